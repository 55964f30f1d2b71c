"""AgentSpec, spawn_agent, AgentRef.run's arguments, context labels, stop and cancel,
usage, and the agent's workspace with its run summary."""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    ActorStopped,
    AgentSpec,
    Budget,
    ChatMessage,
    InvalidArgument,
    Limits,
    PhaseResult,
    ToolCallRequest,
    Usage,
)
from agentrio._checks import check_name, is_reserved
from agentrio.agents.loop.spec import context_name
from agentrio.errors import DuplicateName
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import ContextRead, ToolSchema

if TYPE_CHECKING:
    from conftest import TaskTracker

Recorder = Callable[[agentrio.Runtime], list[agentrio.events.Event]]

# Virtual seconds (MockClock): a test that deadlocks jumps here and fails at once.
DEADLINE = 10_000


@agentrio.tool
async def echo(x: int) -> str:
    """Echo x."""
    await trio.lowlevel.checkpoint()
    return f"echo {x}"


@agentrio.tool
async def forever() -> str:
    """Never returns."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def answer(text: str, usage: Usage | None = None) -> Reply:
    return Reply(text=text, usage=usage or Usage(10, 5))


def calling(*calls: ToolCallRequest, usage: Usage | None = None) -> Reply:
    return Reply(tool_calls=calls, usage=usage or Usage(10, 5))


def make_spec(model: object, *tools: agentrio.Tool, **kw: object) -> AgentSpec:
    return AgentSpec(name="a", model=model, instructions="sys", tools=list(tools), **kw)  # type: ignore[arg-type]


def contents(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.content for m in messages]


# -- AgentSpec --------------------------------------------------------------------------


def test_spec_defaults_and_plain_functions_as_tools() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    model = ScriptedModel([])
    spec = AgentSpec(name="a", model=model, tools=[add, echo])
    assert spec.instructions == ""
    assert spec.limits == Limits()
    assert spec.workspace is None and spec.on_step is None and spec.token_estimator is None
    assert spec.continuation_detector is None  # agentrio.looks_unfinished
    assert isinstance(spec.tools, tuple)
    assert [t.name for t in spec.tools] == ["add", "echo"]
    assert isinstance(spec.tools[0], agentrio.Tool)
    assert spec.tools[1] is echo


@pytest.mark.parametrize("name", ["", "a/b", 3, None])
def test_spec_name_must_be_a_plain_str(name: object) -> None:
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.name"):
        AgentSpec(name=name, model=ScriptedModel([]))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a.context", "a.context.side", "context.side"])
def test_spec_name_must_not_be_a_context_actors(name: str) -> None:
    # "context.side" as a subagent of "a" would be named "a.context.side-<n>"
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.name must not .*context"):
        AgentSpec(name=name, model=ScriptedModel([]))


@pytest.mark.parametrize("name", ["context", "a.contexts", "a.context-2", "contextual.b"])
def test_spec_names_near_the_reserved_form_stay_valid(name: str) -> None:
    assert AgentSpec(name=name, model=ScriptedModel([])).name == name


class SyncModel:
    def complete(self, messages: object, tools: object, *, max_output_tokens: int) -> Reply:
        return answer("sync")


class BadWindow:
    context_window = 0

    async def complete(self, messages: object, tools: object, *, max_output_tokens: int) -> Reply:
        return answer("x")


@pytest.mark.parametrize("model", [object(), None, 3, b"gpt", SyncModel()], ids=repr)
def test_spec_model_needs_an_async_complete(model: object) -> None:
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.model") as info:
        AgentSpec(name="a", model=model)  # type: ignore[arg-type]
    assert "async complete" in str(info.value)


def test_spec_model_must_not_be_an_empty_name() -> None:
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.model"):
        AgentSpec(name="a", model="")


def test_spec_model_context_window_is_checked() -> None:
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.model\.context_window"):
        AgentSpec(name="a", model=BadWindow())


def test_spec_duplicate_tool_names() -> None:
    other = agentrio.tool(name="echo")(lambda x: x)
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.tools has duplicate names: \['echo'\]"):
        AgentSpec(name="a", model=ScriptedModel([]), tools=[echo, other])


@pytest.mark.parametrize("tools", ["echo", echo, 3, None], ids=repr)
def test_spec_tools_must_be_a_list(tools: object) -> None:
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.tools"):
        AgentSpec(name="a", model=ScriptedModel([]), tools=tools)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("instructions", 3),
        ("limits", {"max_iterations": 3}),
        ("on_step", "print"),
        ("token_estimator", 3.5),
        ("continuation_detector", "looks_unfinished"),
    ],
)
def test_spec_bad_fields_name_themselves(field: str, value: object) -> None:
    with pytest.raises(InvalidArgument, match=rf"AgentSpec\.{field}"):
        AgentSpec(name="a", model=ScriptedModel([]), **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("workspace", ["", 3])
def test_spec_bad_workspace(workspace: object) -> None:
    with pytest.raises(InvalidArgument, match="workspace"):
        AgentSpec(name="a", model=ScriptedModel([]), workspace=workspace)  # type: ignore[arg-type]


def test_spec_env_is_a_read_only_copy_and_empty_by_default() -> None:
    assert AgentSpec(name="a", model=ScriptedModel([])).env == {}
    assert AgentSpec(name="a", model=ScriptedModel([]), env=None).env == {}
    env = {"HOME": "/home/a", "API_TOKEN": "s3cret"}
    spec = AgentSpec(name="a", model=ScriptedModel([]), env=env)
    env["HOME"] = "/elsewhere"
    assert spec.env == {"HOME": "/home/a", "API_TOKEN": "s3cret"}
    with pytest.raises(TypeError):
        spec.env["HOME"] = "/tmp"  # type: ignore[index]
    assert "env=<HOME, API_TOKEN>" in repr(spec)
    assert "s3cret" not in repr(spec)
    assert spec == attrs.evolve(spec, name="a")
    assert spec.env is attrs.evolve(spec, name="b").env  # checked and copied once
    assert hash(spec) == hash(attrs.evolve(spec, name="a"))  # still hashable
    assert spec != attrs.evolve(spec, env={"HOME": "/home/a"})


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ("HOME=/home/a", r"AgentSpec\.env must be a mapping of str to str, got a str"),
        ({"HOME": 3}, r"AgentSpec\.env\['HOME'\] must be a str, got a int"),
        ({3: "x"}, r"AgentSpec\.env keys must be str, got 3"),
    ],
)
def test_spec_bad_env(env: object, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        AgentSpec(name="a", model=ScriptedModel([]), env=env)  # type: ignore[arg-type]


def test_spec_is_frozen() -> None:
    spec = AgentSpec(name="a", model=ScriptedModel([]))
    with pytest.raises(AttributeError):
        spec.name = "b"  # type: ignore[misc]


# -- spawn_agent and AgentRef ------------------------------------------------------------


async def test_spawn_under_the_root_and_under_a_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("one"), answer("two")])
    spec = make_spec(model)
    async with agentrio.open_runtime() as rt:
        top = await rt.spawn_agent(spec)
        team = await rt.spawn_supervisor(name="team")
        member = await rt.spawn_agent(spec, under=team, name="b")
        assert (top.name, top.path) == ("a", "a")
        assert (member.name, member.path) == ("b", "team/b")
        assert member.spec is spec and member.workspace is None
        assert member.ref == rt.lookup("team/b")
        assert "team/b" in repr(member)
        assert (await top.run("go")).final_text == "one"
        assert (await member.run("go")).final_text == "two"
        stats = member.statistics()
        assert (stats.path, stats.messages_handled) == ("team/b", 1)


async def test_spawn_agent_errors(autojump_clock: trio.testing.MockClock) -> None:
    spec = make_spec(ScriptedModel([]))
    async with agentrio.open_runtime() as rt:
        await rt.spawn_agent(spec)
        with pytest.raises(DuplicateName):
            await rt.spawn_agent(spec)
        with pytest.raises(InvalidArgument, match="spec"):
            await rt.spawn_agent({"name": "a"})  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="budget"):
            await rt.spawn_agent(spec, name="c", budget=100)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="name"):
            await rt.spawn_agent(spec, name="x/y")


def test_agent_ref_has_no_public_constructor() -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        agentrio.AgentRef()


async def test_spawn_agent_with_its_own_budget(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([answer("x", Usage(10, 5)), answer("y", Usage(10, 5))])
    own = Budget(max_requests=1)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model), budget=own)
        assert (await agent.run("go")).stop_reason == "done"
        assert (await agent.run("go")).stop_reason == "budget_exhausted"
        # a free-standing budget is carved out of the runtime's: both count it
        assert own.parent is rt.budget
        assert own.usage().requests == rt.usage().requests == 1
        assert rt.usage().total_tokens == 15
        # another agent on the runtime's budget still runs
        other = await rt.spawn_agent(make_spec(model), name="b")
        assert (await other.run("go")).stop_reason == "done"


async def test_a_budget_with_calls_in_flight_is_not_carved_out_of_the_runtimes() -> None:
    # Settling a lease would take from ancestors that never reserved it.
    own = Budget(max_total_tokens=100)
    lease = own.reserve(10, 10)
    assert lease is not None
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match="has model calls in flight"):
            await rt.spawn_agent(make_spec(ScriptedModel([])), budget=own)
        assert own.parent is None and rt.children() == []
        lease.settle(Usage(5, 5))
        await rt.spawn_agent(make_spec(ScriptedModel([])), budget=own)
        assert own.parent is rt.budget


# -- run()'s arguments -----------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, True, False, "3", 1.5])
async def test_run_max_iterations_must_be_an_int_at_least_one(
    autojump_clock: trio.testing.MockClock, value: object
) -> None:
    model = ScriptedModel([])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        with pytest.raises(InvalidArgument, match="max_iterations") as info:
            await agent.run("go", max_iterations=value)  # type: ignore[arg-type]
        assert repr(value) in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tool_names": ["echo", "nope"]}, "tool_names"),
        ({"tool_names": "echo"}, "tool_names"),
        ({"tool_names": 3}, "tool_names"),
        ({"continue_context": "yes"}, "continue_context"),
        ({"context_label": 3}, "context_label"),
        ({"direct_tool_calls": [{"name": "echo"}]}, "direct_tool_calls"),
        ({"direct_tool_calls": "echo"}, "direct_tool_calls"),
        ({"lane": "urgent"}, "lane must be one of"),
        ({"lane": 0}, "lane must be one of"),
    ],
)
async def test_run_bad_arguments_are_named(
    autojump_clock: trio.testing.MockClock, kwargs: dict[str, object], named: str
) -> None:
    model = ScriptedModel([])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        with pytest.raises(InvalidArgument, match=named):
            await agent.run("go", **kwargs)  # type: ignore[arg-type]
    assert model.calls == []


async def test_unknown_tool_name_is_reported_at_the_call_site(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), echo))
        with pytest.raises(InvalidArgument) as info:
            await agent.run("go", tool_names=["nope"])
    message = str(info.value)
    assert "tool_names" in message and "'nope'" in message and "'echo'" in message
    # raised by run() itself, before anything reached the agent
    assert agent.statistics().messages_handled == 0


async def test_run_user_message_must_be_a_str(autojump_clock: trio.testing.MockClock) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([])))
        with pytest.raises(InvalidArgument, match="user_message"):
            await agent.run(b"go")  # type: ignore[arg-type]


class LaneModel:
    """A model whose complete() takes ``lane``: it notes the lane of every call."""

    def __init__(self) -> None:
        self.lanes: list[str | None] = []

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        lane: str | None = None,
    ) -> Reply:
        await trio.lowlevel.checkpoint()
        self.lanes.append(lane)
        return Reply(text="ok")


def test_a_specs_lane() -> None:
    assert make_spec(ScriptedModel([])).lane == "query"
    assert AgentSpec("a", ScriptedModel([]), lane="background").lane == "background"
    assert AgentSpec("a", ScriptedModel([]), lane="control").lane == "interactive"
    with pytest.raises(InvalidArgument, match=r"AgentSpec\.lane must be one of .*'later'"):
        AgentSpec("a", ScriptedModel([]), lane="later")  # type: ignore[arg-type]


async def test_the_phases_lane_reaches_a_model_that_takes_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = LaneModel()
    async with agentrio.open_runtime() as rt:
        default = await rt.spawn_agent(AgentSpec("d", model))
        background = await rt.spawn_agent(AgentSpec("b", model, lane="background"))
        await default.run("go")
        await background.run("go")
        await background.run("go", lane="control")  # the run's lane wins over the spec's
        await default.run("go", lane="execute")
    assert model.lanes == ["query", "background", "interactive", "execute"]


async def test_a_run_phase_with_an_unknown_lane_ends_with_error(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    model = LaneModel()
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(AgentSpec("a", model))
        result = await agent.ref.ask(agentrio.RunPhase("go", lane="soon"))  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
    assert isinstance(result, PhaseResult) and result.stop_reason == "error"
    assert model.lanes == []
    (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert error.error_type == "InvalidArgument" and "RunPhase.lane" in error.error


def test_phase_result_carries_no_accounting() -> None:
    assert PhaseResult.__struct_fields__ == (
        "final_text",
        "tool_calls",
        "stop_reason",
        "error_type",
        "error",
        "output",
    )


# -- context labels --------------------------------------------------------------------


async def test_labels_never_see_each_others_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer(f"reply {i}") for i in range(5)])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("primary 1")
        await agent.run("side 1", context_label="side")
        await agent.run("primary 2")
        await agent.run("other 1", context_label="other")
        await agent.run("side 2", context_label="side")
    assert [contents(c) for c in model.calls] == [
        ["sys", "primary 1"],
        ["sys", "side 1"],
        ["sys", "primary 1", "reply 0", "primary 2"],
        ["sys", "other 1"],
        ["sys", "side 1", "reply 1", "side 2"],
    ]


async def test_each_label_is_its_own_context_actor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("p"), answer("s"), answer("empty label")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("primary")
        await agent.run("side", context_label="side")
        await agent.run("odd", context_label="a/b")
        primary = rt.lookup("a.context")
        side = rt.lookup("a.context.side")
        odd = rt.lookup("a.context.a%2Fb")
        assert len({primary.path, side.path, odd.path}) == 3
        assert contents(await primary.ask(ContextRead())) == ["sys", "primary", "p"]  # type: ignore[arg-type]
        assert contents(await side.ask(ContextRead())) == ["sys", "side", "s"]  # type: ignore[arg-type]
        # the contexts stop after their agent
        await agent.stop()
        await trio.testing.wait_all_tasks_blocked()
        assert primary.statistics().state == "exited"
        assert side.statistics().state == "exited"


async def test_labels_that_escape_alike_have_their_own_contexts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # "/" is written "%2F" in a context actor's name, and "%" is written "%25"
    # first, so no two labels share a name (an actor, and a history).
    labels = ["a/b", "a%2Fb", "a%252Fb", "a%b", "a%25b"]
    calls = []

    def reply(messages: Sequence[ChatMessage], tools: object) -> Reply:
        calls.append(messages)
        return answer(f"{len(messages)} messages")

    model = FunctionModel(reply)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        for label in labels:
            result = await agent.run(label, context_label=label)
            assert result.final_text == "2 messages"  # a context of its own
        for label in labels:
            result = await agent.run("again", context_label=label)
            assert result.final_text == "4 messages"
        paths = [c.path for c in rt.children()]
    assert paths == [
        "a",
        "a.context.a%2Fb",
        "a.context.a%252Fb",
        "a.context.a%25252Fb",
        "a.context.a%25b",
        "a.context.a%2525b",
    ]
    assert len(calls) == 2 * len(labels)


def _joined(pieces: Sequence[str], most: int) -> list[str]:
    """Every string of up to *most* of *pieces*."""
    return ["".join(p) for n in range(most + 1) for p in itertools.product(pieces, repeat=n)]


def test_each_agent_and_label_has_a_context_name_no_actor_can_take() -> None:
    # Every agent name and label made of the pieces that could make two
    # context names alike: no two pairs share a name, and no actor of any
    # other kind can take one.
    agents = [n for n in _joined(["a", ".", "context", "-1"], 3) if n and not is_reserved(n)]
    labels: list[str | None] = [None, *_joined(["a", "/", "%", "2F", "25", ".context"], 3)]
    names = {context_name(agent, label) for agent in agents for label in labels}
    assert len(names) == len(agents) * len(labels)
    for name in names:
        assert "/" not in name
        with pytest.raises(InvalidArgument, match="reserved"):
            check_name("name", name)


@pytest.mark.parametrize("name", ["a.context", "a.context.side"])
async def test_a_sibling_cannot_take_a_context_actors_name(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([answer("p"), answer("s")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        # Refused at spawn, before the agent needs the name (and before any
        # model call), whether the sibling is an agent or any other child.
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            await rt.spawn_agent(make_spec(ScriptedModel([])), name=name)
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            await agent.spawn_subagent(make_spec(ScriptedModel([])), name=name)
        assert model.calls == []
        assert (await agent.run("primary")).final_text == "p"
        assert (await agent.run("side", context_label="side")).final_text == "s"
        assert [c.path for c in rt.children()] == ["a", "a.context", "a.context.side"]


async def test_an_empty_label_is_not_the_primary_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("p"), answer("e")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("primary")
        await agent.run("empty", context_label="")
    assert contents(model.calls[1]) == ["sys", "empty"]


async def test_continue_context_false_resets_only_that_label(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer(f"r{i}") for i in range(5)])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("p1")
        await agent.run("s1", context_label="s")
        await agent.run("p2", continue_context=False)
        await agent.run("s2", context_label="s")
        await agent.run("p3")
    assert [contents(c) for c in model.calls[2:]] == [
        ["sys", "p2"],
        ["sys", "s1", "r1", "s2"],
        ["sys", "p2", "r2", "p3"],
    ]


async def test_continue_context_false_on_a_new_label(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("r")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("fresh", context_label="new", continue_context=False)
    assert contents(model.calls[0]) == ["sys", "fresh"]


async def test_the_budget_is_global_across_labels(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("x", Usage(10, 5)) for _ in range(3)])
    async with agentrio.open_runtime(budget=Budget(max_requests=2)) as rt:
        agent = await rt.spawn_agent(make_spec(model))
        assert (await agent.run("a")).stop_reason == "done"
        assert (await agent.run("b", context_label="x")).stop_reason == "done"
        assert (await agent.run("c", context_label="y")).stop_reason == "budget_exhausted"
        assert (await agent.run("d", continue_context=False)).stop_reason == "budget_exhausted"
        assert rt.usage().requests == 2
        assert agent.usage().total_tokens == 30
    assert len(model.calls) == 2


# -- reading a history ----------------------------------------------------------------

EPOCH = 1_700_000_000.0


@pytest.fixture
def wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """time.time() runs with Trio's (mock) clock, from EPOCH."""
    monkeypatch.setattr("agentrio.agents.loop.phase.time.time", lambda: EPOCH + trio.current_time())


