"""ToolCallActor (one call, its timeout, every failure as a result) and start_batch."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

import agentrio
from agentrio import ToolCallRequest, ToolResult
from agentrio.actors.tool_call import ToolCallActor, start_batch


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
    actor = ToolCallActor(add, request("add", a=2, b=3), 10.0)
    assert actor.result is None
    result = await actor.run()
    assert result == ToolResult(
        id="c1", name="add", arguments={"a": 2, "b": 3}, status="ok", content="5"
    )
    assert actor.result is result


async def test_arguments_are_converted_and_defaulted() -> None:
    result = await ToolCallActor(add, request("add", a="2"), 10.0).run()
    assert (result.status, result.content) == ("ok", "3")


@pytest.mark.parametrize(
    "arguments",
    [{}, {"a": "x"}, {"a": 1, "c": 2}, {"a": [1]}],
    ids=["missing", "wrong type", "unknown", "list"],
)
async def test_invalid_arguments_are_a_failed_result(arguments: dict[str, object]) -> None:
    result = await ToolCallActor(add, request("add", **arguments), 10.0).run()
    assert result.status == "failed"
    assert result.content.startswith("invalid arguments for 'add'")
    assert result.arguments == arguments


async def test_a_raise_is_a_failed_result() -> None:
    result = await ToolCallActor(fails, request("fails"), 10.0).run()
    assert result.status == "failed"
    assert result.content == "tool 'fails' raised KeyError: 'missing'"


async def test_an_unencodable_result_is_a_failed_result_naming_the_tool() -> None:
    result = await ToolCallActor(weird, request("weird"), 10.0).run()
    assert result.status == "failed"
    assert "tool 'weird' returned a object" in result.content
    assert "JSON" in result.content


async def test_timeout(autojump_clock: trio.testing.MockClock) -> None:
    t0 = trio.current_time()
    result = await ToolCallActor(nap, request("nap", seconds=100), 2.5).run()
    assert trio.current_time() - t0 == pytest.approx(2.5)
    assert result.status == "timeout"
    assert result.content == "tool 'nap' timed out after 2.5 s"


async def test_in_time(autojump_clock: trio.testing.MockClock) -> None:
    result = await ToolCallActor(nap, request("nap", seconds=2), 2.5).run()
    assert (result.status, result.content) == ("ok", "slept 2.0")


async def test_sync_tool_raising_in_its_thread() -> None:
    @agentrio.tool
    def sync_fails(x: int) -> int:
        raise ZeroDivisionError(x)

    result = await ToolCallActor(sync_fails, request("sync_fails", x=1), 10.0).run()
    assert (result.status, result.content) == (
        "failed",
        "tool 'sync_fails' raised ZeroDivisionError: 1",
    )


async def test_cancellation_is_not_swallowed(autojump_clock: trio.testing.MockClock) -> None:
    actor = ToolCallActor(nap, request("nap", seconds=100), 50)
    with trio.move_on_after(1):
        await actor.run()
        raise AssertionError("not cancelled")
    assert actor.result is None
    interrupted = actor.interrupted("cut short")
    assert (interrupted.status, interrupted.content) == ("timeout", "cut short")
    # once set, the result stays
    assert actor.interrupted("again") is interrupted


async def test_interrupted_keeps_a_finished_result() -> None:
    actor = ToolCallActor(add, request("add", a=1), 10.0)
    result = await actor.run()
    assert actor.interrupted("late") is result


# -- start_batch ---------------------------------------------------------------------------


async def run_batch(actors: list[ToolCallActor], limit: int) -> list[ToolResult]:
    done: list[ToolResult] = []
    async with trio.open_nursery() as nursery:
        start_batch(nursery, actors, limit, lambda actor, result: done.append(result))
    # the nursery's exit waits for the last call
    assert len(done) == len(actors)
    assert all(a.result is not None for a in actors)
    return done


async def test_batch_runs_in_parallel(autojump_clock: trio.testing.MockClock) -> None:
    actors = [ToolCallActor(nap, request("nap", f"c{i}", seconds=10), 60) for i in range(5)]
    t0 = trio.current_time()
    await run_batch(actors, 5)
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

    actors = [ToolCallActor(counted, request("counted", f"c{i}", i=i), 60) for i in range(5)]
    t0 = trio.current_time()
    await run_batch(actors, limit)
    assert trio.current_time() - t0 == pytest.approx(elapsed)
    assert peak == min(limit, 5)


async def test_batch_reports_each_result_as_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actors = [
        ToolCallActor(nap, request("nap", "slow", seconds=30), 60),
        ToolCallActor(nap, request("nap", "fast", seconds=10), 60),
        ToolCallActor(fails, request("fails", "bad"), 60),
    ]
    done = await run_batch(actors, 3)
    assert [r.id for r in done] == ["bad", "fast", "slow"]


async def test_empty_batch() -> None:
    assert await run_batch([], 3) == []


async def test_cancelled_batch_leaves_unfinished_calls_unset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    actors = [
        ToolCallActor(nap, request("nap", "fast", seconds=1), 60),
        ToolCallActor(nap, request("nap", "slow", seconds=100), 60),
    ]
    done: list[ToolResult] = []
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            start_batch(nursery, actors, 2, lambda actor, result: done.append(result))
    assert [r.id for r in done] == ["fast"]
    assert actors[1].result is None
    assert actors[1].interrupted("phase over").status == "timeout"


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
        result = await ToolCallActor(stuck, request("stuck"), 5).run()
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
        actor = ToolCallActor(tool, request(tool.name, x=1), 10.0, context=CONTEXT)
        result = await actor.run()
        assert (result.status, result.content) == ("ok", "1")
    assert got == [CONTEXT, CONTEXT]
    assert got[0] is CONTEXT and got[1] is CONTEXT


async def test_a_context_is_not_a_models_argument() -> None:
    @agentrio.tool
    async def where(x: int, ctx: agentrio.ToolContext) -> int:
        raise AssertionError("never runs")

    actor = ToolCallActor(where, request("where", x=1, ctx="forged"), 10.0, context=CONTEXT)
    result = await actor.run()
    assert result.status == "failed"
    assert "unknown field `ctx`" in result.content


async def test_an_actor_has_no_context_unless_given_one() -> None:
    actor = ToolCallActor(add, request("add", a=2), 10.0)
    assert actor.context is None
    assert (await actor.run()).content == "3"
