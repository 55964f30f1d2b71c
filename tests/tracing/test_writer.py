"""The trace writer: every event in the file, typed back; bounded; off costs nothing."""

from __future__ import annotations

import pathlib

import pytest
import trio

import agentrio
from agentrio import events
from agentrio.errors import TraceError
from agentrio.testing import FunctionModel, Reply
from agentrio.tracing import TraceWriter, read_trace


def _answer(messages: object, tools: object) -> Reply:
    return Reply(text="done")


async def test_a_runtime_writes_every_event(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.jsonl"
    async with agentrio.open_runtime(trace=path) as rt:
        agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
        assert (await agent.run("go")).final_text == "done"
    records = list(read_trace(path))
    kinds = [type(r.e).__name__ for r in records]
    assert "PhaseStarted" in kinds and "TurnEnded" in kinds and "PhaseEnded" in kinds
    ended = [r.e for r in records if isinstance(r.e, events.PhaseEnded)]
    assert ended[0].path == "a1" and ended[0].stop_reason == "done"
    times = [r.t for r in records]
    assert times == sorted(times) and times[0] > 1e9


async def test_a_trace_begins_with_the_runtimes_budget(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.jsonl"
    budget = agentrio.Budget(max_total_tokens=5000, max_cost_usd=0.5)
    async with agentrio.open_runtime(trace=path, budget=budget) as rt:
        agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
        await agent.run("go")
    first = next(iter(read_trace(path))).e
    assert first == events.RuntimeOpened(
        path="", version=agentrio.__version__, max_total_tokens=5000, max_cost_usd=0.5
    )


async def test_no_trace_no_subscriber() -> None:
    async with agentrio.open_runtime() as rt:
        assert rt.statistics() is not None
        # nothing listens: the bus stays inactive
        assert not rt._tree.bus.active  # type: ignore[attr-defined]


def test_a_file_that_cannot_be_opened_is_a_typed_error(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "run.jsonl"
    with pytest.raises(TraceError, match=r"no/such/dir/run\.jsonl"):
        TraceWriter(missing)


async def test_events_past_the_bound_are_dropped_and_counted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.jsonl"
    bus = agentrio.core.EventBus()
    writer = TraceWriter(path, max_pending=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run, bus)
        for i in range(10):
            bus.publish(events.Stalled(path=f"a{i}", why="x"))
        await trio.sleep(0)  # the writer takes what the bus holds, no write in between
        await trio.sleep(0)
        bus.close()
    records = list(read_trace(path))
    assert writer.dropped == 7
    assert [type(r.e).__name__ for r in records] == ["Stalled"] * 3 + ["EventsLost"]
    lost = records[-1].e
    assert isinstance(lost, events.EventsLost) and lost.count == 7


async def test_a_crash_keeps_what_was_written(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.jsonl"
    with pytest.raises(ZeroDivisionError):  # (the block's own: as itself, no group)
        async with agentrio.open_runtime(trace=path) as rt:
            agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
            await agent.run("go")
            1 / 0  # noqa: B018
    kinds = [type(r.e).__name__ for r in read_trace(path)]
    assert "PhaseEnded" in kinds