@agentrio.tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return "rested"


async def test_history_gives_each_turn_the_time_it_was_made(
    autojump_clock: trio.testing.MockClock, wall_clock: None
) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(2)  # each model call takes 2 s
        if messages[-1].role == "user":
            return calling(ToolCallRequest("nap", {"seconds": 10}))
        return answer("rested enough")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(slow), nap))
        assert await agent.history() == ()  # no phase yet
        t0 = trio.current_time()
        result = await agent.run("rest")
        await trio.sleep(100)
        await agent.run("again")
        turns = await agent.history()
    assert all(isinstance(t, agentrio.types.Turn) for t in turns)
    assert [(t.message.role, t.message.content, t.timestamp - EPOCH - t0) for t in turns] == [
        ("system", "sys", 0),  # the phase's start
        ("user", "rest", 0),
        ("assistant", "", 2),  # when the reply came
        ("tool", "rested", 12),  # when the call ended
        ("assistant", "rested enough", 14),
        ("user", "again", 114),  # the next phase's
        ("assistant", "", 116),
        ("tool", "rested", 126),
        ("assistant", "rested enough", 128),
    ]
    # the turns are those of the conversation, as the model sees it
    assert turns[2].message.tool_calls[0].id == result.tool_calls[0].id


async def test_the_tool_results_of_one_turn_share_its_time(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clock that moves at each reading: results added together read it once.
    ticks = itertools.count(1)
    monkeypatch.setattr("agentrio.agents.loop.phase.time.time", lambda: float(next(ticks)))
    calls = (ToolCallRequest("nap", {"seconds": 1}), ToolCallRequest("nap", {"seconds": 3}))
    model = ScriptedModel([calling(*calls), answer("rested")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap))
        await agent.run("rest")
        turns = await agent.history()
    assert [t.message.role for t in turns] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    times = [t.timestamp for t in turns]
    assert times[3] == times[4]  # the turn's results, added together
    assert times[2] < times[3] < times[5]


async def test_history_of_each_label(
    autojump_clock: trio.testing.MockClock, wall_clock: None
) -> None:
    model = ScriptedModel([answer(f"r{i}") for i in range(4)])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("p1")
        await trio.sleep(5)
        await agent.run("s1", context_label="side")
        assert await agent.history("other") == ()
        await trio.sleep(5)
        await agent.run("p2", continue_context=False)  # a fresh history, with fresh times
        primary = await agent.history()
        side = await agent.history(context_label="side")
        with pytest.raises(InvalidArgument, match="context_label must be a str or None"):
            await agent.history(3)  # type: ignore[arg-type]
    assert [(t.message.content, t.timestamp - EPOCH) for t in primary] == [
        ("sys", 10),
        ("p2", 10),
        ("r2", 10),
    ]
    assert [(t.message.content, t.timestamp - EPOCH) for t in side] == [
        ("sys", 5),
        ("s1", 5),
        ("r1", 5),
    ]


async def test_history_during_a_phase_is_the_one_before_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(10)
        return answer(f"after {messages[-1].content}")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(slow)))
        await agent.run("one")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.run, "two")
            await trio.sleep(5)
            during = await agent.history()
        after = await agent.history()
    assert [t.message.content for t in during] == ["sys", "one", "after one"]
    assert [t.message.content for t in after] == ["sys", "one", "after one", "two", "after two"]


