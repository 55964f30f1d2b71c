"""The trace writer: every event in the file, typed back; bounded; off costs nothing."""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
import time
from collections.abc import Iterator

import pytest
import trio
import trio.testing

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


async def test_a_file_that_cannot_be_opened_is_a_typed_error(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "run.jsonl"
    with pytest.raises(TraceError, match=r"no/such/dir/run\.jsonl"):
        await TraceWriter(missing).open()
    with pytest.raises(TraceError, match=r"no/such/dir/run\.jsonl"):  # as is, not in a group
        async with agentrio.open_runtime(trace=missing):
            pytest.fail("the block ran")
    # A path no file can have (a NUL in it): a TraceError too, not a ValueError.
    with pytest.raises(TraceError, match="embedded null byte"):
        async with agentrio.open_runtime(trace=tmp_path / "a\0b.jsonl"):
            pytest.fail("the block ran")


async def test_events_past_the_bound_are_dropped_and_counted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.jsonl"
    bus = agentrio.actors.EventBus()
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


# -- a file that cannot be written, or opened at once ------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
async def test_a_full_disk_stops_the_trace_not_the_agents() -> None:
    with pytest.raises(TraceError) as caught:
        async with agentrio.open_runtime(trace="/dev/full") as rt:
            seen = rt.events()
            agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
            first = await agent.run("go")
            async with seen:  # the writer's first write fails: it says so, once
                async for event in seen:
                    if isinstance(event, events.TraceWriteFailed):
                        failed = event
                        break
            second = await agent.run("go on")  # the agents never notice
    assert (first.stop_reason, second.stop_reason) == ("done", "done")
    assert failed.file == "/dev/full" and failed.errno == "ENOSPC"
    assert failed.error_type == "OSError" and failed.error == "No space left on device"
    assert failed.written == 0 and failed.dropped > 0
    message = str(caught.value)
    assert "'/dev/full' could not be written (ENOSPC: No space left on device)" in message
    dropped = int(message.split("written, ")[1].split(" dropped")[0])
    assert dropped > failed.dropped  # every later event was counted too


async def test_a_fifo_with_no_reader_does_not_hang_the_runtime(
    tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock
) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    # (Without the fix the open blocks Trio's thread: this lets it go, late, so the
    # test fails rather than hangs.)
    rescue = threading.Timer(30, lambda: os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)))
    rescue.start()
    try:
        with trio.move_on_after(5) as scope:
            async with agentrio.open_runtime(trace=fifo):
                pytest.fail("the trace file was opened: nobody reads it")
    finally:
        rescue.cancel()
    assert scope.cancelled_caught


async def test_a_fifo_with_a_reader_gets_the_trace(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as reader:
            got.append(reader.read())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, read)
        await trio.testing.wait_all_tasks_blocked()  # (the reader waits for a writer)
        async with agentrio.open_runtime(trace=fifo) as rt:
            agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
            await agent.run("go")
    assert b'"type":"PhaseEnded"' in got[0]


# -- text that is not UTF-8 --------------------------------------------------------------


async def test_a_lone_surrogate_is_written_as_a_replacement_character(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "run.jsonl"
    bus = agentrio.actors.EventBus()
    writer = TraceWriter(path)
    name = os.fsdecode(b"report-\xff.txt")  # what os.listdir gives for such a file
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run, bus)
        bus.publish(events.Stalled(path="a", why="fine"))
        bus.publish(events.ToolEnded(path="a", tool="ls", output_preview=name))
        bus.publish(events.Stalled(path="a\ud800", why="\udcff\ud83d\ude00"))
        bus.close()
    records = [r.e for r in read_trace(path)]
    assert writer.written == 3 and writer.dropped == 0 and writer.error is None
    assert records[0] == events.Stalled(path="a", why="fine")
    assert records[1] == events.ToolEnded(path="a", tool="ls", output_preview="report-\ufffd.txt")
    assert records[2] == events.Stalled(path="a\ufffd", why="\ufffd\U0001f600")


async def test_a_fifo_whose_reader_left_stops_the_trace_not_the_agents(
    tmp_path: pathlib.Path,
) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    left = trio.Event()

    async def read_nothing() -> None:
        await trio.to_thread.run_sync(lambda: open(fifo, "rb").close())
        left.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_nothing)
        await trio.testing.wait_all_tasks_blocked()  # (the reader waits for a writer)
        with pytest.raises(TraceError, match=r"\(EPIPE: Broken pipe\); 0 events written") as caught:
            async with agentrio.open_runtime(trace=fifo) as rt:
                seen = rt.events()
                await left.wait()
                agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
                assert (await agent.run("go")).stop_reason == "done"
                async with seen:  # the writer's first write fails: it says so
                    async for event in seen:
                        if isinstance(event, events.TraceWriteFailed):
                            failed = event
                            break
    assert (failed.error_type, failed.errno) == ("BrokenPipeError", "EPIPE")
    assert "'" + str(fifo) + "'" in str(caught.value)


# -- a FIFO whose reader reads nothing (review of #21) ------------------------------------


@contextlib.contextmanager
def _stalled_fifo(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A FIFO with a reader that reads nothing, and leaves after 20 s of real time
    (a writer that waits for it for ever then sees EPIPE: the test fails, not hangs)."""
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    once = threading.Lock()  # (taken by whoever closes the reader: it is closed once)

    def leave() -> None:
        if once.acquire(blocking=False):
            os.close(reader)

    timer = threading.Timer(20, leave)
    timer.start()
    try:
        yield fifo
    finally:
        timer.cancel()
        leave()


async def test_a_reader_that_reads_nothing_is_given_up_at_the_end(
    tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The writer waited in a worker thread for the pipe to take a write, for ever:
    # open_runtime's block never ended, and could not be cancelled.
    with _stalled_fifo(tmp_path) as fifo:
        bus = agentrio.actors.EventBus()
        writer = TraceWriter(fifo)
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run, bus)
            for _ in range(300):  # (far past what the pipe holds)
                bus.publish(events.Stalled(path="a", why="x" * 1000))
            await trio.sleep(1)
            bus.close()
    assert writer.error is not None
    assert "(ETIMEDOUT: its reader read nothing for 5 s)" in str(writer.error)


async def test_a_reader_that_reads_nothing_does_not_stop_a_cancel(
    tmp_path: pathlib.Path,
) -> None:
    with _stalled_fifo(tmp_path) as fifo:
        start = time.monotonic()
        with trio.move_on_after(2) as scope:  # (real time: the cancel must end it)
            async with agentrio.open_runtime(trace=fifo) as rt:
                agent = await rt.spawn_agent(agentrio.AgentSpec("a1", FunctionModel(_answer)))
                for _ in range(1000):  # (their events are more than the pipe holds)
                    await agent.run("go")
                await trio.sleep_forever()
        assert scope.cancelled_caught
        assert time.monotonic() - start < 10  # (not ended by the reader's leaving, at 20 s)
