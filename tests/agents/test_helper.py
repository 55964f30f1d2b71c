"""Helpers: infrastructure helpers (a tool whitelist, no approval) and session helpers
(their agent's tools, rules, approver, workspace and budget), their turn limit,
and their place in the supervision tree."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    ActorStopped,
    AgentSpec,
    Approval,
    Budget,
    ChatMessage,
    InvalidArgument,
    PermissionPolicy,
    ToolCallRequest,
    Usage,
    allow_rule,
    deny_rule,
)
from agentrio.errors import HelperTurnsExceeded
from agentrio.events import ConfirmationRequired
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import HelperResult, ToolSchema

Recorder = Callable[[agentrio.Runtime], list[agentrio.events.Event]]


def make_tools() -> tuple[list[str], list[agentrio.Tool]]:
    ran: list[str] = []

    @agentrio.tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        ran.append(f"lookup {key}")
        return f"{key}=1"

    @agentrio.tool
    async def delete(key: str) -> str:
        """Delete a key."""
        ran.append(f"delete {key}")
        return "deleted"

    return ran, [lookup, delete]


def calls(*names: str, first: int = 0) -> Reply:
    """Tool calls with keys k<first>, k<first + 1>...: never the same call twice."""
    return Reply(
        tool_calls=tuple(ToolCallRequest(n, {"key": f"k{first + i}"}) for i, n in enumerate(names)),
        usage=Usage(10, 3),
    )


def text(t: str) -> Reply:
    return Reply(text=t, usage=Usage(7, 2))


def busy_model() -> FunctionModel:
    """Calls lookup with a new key every turn (never stalls, never answers); once
    told to answer without tools, it answers."""

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if not tools:
            return Reply(text="best effort", usage=Usage(1, 1))
        n = sum(m.role == "tool" for m in messages)
        return Reply(tool_calls=(ToolCallRequest("lookup", {"key": f"k{n}"}),), usage=Usage(1, 1))

    return FunctionModel(reply)


# -- infrastructure helpers -------------------------------------------------------------


class RetriesOnce:
    """A model that retries once, through the meter the agent passes it."""

    async def complete(
        self,
        messages: Sequence[agentrio.ChatMessage],
        tools: Sequence[agentrio.types.ToolSchema],
        *,
        max_output_tokens: int,
        meter: agentrio.types.AttemptMeter | None = None,
    ) -> agentrio.ModelReply:
        assert meter is not None
        meter.failed(0, 0, "")  # a 429, say
        assert await meter.retry()
        return Reply(text="done", usage=Usage(3, 1))


async def test_execute_counts_the_attempts_of_its_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        res = await rt.helper(RetriesOnce()).execute("hi")
    assert (res.usage.total_tokens, res.usage.requests, res.usage.attempts) == (4, 1, 2)


async def test_execute_returns_content_calls_results_and_usage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, (lookup, _) = make_tools()
    model = ScriptedModel([calls("lookup"), calls("lookup", "lookup", first=1), text("k0=1")])
    async with agentrio.open_runtime() as rt:
        h = rt.helper(model, tools=[lookup])
        res = await h.execute("what is k0?")
    assert isinstance(res, HelperResult)
    assert res.content == "k0=1"
    assert res.stop_reason == "done"
    assert [c.name for c in res.tool_calls] == ["lookup"] * 3
    assert [c.arguments for c in res.tool_calls] == [{"key": "k0"}, {"key": "k1"}, {"key": "k2"}]
    assert [(r.status, r.content) for r in res.tool_results] == [
        ("ok", "k0=1"),
        ("ok", "k1=1"),
        ("ok", "k2=1"),
    ]
    assert [c.id for c in res.tool_calls] == [r.id for r in res.tool_results]
    assert res.usage.input_tokens == 27 and res.usage.output_tokens == 8
    assert res.usage.requests == 3 and res.usage.tool_calls == 3
    assert sorted(ran) == ["lookup k0", "lookup k1", "lookup k2"]


async def test_only_whitelisted_tools_run_and_no_approval_is_asked(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    ran, (lookup, delete) = make_tools()
    model = ScriptedModel([calls("delete", "lookup", "rm_rf"), text("done")])
    async with agentrio.open_runtime(tools=[delete]) as rt:  # registered, not whitelisted
        events = record_events(rt)
        h = rt.helper(model, tools=[lookup])
        res = await h.execute("clean up")
        await trio.testing.wait_all_tasks_blocked()
    assert [(r.name, r.status) for r in res.tool_results] == [
        ("delete", "denied"),
        ("lookup", "ok"),
        ("rm_rf", "denied"),
    ]
    assert res.tool_results[0].content == "tool 'delete' is not allowed here"
    assert ran == ["lookup k1"]
    # the model saw the denials, and only the whitelisted tool was offered
    last = model.calls[-1]
    assert next(m.content for m in last if m.role == "tool") == "tool 'delete' is not allowed here"
    assert not any(isinstance(e, ConfirmationRequired) for e in events)
    denied = [e for e in events if isinstance(e, agentrio.events.PermissionDenied)]
    assert sorted(e.tool for e in denied) == ["delete", "rm_rf"]  # audited all the same


async def test_tools_by_registered_name(autojump_clock: trio.testing.MockClock) -> None:
    ran, (lookup, _) = make_tools()
    async with agentrio.open_runtime(tools=[lookup]) as rt:
        h = rt.helper(ScriptedModel([calls("lookup"), text("ok")]), tools=["lookup"])
        assert (await h.execute("x")).tool_results[0].status == "ok"
        with pytest.raises(InvalidArgument, match="no tool registered as 'nope'"):
            rt.helper(ScriptedModel([]), tools=["nope"])
    assert ran == ["lookup k0"]


async def test_the_offered_schemas_are_the_whitelist(
    autojump_clock: trio.testing.MockClock,
) -> None:
    offered: list[list[str]] = []

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        offered.append([t.name for t in tools])
        return text("ok")

    _, (lookup, _) = make_tools()
    async with agentrio.open_runtime() as rt:
        await rt.helper(FunctionModel(reply), tools=[lookup]).execute("x")
        await rt.helper(FunctionModel(reply)).execute("x")
    assert offered == [["lookup"], []]


async def test_max_turns_defaults_to_ten_then_a_typed_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, (lookup, _) = make_tools()
    async with agentrio.open_runtime() as rt:
        h = rt.helper(busy_model(), tools=[lookup])
        with pytest.raises(HelperTurnsExceeded, match="10 turns") as info:
            await h.execute("loop")
    partial = info.value.result
    assert isinstance(partial, HelperResult)
    assert partial.stop_reason == "max_iterations"
    assert len(partial.tool_results) == 10 and partial.usage.requests == 10
    assert len(ran) == 10


async def test_final_answer_instead_of_the_error(autojump_clock: trio.testing.MockClock) -> None:
    _, (lookup, _) = make_tools()
    async with agentrio.open_runtime() as rt:
        h = rt.helper(busy_model(), tools=[lookup], max_turns=3, final_answer=True)
        res = await h.execute("loop")
    assert res.content == "best effort"
    assert res.stop_reason == "max_iterations"
    assert len(res.tool_results) == 3
    assert res.usage.requests == 4  # three turns, then one without tools


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
async def test_bad_max_turns(bad: object) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match="max_turns"):
            rt.helper(ScriptedModel([]), max_turns=bad)  # type: ignore[arg-type]
        agent = await rt.spawn_agent(AgentSpec("a", ScriptedModel([])))
        with pytest.raises(InvalidArgument, match="max_turns"):
            agent.helper(max_turns=bad)  # type: ignore[arg-type]


async def test_each_execute_starts_afresh(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([text("one"), text("two")])
    async with agentrio.open_runtime() as rt:
        h = rt.helper(model, instructions="be brief")
        await h.execute("first")
        res = await h.execute("second")
    assert res.content == "two"
    assert [(m.role, m.content) for m in model.calls[1]] == [
        ("system", "be brief"),
        ("user", "second"),
    ]


async def test_infrastructure_helper_workspace_and_budget(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    budget = Budget(max_requests=1)
    async with agentrio.open_runtime() as rt:
        h = rt.helper(
            ScriptedModel([calls("lookup"), text("never")]),
            tools=make_tools()[1][:1],
            workspace=tmp_path / "ws",
            budget=budget,
            name="indexer",
        )
        res = await h.execute("x")
        assert h.agent.path == "indexer"
    assert res.stop_reason == "budget_exhausted"
    assert budget.usage().requests == 1
    assert rt.usage().requests == 1  # a free-standing budget is carved out of the runtime's
    summary = json.loads((tmp_path / "ws" / "run_summary.json").read_text())
    assert summary["agent"] == "indexer" and summary["requests"] == 1


def where_tool() -> tuple[list[agentrio.ToolContext], agentrio.Tool]:
    seen: list[agentrio.ToolContext] = []

    @agentrio.tool
    async def where(ctx: agentrio.ToolContext, key: str) -> str:
        """Record where it runs."""
        seen.append(ctx)
        return "here"

    return seen, where


async def test_infrastructure_helper_tools_are_told_its_workspace_and_env(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    seen, where = where_tool()
    env = {"PATH": "/opt/bin", "TOKEN": "t"}
    async with agentrio.open_runtime() as rt:
        h = rt.helper(
            ScriptedModel([calls("where"), text("ok")] * 2),
            tools=[where],
            workspace=tmp_path / "ws",
            env=env,
            name="indexer",
        )
        env["PATH"] = "/elsewhere"  # the helper kept a copy
        await h.execute("x")
        await rt.helper(ScriptedModel([calls("where"), text("ok")]), tools=[where]).execute("y")
    assert seen[0] == agentrio.ToolContext(
        "indexer",
        None,
        "call_1",
        2,
        workspace=tmp_path / "ws",
        env={"PATH": "/opt/bin", "TOKEN": "t"},
    )
    assert (seen[1].workspace, seen[1].env) == (None, {})  # none given: none told


@pytest.mark.parametrize("env", [["PATH"], {"PATH": 1}], ids=["list", "value"])
async def test_infrastructure_helper_bad_env(env: object) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match=r"^env"):
            rt.helper(ScriptedModel([]), env=env)  # type: ignore[arg-type]


# -- session helpers --------------------------------------------------------------------


async def test_session_helper_inherits_tools_model_and_instructions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, tools = make_tools()
    model = ScriptedModel([calls("lookup"), text("found")])
    spec = AgentSpec(
        "lead",
        model,
        instructions="lead's rules",
        tools=tools,
        permissions=PermissionPolicy(rules=[allow_rule("lookup")]),
    )
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(spec)
        h = lead.helper()
        res = await h.execute("find k0")
        assert h.agent.path.startswith("lead.helper-")
        assert {t.name for t in h.agent.spec.tools} == {"lookup", "delete"}
    assert res.content == "found" and ran == ["lookup k0"]
    assert model.calls[0][0] == ChatMessage("system", "lead's rules")


async def test_session_helper_asks_by_default_through_the_parent_approver(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    asked: list[ConfirmationRequired] = []

    def approver(request: ConfirmationRequired) -> Approval:
        asked.append(request)
        return Approval(request.tool_call.name == "lookup", "lookups only")

    ran, tools = make_tools()
    model = ScriptedModel([calls("lookup", "delete"), text("ok")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        lead = await rt.spawn_agent(AgentSpec("lead", model, tools=tools, approver=approver))
        h = lead.helper()
        res = await h.execute("go")
        await trio.testing.wait_all_tasks_blocked()
    # The parent has no policy (its own calls are all allowed); its session
    # helper's unmatched calls default to ask.
    assert [r.status for r in res.tool_results] == ["ok", "denied"]
    assert res.tool_results[1].content == "the approver refused 'delete': lookups only"
    assert sorted(r.tool_call.name for r in asked) == ["delete", "lookup"]
    assert all(r.agent == h.agent.path for r in asked)
    assert ran == ["lookup k0"]
    required = [e for e in events if isinstance(e, ConfirmationRequired)]
    assert [e.path for e in required] == [h.agent.path] * 2


async def test_session_helper_follows_the_parent_rules(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, tools = make_tools()
    policy = PermissionPolicy(rules=[deny_rule("delete"), allow_rule("lookup")], default="ask")
    model = ScriptedModel([calls("lookup", "delete"), text("ok")])
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec("lead", model, tools=tools, permissions=policy, approver=lambda r: True)
        )
        res = await lead.helper().execute("go")
    assert [r.status for r in res.tool_results] == ["ok", "denied"]
    assert "denied by the permission policy" in res.tool_results[1].content
    assert ran == ["lookup k0"]


async def test_session_helper_asks_about_what_the_rules_leave_even_with_a_default_of_allow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The agent itself may delete (its default is allow); its session helper
    # may not without asking, since no rule of the agent's settles delete.
    asked: list[str] = []

    def approver(request: ConfirmationRequired) -> bool:
        asked.append(request.tool_call.name)
        return False

    ran, tools = make_tools()
    policy = PermissionPolicy(rules=[allow_rule("lookup")], default="allow")
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec(
                "lead",
                ScriptedModel([calls("delete", first=5), text("ok")]),
                tools=tools,
                permissions=policy,
                approver=approver,
            )
        )
        res = await lead.helper(ScriptedModel([calls("lookup", "delete"), text("ok")])).execute(
            "go"
        )
        own = await lead.run("go")
    assert [r.status for r in res.tool_results] == ["ok", "denied"]
    assert res.tool_results[1].content == "the approver refused 'delete'"
    assert asked == ["delete"]
    # The agent's own call is settled by its default: nobody is asked.
    assert own.tool_calls[0].status == "ok"
    assert ran == ["lookup k0", "delete k5"]


async def test_session_helper_of_an_agent_with_a_default_of_deny_is_denied_without_asking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked: list[str] = []

    def approver(request: ConfirmationRequired) -> bool:
        asked.append(request.tool_call.name)
        return True

    ran, tools = make_tools()
    policy = PermissionPolicy(rules=[allow_rule("lookup")], default="deny")
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec(
                "lead",
                ScriptedModel([]),
                tools=tools,
                permissions=policy,
                approver=approver,
            )
        )
        res = await lead.helper(ScriptedModel([calls("lookup", "delete"), text("ok")])).execute(
            "go"
        )
    assert [r.status for r in res.tool_results] == ["ok", "denied"]
    assert "denied by the permission policy" in res.tool_results[1].content
    assert asked == [] and ran == ["lookup k0"]


async def test_session_helper_of_a_subagent_asks_about_what_no_rule_settles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The rules that settle a call may be the agent's own or its parent's.
    asked: list[str] = []

    def approver(request: ConfirmationRequired) -> bool:
        asked.append(request.tool_call.name)
        return True

    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec(
                "lead",
                ScriptedModel([]),
                tools=tools,
                permissions=PermissionPolicy(rules=[allow_rule("lookup")]),
                approver=approver,
            )
        )
        child = await lead.spawn_subagent(
            AgentSpec("child", ScriptedModel([]), tools=tools, permissions=PermissionPolicy())
        )
        res = await child.helper(ScriptedModel([calls("lookup", "delete"), text("ok")])).execute(
            "go"
        )
    assert [r.status for r in res.tool_results] == ["ok", "ok"]
    assert asked == ["delete"]
    assert sorted(ran) == ["delete k1", "lookup k0"]


async def test_session_helper_without_an_approver_cannot_run_what_needs_asking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec("lead", ScriptedModel([calls("lookup"), text("ok")]), tools=tools)
        )
        res = await lead.helper().execute("go")
    assert res.tool_results[0].status == "denied"
    assert "no approver" in res.tool_results[0].content
    assert ran == []


async def test_session_helper_spending_shows_in_the_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, tools = make_tools()
    lead_model = ScriptedModel([text("lead")])
    helper_model = ScriptedModel([calls("lookup"), text("helped")])
    budget = Budget(max_total_tokens=10_000)
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec("lead", lead_model, tools=tools, approver=lambda r: True), budget=budget
        )
        await lead.run("hi")
        before = lead.usage()
        res = await lead.helper(helper_model).execute("go")
        after = lead.usage()
    assert res.usage.requests == 2 and res.usage.tool_calls == 1
    assert after.input_tokens - before.input_tokens == res.usage.input_tokens == 17
    assert after.output_tokens - before.output_tokens == res.usage.output_tokens == 5
    assert after.requests == before.requests + 2
    assert after.tool_calls == before.tool_calls + 1
    assert budget.usage().total_tokens == after.total_tokens == 9 + 17 + 5
    assert rt.usage().total_tokens == after.total_tokens


async def test_session_helper_draws_from_the_parent_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, tools = make_tools()
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(
            AgentSpec("lead", ScriptedModel([text("lead")]), tools=tools),
            budget=Budget(max_requests=2),
        )
        await lead.run("hi")
        h = lead.helper(busy_model(), final_answer=True)
        res = await h.execute("go")
    assert res.stop_reason == "budget_exhausted"
    assert res.usage.requests == 1
    assert lead.usage().requests == 2


async def test_session_helper_shares_the_parent_workspace(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    spec = AgentSpec("lead", ScriptedModel([text("a"), text("b")]), workspace=tmp_path)
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(spec)
        h = lead.helper()
        await lead.run("hi")
        await h.execute("hello")
        assert h.agent.workspace is lead.workspace
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    # The helper writes no summary of its own: its spending is in its parent's.
    assert summary["agent"] == "lead" and summary["requests"] == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json") == ["run_summary.json"]


async def test_session_helper_tools_are_told_its_agents_workspace_and_env(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    seen, where = where_tool()
    spec = AgentSpec(
        "lead",
        ScriptedModel([]),
        tools=[where],
        permissions=PermissionPolicy(rules=[allow_rule("where")]),
        workspace=tmp_path,
        env={"HOME": "/home/lead"},
    )
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(spec, name="lead-2")  # the workspace's subfolder lead-2
        h = lead.helper(ScriptedModel([calls("where"), text("ok")]))
        res = await h.execute("hello")
    assert res.tool_results[0].status == "ok"
    assert seen == [
        agentrio.ToolContext(
            h.agent.path,
            None,
            "call_1",
            2,
            workspace=tmp_path / "lead-2",
            env={"HOME": "/home/lead"},
        )
    ]
    assert h.agent.path.startswith("lead-2.helper-")


# -- in the supervision tree -----------------------------------------------------------


@agentrio.tool
async def slow() -> str:
    """Takes an hour."""
    await trio.sleep(3600)
    return "finally"


def slow_model() -> ScriptedModel:
    return ScriptedModel([Reply(tool_calls=(ToolCallRequest("slow"),)), text("done")])


async def test_an_infrastructure_helper_is_cancelled_with_its_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        h = rt.helper(slow_model(), tools=[slow], name="h", under=team)
        assert h.agent.path == "team/h"
        assert rt.lookup("team/h") is h.agent.ref
        failures: list[BaseException] = []

        async def run() -> None:
            try:
                await h.execute("go")
            except ActorStopped as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            t0 = trio.current_time()
            team.cancel()
        assert trio.current_time() == t0
        assert len(failures) == 1
        assert h.agent.statistics().state == "exited"
        assert repr(h) == "<Helper 'team/h'>"


async def test_a_session_helper_is_cancelled_with_its_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        lead = await rt.spawn_agent(
            AgentSpec("lead", slow_model(), tools=[slow], approver=lambda r: True), under=team
        )
        h = lead.helper()
        assert h.agent.path.startswith("team/lead.helper-")
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(ActorStopped):
                    await h.execute("go")

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            lead.cancel()
        assert h.agent.statistics().state == "exited"
        assert team.children() == []


def phases_ended(events: Sequence[agentrio.events.Event]) -> list[tuple[str, str]]:
    return [(e.path, e.stop_reason) for e in events if isinstance(e, agentrio.events.PhaseEnded)]


async def test_a_cancelled_execute_ends_its_phase(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    cancelled: list[float] = []

    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if messages[-1].content == "hang":
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(trio.current_time())
                raise
        return text("ok")

    async with agentrio.open_runtime(budget=Budget(max_total_tokens=10_000)) as rt:
        events = record_events(rt)
        h = rt.helper(FunctionModel(model), name="h")
        with trio.move_on_after(5) as scope:
            await h.execute("hang")
        assert scope.cancelled_caught
        assert cancelled == [5]
        assert rt.budget.reserved_tokens == 0
        await trio.testing.wait_all_tasks_blocked()
        assert phases_ended(events) == [("h", "cancelled")]
        # the helper takes its next execute
        result = await h.execute("again")
        assert (result.content, result.usage.requests) == ("ok", 1)
        assert h.agent.statistics().state == "running"


async def test_a_cancelled_execute_of_a_session_helper_cancels_its_tool_call(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    state: list[str] = []

    @agentrio.tool
    async def hang() -> str:
        """Never returns."""
        state.append("started")
        try:
            await trio.sleep_forever()
        finally:
            state.append("cancelled")
        return "unreachable"

    model = ScriptedModel([Reply(tool_calls=(ToolCallRequest("hang"),), usage=Usage(10, 3))])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        lead = await rt.spawn_agent(
            AgentSpec(
                "lead", model, tools=[hang], permissions=PermissionPolicy([allow_rule("hang")])
            )
        )
        h = lead.helper(name="h")
        with trio.move_on_after(5):
            await h.execute("go")
        assert state == ["started", "cancelled"]
        await trio.testing.wait_all_tasks_blocked()
        assert phases_ended(events) == [("lead.h", "cancelled")]
        assert lead.usage().requests == 1  # its spending is its agent's, as ever
        assert h.agent.statistics().state == "running"


async def test_a_session_helper_stops_with_its_agent_and_by_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(AgentSpec("lead", ScriptedModel([text("a")])))
        h1, h2 = lead.helper(), lead.helper()
        await h1.stop()
        assert h1.agent.statistics().state == "exited"
        with pytest.raises(ActorStopped):
            await h1.execute("x")
        await lead.stop()
        await trio.testing.wait_all_tasks_blocked()
        assert h2.agent.statistics().state == "exited"
        assert rt.children() == []


async def test_concurrent_executes_each_report_their_own_usage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def answer(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        await trio.sleep(1)
        return Reply(text="ok", usage=agentrio.Usage(10, 10))

    async with agentrio.open_runtime() as rt:
        helper = rt.helper(FunctionModel(answer))
        totals: dict[str, int] = {}

        async def run(name: str) -> None:
            totals[name] = (await helper.execute(name)).usage.total_tokens

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a")
            nursery.start_soon(run, "b")
    assert totals == {"a": 20, "b": 20}


async def test_helper_arguments_are_named_in_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(agentrio.InvalidArgument, match="name"):
            rt.helper(ScriptedModel([]), name="a/b")
        helper = rt.helper(ScriptedModel([]))
        with pytest.raises(agentrio.InvalidArgument, match="prompt"):
            await helper.execute(123)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["context", "notes.context"])
async def test_a_session_helper_cannot_take_its_agents_context_name(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    # A session helper is named "<agent>.<last part of its name>": here
    # "lead.context", the name of the agent's primary context actor.
    model = ScriptedModel([Reply(text="done", usage=Usage(1, 1))])
    async with agentrio.open_runtime() as rt:
        lead = await rt.spawn_agent(AgentSpec("lead", model))
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            lead.helper(name=name)
        assert model.calls == []
        assert (await lead.run("go")).final_text == "done"
        assert [c.path for c in rt.children()] == ["lead", "lead.context"]
