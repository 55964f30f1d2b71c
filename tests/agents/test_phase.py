"""One phase of the agent loop: every stop reason, the gates before each model call,
tool calls (policy, parallelism, timeouts, failures as results), direct tool calls,
the final answer turn, stall detection, the context window, events and on_step, and a
lone tool call's timeout (a runtime timer that cuts the agent's task short and resumes
its phase)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    Budget,
    ChatMessage,
    Limits,
    PhaseResult,
    ToolCallRequest,
    ToolResult,
    Usage,
)
from agentrio.agents.loop.continuation import CONTINUATION_PROMPT
from agentrio.agents.loop.endings import FINAL_ANSWER_PROMPT
from agentrio.agents.loop.phase import Phase
from agentrio.config import Config
from agentrio.testing import FakeRequest, FunctionModel, Reply, ScriptedModel, open_fake_llm
from agentrio.types import ToolSchema

if TYPE_CHECKING:
    from conftest import TaskTracker

RecordEvents = Callable[..., list[agentrio.events.Event]]

# Virtual seconds (MockClock): a test that deadlocks jumps here and fails at once.
DEADLINE = 10_000


def call(name: str, **arguments: object) -> ToolCallRequest:
    return ToolCallRequest(name, arguments)


def calling(*calls: ToolCallRequest, text: str = "", usage: Usage | None = None) -> Reply:
    return Reply(text=text, tool_calls=calls, usage=usage or Usage(10, 5))


def answer(text: str, usage: Usage | None = None) -> Reply:
    return Reply(text=text, usage=usage or Usage(10, 5))


@agentrio.tool
async def echo(x: int) -> str:
    """Echo x."""
    await trio.lowlevel.checkpoint()
    return f"echo {x}"


@agentrio.tool
async def nap(n: int, seconds: float = 10.0) -> str:
    """Sleep, then say so."""
    await trio.sleep(seconds)
    return f"slept {n}"


@agentrio.tool
async def boom(x: int) -> str:
    """Always raises."""
    await trio.lowlevel.checkpoint()
    raise ValueError(f"bad x {x}")


@agentrio.tool
async def unencodable() -> object:
    """Returns something JSON cannot hold."""
    await trio.lowlevel.checkpoint()
    return object()


def make_spec(model: object, *tools: agentrio.Tool, **kw: object) -> AgentSpec:
    return AgentSpec(name="a", model=model, instructions="sys", tools=list(tools), **kw)  # type: ignore[arg-type]


class Recording:
    """A FunctionModel body that records (messages, tools) of every call."""

    def __init__(self, fn: Callable[[Sequence[ChatMessage]], Reply]) -> None:
        self.fn = fn
        self.seen: list[tuple[tuple[ChatMessage, ...], tuple[ToolSchema, ...]]] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        self.seen.append((tuple(messages), tuple(tools)))
        return self.fn(messages)


def tool_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [m for m in messages if m.role == "tool"]


# -- every stop reason ------------------------------------------------------------------


async def test_done_with_final_text(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([calling(call("echo", x=1)), answer("the end")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go")
    assert result == PhaseResult(
        final_text="the end",
        tool_calls=(
            ToolResult(id="call_1", name="echo", arguments={"x": 1}, status="ok", content="echo 1"),
        ),
        stop_reason="done",
        output="the end",
    )
    assert model.remaining == 0


async def test_max_iterations_ends_with_a_final_call_without_tools(
    autojump_clock: trio.testing.MockClock,
) -> None:
    n = 0

    def fn(messages: Sequence[ChatMessage]) -> Reply:
        nonlocal n
        n += 1
        return calling(call("echo", x=n), text=f"turn {n}")

    rec = Recording(fn)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(rec), echo))
        result = await agent.run("go", max_iterations=2)
    assert result.stop_reason == "max_iterations"
    # two iterations, then one last call that is shown no tools
    assert len(rec.seen) == 3
    assert [len(tools) for _, tools in rec.seen] == [1, 1, 0]
    assert rec.seen[2][1] == ()
    # the last call saw both tool results; the tool calls it asked for were not run
    assert [m.content for m in tool_messages(rec.seen[2][0])] == ["echo 1", "echo 2"]
    assert [r.arguments for r in result.tool_calls] == [{"x": 1}, {"x": 2}]
    assert result.final_text == "turn 3"


async def test_final_answer_false_makes_no_last_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling(call("echo", x=i)) for i in range(5)])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, limits=Limits(final_answer=False)))
        result = await agent.run("go", max_iterations=2)
    assert result.stop_reason == "max_iterations"
    assert len(model.calls) == 2
    assert len(result.tool_calls) == 2


async def test_max_iterations_defaults_to_the_spec_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling(call("echo", x=i)) for i in range(10)])
    limits = Limits(max_iterations=3, final_answer=False)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, limits=limits))
        result = await agent.run("go")
    assert result.stop_reason == "max_iterations"
    assert len(model.calls) == 3


async def test_budget_exhausted_before_the_first_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("never")])
    async with agentrio.open_runtime(budget=Budget(max_requests=0)) as rt:
        agent = await rt.spawn_agent(make_spec(model))
        result = await agent.run("go")
    assert result == PhaseResult("", (), "budget_exhausted")
    assert model.calls == []


async def test_budget_is_checked_before_every_model_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling(call("echo", x=i)) for i in range(10)])
    async with agentrio.open_runtime(budget=Budget(max_requests=2)) as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go", max_iterations=5)
        assert result.stop_reason == "budget_exhausted"
        assert len(model.calls) == 2
        # the tool calls of the turns that were made are kept
        assert [r.content for r in result.tool_calls] == ["echo 0", "echo 1"]
        # and from now on every phase ends at once, without calling the model
        for _ in range(3):
            later = await agent.run("again")
            assert later == PhaseResult("", (), "budget_exhausted")
        assert len(model.calls) == 2
        assert rt.usage().requests == 2


async def test_token_budget_too_small_for_the_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # the reservation (prompt estimate + max_output_tokens) cannot fit: no call
    model = ScriptedModel([answer("never")])
    limits = Limits(max_output_tokens=100)
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=50)) as rt:
        agent = await rt.spawn_agent(make_spec(model, limits=limits))
        result = await agent.run("go")
    assert result.stop_reason == "budget_exhausted"
    assert model.calls == []


async def test_stop_requested_is_seen_at_the_next_iteration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()
    release = trio.Event()

    @agentrio.tool
    async def wait_here() -> str:
        entered.set()
        await release.wait()
        return "released"

    model = ScriptedModel([calling(call("wait_here")), answer("next phase")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, wait_here))
        result: list[PhaseResult] = []

        async def run() -> None:
            result.append(await agent.run("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await entered.wait()
            await agent.request_stop()
            release.set()
        assert result[0].stop_reason == "stop_requested"
        # the tool call in progress finished and is kept; the model was not called again
        assert [r.content for r in result[0].tool_calls] == ["released"]
        assert len(model.calls) == 1
        # nothing of the stopped phase is lost: the next phase's model sees it
        assert (await agent.run("and now?")).stop_reason == "done"
    assert [m.role for m in model.calls[1]] == ["system", "user", "assistant", "tool", "user"]
    assert tool_messages(model.calls[1])[0].content == "released"


async def test_stop_request_before_a_phase_ends_it_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("after")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.request_stop()
        stopped = await agent.run("go")
        assert stopped == PhaseResult("", (), "stop_requested")
        assert model.calls == []
        # the request was used up: the next phase runs normally
        assert (await agent.run("again")).stop_reason == "done"


async def test_stop_is_checked_before_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("never")])
    async with agentrio.open_runtime(budget=Budget(max_requests=0)) as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.request_stop()
        assert (await agent.run("go")).stop_reason == "stop_requested"
        assert (await agent.run("go")).stop_reason == "budget_exhausted"
    assert model.calls == []


async def test_timeout_keeps_the_tool_calls_so_far(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(call("echo", x=1)),
            calling(call("nap", n=1, seconds=100)),
            answer("after"),
        ]
    )
    limits = Limits(timeout=30, tool_timeout=1000)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, nap, limits=limits))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == pytest.approx(30)
        assert result.stop_reason == "timeout"
        assert [(r.name, r.status) for r in result.tool_calls] == [
            ("echo", "ok"),
            ("nap", "timeout"),
        ]
        assert "timed out" in result.tool_calls[1].content
        # nothing of the phase was lost: the next phase's model sees all of it
        assert (await agent.run("and now?")).stop_reason == "done"
    history = model.calls[2]
    assert [m.role for m in history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
    ]
    assert [m.content for m in tool_messages(history)] == [r.content for r in result.tool_calls]


async def test_timeout_in_a_parallel_batch_records_each_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(
                call("nap", n=1, seconds=5),
                call("nap", n=2, seconds=100),
                call("nap", n=3, seconds=200),
            ),
            answer("never"),
        ]
    )
    limits = Limits(timeout=30, tool_timeout=1000)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap, limits=limits))
        result = await agent.run("go")
    assert result.stop_reason == "timeout"
    assert [(r.arguments["n"], r.status) for r in result.tool_calls] == [
        (1, "ok"),
        (2, "timeout"),
        (3, "timeout"),
    ]


async def test_timeout_during_the_model_call(autojump_clock: trio.testing.MockClock) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(1000)
        return answer("late")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(slow), limits=Limits(timeout=10)))
        result = await agent.run("go")
        assert result == PhaseResult("", (), "timeout")
        # the call was made: it is counted, and its reservation was released
        assert rt.usage().requests == 1
        assert rt.budget.reserved_tokens == 0


async def test_stalled_on_the_same_call_twice(autojump_clock: trio.testing.MockClock) -> None:
    # the same arguments in another key order are the same call
    first = ToolCallRequest("pair", {"a": 1, "b": 2})
    second = ToolCallRequest("pair", {"b": 2, "a": 1})
    assert list(first.arguments) != list(second.arguments)

    @agentrio.tool
    async def pair(a: int, b: int) -> int:
        await trio.lowlevel.checkpoint()
        return a + b + len(log)

    log: list[int] = []
    script = iter([calling(first), calling(second)])

    def fn(messages: Sequence[ChatMessage]) -> Reply:
        log.append(1)  # so the two calls get different results
        return next(script, answer("best answer"))

    rec = Recording(fn)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(rec), pair))
        result = await agent.run("go", max_iterations=10)
    assert result.stop_reason == "stalled"
    assert result.final_text == "best answer"
    assert len(result.tool_calls) == 2
    # the last call was told to answer now, and was shown no tools
    messages, tools = rec.seen[-1]
    assert messages[-1] == ChatMessage("user", FINAL_ANSWER_PROMPT)
    assert tools == ()
    assert len(rec.seen) == 3


async def test_different_arguments_are_not_a_stall(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling(call("echo", x=i)) for i in range(4)] + [answer("done")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go", max_iterations=10)
    assert result.stop_reason == "done"
    assert len(result.tool_calls) == 4


async def test_stalled_on_three_identical_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @agentrio.tool
    async def same(x: int) -> str:
        await trio.lowlevel.checkpoint()
        return "nothing new"

    model = ScriptedModel([*(calling(call("same", x=i)) for i in (1, 2, 3)), answer("giving up")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, same))
        result = await agent.run("go", max_iterations=10)
    assert result.stop_reason == "stalled"
    assert len(result.tool_calls) == 3
    assert len(model.calls) == 4
    assert model.calls[-1][-1].content == FINAL_ANSWER_PROMPT


async def test_two_identical_results_are_not_a_stall(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @agentrio.tool
    async def same(x: int) -> str:
        await trio.lowlevel.checkpoint()
        return "nothing new" if x < 3 else "news"

    model = ScriptedModel([*(calling(call("same", x=i)) for i in (1, 2, 3)), answer("fine")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, same))
        result = await agent.run("go", max_iterations=10)
    assert result.stop_reason == "done"


# -- stall thresholds (Limits.max_identical_calls, max_identical_results) ----------------


@agentrio.tool
async def poll(job: str) -> str:
    """A status that changes only after a while: each poll the same call."""
    await trio.lowlevel.checkpoint()
    polls.append(job)
    return f"pending ({len(polls)})" if len(polls) < 4 else "finished"


polls: list[str] = []


def polling_model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
    last = messages[-1]
    if last.role == "tool" and last.content == "finished":
        return answer("the job finished")
    if last.role == "user" and last.content == FINAL_ANSWER_PROMPT:
        return answer("gave up")
    return calling(call("poll", job="build"))


async def test_a_polling_tool_is_stalled_at_the_second_identical_call_by_default(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    polls.clear()
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(FunctionModel(polling_model), poll))
        result = await agent.run("wait for the build")
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text, len(polls)) == ("stalled", "gave up", 2)
    (stalled,) = [e for e in events if isinstance(e, agentrio.events.Stalled)]
    assert stalled.why == 'repeated call poll({"job":"build"})'  # (today's words)


async def test_max_identical_calls_lets_a_tool_poll(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    # The third identical call stalls at 3; the fourth at 4; not at all when off.
    for most, stalled_after in ((3, 3), (4, 4), (None, None), (0, None)):
        polls.clear()
        limits = Limits(max_identical_calls=most, max_identical_results=None)
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(
                make_spec(FunctionModel(polling_model), poll, limits=limits)
            )
            result = await agent.run("wait for the build")
            await trio.testing.wait_all_tasks_blocked()
        if stalled_after is None:
            assert (result.stop_reason, result.final_text) == ("done", "the job finished")
            assert len(polls) == 4
            assert not [e for e in events if isinstance(e, agentrio.events.Stalled)]
        else:
            assert (result.stop_reason, len(polls)) == ("stalled", stalled_after)
            (stalled,) = [e for e in events if isinstance(e, agentrio.events.Stalled)]
            assert stalled.why == (
                f'repeated call poll({{"job":"build"}}) {["three", "four"][most - 3]} times'
            )


async def test_max_identical_calls_counts_each_call_on_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # At 3: a, b, a, b is no stall (each made twice); the third a is.
    script = [calling(call("echo", x=x)) for x in (1, 2, 1, 2, 1)]
    model = ScriptedModel([*script, answer("stop")])
    limits = Limits(max_identical_calls=3, max_identical_results=None)
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(make_spec(model, echo, limits=limits))).run("go")
    assert result.stop_reason == "stalled"
    assert [r.arguments["x"] for r in result.tool_calls] == [1, 2, 1, 2, 1]


async def test_max_identical_calls_counts_past_the_seen_list(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Past a handful of calls the seen calls are a set; a call's count still adds up.
    many = calling(*(call("echo", x=i) for i in range(30)))
    model = ScriptedModel(
        [many, calling(call("echo", x=29)), calling(call("echo", x=29)), answer("")]
    )
    limits = Limits(max_identical_calls=3, max_identical_results=None)
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(make_spec(model, echo, limits=limits))).run("go")
    assert result.stop_reason == "stalled" and len(result.tool_calls) == 32


async def test_a_call_equal_in_python_but_not_in_json_is_not_a_repeat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The seen list holds the calls' results, compared with == first, then by
    # their JSON (the set's keys): {"s": 1} == {"s": 1.0}, but "1" != "1.0".
    @agentrio.tool
    async def scale(s: float) -> str:
        """Scale by s."""
        await trio.lowlevel.checkpoint()
        return f"scaled {s} at {trio.current_time()}"

    same = [calling(call("scale", s=1)), calling(call("scale", s=1.0))]
    limits = Limits(max_identical_results=None)
    async with agentrio.open_runtime() as rt:
        model = ScriptedModel([*same, calling(call("scale", s=1)), answer("done")])
        result = await (await rt.spawn_agent(make_spec(model, scale, limits=limits))).run("go")
    # (the third call, the first one's again, is the repeat)
    assert result.stop_reason == "stalled"
    assert [r.arguments["s"] for r in result.tool_calls] == [1, 1.0, 1]
    assert [type(r.arguments["s"]) for r in result.tool_calls] == [int, float, int]


async def test_the_seen_calls_become_a_set_past_a_handful(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A list while short (an empty set costs 216 bytes on each agent in flight),
    # then a set: each check O(1), a phase's calls linear in their number.
    shapes: list[tuple[str, int]] = []
    watch = Phase._watch

    def spy(self: Phase, result: ToolResult) -> None:
        watch(self, result)
        shapes.append((type(self.seen).__name__, len(self.seen)))

    monkeypatch.setattr(Phase, "_watch", spy)
    calls = [call("echo", x=i) for i in range(20)]
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), echo))
        await agent.run("", direct_tool_calls=calls)
    assert shapes == [("list", n) for n in range(1, 9)] + [("set", n) for n in range(9, 21)]


async def test_many_direct_tool_calls_take_linear_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The seen calls were a list whatever their number: 20,000 direct calls took
    # 4.4 s of CPU (quadratic), against 0.7 s now. (CPU time: a busy machine
    # does not count; the bound is generous.)
    calls = [call("echo", x=i) for i in range(20_000)]
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), echo))
        start = time.process_time()
        result = await agent.run("", direct_tool_calls=calls)
        took = time.process_time() - start
    assert result.stop_reason == "done" and len(result.tool_calls) == 20_000
    assert took < 2.5, f"20,000 direct tool calls took {took:.2f} s of CPU"


async def test_max_identical_results_sets_the_run_that_stalls(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    @agentrio.tool
    async def same(x: int) -> str:
        await trio.lowlevel.checkpoint()
        return "nothing new"

    for most, stalled_after in ((2, 2), (4, 4), (None, None), (0, None)):
        model = ScriptedModel([*(calling(call("same", x=i)) for i in range(5)), answer("ok")])
        limits = Limits(max_identical_results=most)
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(make_spec(model, same, limits=limits))
            result = await agent.run("go")
            await trio.testing.wait_all_tasks_blocked()
        stalls = [e.why for e in events if isinstance(e, agentrio.events.Stalled)]
        if stalled_after is None:
            assert (result.stop_reason, len(result.tool_calls), stalls) == ("done", 5, [])
        else:
            assert (result.stop_reason, len(result.tool_calls)) == ("stalled", stalled_after)
            assert stalls == [f"{['two', 'three', 'four'][most - 2]} identical results from same"]


async def test_identical_results_must_be_in_a_row(autojump_clock: trio.testing.MockClock) -> None:
    @agentrio.tool
    async def flip(x: int) -> str:
        await trio.lowlevel.checkpoint()
        return "same" if x % 3 else "other"

    # same, same, other, same, same, other...: never three in a row
    model = ScriptedModel([*(calling(call("flip", x=i)) for i in range(1, 8)), answer("ok")])
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(make_spec(model, flip))).run("go")
    assert (result.stop_reason, len(result.tool_calls)) == ("done", 7)
    model = ScriptedModel([*(calling(call("flip", x=i)) for i in range(1, 8)), answer("ok")])
    limits = Limits(max_identical_results=2)
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(make_spec(model, flip, limits=limits))).run("go")
    assert (result.stop_reason, len(result.tool_calls)) == ("stalled", 2)


async def test_with_both_rules_off_only_max_iterations_bounds_a_loop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling(call("echo", x=1)) for _ in range(4)] + [answer("last")])
    limits = Limits(max_identical_calls=None, max_identical_results=None)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, limits=limits))
        result = await agent.run("go", max_iterations=4)
    assert (result.stop_reason, result.final_text, len(result.tool_calls)) == (
        "max_iterations",
        "last",
        4,
    )


# -- continuation (Limits.max_continuation_turns) -----------------------------------------


def continuing(spec_limits: Limits | None = None, **kw: object) -> Callable[..., AgentSpec]:
    limits = spec_limits or Limits(max_continuation_turns=3)
    return lambda model, *tools: make_spec(model, *tools, limits=limits, **kw)


async def test_an_unfinished_reply_is_continued_up_to_the_cap(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    replies = iter(["Let me check the logs.", "Now I'll read the config.", "Next, I will look:"])

    def fn(messages: Sequence[ChatMessage]) -> Reply:
        return answer(next(replies, "I'll now try again."))

    rec = Recording(fn)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(continuing()(FunctionModel(rec)))
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    # three continuations, then the fourth unfinished reply ends the phase as today
    assert (result.stop_reason, result.final_text) == ("done", "I'll now try again.")
    assert len(rec.seen) == 4 and agent.usage().requests == 4
    # each continued call saw the reply, then the continuation message as a user turn
    for n, (messages, tools) in enumerate(rec.seen[1:], 1):
        assert messages[-1] == ChatMessage("user", CONTINUATION_PROMPT)
        assert messages[-2].role == "assistant"
        assert len(tools) == 0  # (the agent has no tools; they are offered as usual)
        assert [m.content for m in messages].count(CONTINUATION_PROMPT) == n
    injected = [e for e in events if isinstance(e, agentrio.events.ContinuationInjected)]
    assert [(e.path, e.iteration, e.count, e.text) for e in injected] == [
        ("a", 1, 1, "Let me check the logs."),
        ("a", 2, 2, "Now I'll read the config."),
        ("a", 3, 3, "Next, I will look:"),
    ]
    (ended,) = [e for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert (ended.stop_reason, ended.iterations) == ("done", 4)


async def test_continuation_messages_stay_in_the_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rec = Recording(lambda m: answer("Let me think..." if len(m) < 4 else "It is 4."))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(continuing()(FunctionModel(rec)))
        assert (await agent.run("2+2?")).final_text == "It is 4."
        await agent.run("and 3+3?")
    roles = [(m.role, m.content) for m in rec.seen[-1][0]]
    assert roles == [
        ("system", "sys"),
        ("user", "2+2?"),
        ("assistant", "Let me think..."),
        ("user", CONTINUATION_PROMPT),
        ("assistant", "It is 4."),
        ("user", "and 3+3?"),
    ]


async def test_a_continued_phase_goes_on_with_its_tools(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [answer("I'll start by echoing 1."), calling(call("echo", x=1)), answer("echo said 1")]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(continuing()(model, echo))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("done", "echo said 1")
    assert [r.content for r in result.tool_calls] == ["echo 1"]
    assert model.remaining == 0
    # the tools were offered on the continued call too
    assert model.calls[1][-1].content == CONTINUATION_PROMPT


FINAL_ANSWERS = [
    "The capital of France is Paris.",
    "Done. I wrote report.md; let me know if you need anything else.",
    "Would you like me to fix these as well?",
    "Here is the summary:\n\n- A\n- B",
]


@pytest.mark.parametrize("text", FINAL_ANSWERS)
async def test_a_final_answer_is_not_continued(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, text: str
) -> None:
    model = ScriptedModel([answer(text)])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        result = await (await rt.spawn_agent(continuing()(model))).run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text, len(model.calls)) == ("done", text, 1)
    assert not [e for e in events if isinstance(e, agentrio.events.ContinuationInjected)]


async def test_continuation_is_off_by_default(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    asked: list[str] = []

    def detector(text: str) -> bool:
        asked.append(text)
        return True

    assert Limits().max_continuation_turns == 0
    model = ScriptedModel([answer("Let me check the logs."), answer("unused")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, continuation_detector=detector))
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text) == ("done", "Let me check the logs.")
    assert model.remaining == 1
    assert asked == []  # not even asked
    assert not [e for e in events if isinstance(e, agentrio.events.ContinuationInjected)]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_custom_detector_decides(
    autojump_clock: trio.testing.MockClock, is_async: bool
) -> None:
    asked: list[str] = []

    def sync_detector(text: str) -> bool:
        asked.append(text)
        return "DONE" not in text

    async def async_detector(text: str) -> bool:
        await trio.lowlevel.checkpoint()
        return sync_detector(text)

    # The built-in detector would take the first two for final answers.
    model = ScriptedModel([answer("Paris."), answer("Still Paris."), answer("Paris. DONE")])
    detector = async_detector if is_async else sync_detector
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(continuing(continuation_detector=detector)(model))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("done", "Paris. DONE")
    assert asked == ["Paris.", "Still Paris.", "Paris. DONE"]


async def test_only_true_from_the_detector_continues(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for verdict in (1, "yes", None, False):
        model = ScriptedModel([answer("first"), answer("second")])
        spec = continuing(continuation_detector=lambda text, v=verdict: v)(model)
        async with agentrio.open_runtime() as rt:
            result = await (await rt.spawn_agent(spec)).run("go")
        assert (result.stop_reason, result.final_text) == ("done", "first")


async def test_a_detector_that_raises_ends_the_phase_with_error(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    def detector(text: str) -> bool:
        raise RuntimeError("detector broke")

    model = ScriptedModel([answer("Let me check.")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(continuing(continuation_detector=detector)(model))
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text) == ("error", "Let me check.")
    (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert (error.error_type, error.error) == ("RuntimeError", "detector broke")


async def test_a_continuation_is_a_model_call_of_max_iterations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two calls allowed: one continuation, and the second unfinished reply ends
    # the phase as today ("done"), not with a final-answer call.
    model = ScriptedModel([answer("Let me look."), answer("Let me look again."), answer("x")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(continuing()(model))
        result = await agent.run("go", max_iterations=2)
        assert (result.stop_reason, result.final_text) == ("done", "Let me look again.")
        assert len(model.calls) == 2
        # with one call allowed, none is left to continue with
        result = await agent.run("again", max_iterations=1)
    assert (result.stop_reason, result.final_text) == ("done", "x")
    assert model.remaining == 0


async def test_the_cap_is_per_phase(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([answer("Let me see."), answer("Let me see more.")] * 2)
    spec = continuing(Limits(max_continuation_turns=1))(model)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        first = await agent.run("one")
        second = await agent.run("two")
    assert first.final_text == second.final_text == "Let me see more."
    assert model.remaining == 0


async def test_a_continued_phase_still_sees_the_budget_and_a_stop_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("Let me check.")] * 3)
    async with agentrio.open_runtime(budget=Budget(max_requests=2)) as rt:
        agent = await rt.spawn_agent(continuing()(model))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("budget_exhausted", "Let me check.")
    assert len(model.calls) == 2

    async def stop_then(text: str) -> bool:
        await agent.request_stop()
        return True

    model = ScriptedModel([answer("Let me check.")] * 3)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(continuing(continuation_detector=stop_then)(model))
        result = await agent.run("go")
    assert (result.stop_reason, len(model.calls)) == ("stop_requested", 1)


async def test_model_error_ends_the_phase_with_error(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    model = ScriptedModel([calling(call("echo", x=1))])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go")
        assert result.stop_reason == "error"
        # what came before the error is kept
        assert [r.content for r in result.tool_calls] == ["echo 1"]
        await trio.testing.wait_all_tasks_blocked()
        (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
        assert error.error_type == "ScriptExhausted"
        assert "ran out of replies" in error.error
        # the agent did not crash: it runs the next phase
        assert (await agent.run("again")).stop_reason == "error"
        assert agent.statistics().restarts == 0


async def test_model_returning_a_non_reply_is_an_error(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    class Weird:
        async def complete(self, messages: object, tools: object, *, max_output_tokens: int) -> str:
            await trio.lowlevel.checkpoint()
            return "not a reply"

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(Weird()))
        assert (await agent.run("go")).stop_reason == "error"
        await trio.testing.wait_all_tasks_blocked()
        (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
        assert error.error_type == "TypeError"
        assert "ModelReply" in error.error
        assert rt.budget.reserved_tokens == 0


# -- tool calls -------------------------------------------------------------------------


async def test_tool_calls_run_in_parallel(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([calling(*(call("nap", n=i) for i in range(3))), answer("ok")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == pytest.approx(10)
    assert [r.content for r in result.tool_calls] == ["slept 0", "slept 1", "slept 2"]


async def test_max_parallel_tools_bounds_the_overlap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    running = peak = 0

    @agentrio.tool
    async def counted(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(10)
        running -= 1
        return n

    model = ScriptedModel([calling(*(call("counted", n=i) for i in range(3))), answer("ok")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, counted, limits=Limits(max_parallel_tools=2)))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == pytest.approx(20)
    assert peak == 2
    # results are in call order whatever order they finished in
    assert [r.content for r in result.tool_calls] == ["0", "1", "2"]


async def test_tool_timeout(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([calling(call("nap", n=1, seconds=100), call("echo", x=2)), answer("ok")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap, echo, limits=Limits(tool_timeout=5)))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == pytest.approx(5)
    assert result.stop_reason == "done"
    slow, fast = result.tool_calls
    assert (slow.status, fast.status) == ("timeout", "ok")
    assert "nap" in slow.content and "timed out" in slow.content
    # the model saw the timeout as a tool result
    assert [m.content for m in tool_messages(model.calls[1])] == [slow.content, "echo 2"]


async def test_failures_are_results_the_model_sees(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(
                call("boom", x=1),
                call("echo", x="not a number"),
                call("echo", y=1),
                call("unencodable"),
                call("missing"),
            ),
            answer("coped"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, boom, echo, unencodable))
        result = await agent.run("go")
    assert result.stop_reason == "done"
    statuses = [(r.name, r.status) for r in result.tool_calls]
    assert statuses == [
        ("boom", "failed"),
        ("echo", "failed"),
        ("echo", "failed"),
        ("unencodable", "failed"),
        ("missing", "denied"),
    ]
    raised, bad_type, bad_name, unusable, denied = result.tool_calls
    assert "ValueError" in raised.content and "bad x 1" in raised.content
    assert "invalid arguments for 'echo'" in bad_type.content
    assert "invalid arguments for 'echo'" in bad_name.content
    assert "unencodable" in unusable.content and "JSON" in unusable.content
    assert "missing" in denied.content
    seen = tool_messages(model.calls[1])
    assert [m.content for m in seen] == [r.content for r in result.tool_calls]
    assert [m.tool_call_id for m in seen] == [r.id for r in result.tool_calls]


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    import threading

    threads: list[threading.Thread] = []

    @agentrio.tool
    def blocking(x: int) -> int:
        threads.append(threading.current_thread())
        return x * 2

    model = ScriptedModel([calling(call("blocking", x=21)), answer("ok")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, blocking))
        result = await agent.run("go")
    assert result.tool_calls[0].content == "42"
    assert threads and threads[0] is not threading.main_thread()


async def test_tool_names_restrict_the_allowlist(autojump_clock: trio.testing.MockClock) -> None:
    rec = Recording(
        lambda m: (
            answer("done") if tool_messages(m) else calling(call("echo", x=1), call("boom", x=1))
        )
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(rec), echo, boom))
        result = await agent.run("go", tool_names=["echo"])
        assert [(r.name, r.status) for r in result.tool_calls] == [
            ("echo", "ok"),
            ("boom", "denied"),
        ]
        assert [t.name for t in rec.seen[0][1]] == ["echo"]
        # None: every tool of the spec
        rec.seen.clear()
        result = await agent.run("go", tool_names=None, continue_context=False)
        assert [(r.name, r.status) for r in result.tool_calls] == [
            ("echo", "ok"),
            ("boom", "failed"),
        ]
        assert [t.name for t in rec.seen[0][1]] == ["echo", "boom"]


async def test_empty_tool_names_denies_every_call(autojump_clock: trio.testing.MockClock) -> None:
    rec = Recording(lambda m: answer("done") if tool_messages(m) else calling(call("echo", x=1)))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(rec), echo))
        result = await agent.run("go", tool_names=[])
    assert result.stop_reason == "done"
    assert [(r.name, r.status) for r in result.tool_calls] == [("echo", "denied")]
    assert "not allowed" in result.tool_calls[0].content
    assert len(rec.seen) == 2  # the model did run
    assert rec.seen[0][1] == ()


async def test_tool_call_budget_denies_calls_past_it(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    model = ScriptedModel([calling(call("echo", x=1), call("echo", x=2)), answer("ok")])
    async with agentrio.open_runtime(budget=Budget(max_tool_calls=1)) as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go")
        assert [r.status for r in result.tool_calls] == ["ok", "denied"]
        assert "budget" in result.tool_calls[1].content
        assert rt.usage().tool_calls == 1
        await trio.testing.wait_all_tasks_blocked()
    (exhausted,) = [e for e in events if isinstance(e, agentrio.events.BudgetExhausted)]
    assert exhausted.limit == "max_tool_calls"


CAPPED = (
    "tool 'count' was not run: this reply asked for 10000 tool calls, and at most 64 are "
    "run per turn (Limits.max_tool_calls_per_turn); ask for it again in a later turn if "
    "it is still needed"
)


async def test_calls_past_the_per_turn_cap_are_denied_and_each_has_its_result(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    ran: list[int] = []

    @agentrio.tool
    async def count(x: int) -> str:
        """Count a call."""
        await trio.lowlevel.checkpoint()
        ran.append(x)
        return f"ran {x}"

    many = [call("count", x=i) for i in range(10_000)]
    rec = Recording(lambda m: answer("done") if tool_messages(m) else calling(*many))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        # (a window that holds all 20,000 messages: none is left out of the next turn)
        model = FunctionModel(rec, context_window=10_000_000)
        agent = await rt.spawn_agent(make_spec(model, count))
        result = await agent.run("go")
        assert rt.usage().tool_calls == 64  # the calls not run are not counted
        await trio.testing.wait_all_tasks_blocked()
    # (9,936 alike refusals are not "three identical results": no stall)
    assert result.stop_reason == "done" and result.final_text == "done"
    assert sorted(ran) == list(range(64))  # Limits.max_tool_calls_per_turn's default
    assert [r.status for r in result.tool_calls] == ["ok"] * 64 + ["denied"] * 9_936
    assert {r.content for r in result.tool_calls[64:]} == {CAPPED}
    assert [r.arguments["x"] for r in result.tool_calls] == list(range(10_000))
    # The model's next turn holds every call, and then a result for each, in order.
    messages = rec.seen[1][0]
    (assistant,) = [m for m in messages if m.role == "assistant"]
    ids = [c.id for c in assistant.tool_calls]
    assert len(set(ids)) == 10_000
    assert [m.tool_call_id for m in tool_messages(messages)] == ids
    # Like other refused calls, those past the cap are never started.
    assert sum(isinstance(e, agentrio.events.ToolStarted) for e in events) == 64
    (turn, _) = [e for e in events if isinstance(e, agentrio.events.TurnEnded)]
    assert turn.tool_calls == 10_000


async def test_a_call_asked_for_again_after_the_cap_is_not_a_stall(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(call("echo", x=1), call("echo", x=2), call("echo", x=3)),
            calling(call("echo", x=3)),  # the one that was not run
            answer("all three"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        spec = make_spec(model, echo, limits=Limits(max_tool_calls_per_turn=2))
        result = await (await rt.spawn_agent(spec)).run("go")
        assert rt.usage().tool_calls == 3
    assert result.stop_reason == "done" and result.final_text == "all three"
    assert [(r.arguments["x"], r.status) for r in result.tool_calls] == [
        (1, "ok"),
        (2, "ok"),
        (3, "denied"),
        (3, "ok"),
    ]
    assert "at most 2 are run per turn" in result.tool_calls[2].content


async def test_unreadable_calls_past_the_cap_do_not_count_toward_max_parse_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The calls past the cap were not run (their arguments not even looked at):
    # turns whose run calls were all readable are no parse failures.
    broken = ToolCallRequest("echo", error="not JSON")
    model = ScriptedModel(
        [
            *(calling(call("echo", x=2 * n), call("echo", x=2 * n + 1), broken) for n in range(3)),
            answer("fine"),
        ]
    )
    limits = Limits(max_tool_calls_per_turn=2, max_parse_retries=2)
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(make_spec(model, echo, limits=limits))).run("go")
    assert (result.stop_reason, result.final_text) == ("done", "fine")
    assert [r.status for r in result.tool_calls] == ["ok", "ok", "denied"] * 3
    # one unreadable call among the run ones still counts
    model = ScriptedModel([calling(call("echo", x=n), broken) for n in range(2)])
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(make_spec(model, echo, limits=limits))).run("go")
    assert (result.stop_reason, result.error_type) == ("error", "ValueError")


async def test_direct_tool_calls_are_not_capped_per_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        spec = make_spec(ScriptedModel([]), echo, limits=Limits(max_tool_calls_per_turn=1))
        agent = await rt.spawn_agent(spec)
        result = await agent.run("direct", direct_tool_calls=[call("echo", x=1), call("echo", x=2)])
    assert [r.status for r in result.tool_calls] == ["ok", "ok"]


async def test_a_repeated_call_is_a_stall_after_many_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Past a handful of calls the phase keeps the calls it has seen in a set:
    # a repeat is still caught, whether among the first calls or the last.
    for repeated in (0, 29):
        script = [
            calling(*(call("echo", x=i) for i in range(30))),
            calling(call("echo", x=repeated)),
        ]
        model = ScriptedModel([*script, answer("stop")])
        async with agentrio.open_runtime() as rt:
            result = await (await rt.spawn_agent(make_spec(model, echo))).run("go")
        assert result.stop_reason == "stalled" and len(result.tool_calls) == 31


async def test_tool_call_ids_are_made_up_when_missing_and_kept_when_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(ToolCallRequest("echo", {"x": 1}, id="mine"), call("echo", x=2)),
            calling(call("echo", x=3)),
            answer("ok"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go")
    ids = [r.id for r in result.tool_calls]
    assert ids[0] == "mine"
    assert len(set(ids)) == 3 and all(ids)
    # the assistant turn in the history carries the same ids as the tool turns
    history = model.calls[2]
    asked = [c.id for m in history if m.role == "assistant" for c in m.tool_calls]
    answered = [m.tool_call_id for m in tool_messages(history)]
    assert asked == answered == ids


# -- direct tool calls ------------------------------------------------------------------


async def test_direct_tool_calls_run_without_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, nap))
        t0 = trio.current_time()
        result = await agent.run(
            "do these", direct_tool_calls=[call("nap", n=1), call("nap", n=2), call("echo", x=3)]
        )
        assert trio.current_time() - t0 == pytest.approx(10)  # in parallel
    assert result.stop_reason == "done"
    assert result.final_text == ""
    assert [r.content for r in result.tool_calls] == ["slept 1", "slept 2", "echo 3"]
    assert model.calls == []


async def test_direct_tool_calls_ignore_an_exhausted_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = Budget(max_requests=0, max_tool_calls=0, max_total_tokens=0)
    model = ScriptedModel([])
    async with agentrio.open_runtime(budget=budget) as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        assert (await agent.run("model?")).stop_reason == "budget_exhausted"
        result = await agent.run("direct", direct_tool_calls=[call("echo", x=1)])
        assert rt.usage().requests == 0
    assert result.stop_reason == "done"
    assert [(r.status, r.content) for r in result.tool_calls] == [("ok", "echo 1")]


async def test_direct_tool_calls_are_gated_by_the_allowlist(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), echo, boom))
        result = await agent.run(
            "direct",
            tool_names=["echo"],
            direct_tool_calls=[call("boom", x=1), call("echo", x=2), call("nope")],
        )
    assert result.stop_reason == "done"
    assert [(r.name, r.status) for r in result.tool_calls] == [
        ("boom", "denied"),
        ("echo", "ok"),
        ("nope", "denied"),
    ]


async def test_direct_tool_calls_are_gated_by_the_stop_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[int] = []

    @agentrio.tool
    async def mark(x: int) -> int:
        ran.append(x)
        await trio.lowlevel.checkpoint()
        return x

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), mark))
        await agent.request_stop()
        result = await agent.run("direct", direct_tool_calls=[call("mark", x=1)])
        assert result == PhaseResult("", (), "stop_requested")
        assert ran == []
        result = await agent.run("direct", direct_tool_calls=[call("mark", x=2)])
    assert result.stop_reason == "done"
    assert ran == [2]


async def test_direct_tool_calls_are_kept_in_the_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("I saw it")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        await agent.run("direct", direct_tool_calls=[call("echo", x=7)])
        await agent.run("what did the tool say?")
    history = model.calls[0]
    assert [m.role for m in history] == ["system", "user", "assistant", "tool", "user"]
    assert history[2].tool_calls[0].name == "echo"
    assert history[3].content == "echo 7"


# -- tools that know where they run (ToolContext) ---------------------------------------


def context_tools() -> tuple[list[agentrio.ToolContext], agentrio.Tool, agentrio.Tool]:
    """An async and a sync tool that record the ToolContext each call receives."""
    seen: list[agentrio.ToolContext] = []

    @agentrio.tool
    async def where(x: int, ctx: agentrio.ToolContext) -> str:
        """Record where it runs."""
        seen.append(ctx)
        await trio.lowlevel.checkpoint()
        return f"where {x}"

    @agentrio.tool
    def where_sync(ctx: agentrio.ToolContext, x: int) -> str:
        """Record where it runs, from a worker thread."""
        seen.append(ctx)
        return f"where_sync {x}"

    return seen, where, where_sync


def Ctx(call_id: str, step: int, **kw: object) -> agentrio.ToolContext:
    return agentrio.ToolContext(agent="a", context_label=None, call_id=call_id, step=step, **kw)  # type: ignore[arg-type]


# (No MockClock where a sync tool runs: while its thread works, every task waits,
# and an autojumping clock would jump to the call's timeout.)
async def test_a_lone_call_receives_its_context() -> None:
    seen, where, where_sync = context_tools()
    model = ScriptedModel(
        [calling(call("where", x=1)), calling(call("where_sync", x=2)), answer("ok")]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, where, where_sync))
        result = await agent.run("go")
    assert [r.status for r in result.tool_calls] == ["ok", "ok"]
    # a step for each model turn, then one for each call: 1 turn, 2 call, 3 turn, 4 call
    assert seen == [Ctx("call_1", 2), Ctx("call_2", 4)]
    assert seen[0].workspace is None and seen[0].env == {}


async def test_a_batch_gives_each_call_its_context_and_on_steps_step() -> None:
    seen, where, where_sync = context_tools()
    steps: dict[str, int] = {}

    def on_step(info: agentrio.types.StepInfo) -> None:
        if info.tool_name is not None:
            steps[info.summary.removeprefix("ok: ")] = info.step

    model = ScriptedModel(
        [
            calling(
                call("where", x=1),
                call("nope"),  # denied: a step all the same
                call("echo", x=2),  # declares no context
                call("where_sync", x=3),
                call("where", x=4),
            ),
            answer("done"),
        ]
    )
    spec = make_spec(model, where, where_sync, echo, on_step=on_step)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go", context_label="notes")
    ids = [r.id for r in result.tool_calls]
    by_id = {ctx.call_id: ctx for ctx in seen}
    assert sorted(by_id) == [ids[0], ids[3], ids[4]]  # calls run in parallel: any order
    assert all(ctx.agent == "a" and ctx.context_label == "notes" for ctx in seen)
    assert [by_id[i].step for i in (ids[0], ids[3], ids[4])] == [2, 5, 6]
    assert [steps["where 1"], steps["where_sync 3"], steps["where 4"]] == [2, 5, 6]


async def test_direct_tool_calls_receive_their_context() -> None:
    seen, where, where_sync = context_tools()
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), where, where_sync))
        await agent.run("one", direct_tool_calls=[call("where_sync", x=1)], context_label="side")
        await agent.run(
            "two",
            direct_tool_calls=[call("where", x=2), ToolCallRequest("where", {"x": 3}, id="mine")],
        )
    assert seen[0] == agentrio.ToolContext("a", "side", "call_1", 1)
    assert sorted(seen[1:], key=lambda c: c.step) == [Ctx("call_1", 1), Ctx("mine", 2)]


async def test_the_context_holds_the_agents_path_workspace_and_env(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    seen, where, _ = context_tools()
    env = {"HOME": "/home/a", "API_TOKEN": "t0ken"}
    spec = make_spec(
        ScriptedModel([calling(call("where", x=1)), answer("ok")] * 2),
        where,
        workspace=tmp_path,
        env=env,
    )
    env["HOME"] = "/elsewhere"  # the spec kept a copy
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        team = await rt.spawn_supervisor(name="team")
        other = await rt.spawn_agent(spec, under=team, name="b")
        await agent.run("go")
        await other.run("go")
    assert seen[0] == Ctx(
        "call_1", 2, workspace=tmp_path, env={"HOME": "/home/a", "API_TOKEN": "t0ken"}
    )
    assert (seen[1].agent, seen[1].workspace) == ("team/b", tmp_path / "b")
    assert seen[1].env == seen[0].env
    with pytest.raises(TypeError):
        seen[0].env["HOME"] = "/tmp"  # type: ignore[index]


async def test_the_call_id_survives_a_pre_tool_use_rewrite(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen, where, _ = context_tools()

    async def double(req: ToolCallRequest) -> ToolCallRequest:
        return ToolCallRequest(req.name, {"x": 2 * req.arguments["x"]}, id="forged")

    model = ScriptedModel([calling(ToolCallRequest("where", {"x": 1}, id="c7")), answer("ok")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, where, pre_tool_use=double))
        result = await agent.run("go")
    assert result.tool_calls[0].content == "where 2"
    assert seen == [Ctx("c7", 2)]


async def test_an_agent_tools_child_gets_its_own_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen, where, _ = context_tools()

    def child_model(messages: Sequence[ChatMessage]) -> Reply:
        if messages[-1].role == "tool":
            return answer("child done")
        return calling(call("where", x=1))

    child = AgentSpec("child", FunctionModel(Recording(child_model)), tools=[where])
    lead = make_spec(
        ScriptedModel([calling(call("child", task="go"), call("where", x=2)), answer("ok")]),
        agentrio.agent_tool(child),
        where,
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(lead)
        await agent.run("delegate", context_label="plan")
    mine = next(c for c in seen if c.agent == "a")
    theirs = next(c for c in seen if c.agent != "a")
    assert mine == agentrio.ToolContext("a", "plan", "call_2", 3)
    assert theirs.agent.startswith("a.child-")
    assert (theirs.context_label, theirs.call_id, theirs.step) == (None, "call_1", 2)


async def test_only_calls_of_tools_that_declare_it_build_a_context(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentrio.agents.loop.tool_turns as phase_module

    built: list[agentrio.ToolContext] = []

    def counting(*args: object, **kw: object) -> agentrio.ToolContext:
        built.append(agentrio.ToolContext(*args, **kw))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(phase_module, "ToolContext", counting)
    _, where, _ = context_tools()
    model = ScriptedModel(
        [
            calling(call("echo", x=1)),
            calling(call("echo", x=2), call("echo", x=3)),
            calling(call("echo", x=4), call("where", x=5)),
            answer("ok"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, where))
        result = await agent.run("go")
        await agent.run("direct", direct_tool_calls=[call("echo", x=6)])
    assert [r.status for r in result.tool_calls] == ["ok"] * 5
    assert [c.call_id for c in built] == ["call_5"]


# -- context window ---------------------------------------------------------------------


async def test_context_window_drops_old_tool_results_then_assistant_turns(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    # one token per character keeps the arithmetic visible
    def chars(text: str) -> int:
        return len(text)

    @agentrio.tool
    async def big(n: int) -> str:
        await trio.lowlevel.checkpoint()
        return f"{n}" * 40

    n_calls = 0

    def fn(messages: Sequence[ChatMessage]) -> Reply:
        nonlocal n_calls
        n_calls += 1
        return calling(call("big", n=n_calls), text="t" * 20) if n_calls < 4 else answer("end")

    rec = Recording(fn)
    # window 200 * 0.75 = 150 tokens
    model = FunctionModel(rec, context_window=200)
    spec = AgentSpec(
        name="a",
        model=model,
        instructions="S" * 30,
        tools=[big],
        token_estimator=chars,
    )
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("U" * 30)
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "done"
    for messages, _ in rec.seen:
        assert (
            sum(
                len(m.content) + sum(len(f"{c.name}{c.arguments}") for c in m.tool_calls)
                for m in messages
            )
            <= 150
        )
        # never the system prompt nor the first user message
        assert messages[0] == ChatMessage("system", "S" * 30)
        assert messages[1] == ChatMessage("user", "U" * 30)
    last = rec.seen[-1][0]
    # the newest tool result stays, the older ones went first
    assert tool_messages(last)[-1].content == "3" * 40
    assert "1" * 40 not in [m.content for m in last]
    truncations = [e for e in events if isinstance(e, agentrio.events.ContextTruncated)]
    assert truncations
    assert all(t.tokens_after <= 150 < t.tokens_before and t.dropped > 0 for t in truncations)
    assert all(t.context_label is None for t in truncations)


async def test_context_window_default_estimator_is_chars_over_3_5(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @agentrio.tool
    async def big() -> str:
        await trio.lowlevel.checkpoint()
        return "x" * 700  # 201 tokens by the default estimate

    model = ScriptedModel(
        [calling(call("big")), calling(call("big"), text="again"), answer("end")],
        context_window=400,
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, big, limits=Limits(final_answer=False)))
        await agent.run("go", max_iterations=3)
    # 2 results = 402 tokens > 300: the older one was left out of the third call
    assert len(tool_messages(model.calls[1])) == 1
    assert len(tool_messages(model.calls[2])) == 1
    assert agentrio.estimate_tokens("x" * 700) == 201


@pytest.mark.parametrize(("fill", "kept"), [(0.75, 1), (1.0, 2)])
async def test_context_fill_sets_the_share_of_the_window(
    autojump_clock: trio.testing.MockClock, fill: float, kept: int
) -> None:
    @agentrio.tool
    async def big() -> str:
        await trio.lowlevel.checkpoint()
        return "x" * 700  # 201 tokens by the default estimate

    model = ScriptedModel(
        [calling(call("big")), calling(call("big"), text="again"), answer("end")],
        context_window=500,
    )
    limits = Limits(final_answer=False, context_fill=fill)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, big, limits=limits))
        await agent.run("go", max_iterations=3)
    # two results are about 410 tokens: over 375 (75% of 500), under 500
    assert len(tool_messages(model.calls[2])) == kept


async def test_context_window_shrinks_the_budget_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # the reservation is the estimate of what is sent, after truncation
    reserved: list[int] = []

    def chars(text: str) -> int:
        return len(text)

    @agentrio.tool
    async def big() -> str:
        await trio.lowlevel.checkpoint()
        return "x" * 200

    def fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        reserved.append(rt.budget.reserved_tokens)
        assert tool_messages(messages) == []
        return answer("ok")

    model = FunctionModel(fn, context_window=100)  # 75 tokens may be sent
    limits = Limits(max_output_tokens=7)
    spec = AgentSpec("a", model, tools=[big], token_estimator=chars, limits=limits)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("d", direct_tool_calls=[call("big")])
        await agent.run("q" * 10)
    # the user "d" and "q" * 10 are sent; the call "big{}" is left out with its result
    assert reserved == [1 + 10 + 7]


async def test_an_error_in_the_last_call_is_reported_as_error(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    model = ScriptedModel([calling(call("echo", x=1))])  # nothing left for the last call
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go", max_iterations=1)
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "error"
    assert [r.content for r in result.tool_calls] == ["echo 1"]
    (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert error.error_type == "ScriptExhausted"
    (ended,) = [e for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert ended.stop_reason == "error"


async def test_a_stop_request_before_the_last_call_is_the_stop_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stop_me: list[agentrio.AgentRef] = []

    @agentrio.tool
    async def stopper() -> str:
        await stop_me[0].request_stop()
        return "asked"

    model = ScriptedModel([calling(call("stopper")), answer("never")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, stopper))
        stop_me.append(agent)
        result = await agent.run("go", max_iterations=1)
        # the request is consumed: the next phase runs normally
        model2_result = await agent.run("again", max_iterations=1)
    # the final no-tools call is not made, and the phase says why
    assert result.stop_reason == "stop_requested"
    assert len(model.calls) == 2
    assert model2_result.stop_reason == "done" and model2_result.final_text == "never"


# -- events and on_step -----------------------------------------------------------------


async def test_events_for_every_step(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel(
        [
            calling(call("echo", x=1), call("boom", x=1), usage=Usage(11, 3)),
            answer("done", usage=Usage(20, 2)),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, boom))
        async with rt.events() as stream:
            result = await agent.run("go", context_label="side")
            assert result.stop_reason == "done"
            events: list[agentrio.events.Event] = []
            while not events or not isinstance(events[-1], agentrio.events.PhaseEnded):
                event = await stream.receive()
                if not isinstance(event, agentrio.events.ActorStarted):
                    events.append(event)
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "PhaseStarted"
    assert kinds[-1] == "PhaseEnded"
    assert kinds.count("TurnStarted") == kinds.count("TurnEnded") == 2
    assert kinds.count("ToolStarted") == kinds.count("ToolEnded") == 2
    assert all(e.path == "a" for e in events)
    started = events[0]
    assert isinstance(started, agentrio.events.PhaseStarted) and started.context_label == "side"
    turns = [e for e in events if isinstance(e, agentrio.events.TurnEnded)]
    assert [(t.iteration, t.usage, t.tool_calls) for t in turns] == [
        (1, Usage(11, 3), 2),
        (2, Usage(20, 2), 0),
    ]
    ended = {(e.tool, e.status) for e in events if isinstance(e, agentrio.events.ToolEnded)}
    assert ended == {("echo", "ok"), ("boom", "failed")}
    # each tool starts after the turn that asked for it and ends before the next turn
    first_turn_end = kinds.index("TurnEnded")
    second_turn = kinds.index("TurnStarted", first_turn_end)
    tool_steps = [i for i, k in enumerate(kinds) if k in ("ToolStarted", "ToolEnded")]
    assert all(first_turn_end < i < second_turn for i in tool_steps)
    phase_end = events[-1]
    assert isinstance(phase_end, agentrio.events.PhaseEnded)
    assert (phase_end.stop_reason, phase_end.iterations, phase_end.context_label) == (
        "done",
        2,
        "side",
    )


async def test_stalled_and_budget_events(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    model = ScriptedModel([calling(call("echo", x=1)), calling(call("echo", x=1)), answer("a")])
    async with agentrio.open_runtime(budget=Budget(max_requests=3)) as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, echo))
        assert (await agent.run("go")).stop_reason == "stalled"
        assert (await agent.run("go")).stop_reason == "budget_exhausted"
        await trio.testing.wait_all_tasks_blocked()
    (stalled,) = [e for e in events if isinstance(e, agentrio.events.Stalled)]
    assert "echo" in stalled.why
    (exhausted,) = [e for e in events if isinstance(e, agentrio.events.BudgetExhausted)]
    assert exhausted.limit == "max_requests"
    reasons = [e.stop_reason for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert reasons == ["stalled", "budget_exhausted"]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_on_step_sees_every_turn_and_tool_call(
    autojump_clock: trio.testing.MockClock, is_async: bool
) -> None:
    steps: list[agentrio.types.StepInfo] = []

    def sync_hook(info: agentrio.types.StepInfo) -> None:
        steps.append(info)

    async def async_hook(info: agentrio.types.StepInfo) -> None:
        await trio.lowlevel.checkpoint()
        steps.append(info)

    model = ScriptedModel(
        [calling(call("echo", x=1), call("boom", x=2)), answer("all " + "done " * 30)]
    )
    spec = make_spec(model, echo, boom, on_step=async_hook if is_async else sync_hook)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
    assert result.stop_reason == "done"
    assert [(s.agent, s.step, s.tool_name) for s in steps] == [
        ("a", 1, None),
        ("a", 2, "echo"),
        ("a", 3, "boom"),
        ("a", 4, None),
    ]
    assert steps[0].summary == "2 tool call(s)"
    assert steps[1].summary == "ok: echo 1"
    assert steps[2].summary.startswith("failed: ")
    assert len(steps[3].summary) <= 80 and steps[3].summary.endswith("...")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_on_step_that_raises_ends_the_phase_with_error(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, is_async: bool
) -> None:
    def sync_hook(info: agentrio.types.StepInfo) -> None:
        if info.tool_name == "echo":
            raise RuntimeError("hook failed")

    async def async_hook(info: agentrio.types.StepInfo) -> None:
        await trio.lowlevel.checkpoint()
        sync_hook(info)

    model = ScriptedModel([calling(call("echo", x=1)), answer("never")])
    spec = make_spec(model, echo, on_step=async_hook if is_async else sync_hook)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "error"
    assert [r.content for r in result.tool_calls] == ["echo 1"]
    assert len(model.calls) == 1
    (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert (error.error_type, error.error) == ("RuntimeError", "hook failed")


async def test_on_step_raising_after_a_turn_stops_before_the_tools(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran: list[int] = []

    @agentrio.tool
    async def mark(x: int) -> int:
        ran.append(x)
        await trio.lowlevel.checkpoint()
        return x

    def hook(info: agentrio.types.StepInfo) -> None:
        raise RuntimeError("no")

    model = ScriptedModel([calling(call("mark", x=1))])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, mark, on_step=hook))
        result = await agent.run("go")
    assert result == PhaseResult("", (), "error", "RuntimeError", "no")
    assert ran == []


async def test_made_up_ids_are_unique_across_the_phases_of_a_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(call("echo", x=1), call("echo", x=2)),
            answer("first"),
            calling(call("echo", x=3)),
            answer("second"),
            answer("third"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        await agent.run("one")
        await agent.run("direct", direct_tool_calls=[call("echo", x=4)])
        await agent.run("two")
        await agent.run("three")
        fresh = await agent.run("new", context_label="other", direct_tool_calls=[call("echo", x=5)])
    history = model.calls[-1]
    asked = [c.id for m in history if m.role == "assistant" for c in m.tool_calls]
    answered = [m.tool_call_id for m in tool_messages(history)]
    assert asked == answered
    assert len(asked) == 4 and len(set(asked)) == 4
    assert fresh.tool_calls[0].id == "call_1"  # another context numbers its own


async def test_a_reset_phase_that_does_nothing_keeps_the_old_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("first"), answer("second")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("remember this")
        await agent.request_stop()
        stopped = await agent.run("start afresh", continue_context=False)
        await agent.run("and now?")
    assert stopped.stop_reason == "stop_requested"
    last_call = [m.content for m in model.calls[-1]]
    assert "remember this" in last_call and "start afresh" not in last_call


# -- what a caller sees of a run: StepInfo, ToolEnded, an error's result -------------------


async def test_on_step_carries_the_iteration_the_limit_the_arguments_and_the_tokens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    steps: list[agentrio.types.StepInfo] = []
    model = ScriptedModel([calling(call("echo", x=1), call("boom", x=2)), answer("done")])
    # len as the estimator: each step's estimate can be counted by hand
    spec = make_spec(model, echo, boom, on_step=steps.append, token_estimator=len)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go", max_iterations=4)
        await agent.run("direct", direct_tool_calls=[call("echo", x=3)])
    failed = result.tool_calls[1].content
    asked = len('echo{"x":1}boom{"x":2}')
    first = len("sys") + len("go") + asked  # the history up to the model's first turn
    assert [(s.step, s.iteration, s.max_iterations, s.tool_arguments, s.tokens) for s in steps] == [
        (1, 1, 4, None, first),
        (2, 1, 4, {"x": 1}, first + len("echo 1")),  # its own result, not the next one's
        (3, 1, 4, {"x": 2}, first + len("echo 1") + len(failed)),
        (4, 2, 4, None, first + len("echo 1") + len(failed) + len("done")),
        # a direct call: no model call; the estimate counts the history it continued
        # (its limit, by default Limits.max_iterations, bounds no model call here)
        (1, 0, 10, {"x": 3}, steps[3].tokens + len("direct") + len('echo{"x":3}') + 6),
    ]


async def test_tool_ended_carries_the_duration_and_previews(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    @agentrio.tool
    async def shout(text: str) -> str:
        await trio.sleep(2)
        return text.upper() * 3

    model = ScriptedModel(
        [
            calling(call("nap", n=1, seconds=3), call("nap", n=2, seconds=7)),  # in parallel
            calling(call("shout", text="a" * 300)),  # alone
            answer("done"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, nap, shout))
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    ended = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    assert [(e.call_id, e.status, e.duration) for e in ended] == [
        ("call_1", "ok", 3),
        ("call_2", "ok", 7),
        ("call_3", "ok", 2),
    ]
    assert [(e.arguments_preview, e.output_preview) for e in ended[:2]] == [
        ('{"n":1,"seconds":3}', "slept 1"),
        ('{"n":2,"seconds":7}', "slept 2"),
    ]
    # bounded: 200 characters at most, a cut one ending with "…"
    shouted = ended[2]
    assert shouted.arguments_preview == ('{"text":"' + "a" * 300)[:199] + "…"
    assert result.tool_calls[2].content == "A" * 900
    assert shouted.output_preview == "A" * 199 + "…"
    assert len(shouted.arguments_preview) == len(shouted.output_preview) == 200


async def test_tool_ended_previews_hide_the_agents_env_values(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    @agentrio.tool
    async def say(text: str) -> str:
        await trio.lowlevel.checkpoint()
        return f"said {text}"

    model = ScriptedModel([calling(call("say", text="key s3cr3t-t0ken here")), answer("done")])
    spec = make_spec(model, say, env={"API_KEY": "s3cr3t-t0ken", "N": "1"})
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    (ended,) = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    assert ended.arguments_preview == '{"text":"key [redacted] here"}'
    assert ended.output_preview == "said key [redacted] here"
    # (the model sees the result as it is)
    assert result.tool_calls[0].content == "said key s3cr3t-t0ken here"


async def test_on_step_tool_arguments_are_read_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def change(step: agentrio.types.StepInfo) -> None:
        if step.tool_arguments is not None:
            step.tool_arguments["x"] = 99  # type: ignore[index]

    model = ScriptedModel([calling(call("echo", x=1)), answer("done")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, on_step=change))
        result = await agent.run("go")
    # the hook raised TypeError: the phase ended with "error", the call's arguments as they were
    assert result.stop_reason == "error"
    assert result.tool_calls[0].arguments == {"x": 1}


async def test_tool_ended_duration_of_a_call_that_waited_for_a_slot(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    model = ScriptedModel(
        [calling(call("nap", n=1, seconds=3), call("nap", n=2, seconds=7)), answer("done")]
    )
    spec = make_spec(model, nap, limits=Limits(max_parallel_tools=1))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        t0 = trio.current_time()
        await agent.run("go")
        assert trio.current_time() - t0 == 10
        await trio.testing.wait_all_tasks_blocked()
    ended = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    # the one that ran second ran 3 or 7 s, after waiting for the one slot
    assert sorted((e.call_id, e.duration) for e in ended) == [("call_1", 3), ("call_2", 7)]


async def test_tool_ended_of_a_denied_and_a_timed_out_call(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    policy = agentrio.PermissionPolicy([agentrio.deny_rule("echo")])
    model = ScriptedModel(
        [calling(call("echo", x=1)), calling(call("nap", n=1, seconds=100)), answer("done")]
    )
    spec = make_spec(model, echo, nap, permissions=policy, limits=Limits(tool_timeout=5))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    ended = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    assert [(e.tool, e.status, e.duration, e.arguments_preview) for e in ended] == [
        ("echo", "denied", 0, '{"x":1}'),
        ("nap", "timeout", 5, '{"n":1,"seconds":100}'),
    ]
    assert ended[0].output_preview.startswith("tool 'echo' ")
    assert ended[1].output_preview == "tool 'nap' timed out after 5 s"


@pytest.mark.parametrize("calls", [1, 2], ids=["lone", "batch"])
async def test_calls_cut_short_by_the_phase_end_have_their_tool_ended(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, calls: int
) -> None:
    naps = [call("nap", n=n, seconds=100) for n in range(calls)]
    model = ScriptedModel([calling(*naps), calling(*naps)])
    spec = make_spec(model, nap, limits=Limits(timeout=30, tool_timeout=60))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
        with trio.move_on_after(20):  # and a caller that gives up first
            await agent.run("again")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "timeout"
    # every call that started ended, with the result the phase recorded for it
    started = [e.call_id for e in events if isinstance(e, agentrio.events.ToolStarted)]
    ended = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    assert sorted(e.call_id for e in ended) == sorted(started) and len(started) == 2 * calls
    assert [(e.status, e.duration, e.output_preview) for e in ended] == [
        ("timeout", 30, "the phase timed out while the tool ran")
    ] * calls + [("timeout", 20, "the phase was cancelled while the tool ran")] * calls


@pytest.mark.parametrize("calls", [1, 2], ids=["lone", "batch"])
async def test_a_call_cut_short_in_its_post_hook_has_one_tool_ended(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, calls: int
) -> None:
    async def post(req: ToolCallRequest, result: ToolResult) -> ToolResult:
        await trio.sleep_forever()  # the phase's deadline passes here, after the tool
        raise AssertionError("unreachable")

    model = ScriptedModel([calling(*[call("echo", x=n) for n in range(calls)])])
    spec = make_spec(model, echo, post_tool_use=post, limits=Limits(timeout=30))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "timeout"
    ended = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    # the tool's own result, which the hook never got to rewrite
    assert sorted((e.call_id, e.status, e.duration, e.output_preview) for e in ended) == [
        (f"call_{n + 1}", "ok", 30, f"echo {n}") for n in range(calls)
    ]


async def test_an_error_ends_with_its_type_and_message_in_the_result(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    broken = ToolCallRequest("echo", error="not JSON")
    model = ScriptedModel([answer("fine"), calling(broken), calling(broken)])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, echo))
        fine = await agent.run("go")
        unparsed = await agent.run("go")
        exhausted = await agent.run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert (fine.stop_reason, fine.error_type, fine.error) == ("done", "", "")
    assert (unparsed.stop_reason, unparsed.error_type) == ("error", "ValueError")
    assert unparsed.error.startswith("the model's tool-call arguments could not be parsed")
    assert (exhausted.stop_reason, exhausted.error_type) == ("error", "ScriptExhausted")
    # the same strings as the phase's PhaseError event
    errors = [(e.error_type, e.error) for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert errors == [(r.error_type, r.error) for r in (unparsed, exhausted)]


async def test_invalid_usage_ends_with_its_error_in_the_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("?", usage=Usage(-1, 5))])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        result = await agent.run("go")
    assert (result.stop_reason, result.error_type) == ("error", "UsageInvalid")
    assert "reported usage that cannot be charged" in result.error


# -- a lone tool call's timeout (runtime timer) -----------------------------------------
#
# A turn's only tool call runs in its agent's own task; its tool_timeout is a runtime
# timer that, on expiry, cuts the agent's task short (its cell scope) and the runtime
# resumes the same phase from the timed-out call (Phase.cut_short / AgentActor.resume).

TIMER_TASK = "agentrio timers"


def timed_out(seconds: float, n: int = 1, *, id: str = "call_1", slept: float = 100) -> ToolResult:
    """The result of a lone nap(n, slept) cut short by a tool_timeout of *seconds*."""
    return ToolResult(
        id=id,
        name="nap",
        arguments={"n": n, "seconds": slept},
        status="timeout",
        content=f"tool 'nap' timed out after {seconds} s",
    )


def of_type(
    events: list[agentrio.events.Event], kind: type[agentrio.events.Event]
) -> list[agentrio.events.Event]:
    return [e for e in events if isinstance(e, kind)]


async def test_lone_call_timeout_is_a_result_and_the_phase_goes_on(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    model = ScriptedModel([calling(call("nap", n=1, seconds=100)), answer("after")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, nap, limits=Limits(tool_timeout=5)))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == 5
        stats = agent.statistics()
        await trio.testing.wait_all_tasks_blocked()
    assert result == PhaseResult("after", (timed_out(5),), "done", output="after")
    # the next model turn saw the timeout as the call's result
    assert len(model.calls) == 2
    assert [m.role for m in model.calls[1]] == ["system", "user", "assistant", "tool"]
    (tool_msg,) = tool_messages(model.calls[1])
    assert (tool_msg.content, tool_msg.tool_call_id) == ("tool 'nap' timed out after 5 s", "call_1")
    # the same incarnation went on: not restarted, and the phase counted once
    assert (stats.restarts, stats.messages_handled, stats.state) == (0, 1, "running")
    assert of_type(events, agentrio.events.ActorRestarted) == []
    assert of_type(events, agentrio.events.ActorFailed) == []
    assert [e.path for e in of_type(events, agentrio.events.ActorStarted)].count("a") == 1
    # one phase in the events, with its one tool call and its two turns
    assert len(of_type(events, agentrio.events.PhaseStarted)) == 1
    (ended,) = of_type(events, agentrio.events.PhaseEnded)
    assert isinstance(ended, agentrio.events.PhaseEnded)
    assert (ended.stop_reason, ended.iterations) == ("done", 2)
    (started,) = of_type(events, agentrio.events.ToolStarted)
    (tool_end,) = of_type(events, agentrio.events.ToolEnded)
    assert isinstance(started, agentrio.events.ToolStarted) and isinstance(
        tool_end, agentrio.events.ToolEnded
    )
    assert (started.tool, started.call_id) == ("nap", "call_1")
    assert (tool_end.tool, tool_end.call_id, tool_end.status) == ("nap", "call_1", "timeout")
    turns = of_type(events, agentrio.events.TurnStarted)
    assert [t.iteration for t in turns if isinstance(t, agentrio.events.TurnStarted)] == [1, 2]


async def test_two_lone_timeouts_in_a_row(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    model = ScriptedModel(
        [
            calling(call("nap", n=1, seconds=100)),
            calling(call("nap", n=2, seconds=100)),
            answer("after both"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, nap, limits=Limits(tool_timeout=5)))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == 2 * 5
        stats = agent.statistics()
        await trio.testing.wait_all_tasks_blocked()
    assert result == PhaseResult(
        "after both",
        (timed_out(5, 1), timed_out(5, 2, id="call_2")),
        "done",
        output="after both",
    )
    assert [m.content for m in tool_messages(model.calls[2])] == [
        "tool 'nap' timed out after 5 s",
        "tool 'nap' timed out after 5 s",
    ]
    assert [m.tool_call_id for m in tool_messages(model.calls[2])] == ["call_1", "call_2"]
    assert (stats.restarts, stats.messages_handled) == (0, 1)
    turns = [e for e in events if isinstance(e, agentrio.events.TurnEnded)]
    assert [(t.iteration, t.tool_calls) for t in turns] == [(1, 1), (2, 1), (3, 0)]
    ended = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    assert [(e.call_id, e.status) for e in ended] == [("call_1", "timeout"), ("call_2", "timeout")]
    (phase_end,) = [e for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert (phase_end.stop_reason, phase_end.iterations) == ("done", 3)
    assert len(of_type(events, agentrio.events.PhaseStarted)) == 1


async def test_the_phase_timeout_holds_across_cuts(autojump_clock: trio.testing.MockClock) -> None:
    n = 0

    def always_nap(messages: Sequence[ChatMessage]) -> Reply:
        nonlocal n
        n += 1
        return calling(call("nap", n=n, seconds=100))  # new arguments: no stall

    model = FunctionModel(Recording(always_nap))
    limits = Limits(timeout=25, tool_timeout=10)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap, limits=limits))
        t0 = trio.current_time()
        result = await agent.run("go")
        # the phase's deadline was kept through both resumes: 25, not 10 + 10 + 25
        assert trio.current_time() - t0 == 25
        stats = agent.statistics()
    assert result.stop_reason == "timeout"
    assert result.tool_calls == (
        timed_out(10, 1),
        timed_out(10, 2, id="call_2"),
        # the third call was cut by the phase's own timeout, 5 s into its 10
        ToolResult(
            id="call_3",
            name="nap",
            arguments={"n": 3, "seconds": 100},
            status="timeout",
            content="the phase timed out while the tool ran",
        ),
    )
    assert n == 3
    assert (stats.restarts, stats.messages_handled) == (0, 1)


async def test_a_cut_at_the_phase_deadline_ends_the_phase_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The second call's timer and the phase's deadline fall at the same instant
    # (t0 + 20): whichever fires first, the phase ends at 20 with two timeouts
    # and no third model call.
    rec = Recording(lambda messages: calling(call("nap", n=len(messages), seconds=100)))
    limits = Limits(timeout=20, tool_timeout=10)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(FunctionModel(rec), nap, limits=limits))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == 20
        assert agent.statistics().restarts == 0
    assert result.stop_reason == "timeout"
    assert [r.status for r in result.tool_calls] == ["timeout", "timeout"]
    assert result.tool_calls[0].content == "tool 'nap' timed out after 10 s"
    assert len(rec.seen) == 2


async def test_a_lone_direct_call_that_times_out(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap, echo, limits=Limits(tool_timeout=5)))
        t0 = trio.current_time()
        result = await agent.run("x", direct_tool_calls=[call("nap", n=1, seconds=100)])
        assert trio.current_time() - t0 == 5
        # the agent goes on working
        again = await agent.run("y", direct_tool_calls=[call("echo", x=2)])
        stats = agent.statistics()
    assert result == PhaseResult("", (timed_out(5),), "done", output="")
    assert [(r.status, r.content) for r in again.tool_calls] == [("ok", "echo 2")]
    assert (stats.restarts, stats.messages_handled) == (0, 2)
    assert model.calls == []


async def test_post_tool_use_and_on_step_see_a_lone_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[ToolResult] = []
    steps: list[agentrio.types.StepInfo] = []

    async def post(req: ToolCallRequest, result: ToolResult) -> ToolResult:
        await trio.lowlevel.checkpoint()
        seen.append(result)
        return msgspec.structs.replace(result, content="rewritten: " + result.content)

    model = ScriptedModel([calling(call("nap", n=1, seconds=100)), answer("after")])
    spec = make_spec(
        model, nap, limits=Limits(tool_timeout=5), post_tool_use=post, on_step=steps.append
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
    assert seen == [timed_out(5)]
    rewritten = "rewritten: tool 'nap' timed out after 5 s"
    assert result.tool_calls == (msgspec.structs.replace(timed_out(5), content=rewritten),)
    assert [m.content for m in tool_messages(model.calls[1])] == [rewritten]
    assert [(s.step, s.tool_name, s.summary) for s in steps] == [
        (1, None, "1 tool call(s)"),
        (2, "nap", "timeout: " + rewritten),
        (3, None, "after"),
    ]


@pytest.mark.parametrize("when", [2.0, 5.0], ids=["mid-call", "at-the-timer"])
async def test_cancel_during_a_lone_call_does_not_resume(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker, when: float
) -> None:
    # At 5.0 the cancel and the timer's expiry come at the same instant, in
    # either order: a cut must not turn a cancel into a resume.
    entered = 0

    @agentrio.tool
    async def slow() -> str:
        nonlocal entered
        entered += 1
        await trio.sleep(100)
        return "never"

    model = ScriptedModel([calling(call("slow")), answer("never")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, slow, limits=Limits(tool_timeout=5)))
        errors: list[agentrio.ActorStopped] = []

        async def run() -> None:
            with pytest.raises(agentrio.ActorStopped) as info:
                await agent.run("go")
            errors.append(info.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.sleep(when)
            agent.cancel()
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(50)  # past the timer's deadline: nothing wakes up
        await trio.testing.wait_all_tasks_blocked()
        assert [e.reason for e in errors] == ["cancelled"]
        assert agent.statistics().state == "exited"
        assert entered == 1 and len(model.calls) == 1
        agent_task = task_tracker.named("a")
        assert task_tracker.alive([agent_task]) == []
        assert task_tracker.alive_at_exit[agent_task] == []
        timer_tasks = [t for t in task_tracker.spawned if t.name == TIMER_TASK]
        assert len(timer_tasks) == 1
        assert task_tracker.alive(timer_tasks) == []


async def test_a_stop_request_during_a_lone_call_that_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()

    @agentrio.tool
    async def slow() -> str:
        entered.set()
        await trio.sleep(100)
        return "never"

    model = ScriptedModel([calling(call("slow")), answer("next phase")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, slow, limits=Limits(tool_timeout=5)))
        t0 = trio.current_time()
        result: list[PhaseResult] = []

        async def run() -> None:
            result.append(await agent.run("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await entered.wait()
            await agent.request_stop()
        assert trio.current_time() - t0 == 5
        # the timed-out call was recorded, then the stop was seen before the next turn
        assert result[0].stop_reason == "stop_requested"
        assert [(r.status, r.content) for r in result[0].tool_calls] == [
            ("timeout", "tool 'slow' timed out after 5 s")
        ]
        assert len(model.calls) == 1
        assert (await agent.run("and now?")).final_text == "next phase"
        assert agent.statistics().restarts == 0
    assert [m.role for m in model.calls[1]] == ["system", "user", "assistant", "tool", "user"]


async def test_the_phase_after_a_cut_phase_sees_its_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            calling(call("nap", n=1, seconds=100)),
            answer("first"),
            calling(call("echo", x=7)),
            answer("second"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap, echo, limits=Limits(tool_timeout=5)))
        first = await agent.run("one")
        t0 = trio.current_time()
        second = await agent.run("two", continue_context=True)
        assert trio.current_time() - t0 == 0  # no timer left over from the first phase
        stats = agent.statistics()
    assert (first.stop_reason, first.final_text) == ("done", "first")
    assert second == PhaseResult(
        "second",
        (ToolResult(id="call_2", name="echo", arguments={"x": 7}, status="ok", content="echo 7"),),
        "done",
        output="second",
    )
    last = model.calls[3]
    assert [m.role for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert [m.content for m in tool_messages(last)] == ["tool 'nap' timed out after 5 s", "echo 7"]
    assert (stats.restarts, stats.messages_handled) == (0, 2)


@agentrio.tool
async def lookup(key: str) -> str:
    """Sleep far past the tool timeout."""
    await trio.sleep(100)
    return f"nothing about {key}"


def stalls_on_small(request: FakeRequest) -> Reply:
    """The small model repeats one (timed-out) call, a stall; the big one answers."""
    if request.model == "big":
        return Reply(text="the smart answer", usage=Usage(50, 5))
    if not request.tools:  # the final turn after the stall
        return Reply(text="I am stuck", usage=Usage(40, 3))
    return Reply(tool_calls=(ToolCallRequest("lookup", {"key": "x"}),), usage=Usage(30, 4))


async def test_an_escalating_phase_cut_short_still_escalates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_llm(stalls_on_small) as server:
        local = agentrio.ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
        config = Config(
            providers={"local": local},
            tiers={"fast": "local:small", "smart": "local:big"},
            escalation=["fast", "smart"],
        )
        async with agentrio.open_runtime(config=config) as rt:
            spec = AgentSpec(
                "a",
                model="fast",
                tools=[lookup],
                escalate_on_stall=True,
                limits=Limits(tool_timeout=5),
            )
            agent = await rt.spawn_agent(spec)
            result = await agent.run("q")
            stats = agent.statistics()
    # both calls timed out (each a cut and a resume), the repeat was a stall, and
    # the resumed phase still escalated to smart
    assert (result.stop_reason, result.final_text) == ("done", "the smart answer")
    assert [r.model for r in server.requests] == ["small", "small", "small", "big"]
    retry = server.requests[3]
    assert [m.content for m in retry.messages if m.role == "tool"] == [
        "tool 'lookup' timed out after 5 s"
    ] * 2
    assert (stats.restarts, stats.messages_handled) == (0, 1)


@agentrio.tool
async def reraises_late() -> str:
    """Catches its cancellation, tidies up at a checkpoint (shielded), re-raises."""
    try:
        await trio.sleep(100)
    except trio.Cancelled:
        with trio.CancelScope(shield=True):
            await trio.lowlevel.checkpoint()
        raise
    return "never"


TIDIED: list[float] = []


@agentrio.tool
async def tidies_up() -> str:
    """Its finally block takes a (shielded) second."""
    try:
        await trio.sleep(100)
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(1)
        TIDIED.append(trio.current_time())
    return "never"


@pytest.mark.parametrize(
    ("tool", "elapsed"), [(reraises_late, 5), (tidies_up, 6)], ids=["reraise", "finally"]
)
async def test_a_tool_that_cleans_up_shielded_still_times_out(
    autojump_clock: trio.testing.MockClock, tool: agentrio.Tool, elapsed: float
) -> None:
    TIDIED.clear()
    model = ScriptedModel([calling(call(tool.name)), answer("after")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, tool, limits=Limits(tool_timeout=5)))
        t0 = trio.current_time()
        result = await agent.run("go")
        assert trio.current_time() - t0 == elapsed
        assert agent.statistics().restarts == 0
    assert result.stop_reason == "done" and result.final_text == "after"
    assert [(r.status, r.content) for r in result.tool_calls] == [
        ("timeout", f"tool {tool.name!r} timed out after 5 s")
    ]
    assert [m.content for m in tool_messages(model.calls[1])] == [result.tool_calls[0].content]
    if tool is tidies_up:
        assert [t - t0 for t in TIDIED] == [6]


async def test_concurrent_agents_are_cut_each_at_its_own_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # (name, tool_timeout, how long its tool sleeps)
    plan = [("a", 5, 100), ("b", 8, 6), ("c", 8, 100)]
    results: dict[str, tuple[PhaseResult, float]] = {}
    async with agentrio.open_runtime() as rt:
        t0 = trio.current_time()
        agents = {}
        for name, tool_timeout, seconds in plan:
            model = ScriptedModel([calling(call("nap", n=1, seconds=seconds)), answer(name)])
            spec = make_spec(model, nap, limits=Limits(tool_timeout=tool_timeout))
            agents[name] = await rt.spawn_agent(spec, name=name)

        async def run(name: str) -> None:
            result = await agents[name].run("go")
            results[name] = (result, trio.current_time() - t0)

        async with trio.open_nursery() as nursery:
            for name in agents:
                nursery.start_soon(run, name)
        assert [agents[n].statistics().restarts for n in agents] == [0, 0, 0]
    assert {n: (r.final_text, r.stop_reason, t) for n, (r, t) in results.items()} == {
        "a": ("a", "done", 5),
        "b": ("b", "done", 6),
        "c": ("c", "done", 8),
    }
    assert results["a"][0].tool_calls == (timed_out(5),)
    assert [(r.status, r.content) for r in results["b"][0].tool_calls] == [("ok", "slept 1")]
    assert results["c"][0].tool_calls == (timed_out(8),)


async def test_a_tool_ending_at_its_deadline_is_ok_or_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The tool's sleep and its timer end at the same instant; Trio runs the two
    # tasks in either order. Either outcome is fine, a crash or a lost phase is not.
    rounds = 20
    script = []
    for i in range(rounds):
        script += [calling(call("nap", n=i, seconds=5)), answer(f"round {i}")]
    model = ScriptedModel(script)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, nap, limits=Limits(tool_timeout=5)))
        results = [await agent.run(f"go {i}", continue_context=False) for i in range(rounds)]
        stats = agent.statistics()
    assert [r.final_text for r in results] == [f"round {i}" for i in range(rounds)]
    for i, r in enumerate(results):
        (tool_result,) = r.tool_calls
        assert (tool_result.status, tool_result.content) in (
            ("ok", f"slept {i}"),
            ("timeout", "tool 'nap' timed out after 5 s"),
        )
    assert (stats.restarts, stats.messages_handled) == (0, rounds)


# A tool whose timer expired but that returned anyway (it shielded its work, or
# swallowed the Cancelled, or was woken just as the timer fired): the call is a
# timeout, recorded once, and the agent goes on (no crash, no restart).


@agentrio.tool
async def shields_its_work(n: int) -> str:
    """Finishes whatever happens."""
    with trio.CancelScope(shield=True):
        await trio.sleep(20)
    return f"finished {n}"


@agentrio.tool
async def swallows_cancel(n: int) -> str:
    """Catches its cancellation and answers anyway (bad manners, but tools do it)."""
    try:
        await trio.sleep(100)
    except trio.Cancelled:
        return f"gave up {n}"
    return "never"


@pytest.mark.parametrize("tool", [shields_its_work, swallows_cancel], ids=["shield", "swallow"])
async def test_a_tool_that_outlives_its_timer_in_a_model_turn(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, tool: agentrio.Tool
) -> None:
    model = ScriptedModel([calling(call(tool.name, n=1)), answer("after"), answer("again")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make_spec(model, tool, limits=Limits(tool_timeout=5)))
        result = await agent.run("go")
        assert (await agent.run("again")).final_text == "again"
        stats = agent.statistics()
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text) == ("done", "after")
    (tool_result,) = result.tool_calls  # the timer fired first: a timeout, recorded once
    assert (tool_result.status, tool_result.content) == (
        "timeout",
        f"tool {tool.name!r} timed out after 5 s",
    )
    assert len(of_type(events, agentrio.events.ToolEnded)) == 1
    assert (stats.restarts, stats.messages_handled) == (0, 2)


@pytest.mark.parametrize("tool", [shields_its_work, swallows_cancel], ids=["shield", "swallow"])
async def test_a_tool_that_outlives_its_timer_in_a_direct_call(
    autojump_clock: trio.testing.MockClock, tool: agentrio.Tool
) -> None:
    async with agentrio.open_runtime() as rt:
        spec = make_spec(ScriptedModel([]), tool, echo, limits=Limits(tool_timeout=5))
        agent = await rt.spawn_agent(spec)
        result = await agent.run("x", direct_tool_calls=[call(tool.name, n=1)])
        await trio.testing.wait_all_tasks_blocked()
        assert agent.statistics().state == "running"
        again = await agent.run("y", direct_tool_calls=[call("echo", x=2)])
    assert result.stop_reason == "done"
    assert [r.status for r in result.tool_calls] == ["timeout"]
    assert [r.content for r in again.tool_calls] == ["echo 2"]


async def test_a_tool_woken_just_as_its_timer_fires(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # Another task wakes the tool at its deadline; in about half the rounds Trio
    # runs the timer task first, which cuts the agent after the tool was woken:
    # the tool returns, and the call is still a timeout, recorded once.
    woke: list[int] = []

    @agentrio.tool
    async def woken(n: int) -> str:
        """Waits for another task to wake it, 5 s from now."""
        done = trio.Event()

        async def wake() -> None:
            await trio.sleep(5)
            done.set()

        nursery.start_soon(wake)
        await done.wait()
        woke.append(n)
        return f"woken {n}"

    rounds = 30  # a round misses the race with probability 1/2: 2**-30 for all of them
    script = []
    for i in range(rounds):
        script += [calling(call("woken", n=i)), answer(f"round {i}")]
    model = ScriptedModel(script)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, woken, limits=Limits(tool_timeout=5)))
        for i in range(rounds):
            result = await agent.run(f"go {i}", continue_context=False)
            assert result.final_text == f"round {i}"
            assert [r.status for r in result.tool_calls] == ["timeout"]
        assert agent.statistics().restarts == 0
    assert woke  # the race was reached: some tools returned after their timer fired


async def test_an_ended_lone_call_does_not_keep_its_phase_alive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The timer's heap keeps a disarmed entry until its deadline (or until it
    # is compacted); the entry must not keep the phase (history and all).
    import gc

    from agentrio.agents.loop.phase import Phase

    def phases() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Phase)

    long_model = ScriptedModel([calling(call("nap", n=0, seconds=500)), answer("late")])
    quick = ScriptedModel(
        [calling(call("nap", n=i, seconds=0)) if i % 2 == 0 else answer("ok") for i in range(40)]
    )
    async with agentrio.open_runtime() as rt, trio.open_nursery() as nursery:
        slow = await rt.spawn_agent(make_spec(long_model, nap, limits=Limits(tool_timeout=1000)))
        nursery.start_soon(slow.run, "wait")  # its call stays armed throughout
        await trio.testing.wait_all_tasks_blocked()
        fast = await rt.spawn_agent(
            make_spec(quick, nap, limits=Limits(tool_timeout=1000)), name="fast"
        )
        for i in range(20):
            assert (await fast.run(f"go {i}")).final_text == "ok"
        assert phases() == 1  # the slow agent's, still running


async def test_after_a_resume_the_next_queued_phase_is_a_checkpoint_as_usual(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    # A phase is cut by its tool's timer and resumed; during the resumed turn
    # the agent is cancelled while a second phase is queued. The queued one
    # must not start: it is undelivered, as it is without a cut.
    box: list[agentrio.AgentRef] = []

    def decide(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
        if any(m.role == "tool" for m in messages):
            box[0].cancel()  # in the resumed turn
            return answer("unreachable")
        return calling(call("nap", n=1, seconds=100))

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(
            make_spec(FunctionModel(decide), nap, limits=Limits(tool_timeout=5)), name="a"
        )
        box.append(agent)
        outcomes: list[str] = []

        async def run(text: str) -> None:
            try:
                await agent.run(text)
                outcomes.append(f"{text}: done")
            except agentrio.ActorStopped as exc:
                outcomes.append(f"{text}: {exc.reason}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(run, "second")
        await trio.testing.wait_all_tasks_blocked()
    # The first phase's last turn had no checkpoint left after the cancel: it
    # finished. The queued one was never taken: cancelled, never started.
    assert sorted(outcomes) == ["first: done", "second: cancelled"]
    started = [e for e in events if isinstance(e, agentrio.events.PhaseStarted)]
    assert len(started) == 1  # the second phase never began


# -- how a model's answer ended: cut, refused, paused ------------------------------------


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("length", "max_output_tokens"),
        ("content_filter", "content_filter"),
        ("refusal", "refusal"),
    ],
)
async def test_an_answer_the_model_did_not_end_is_not_done(
    autojump_clock: trio.testing.MockClock, finish: str, stop_reason: str
) -> None:
    # With continuations on, a cut answer (which reads as unfinished) is not continued either.
    cut = Reply(text="The answer is", finish_reason=finish)  # type: ignore[arg-type]
    model = ScriptedModel([calling(call("echo", x=1)), cut])
    spec = make_spec(model, echo, limits=Limits(max_continuation_turns=2))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == (stop_reason, "The answer is")
    assert len(result.tool_calls) == 1 and model.remaining == 0


async def test_a_cut_reply_with_tool_calls_goes_on(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel(
        [Reply(tool_calls=(call("echo", x=1),), finish_reason="length"), answer("fine")]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("done", "fine")


async def test_a_cut_final_answer_says_so(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel(
        [calling(call("echo", x=1)), Reply(text="In short", finish_reason="length")]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        result = await agent.run("go", max_iterations=1)
    assert (result.stop_reason, result.final_text) == ("max_output_tokens", "In short")


async def test_a_refusal_is_the_final_text(autojump_clock: trio.testing.MockClock) -> None:
    refused = Reply(refusal="I can't help with that.", finish_reason="refusal")
    model = ScriptedModel([refused])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        result = await agent.run("go")
        history = await agent.history()
    assert (result.stop_reason, result.final_text) == ("refusal", "I can't help with that.")
    assert history[-1].message == ChatMessage("assistant", "I can't help with that.")


async def test_a_paused_turn_is_called_again(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([Reply(text="Searching", finish_reason="pause_turn"), answer("found")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("done", "found")
    # The paused turn went back to the model as the last assistant turn.
    assert model.calls[1][-1] == ChatMessage("assistant", "Searching")


async def test_paused_turns_count_as_iterations(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([Reply(finish_reason="pause_turn")] * 3)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, limits=Limits(final_answer=False)))
        result = await agent.run("go", max_iterations=2)
    assert result.stop_reason == "max_iterations" and model.remaining == 1


# -- what goes back to the model: thinking, failed tool results --------------------------


async def test_thinking_is_kept_with_its_turn_and_sent_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    thought = (
        agentrio.types.ThinkingBlock("let me look", "sig-1"),
        agentrio.types.ThinkingBlock(redacted="x"),
    )
    first = Reply(tool_calls=(call("echo", x=1),), thinking=thought)
    model = ScriptedModel([first, answer("done")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo))
        await agent.run("go")
        history = [t.message for t in await agent.history()]
    (turn,) = [m for m in model.calls[1] if m.role == "assistant"]
    assert turn.thinking == thought and turn.tool_calls[0].name == "echo"
    assert [m.thinking for m in history if m.role == "assistant"] == [thought, ()]


async def test_failed_tool_results_are_marked_as_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [calling(call("echo", x=1), call("boom", x=2), call("nope")), answer("ok")]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model, echo, boom))
        await agent.run("go")
    results = tool_messages(model.calls[1])
    assert [(m.name, m.is_error) for m in results] == [
        ("echo", False),
        ("boom", True),
        ("nope", True),
    ]


# -- usage of every kind -------------------------------------------------------------------


async def test_cached_input_cache_writes_and_reasoning_are_counted_and_priced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    used = Usage(1000, 200, cached_input_tokens=600, cache_write_tokens=300, reasoning_tokens=150)
    # input 1.0, output 4.0, cache reads 0.1, cache writes 1.25 (USD per token, for round sums)
    model = ScriptedModel([answer("a", used), answer("b", used)], pricing=(1.0, 4.0, 0.1, 1.25))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("one")
        await agent.run("two")
        totals, mine = rt.usage(), agent.usage()
    cost = 100 * 1.0 + 600 * 0.1 + 300 * 1.25 + 200 * 4.0
    assert totals.cost_usd == pytest.approx(2 * cost)
    for u in (totals, mine):
        assert (u.input_tokens, u.output_tokens) == (2000, 400)
        assert (u.cached_input_tokens, u.cache_write_tokens, u.reasoning_tokens) == (
            1200,
            600,
            300,
        )


async def test_a_call_reserves_every_input_token_at_the_dearest_input_price(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 10 input tokens estimated (5 for each message), 5 output: at the input
    # price the call would fit $20 ($15), at the cache-write price not ($35).
    model = ScriptedModel([answer("a")], pricing=(1.0, 1.0, 0.5, 3.0))
    budget = Budget(max_cost_usd=20.0)
    async with agentrio.open_runtime(budget=budget) as rt:
        limits = Limits(max_output_tokens=5)
        spec = make_spec(model, limits=limits, token_estimator=lambda text: 5)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go")
    assert result.stop_reason == "budget_exhausted" and model.remaining == 1


async def test_usage_details_beyond_their_totals_are_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("a", Usage(10, 5, cached_input_tokens=11))])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        result = await agent.run("go")
    assert (result.stop_reason, result.error_type) == ("error", "UsageInvalid")
    assert "cached_input_tokens + cache_write_tokens = 11" in result.error


# -- request settings ------------------------------------------------------------------


async def test_settings_reach_the_model_run_over_spec(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([answer("a"), answer("b")])
    spec_settings = agentrio.ModelSettings(temperature=0.2, seed=7, extra_body={"a": 1})
    spec = make_spec(model, settings=spec_settings)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("one")
        run_settings = agentrio.ModelSettings(temperature=0.9, extra_body={"b": 2})
        await agent.run("two", settings=run_settings)
    assert model.call_settings == [
        spec_settings,
        agentrio.ModelSettings(temperature=0.9, seed=7, extra_body={"a": 1, "b": 2}),
    ]


async def test_no_settings_pass_no_keyword(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([answer("a")])
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(model))
        await agent.run("go")
    assert model.call_settings == [None]


class _NoSettings:
    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
    ) -> Reply:
        await trio.lowlevel.checkpoint()
        return answer("a")


async def test_settings_for_a_model_that_takes_none_are_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    settings = agentrio.ModelSettings(temperature=0.5)
    async with agentrio.open_runtime() as rt:
        with pytest.raises(agentrio.InvalidArgument, match=r"AgentSpec\.settings: .* takes no"):
            await rt.spawn_agent(make_spec(_NoSettings(), settings=settings))
        agent = await rt.spawn_agent(make_spec(_NoSettings()))
        with pytest.raises(agentrio.InvalidArgument, match=r"settings: .* takes no settings"):
            await agent.run("go", settings=settings)
        assert (await agent.run("go")).stop_reason == "done"


async def test_a_runs_settings_are_checked_against_the_model_of_the_run() -> None:
    # The agent's own model takes no settings; run(model=...)'s provider does: the
    # settings go to that model, so they are checked against it.
    settings = agentrio.ModelSettings(temperature=0.5)
    async with open_fake_llm([answer("ok"), answer("ok")]) as server:
        url = server.base_url + "/v1"
        local = agentrio.ProviderConfig(name="local", kind="openai", base_url=url)
        async with agentrio.open_runtime(config=Config(providers={"local": local})) as rt:
            agent = await rt.spawn_agent(make_spec(_NoSettings()))
            result = await agent.run("go", model="local:m", settings=settings)
            async with agent.stream("again", model="local:m", settings=settings) as stream:
                async for _ in stream:
                    pass
        first, second = server.requests
    assert result.final_text == "ok"
    assert first.body["temperature"] == second.body["temperature"] == 0.5


async def test_a_named_tool_choice_must_be_the_agents(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(agentrio.InvalidArgument, match="tool_choice names tool 'nope'"):
        make_spec(ScriptedModel([]), echo, settings=agentrio.ModelSettings(tool_choice="nope"))
    make_spec(ScriptedModel([]), echo, settings=agentrio.ModelSettings(tool_choice="echo"))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(make_spec(ScriptedModel([]), echo))
        bad = agentrio.ModelSettings(tool_choice="boom")
        with pytest.raises(agentrio.InvalidArgument, match=r"settings\.tool_choice names tool"):
            await agent.run("go", settings=bad)
        with pytest.raises(agentrio.InvalidArgument, match="settings must be"):
            await agent.run("go", settings={"temperature": 1})  # type: ignore[arg-type]


# -- images and documents in the estimate ------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


async def test_an_image_counts_in_the_budgets_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # An image counts IMAGE_TOKENS (3,000), whatever its bytes: a budget of
    # 2,000 input tokens has no room for a call that shows one.
    image = agentrio.ImagePart(data=PNG, media_type="image/png")
    spec = AgentSpec(
        "a", ScriptedModel([answer("ok"), answer("ok")]), limits=Limits(max_output_tokens=10)
    )
    async with agentrio.open_runtime(budget=agentrio.Budget(max_input_tokens=2000)) as rt:
        plain = await (await rt.spawn_agent(spec, name="plain")).run("look")
        seeing = await (await rt.spawn_agent(spec, name="seeing")).run(["look", image])
    assert (plain.stop_reason, seeing.stop_reason) == ("done", "budget_exhausted")


async def test_an_image_in_the_history_counts_towards_the_context_window(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    # The window is 8,000 tokens, 6,000 of which may be sent: one image fits,
    # two do not, and old turns are left out (never the first user turn).
    image = agentrio.ImagePart(url="https://example.com/a.png")
    model = ScriptedModel([answer("one"), answer("two")], context_window=8000)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(AgentSpec("a", model, limits=Limits(max_output_tokens=10)))
        await agent.run(["first", image])
        await agent.run(["second", image])
        await trio.testing.wait_all_tasks_blocked()
    assert [m.content for m in model.calls[0]] == ["first"]
    assert [m.content for m in model.calls[1]] == ["first", "second"]  # "one" left out
    (cut,) = [e for e in events if isinstance(e, agentrio.events.ContextTruncated)]
    assert (cut.dropped, cut.tokens_before, cut.tokens_after) == (1, 6005, 6004)


# -- waits for the budget are published (Waited) ---------------------------------------------


async def test_a_model_call_that_waits_for_the_budget_publishes_it(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    async def slow(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(10)
        return Reply(text="ok", usage=Usage(1, 1))

    # Each call reserves 2 + 40 tokens: the second fits only once the first settles.
    spec = AgentSpec(
        "a", FunctionModel(slow), token_estimator=len, limits=Limits(max_output_tokens=40)
    )
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=60)) as rt:
        events = record_events(rt)
        first = await rt.spawn_agent(spec, name="first")
        second = await rt.spawn_agent(spec, name="second")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run, "go")
            await trio.sleep(1)
            nursery.start_soon(second.run, "go")
        await trio.testing.wait_all_tasks_blocked()
        waits = [e for e in events if isinstance(e, agentrio.events.Waited)]
        assert waits == [agentrio.events.Waited(path="second", what="budget", seconds=9)]
        # Alone, nothing waits and nothing is published.
        events.clear()
        await first.run("again")
        await trio.testing.wait_all_tasks_blocked()
        assert not [e for e in events if isinstance(e, agentrio.events.Waited)]