async def test_history_of_a_stopped_agent_raises(autojump_clock: trio.testing.MockClock) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([answer("r")])))
        await agent.run("one")
        assert len(await agent.history()) == 3
        await agent.stop()
        for label in (None, "never used"):
            with pytest.raises(ActorStopped) as info:
                await agent.history(label)
            assert info.value.reason == "stopped"


async def test_phases_run_one_at_a_time_in_order(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[list[str]] = []

    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen.append(contents(messages))
        await trio.sleep(10)
        return answer(f"after {messages[-1].content}")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(slow)))
        results: dict[str, PhaseResult] = {}

        async def run(text: str) -> None:
            results[text] = await agent.run(text)

        async with trio.open_nursery() as nursery:
            for text in ("one", "two", "three"):
                nursery.start_soon(run, text)
                await trio.testing.wait_all_tasks_blocked()
    assert seen == [
        ["sys", "one"],
        ["sys", "one", "after one", "two"],
        ["sys", "one", "after one", "two", "after two", "three"],
    ]
    assert trio.current_time() == pytest.approx(30)


# -- stop and cancel -------------------------------------------------------------------


async def test_cancel_is_immediate_and_leaves_no_task_behind(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    model = ScriptedModel([calling(*(ToolCallRequest("forever") for _ in range(3)))])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, forever))
        failure: list[BaseException] = []

        async def run() -> None:
            try:
                await agent.run("go")
            except ActorStopped as exc:
                failure.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            agent_task = task_tracker.named("a")
            below = task_tracker.descendants(agent_task)
            assert len(below) == 3  # the three tool calls, in the agent's nursery
            t0 = trio.current_time()
            agent.cancel()
        assert trio.current_time() == t0  # no time passed
        await agent.stop()  # waits for the exit; nothing more to do
        assert isinstance(failure[0], ActorStopped)
        assert failure[0].reason == "cancelled"
        assert agent.statistics().state == "exited"
        assert task_tracker.alive_at_exit[agent_task] == []
        assert task_tracker.alive(below) == []
        # a cancelled agent takes no more phases
        with pytest.raises(ActorStopped):
            await agent.run("again")


