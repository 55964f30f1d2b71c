"""Auto-delegation (AgentSpec.delegation): a request, or a plan's step, handed to a child
agent that runs under its parent's budget and hooks, with SubagentProgress events."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    Budget,
    Delegate,
    Delegation,
    Deny,
    Planning,
    ToolCallRequest,
)
from agentrio.errors import InvalidArgument, PermissionEscalation
from agentrio.events import (
    ActorExited,
    Event,
    PhaseEnded,
    StepStarted,
    SubagentEnded,
    SubagentProgress,
    SubagentStarted,
)
from agentrio.testing import Reply, ScriptedModel

Recorder = Callable[[agentrio.Runtime], list[Event]]


@agentrio.tool
async def search(query: str) -> str:
    """Search."""
    return f"found {query}"


@agentrio.tool
async def crawl() -> str:
    """Crawl for an hour."""
    await trio.sleep(3600)
    return "crawled"


def researcher(model: ScriptedModel, tools: Sequence[agentrio.Tool] = (search,)) -> Delegate:
    spec = AgentSpec("researcher", model, tools=list(tools))
    return Delegate(spec, "Finds facts with search.", keywords=["research", "look up"])


def of(events: list[Event], kind: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_request_is_handed_to_the_delegate_its_keywords_name(
    record_events: Recorder,
) -> None:
    child_model = ScriptedModel(
        [Reply(tool_calls=[ToolCallRequest("search", {"query": "otters"})]), Reply(text="otters!")]
    )
    lead_model = ScriptedModel([Reply(text="the lead's own answer")])
    delegation = Delegation([researcher(child_model)])
    spec = AgentSpec("lead", lead_model, tools=[search], delegation=delegation)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        lead = await rt.spawn_agent(spec)
        handed = await lead.run("Please RESEARCH otters")
        kept = await lead.run("What time is it?")
        await trio.testing.wait_all_tasks_blocked()
    assert (handed.final_text, [c.content for c in handed.tool_calls]) == (
        "otters!",
        ["found otters"],
    )
    assert kept.final_text == "the lead's own answer"
    assert child_model.calls[0][-1].content == "Please RESEARCH otters"
    (started,) = of(events, SubagentStarted)
    child = started.child  # type: ignore[attr-defined]
    assert child.startswith("lead.researcher-")
    progress = of(events, SubagentProgress)
    assert [(p.path, p.child, p.step, p.tool) for p in progress] == [  # type: ignore[attr-defined]
        ("lead", child, 1, None),
        ("lead", child, 2, "search"),
        ("lead", child, 3, None),
    ]
    assert progress[-1].summary == "otters!"  # type: ignore[attr-defined]
    (ended,) = of(events, SubagentEnded)
    assert (ended.child, ended.stop_reason) == (child, "done")  # type: ignore[attr-defined]
    # SubagentStarted, then its progress, then SubagentEnded.
    order = [type(e).__name__ for e in events if "Subagent" in type(e).__name__]
    assert order == ["SubagentStarted", *["SubagentProgress"] * 3, "SubagentEnded"]
    # The child stopped once it answered.
    assert any(isinstance(e, ActorExited) and e.path == child for e in events)


async def test_the_child_runs_under_the_parents_budget_and_hooks() -> None:
    seen: list[str] = []

    async def sandbox(call: ToolCallRequest) -> ToolCallRequest | Deny | None:
        seen.append(str(call.arguments["query"]))
        if "secret" in str(call.arguments["query"]):
            return Deny("not that")
        return None

    child_model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCallRequest("search", {"query": "the secret"})]),
            Reply(tool_calls=[ToolCallRequest("search", {"query": "a"})]),
            Reply(tool_calls=[ToolCallRequest("search", {"query": "b"})]),
            Reply(text="never reached"),
        ]
    )
    spec = AgentSpec(
        "lead",
        ScriptedModel([]),
        tools=[search],
        pre_tool_use=sandbox,
        delegation=Delegation([researcher(child_model)]),
    )
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(spec, budget=Budget(max_requests=3))
        result = await lead.run("research it")
        usage = lead.usage()
    # The parent's hook ran on the child's calls, and denied one.
    assert seen == ["the secret", "a", "b"]
    assert [c.status for c in result.tool_calls] == ["denied", "ok", "ok"]
    # The parent's budget of 3 requests stopped the child at its fourth call.
    assert result.stop_reason == "budget_exhausted"
    assert len(child_model.calls) == 3
    assert usage.requests == 0  # (the lead made no call of its own)


async def test_a_rule_of_your_own_may_be_async() -> None:
    asked: list[tuple[str, list[str]]] = []

    async def rule(request: str, delegates: Sequence[Delegate]) -> str | None:
        asked.append((request, [d.name for d in delegates]))
        return "writer" if "poem" in request else None

    writer = Delegate(
        AgentSpec("poet", ScriptedModel([Reply(text="a poem")])), "Writes.", name="writer"
    )
    spec = AgentSpec("lead", ScriptedModel([]), delegation=Delegation([writer], rule=rule))
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(spec)).run("a poem please")
    assert result.final_text == "a poem"
    assert asked == [("a poem please", ["writer"])]


async def test_a_rule_that_names_no_delegate_is_an_error() -> None:
    spec = AgentSpec(
        "lead",
        ScriptedModel([]),
        tools=[search],
        delegation=Delegation([researcher(ScriptedModel([]))], rule=lambda request, ds: "nobody"),
    )
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(spec)
        with pytest.raises(InvalidArgument, match=r"returned 'nobody'"):
            await lead.run("x")


async def test_the_router_as_the_rule(record_events: Recorder) -> None:
    child = researcher(ScriptedModel([Reply(text="a long study")]))
    rule = Delegation.router_rule(agentrio.RuleRouter(), {"background": "researcher"})
    lead_model = ScriptedModel([Reply(text="quick answer")])
    spec = AgentSpec("lead", lead_model, tools=[search], delegation=Delegation([child], rule=rule))
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(spec)
        long = await lead.run("Compare these:\n1. https://a.example\n2. https://b.example\n3. c")
        short = await lead.run("hi")
    assert (long.final_text, short.final_text) == ("a long study", "quick answer")
    with pytest.raises(InvalidArgument, match="by_mode"):
        Delegation.router_rule(agentrio.RuleRouter(), {"background": 1})  # type: ignore[dict-item]

    async def bad_router(request: str) -> object:
        return "background"

    spec = AgentSpec(
        "lead",
        ScriptedModel([]),
        tools=[search],
        delegation=Delegation([child], rule=Delegation.router_rule(bad_router, {})),  # type: ignore[arg-type]
    )
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match=r"must return an agentrio.Route"):
            await (await rt.spawn_agent(spec)).run("x")


def test_the_keyword_rule() -> None:
    a = researcher(ScriptedModel([]))
    b = Delegate(
        AgentSpec("coder", ScriptedModel([])), "Codes.", keywords=["code", "bug", "look up"]
    )
    rule = Delegation.keyword_rule
    assert rule("fix the BUG in this code", [a, b]) == "coder"
    assert rule("look up the bug", [a, b]) == "coder"  # 2 hits against 1
    assert rule("look up it", [a, b]) == "researcher"  # a tie goes to the first
    assert rule("lookup", [a, b]) is None  # whole words only
    assert rule("researching", [a, b]) is None


def test_a_delegation_is_checked() -> None:
    child = researcher(ScriptedModel([]))
    with pytest.raises(PermissionEscalation, match=r"delegate 'researcher' asks for tools"):
        AgentSpec("lead", ScriptedModel([]), delegation=Delegation([child]))
    with pytest.raises(InvalidArgument, match=r"must be the same"):
        AgentSpec(
            "lead",
            ScriptedModel([]),
            tools=[search],
            output_type=int,
            delegation=Delegation([child]),
        )
    with pytest.raises(InvalidArgument, match=r"two delegates named"):
        Delegation([child, child])
    with pytest.raises(InvalidArgument, match=r"must not be empty"):
        Delegation([])
    with pytest.raises(InvalidArgument, match=r"must be an agentrio.AgentSpec"):
        Delegate("researcher", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"keywords"):
        Delegate(child.spec, "x", keywords="research")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"goes in AgentSpec.delegation"):
        AgentSpec("lead", ScriptedModel([]), tools=[search], planning=Delegation([child]))
    with pytest.raises(InvalidArgument, match=r"needs an agent whose AgentSpec.planning"):
        spec = AgentSpec("lead", ScriptedModel([]), tools=[search], delegation=Delegation([child]))
        spec.delegation.check_run("on")  # type: ignore[union-attr]


async def test_a_plan_hands_a_step_to_the_delegate_it_names(record_events: Recorder) -> None:
    body = {
        "goal": "an article",
        "tasks": [
            {"description": "find facts on otters", "agent": "researcher"},
            {"description": "write it", "agent": "nobody"},
        ],
    }
    lead_model = ScriptedModel(
        [Reply(text=json.dumps(body)), Reply(text="the article"), Reply(text="final")]
    )
    child_model = ScriptedModel([Reply(text="otters hold hands")])
    delegation = Delegation([researcher(child_model)], rule=None)
    spec = AgentSpec(
        "lead", lead_model, tools=[search], planning=Planning(mode="on"), delegation=delegation
    )
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        result = await (await rt.spawn_agent(spec)).run("Write an article on otters")
        await trio.testing.wait_all_tasks_blocked()
    assert result.final_text == "final"
    assert [e.agent for e in of(events, StepStarted)] == ["researcher", None]  # type: ignore[attr-defined]
    told = child_model.calls[0][-1].content
    assert (
        "Request:\nWrite an article on otters" in told and "Your task: find facts on otters" in told
    )
    # The planner was told of the delegate; the final answer has its result.
    assert "- researcher: Finds facts with search." in lead_model.calls[0][0].content
    assert "result: otters hold hands" in lead_model.calls[2][-1].content
    assert len(of(events, SubagentProgress)) == 1


async def test_cancelling_the_caller_cancels_the_delegate(record_events: Recorder) -> None:
    child_model = ScriptedModel([Reply(tool_calls=[ToolCallRequest("crawl")])])
    delegate = Delegate(
        AgentSpec("crawler", child_model, tools=[crawl]), "Crawls.", keywords=["crawl"]
    )
    spec = AgentSpec("lead", ScriptedModel([]), tools=[crawl], delegation=Delegation([delegate]))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        lead = await rt.spawn_agent(spec)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lead.run, "crawl the site")
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
    (started,) = of(events, SubagentStarted)
    child = started.child  # type: ignore[attr-defined]
    ends = [e.stop_reason for e in of(events, PhaseEnded) if e.path == child]  # type: ignore[attr-defined]
    assert ends == ["cancelled"]
    assert any(
        isinstance(e, ActorExited) and e.path == child and e.reason == "cancelled" for e in events
    )


async def test_delegation_over_http(record_events: Recorder) -> None:
    script = [
        Reply(tool_calls=[ToolCallRequest("search", {"query": "otters"})]),
        Reply(text="otters!"),
    ]
    seen: list[str] = []

    async def audit(call: ToolCallRequest) -> None:
        seen.append(call.name)

    async with agentrio.testing.open_fake_llm(script) as server:
        config = agentrio.ProviderConfig(name="p", kind="openai", base_url=server.base_url + "/v1")
        async with agentrio.Provider(config) as provider:
            child = Delegate(
                AgentSpec("researcher", provider.model("m"), tools=[search]),
                "Finds facts.",
                keywords=["research"],
            )
            spec = AgentSpec(
                "lead",
                provider.model("m"),
                tools=[search],
                pre_tool_use=audit,
                delegation=Delegation([child]),
            )
            async with agentrio.open_runtime() as rt:
                events = record_events(rt)
                lead = await rt.spawn_agent(spec, budget=Budget(max_requests=5))
                result = await lead.run("research otters")
                await trio.testing.wait_all_tasks_blocked()
                spent = rt.usage().requests
        requests = server.requests
    assert result.final_text == "otters!"
    assert seen == ["search"]  # the lead's hook saw the child's call
    assert len(requests) == 2 and requests[0].messages[-1].content == "research otters"
    assert spent == 2
    assert [type(e).__name__ for e in events if "Subagent" in type(e).__name__] == [
        "SubagentStarted",
        "SubagentProgress",
        "SubagentProgress",
        "SubagentProgress",
        "SubagentEnded",
    ]
