"""ToolRunner (one call, its timeout, every failure as a result) and start_batch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import ChatMessage, ToolCallRequest, ToolResult
from agentrio.agents.tools.tool_call import ToolRunner, start_batch
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import ToolSchema


@agentrio.tool
async def add(a: int, b: int = 1) -> int:
    """Add."""
    await trio.lowlevel.checkpoint()
    return a + b


@agentrio.tool
async def nap(seconds: float) -> str:
    """Sleep."""
    await trio.sleep(seconds)
    return f"slept {seconds}"


@agentrio.tool
async def fails() -> str:
    """Raise."""
    await trio.lowlevel.checkpoint()
    raise KeyError("missing")


@agentrio.tool
async def weird() -> object:
    """Return something JSON cannot encode."""
    await trio.lowlevel.checkpoint()
    return object()


def request(name: str, id: str = "c1", **arguments: object) -> ToolCallRequest:
    return ToolCallRequest(name, arguments, id=id)


async def test_ok_result() -> None:
    runner = ToolRunner(add, request("add", a=2, b=3), 10.0)
    assert runner.result is None
    result = await runner.run()
    assert result == ToolResult(
        id="c1", name="add", arguments={"a": 2, "b": 3}, status="ok", content="5"
    )
    assert runner.result is result


async def test_arguments_are_converted_and_defaulted() -> None:
    result = await ToolRunner(add, request("add", a="2"), 10.0).run()
    assert (result.status, result.content) == ("ok", "3")


@pytest.mark.parametrize(
    "arguments",
    [{}, {"a": "x"}, {"a": 1, "c": 2}, {"a": [1]}],
    ids=["missing", "wrong type", "unknown", "list"],
)
async def test_invalid_arguments_are_a_failed_result(arguments: dict[str, object]) -> None:
    result = await ToolRunner(add, request("add", **arguments), 10.0).run()
    assert result.status == "failed"
    assert result.content.startswith("invalid arguments for 'add'")
    assert result.arguments == arguments


async def test_a_raise_is_a_failed_result() -> None:
    result = await ToolRunner(fails, request("fails"), 10.0).run()
    assert result.status == "failed"
    assert result.content == "tool 'fails' raised KeyError: 'missing'"


async def test_an_unencodable_result_is_a_failed_result_naming_the_tool() -> None:
    result = await ToolRunner(weird, request("weird"), 10.0).run()
    assert result.status == "failed"
    assert "tool 'weird' returned a object" in result.content
    assert "JSON" in result.content


async def test_timeout(autojump_clock: trio.testing.MockClock) -> None:
    t0 = trio.current_time()
    result = await ToolRunner(nap, request("nap", seconds=100), 2.5).run()
    assert trio.current_time() - t0 == pytest.approx(2.5)
    assert result.status == "timeout"
    assert result.content == "tool 'nap' timed out after 2.5 s"


async def test_in_time(autojump_clock: trio.testing.MockClock) -> None:
    result = await ToolRunner(nap, request("nap", seconds=2), 2.5).run()
    assert (result.status, result.content) == ("ok", "slept 2.0")


async def test_sync_tool_raising_in_its_thread() -> None:
    @agentrio.tool
    def sync_fails(x: int) -> int:
        raise ZeroDivisionError(x)

    result = await ToolRunner(sync_fails, request("sync_fails", x=1), 10.0).run()
    assert (result.status, result.content) == (
        "failed",
        "tool 'sync_fails' raised ZeroDivisionError: 1",
    )


async def test_cancellation_is_not_swallowed(autojump_clock: trio.testing.MockClock) -> None:
    runner = ToolRunner(nap, request("nap", seconds=100), 50)
    with trio.move_on_after(1):
        await runner.run()
        raise AssertionError("not cancelled")
    assert runner.result is None
    interrupted = runner.interrupted("cut short")
    assert (interrupted.status, interrupted.content) == ("timeout", "cut short")
    # once set, the result stays
    assert runner.interrupted("again") is interrupted


async def test_interrupted_keeps_a_finished_result() -> None:
    runner = ToolRunner(add, request("add", a=1), 10.0)
    result = await runner.run()
    assert runner.interrupted("late") is result


# -- start_batch ---------------------------------------------------------------------------


async def run_batch(runners: list[ToolRunner], limit: int) -> list[ToolResult]:
    done: list[ToolResult] = []
    async with trio.open_nursery() as nursery:
        start_batch(nursery, runners, limit, lambda runner, result: done.append(result))
    # the nursery's exit waits for the last call
    assert len(done) == len(runners)
    assert all(a.result is not None for a in runners)
    return done


async def test_batch_runs_in_parallel(autojump_clock: trio.testing.MockClock) -> None:
    runners = [ToolRunner(nap, request("nap", f"c{i}", seconds=10), 60) for i in range(5)]
    t0 = trio.current_time()
    await run_batch(runners, 5)
    assert trio.current_time() - t0 == pytest.approx(10)


@pytest.mark.parametrize(("limit", "elapsed"), [(1, 50), (2, 30), (4, 20), (10, 10)])
async def test_batch_limit(
    autojump_clock: trio.testing.MockClock, limit: int, elapsed: float
) -> None:
    running = peak = 0

    @agentrio.tool
    async def counted(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(10)
        running -= 1
        return i

    runners = [ToolRunner(counted, request("counted", f"c{i}", i=i), 60) for i in range(5)]
    t0 = trio.current_time()
    await run_batch(runners, limit)
    assert trio.current_time() - t0 == pytest.approx(elapsed)
    assert peak == min(limit, 5)


async def test_batch_reports_each_result_as_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runners = [
        ToolRunner(nap, request("nap", "slow", seconds=30), 60),
        ToolRunner(nap, request("nap", "fast", seconds=10), 60),
        ToolRunner(fails, request("fails", "bad"), 60),
    ]
    done = await run_batch(runners, 3)
    assert [r.id for r in done] == ["bad", "fast", "slow"]


async def test_empty_batch() -> None:
    assert await run_batch([], 3) == []


async def test_cancelled_batch_leaves_unfinished_calls_unset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runners = [
        ToolRunner(nap, request("nap", "fast", seconds=1), 60),
        ToolRunner(nap, request("nap", "slow", seconds=100), 60),
    ]
    done: list[ToolResult] = []
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            start_batch(nursery, runners, 2, lambda runner, result: done.append(result))
    assert [r.id for r in done] == ["fast"]
    assert runners[1].result is None
    assert runners[1].interrupted("phase over").status == "timeout"


async def test_a_sync_tool_past_its_timeout_is_abandoned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = threading.Event()

    @agentrio.tool
    def stuck() -> str:
        release.wait(30)  # real seconds: only a safety net
        return "late"

    t0 = trio.current_time()
    try:
        result = await ToolRunner(stuck, request("stuck"), 5).run()
    finally:
        release.set()
    assert trio.current_time() - t0 == pytest.approx(5)
    assert (result.status, result.content) == ("timeout", "tool 'stuck' timed out after 5 s")


# -- the ToolContext --------------------------------------------------------------------


CONTEXT = agentrio.ToolContext("lead", "notes", "c1", 2, env={"HOME": "/home/lead"})


async def test_a_tool_that_declares_a_context_receives_the_actors() -> None:
    got: list[agentrio.ToolContext] = []

    @agentrio.tool
    async def where(x: int, ctx: agentrio.ToolContext) -> int:
        got.append(ctx)
        await trio.lowlevel.checkpoint()
        return x

    @agentrio.tool
    def where_sync(ctx: agentrio.ToolContext, x: int) -> int:
        got.append(ctx)
        return x

    for tool in (where, where_sync):
        runner = ToolRunner(tool, request(tool.name, x=1), 10.0, context=CONTEXT)
        result = await runner.run()
        assert (result.status, result.content) == ("ok", "1")
    assert got == [CONTEXT, CONTEXT]
    assert got[0] is CONTEXT and got[1] is CONTEXT


async def test_a_context_is_not_a_models_argument() -> None:
    @agentrio.tool
    async def where(x: int, ctx: agentrio.ToolContext) -> int:
        raise AssertionError("never runs")

    runner = ToolRunner(where, request("where", x=1, ctx="forged"), 10.0, context=CONTEXT)
    result = await runner.run()
    assert result.status == "failed"
    assert "unknown field `ctx`" in result.content


async def test_an_actor_has_no_context_unless_given_one() -> None:
    runner = ToolRunner(add, request("add", a=2), 10.0)
    assert runner.context is None
    assert (await runner.run()).content == "3"


# -- lanes: tool calls queue by lane, retry, dead letters -------------------------------------


class Work:
    """A tool that notes each call's name and start time, works one (virtual) second,
    and raises while ``failures`` says so for that name."""

    def __init__(self, failures: dict[str, int] | None = None, error: str = "flaky") -> None:
        self.calls: list[tuple[str, float]] = []
        self.failures = failures or {}
        self.error = error
        self.tool = agentrio.Tool(self.work)

    async def work(self, name: str) -> str:
        """Work on *name*."""
        self.calls.append((name, trio.current_time()))
        await trio.sleep(1)
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise ConnectionError(f"{self.error} ({name})")
        return f"{name} done"

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def call(name: str, id: str = "c1") -> ToolCallRequest:
    return ToolCallRequest("work", {"name": name}, id=id)


async def direct(
    rt: agentrio.Runtime,
    spec: agentrio.AgentSpec,
    name: str,
    lane: str | None = None,
    results: dict[str, ToolResult] | None = None,
) -> ToolResult:
    """Spawn an agent of *spec* called *name* and run one direct call of ``work(name)``."""
    agent = await rt.spawn_agent(spec, name=name)
    result = await agent.run("go", direct_tool_calls=[call(name)], lane=lane)  # type: ignore[arg-type]
    (done,) = result.tool_calls
    if results is not None:
        results[name] = done
    return done


def worker(work: Work, **options: object) -> agentrio.AgentSpec:
    return agentrio.AgentSpec(
        "w",
        ScriptedModel([]),
        tools=[work.tool],
        **options,  # type: ignore[arg-type]
    )


async def test_a_full_tool_limit_runs_the_interactive_call_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    work = Work()
    lanes = agentrio.Lanes(tool_concurrency=1)
    async with agentrio.open_runtime(lanes=lanes) as rt, trio.open_nursery() as nursery:
        spec = worker(work, lane="background")
        for i in range(4):
            nursery.start_soon(direct, rt, spec, f"bg{i}")
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(direct, rt, spec, "query", "query")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(direct, rt, spec, "urgent", "interactive")
    # One at a time; the interactive call goes as soon as the first one ends.
    assert work.names() == ["bg0", "urgent", "query", "bg1", "bg2", "bg3"]
    assert [t for _, t in work.calls] == [0, 1, 2, 3, 4, 5]


async def test_a_lanes_max_concurrency_caps_that_lane_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    work = Work()
    lanes = agentrio.Lanes(background=agentrio.LanePolicy(max_concurrency=1))
    async with agentrio.open_runtime(lanes=lanes) as rt, trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(direct, rt, worker(work, lane="background"), f"bg{i}")
            nursery.start_soon(direct, rt, worker(work), f"q{i}")
    starts = dict(work.calls)
    assert sorted(starts[f"bg{i}"] for i in range(3)) == [0, 1, 2]  # one at a time
    assert [starts[f"q{i}"] for i in range(3)] == [0, 0, 0]  # the query lane is not capped


async def test_a_parallel_batch_takes_the_runtimes_slots(
    autojump_clock: trio.testing.MockClock,
) -> None:
    work = Work()
    async with agentrio.open_runtime(lanes=agentrio.Lanes(tool_concurrency=2)) as rt:
        agent = await rt.spawn_agent(worker(work))
        calls = [call(f"n{i}", id=f"c{i}") for i in range(5)]
        result = await agent.run("go", direct_tool_calls=calls)
    assert [r.status for r in result.tool_calls] == ["ok"] * 5
    assert sorted(t for _, t in work.calls) == [0, 0, 1, 1, 2]


async def test_a_failing_call_is_retried_with_backoff(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    work = Work(failures={"x": 2})
    policy = agentrio.LanePolicy(attempts=3, backoff_initial=2, backoff_max=3)
    async with agentrio.open_runtime(lanes=agentrio.Lanes(query=policy)) as rt:
        events = record_events(rt)
        done = await direct(rt, worker(work), "x")
        await trio.testing.wait_all_tasks_blocked()
    assert (done.status, done.content) == ("ok", "x done")
    # attempt 1 at 0 (fails at 1), wait 2; attempt 2 at 3 (fails at 4), wait 3; attempt 3 at 7.
    assert [t for _, t in work.calls] == [0, 3, 7]
    retries = [e for e in events if isinstance(e, agentrio.events.ToolRetry)]
    assert [(e.attempt, e.delay) for e in retries] == [(1, 2), (2, 3)]
    assert retries[0] == agentrio.events.ToolRetry(
        path="x",
        tool="work",
        call_id="c1",
        lane="query",
        attempt=1,
        delay=2.0,
        error_type="ConnectionError",
        error="flaky (x)",
    )
    assert not [e for e in events if isinstance(e, agentrio.events.ToolDeadLetter)]


async def test_after_the_last_attempt_a_dead_letter_and_a_refusal(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrio")
    work = Work(failures={"x": 99}, error="cannot reach db with sk-secret-123")
    lanes = agentrio.Lanes(background=agentrio.LanePolicy(attempts=3, backoff_initial=1))
    spec = worker(work, lane="background", env={"DB_TOKEN": "sk-secret-123"})
    async with agentrio.open_runtime(lanes=lanes) as rt:
        events = record_events(rt)
        done = await direct(rt, spec, "x")
        await trio.testing.wait_all_tasks_blocked()
    assert len(work.calls) == 3
    assert done.status == "denied"
    assert done.content == (
        "tool 'work' was given up after 3 attempts (a dead letter of the 'background' "
        "lane); the last raised ConnectionError: cannot reach db with [redacted] (x)"
    )
    (dead,) = [e for e in events if isinstance(e, agentrio.events.ToolDeadLetter)]
    assert dead == agentrio.events.ToolDeadLetter(
        path="x",
        tool="work",
        call_id="c1",
        lane="background",
        attempts=3,
        error_type="ConnectionError",
        error="cannot reach db with [redacted] (x)",
    )
    (ended,) = [e for e in events if isinstance(e, agentrio.events.ToolEnded)]
    assert ended.status == "denied"
    assert "sk-secret" not in repr(events)
    # Logged, the tool's name and the error's type, not its text (nor the arguments).
    (line,) = [r for r in caplog.records if r.name == "agentrio.agents.tools.tool_call"]
    assert line.levelno == logging.WARNING
    assert line.getMessage() == (
        "'x': tool 'work' was given up after 3 attempts (a dead letter of the 'background' "
        "lane; the last raised ConnectionError)"
    )


async def test_the_model_sees_the_dead_letter(autojump_clock: trio.testing.MockClock) -> None:
    work = Work(failures={"x": 99})
    seen: list[str] = []

    def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        if messages[-1].role == "tool":
            seen.append(messages[-1].content)
            return Reply(text="I could not do it")
        return Reply(tool_calls=(call("x"),))

    lanes = agentrio.Lanes(query=agentrio.LanePolicy(attempts=2, backoff_initial=0))
    async with agentrio.open_runtime(lanes=lanes) as rt:
        spec = agentrio.AgentSpec("a", FunctionModel(model), tools=[work.tool])
        result = await (await rt.spawn_agent(spec)).run("go")
    assert result.stop_reason == "done"
    assert [c.status for c in result.tool_calls] == ["denied"]
    assert seen == [result.tool_calls[0].content]
    assert "given up after 2 attempts" in seen[0]


async def test_without_retries_a_failing_call_is_failed_and_no_dead_letter(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    for lanes in (None, agentrio.Lanes(tool_concurrency=1)):
        work = Work(failures={"x": 99})
        async with agentrio.open_runtime(lanes=lanes) as rt:
            events = record_events(rt)
            done = await direct(rt, worker(work), "x")
            await trio.testing.wait_all_tasks_blocked()
        assert (done.status, done.content) == (
            "failed",
            "tool 'work' raised ConnectionError: flaky (x)",
        )
        assert len(work.calls) == 1
        assert not [
            e
            for e in events
            if isinstance(e, (agentrio.events.ToolRetry, agentrio.events.ToolDeadLetter))
        ]


async def test_bad_arguments_and_timeouts_are_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lanes = agentrio.Lanes(query=agentrio.LanePolicy(attempts=3))
    async with agentrio.open_runtime(lanes=lanes) as rt:
        spec = agentrio.AgentSpec(
            "a", ScriptedModel([]), tools=[add, nap], limits=agentrio.Limits(tool_timeout=5)
        )
        agent = await rt.spawn_agent(spec)
        t0 = trio.current_time()
        result = await agent.run(
            "go",
            direct_tool_calls=[
                ToolCallRequest("add", {"a": "x"}, id="c1"),
                ToolCallRequest("nap", {"seconds": 100}, id="c2"),
            ],
        )
    assert [c.status for c in result.tool_calls] == ["failed", "timeout"]
    assert trio.current_time() - t0 == 5  # one attempt of nap, not three


async def test_an_agent_tool_takes_no_slot_its_child_needs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # With one slot in the runtime, an agent tool holding it while its child waits
    # for it would deadlock (until the tool's timeout): agent tools take no slot.
    work = Work()
    child = agentrio.AgentSpec("child", FunctionModel(_one_call_then_done), tools=[work.tool])
    lead_model = ScriptedModel(
        [Reply(tool_calls=(ToolCallRequest("child", {"task": "t"}),)), Reply(text="done")]
    )
    lead = agentrio.AgentSpec("lead", lead_model, tools=[agentrio.agent_tool(child), work.tool])
    async with agentrio.open_runtime(lanes=agentrio.Lanes(tool_concurrency=1)) as rt:
        result = await (await rt.spawn_agent(lead)).run("delegate")
    assert [(c.name, c.status) for c in result.tool_calls] == [("child", "ok")]
    assert work.names() == ["from child"]
    assert trio.current_time() == 1


def _one_call_then_done(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
    if messages[-1].role == "tool":
        return Reply(text="child done")
    return Reply(tool_calls=(call("from child"),))


async def test_a_cancelled_phase_leaves_the_slot_queue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    work = Work()
    async with agentrio.open_runtime(lanes=agentrio.Lanes(tool_concurrency=1)) as rt:
        results: dict[str, ToolResult] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(direct, rt, worker(work), "first", None, results)
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.5):
                await direct(rt, worker(work), "gave up")
            nursery.start_soon(direct, rt, worker(work), "next", None, results)
    assert work.names() == ["first", "next"]
    assert [t for _, t in work.calls] == [0, 1]
    assert results["next"].status == "ok"