async def test_cancel_does_not_wait_for_a_sync_tool() -> None:
    # The real clock: a MockClock would jump to the tool's timeout while the
    # thread blocks. Nothing sleeps; the thread waits until it is released.
    release = threading.Event()
    entered = threading.Event()

    @agentrio.tool
    def stuck() -> str:
        entered.set()
        release.wait(30)  # real seconds: only a safety net
        return "late"

    model = ScriptedModel([calling(ToolCallRequest("stuck"))])
    try:
        async with agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(make_spec(model, stuck))
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    with pytest.raises(ActorStopped):
                        await agent.run("go")

                nursery.start_soon(run)
                await trio.to_thread.run_sync(entered.wait)
                t0 = trio.current_time()
                agent.cancel()
            await agent.stop()
            assert trio.current_time() - t0 < 5  # the thread still blocks for 30 s
            assert agent.statistics().state == "exited"
    finally:
        release.set()


async def test_cancel_during_the_model_call_releases_the_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with agentrio.open_runtime(budget=Budget(max_total_tokens=10_000)) as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(slow)))
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(ActorStopped):
                    await agent.run("go")

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            assert rt.budget.reserved_tokens > 0
            agent.cancel()
        assert rt.budget.reserved_tokens == 0
        assert rt.usage().requests == 1


async def test_stop_finishes_the_queued_phases(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([answer("1"), answer("2")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        results: list[str] = []

        async def run(text: str) -> None:
            results.append((await agent.run(text)).final_text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a")
            nursery.start_soon(run, "b")
            await trio.testing.wait_all_tasks_blocked()
            await agent.stop()
        assert sorted(results) == ["1", "2"]
        assert agent.statistics().state == "exited"


async def test_agent_usage_sums_its_phases(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel(
        [
            calling(ToolCallRequest("echo", {"x": 1}), usage=Usage(10, 1)),
            answer("a", Usage(20, 2)),
            answer("b", Usage(30, 3)),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        await agent.run("one")
        await agent.run("two", context_label="x")
        usage = agent.usage()
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (60, 6, 66)
    assert (usage.requests, usage.tool_calls) == (3, 1)


# -- a cancelled caller ends its phase ---------------------------------------------------


def ended(events: Sequence[agentrio.events.Event]) -> list[tuple[str, str, int]]:
    return [
        (e.path, e.stop_reason, e.iterations)
        for e in events
        if isinstance(e, agentrio.events.PhaseEnded)
    ]


async def test_a_cancelled_caller_cancels_the_model_call_and_ends_the_phase(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    seen: list[list[str]] = []
    cancelled: list[float] = []

    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen.append(contents(messages))
        if len(seen) == 1:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(trio.current_time())
                raise
        return answer("second")

    async with agentrio.open_runtime(budget=Budget(max_total_tokens=10_000)) as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(FunctionModel(model)))
        with trio.move_on_after(5) as scope:
            await agent.run("first")
        assert scope.cancelled_caught
        # run() raised trio.Cancelled once the phase had ended: its model call
        # was cancelled at once, the reservation settled, the event published
        assert cancelled == [5]
        assert rt.budget.reserved_tokens == 0
        assert rt.usage().requests == 1
        await trio.testing.wait_all_tasks_blocked()
        assert ended(events) == [("a", "cancelled", 1)]
        # the agent lives on, and its context kept the cancelled phase's turn
        result = await agent.run("second")
        assert (result.stop_reason, result.final_text) == ("done", "second")
        assert seen[1] == ["sys", "first", "second"]
        assert agent.statistics().state == "running"
        assert agent.statistics().restarts == 0
    assert ended(events) == [("a", "cancelled", 1), ("a", "done", 1)]


async def test_a_cancelled_caller_cancels_a_lone_tool_call(
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

    model = ScriptedModel([calling(ToolCallRequest("hang")), answer("after")])
    spec = make_spec(model, hang, limits=Limits(tool_timeout=30))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        with trio.move_on_after(5):
            await agent.run("go")
        assert state == ["started", "cancelled"]
        await trio.testing.wait_all_tasks_blocked()
        assert ended(events) == [("a", "cancelled", 1)]
        await trio.sleep(60)  # the call's timer was disarmed: nothing fires
        assert agent.statistics().state == "running"
        assert (await agent.run("again")).final_text == "after"
    # the call and its result stay in the context: the conversation is whole
    assert contents(model.calls[1]) == [
        "sys",
        "go",
        "",
        "the phase was cancelled while the tool ran",
        "again",
    ]


async def test_a_cancelled_caller_cancels_parallel_tool_calls(
    autojump_clock: trio.testing.MockClock, record_events: Recorder, task_tracker: TaskTracker
) -> None:
    model = ScriptedModel(
        [calling(*(ToolCallRequest("forever", id=f"c{i}") for i in range(3))), answer("after")]
    )
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, forever))
        with trio.move_on_after(5):
            await agent.run("go")
        below = task_tracker.descendants(task_tracker.named("a"))
        assert len(below) == 3  # the three calls' tasks, all ended
        assert task_tracker.alive(below) == []
        await trio.testing.wait_all_tasks_blocked()
        assert ended(events) == [("a", "cancelled", 1)]
        assert (await agent.run("again")).final_text == "after"
    assert [(m.role, m.content) for m in model.calls[1] if m.role == "tool"] == [
        ("tool", "the phase was cancelled while the tool ran")
    ] * 3


async def test_a_cancelled_caller_abandons_a_sync_tools_thread(
    record_events: Recorder,
) -> None:
    # The real clock, as in test_cancel_does_not_wait_for_a_sync_tool: nothing
    # sleeps; the thread waits until it is released.
    release = threading.Event()
    entered = threading.Event()

    @agentrio.tool
    def stuck() -> str:
        entered.set()
        release.wait(30)  # real seconds: only a safety net
        return "late"

    model = ScriptedModel([calling(ToolCallRequest("stuck")), answer("after")])
    try:
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(make_spec(model, stuck))
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    await agent.run("go")
                    raise AssertionError("unreachable: the caller was cancelled")

                nursery.start_soon(run)
                await trio.to_thread.run_sync(entered.wait)
                t0 = trio.current_time()
                nursery.cancel_scope.cancel()
            assert trio.current_time() - t0 < 5  # the thread still blocks for 30 s
            await trio.testing.wait_all_tasks_blocked()
            assert ended(events) == [("a", "cancelled", 1)]
            assert (await agent.run("again")).final_text == "after"
    finally:
        release.set()


async def test_a_caller_cancelled_as_the_tool_timer_fires_still_ends_the_phase(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    model = ScriptedModel([calling(ToolCallRequest("forever")), answer("after")])
    spec = make_spec(model, forever, limits=Limits(tool_timeout=5))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        with trio.move_on_after(5):  # the very instant the tool times out
            await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
        assert ended(events) == [("a", "cancelled", 1)]
        assert (await agent.run("again")).final_text == "after"
    assert contents(model.calls[1])[3] == "the phase was cancelled while the tool ran"


async def test_a_queued_phase_whose_caller_is_cancelled_never_starts(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    release = trio.Event()
    seen: list[str] = []

    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen.append(messages[-1].content)
        await release.wait()
        return answer(f"re: {messages[-1].content}")

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(FunctionModel(model)))
        results: list[str] = []

        async def run(text: str) -> None:
            results.append((await agent.run(text)).final_text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first")
            await trio.testing.wait_all_tasks_blocked()
            async with trio.open_nursery() as doomed:
                doomed.start_soon(run, "never")
                await trio.testing.wait_all_tasks_blocked()
                assert agent.statistics().mailbox_size == 1
                doomed.cancel_scope.cancel()
            nursery.start_soon(run, "third")
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        await trio.testing.wait_all_tasks_blocked()
    assert seen == ["first", "third"]
    assert results == ["re: first", "re: third"]
    assert sum(isinstance(e, agentrio.events.PhaseStarted) for e in events) == 2
    assert ended(events) == [("a", "done", 1), ("a", "done", 1)]
    assert not any(isinstance(e, agentrio.events.DeadLetter) for e in events)


async def test_a_cancel_that_lands_as_the_phase_ends_leaves_the_agent_running(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    # The model's answer wakes the agent and its caller is cancelled before the
    # agent runs again: the phase ends "done" with no checkpoint left, and the
    # cut meant for it must not end the agent.
    release = trio.Event()

    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if messages[-1].content == "first":
            await release.wait()
        return answer(f"re: {messages[-1].content}")

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(FunctionModel(model)))
        async with trio.open_nursery() as nursery:
            caller = trio.CancelScope()

            async def run() -> None:
                with caller:
                    await agent.run("first")
                    raise AssertionError("unreachable: the caller was cancelled")

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            release.set()  # the agent is scheduled to go on...
            caller.cancel()  # ...and its caller gives up before it does
        assert caller.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert ended(events) == [("a", "done", 1)]
        assert (await agent.run("second")).final_text == "re: second"
        assert agent.statistics().state == "running"
        assert agent.statistics().restarts == 0


async def test_a_ref_ask_of_a_phase_is_not_cancelled_with_its_asker(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    # Only run() links the phase to its caller; a plain ask keeps an ask's rules.
    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(10)
        return answer("late")

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(FunctionModel(model)))
        with pytest.raises(agentrio.AskTimeout):
            await agent.ref.ask(agentrio.RunPhase("go"), timeout=5)
        await trio.sleep(10)
        assert ended(events) == [("a", "done", 1)]


async def test_an_interrupt_from_outside_ends_the_phase_cancelled(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    # agentrio.actors.interrupt on the agent's actor: its phase is handed back to
    # it, neither timed out nor withdrawn; it ends "cancelled" and its caller
    # gets that result (what it did stays), and the agent goes on.
    model = ScriptedModel([calling(ToolCallRequest("forever")), answer("after")])
    spec = make_spec(model, forever, limits=Limits(tool_timeout=30))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        async with trio.open_nursery() as nursery:
            results: list[PhaseResult] = []

            async def run() -> None:
                results.append(await agent.run("go"))

            nursery.start_soon(run)
            await trio.sleep(5)
            assert agentrio.actors.interrupt(agent.ref) is True
        (result,) = results
        assert trio.current_time() == 5
        assert result.stop_reason == "cancelled"
        assert [(r.status, r.content) for r in result.tool_calls] == [
            ("timeout", "the phase was cancelled while the tool ran")
        ]
        await trio.sleep(60)  # the call's alarm was disarmed: nothing rings
        assert (await agent.run("again")).final_text == "after"
        stats = agent.statistics()
    assert ended(events) == [("a", "cancelled", 1), ("a", "done", 1)]
    assert (stats.state, stats.restarts, stats.messages_handled) == ("running", 0, 2)


# -- workspace -------------------------------------------------------------------------


async def test_workspace_and_run_summary(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    model = ScriptedModel(
        [
            calling(ToolCallRequest("echo", {"x": 1}), usage=Usage(100, 10)),
            answer("a", Usage(200, 20)),
            answer("b", Usage(300, 30)),
        ]
    )
    spec = make_spec(model, echo, workspace=root)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        ws = agent.workspace
        assert isinstance(ws, agentrio.Workspace)
        assert ws.root == root
        assert not root.exists()  # made on first use
        await agent.run("one")
        summary = json.loads((root / "run_summary.json").read_text())
        assert summary["total_tokens"] == 330
        await agent.run("two", context_label="other")
        summary = json.loads((root / "run_summary.json").read_text())
        # a second agent from the same spec under another name: its own subfolder
        other = await rt.spawn_agent(spec, name="b/c".replace("/", "-"))
        assert other.workspace is not None and other.workspace.root == root / "b-c"
    assert summary == {
        "agent": "a",
        "phases": 2,
        "stop_reasons": {"done": 2},
        "input_tokens": 600,
        "output_tokens": 60,
        "total_tokens": 660,
        "requests": 3,
        "tool_calls": 1,
    }
    assert sorted(p.name for p in root.iterdir()) == ["run_summary.json"]
    assert ws.artifacts == root / "artifacts" and ws.artifacts.is_dir()
    assert ws.logs.is_dir() and ws.memory.is_dir()


async def test_run_summary_counts_phases_that_ended_early(tmp_path: Path) -> None:
    model = ScriptedModel([answer("a")])
    spec = make_spec(model, workspace=tmp_path)
    async with agentrio.open_runtime(budget=Budget(max_requests=1)) as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("one")
        await agent.run("two")
        await agent.request_stop()
        await agent.run("three")
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary["phases"] == 3
    assert summary["stop_reasons"] == {"done": 1, "budget_exhausted": 1, "stop_requested": 1}


async def test_run_summary_counts_cancelled_phases(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if messages[-1].content == "hang":
            await trio.sleep_forever()
        return answer("a", Usage(10, 1))

    spec = make_spec(FunctionModel(model), workspace=tmp_path)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("one")
        with trio.move_on_after(5):
            await agent.run("hang")
        # written before run() raised
        summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary["phases"] == 2
    assert summary["stop_reasons"] == {"done": 1, "cancelled": 1}
    assert summary["requests"] == 2


async def test_agent_names_cannot_lead_out_of_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    spec = make_spec(ScriptedModel([answer("a")]), workspace=root)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec, name=":..")
        await agent.run("go")
    ws = agent.workspace
    assert ws is not None
    assert ws.root.parent == root and ws.root.name not in (".", "..")
    assert (ws.root / "run_summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]


@pytest.mark.parametrize(
    "name", ["run_summary.json", "artifacts", "logs", "memory", "Artifacts", "run summary.json"]
)
async def test_an_agent_folder_cannot_be_a_workspace_entry(
    name: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    root = tmp_path / "ws"
    model = ScriptedModel([answer("a")])
    spec = make_spec(model, workspace=root)
    async with agentrio.open_runtime() as rt:
        first = await rt.spawn_agent(spec)
        # Refused at spawn ("run summary.json" is made "run_summary.json"),
        # before any model call, and ignoring case.
        with pytest.raises(InvalidArgument, match="the workspace's own entries"):
            await rt.spawn_agent(spec, name=name)
        assert model.calls == [] and not root.exists()
        assert [c.path for c in rt.children()] == ["a"]
        await first.run("one")
    assert json.loads((root / "run_summary.json").read_text())["phases"] == 1
    assert sorted(p.name for p in root.iterdir()) == ["run_summary.json"]


@pytest.mark.parametrize("where", ["subfolder", "root"])
async def test_an_agent_folder_that_is_a_file_is_refused_at_spawn(
    where: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A user's file "w2" where agent w2's subfolder would go: the summary write
    # failed after the phase's model calls, and run() raised ActorCrashed.
    root = tmp_path / "ws"
    root.mkdir()
    taken = root / "w2" if where == "subfolder" else root
    if where == "root":
        root.rmdir()
    taken.write_text("the user's file")
    model = ScriptedModel([answer("a")])
    spec = make_spec(model, workspace=root)
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match="exists and is not a folder"):
            await rt.spawn_agent(spec, name="w2")
        assert rt.children() == []
    assert model.calls == [] and taken.read_text() == "the user's file"


async def test_a_summary_that_cannot_be_written_leaves_the_result(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    model = ScriptedModel([answer("a", Usage(1, 1)), answer("b", Usage(1, 1))])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, workspace=tmp_path))
        # (made unwritable after the spawn: a folder where the file goes)
        (tmp_path / "run_summary.json").mkdir()
        result = await agent.run("one")
        (tmp_path / "run_summary.json").rmdir()
        second = await agent.run("two")
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text) == ("done", "a")
    assert second.final_text == "b"
    (failed,) = [e for e in events if isinstance(e, agentrio.events.WorkspaceWriteFailed)]
    assert failed.path == "a" and failed.file == str(tmp_path / "run_summary.json")
    assert failed.error_type == "IsADirectoryError"
    # the next phase's summary counts both
    assert json.loads((tmp_path / "run_summary.json").read_text())["phases"] == 2


async def test_a_summary_write_that_hangs_does_not_hold_a_cancelled_caller(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    record_events: Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    # (without the deadline, the caller would wait for the thread: freed after 5 real s)
    timer = threading.Timer(5.0, release.set)
    timer.start()

    def stuck(self: agentrio.Workspace, summary: dict[str, object]) -> Path:
        release.wait()
        return self.root / "run_summary.json"

    monkeypatch.setattr(agentrio.Workspace, "write_summary", stuck)

    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep_forever()
        raise AssertionError

    try:
        # (the write's deadline is in real time: 0.2 s)
        async with agentrio.open_runtime(shutdown_timeout=0.2) as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(make_spec(FunctionModel(model), workspace=tmp_path))
            start = trio.current_time()
            with trio.move_on_after(5) as scope:
                await agent.run("hang")
            assert scope.cancelled_caught
            assert trio.current_time() - start == 5.0
            await trio.testing.wait_all_tasks_blocked()
    finally:
        release.set()
        timer.cancel()
    (failed,) = [e for e in events if isinstance(e, agentrio.events.WorkspaceWriteFailed)]
    assert (failed.path, failed.error_type) == ("a", "TimeoutError")
    assert "longer than 0.2 s" in failed.error
    ended = [e.stop_reason for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert ended == ["cancelled"]


async def test_max_iterations_none_means_the_spec_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling(ToolCallRequest("echo", {"x": i})) for i in range(5)])
    limits = Limits(max_iterations=2, final_answer=False)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, limits=limits))
        result = await agent.run("go", max_iterations=None)
    assert result.stop_reason == "max_iterations"
    assert len(model.calls) == 2


async def test_a_context_actor_starts_within_its_first_phase_and_exits_after_its_agent() -> None:
    async with agentrio.open_runtime() as rt:
        events = rt.events()
        agent = await rt.spawn_agent(make_spec(ScriptedModel([Reply(text="hi")])), name="a")
        await agent.run("hello")
    seen = []
    async for event in events:
        if isinstance(
            event,
            (agentrio.events.ActorStarted, agentrio.events.ActorExited, agentrio.events.PhaseEnded),
        ):
            seen.append((type(event).__name__, event.path))
    assert seen == [
        ("ActorStarted", "a"),
        ("ActorStarted", "a.context"),  # written at the end of the phase, before it ends
        ("PhaseEnded", "a"),
        ("ActorExited", "a"),
        ("ActorExited", "a.context"),  # owned: it stops after its agent
    ]


# -- a user turn of content parts --------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


async def test_a_user_turn_of_parts_reaches_the_model_and_stays_in_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from agentrio import ImagePart
    from agentrio.types import TextPart

    image = ImagePart(data=PNG, media_type="image/png")
    model = ScriptedModel([answer("a red square"), answer("it was red")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        first = await agent.run(["What is this?", image, TextPart("Be brief.")])
        second = await agent.run("What colour was it?")
        history = await agent.history()
    assert (first.final_text, second.final_text) == ("a red square", "it was red")
    parts = (TextPart("What is this?"), image, TextPart("Be brief."))
    turn = ChatMessage("user", "What is this?\nBe brief.", parts=parts)
    assert model.calls[0][-1] == turn  # the model sees the parts, in order
    # The next phase, and the stored history, still have them.
    assert model.calls[1][1] == turn
    assert [t.message for t in history][1] == turn


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ([], "user_message is an empty list"),
        (b"png bytes", "got a bytes"),
        (42, "got a int"),
        (["fine", 3], "user_message[1] must be a str, TextPart, ImagePart or DocumentPart"),
    ],
)
async def test_run_refuses_a_user_message_that_is_not_parts(message: object, says: str) -> None:
    model = ScriptedModel([answer("never")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        with pytest.raises(InvalidArgument, match=re.escape(says)):
            await agent.run(message)  # type: ignore[arg-type]
    assert model.calls == []


async def test_run_refuses_a_part_the_providers_wire_cannot_take_before_any_request() -> None:
    from agentrio import ImagePart, Provider, ProviderConfig
    from agentrio.testing import open_fake_llm

    async with open_fake_llm([answer("never")]) as server:
        config = ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(make_spec(provider.model("llava")))
            image = ImagePart(url="https://example.com/cat.png")
            with pytest.raises(InvalidArgument) as caught:
                await agent.run(["what is this?", image])
            assert await agent.history() == ()
            # The same image as data goes.
            ok = await agent.run(["what is this?", ImagePart(data=PNG, media_type="image/png")])
        assert server.statistics().http_requests == 1
    assert ok.final_text == "never"
    assert str(caught.value) == (
        "user_message: provider 'local': part 1 (ImagePart(url='https://example.com/…', "
        "media_type='')): the ollama wire format takes images as data only, not by URL: "
        "give ImagePart(data=...)"
    )
