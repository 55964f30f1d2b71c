"""The sync and asyncio hosts: a runtime in its own thread, reached through anyio's portal."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

import pytest
import trio

import agentrio
from agentrio import AgentSpec, Budget, ChatMessage, InvalidArgument, ToolCallRequest, Usage
from agentrio.errors import RestartIntensityExceeded, RuntimeClosed, SelfAsk, UsageError
from agentrio.events import (
    ActorExited,
    Event,
    PhaseEnded,
    PhaseStarted,
    RunDone,
    TextDelta,
    ToolStarted,
)
from agentrio.host import _RunOptions, _RuntimeOptions, _StreamOptions
from agentrio.testing import FunctionModel, Reply
from agentrio.types import BlockingAgent, BlockingRuntime, BlockingStream

# A safety net, not a measure: a test that deadlocks fails after this instead of hanging.
GUARD = 60.0


def _answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
    """ "wait": call the tool ``wait``, then say what it returned; anything else: echo it."""
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    asked = messages[last_user].content
    results = [m for m in messages[last_user:] if m.role == "tool"]
    usage = Usage(input_tokens=10, output_tokens=2)
    if asked != "wait":
        return Reply(text=f"echo: {asked}", usage=usage)
    if not results:
        return Reply(tool_calls=(ToolCallRequest("wait", {}),), usage=usage)
    return Reply(text=f"after {results[0].content}", usage=usage)


class Gate:
    """A tool that signals when it starts and waits, in the runtime, to be released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = trio.Event()
        self.cancelled = threading.Event()
        self.on_start: Callable[[], object] = lambda: None

    def spec(self, name: str = "agent") -> AgentSpec:
        @agentrio.tool
        async def wait() -> str:
            """Wait to be released."""
            self.started.set()
            self.on_start()
            try:
                with trio.fail_after(GUARD):
                    await self.release.wait()
            except trio.Cancelled:
                self.cancelled.set()
                raise
            return "released"

        return AgentSpec(name=name, model=FunctionModel(_answer), tools=[wait])


def _echo_spec(name: str = "agent") -> AgentSpec:
    return AgentSpec(name=name, model=FunctionModel(_answer))


class Releaser(agentrio.Actor[agentrio.Message]):
    """Sets an event when it stops: proof that the runtime stopped gracefully."""

    def __init__(self, event: trio.Event) -> None:
        self.event = event

    async def handle(self, msg: agentrio.Message) -> None:
        pass

    async def on_stop(self) -> None:
        self.event.set()


def _runtime_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agentrio-runtime"]


# -- sync ------------------------------------------------------------------------------


def test_spawn_run_usage_and_stop_from_sync_code() -> None:
    with agentrio.open_runtime_sync() as rt:
        assert isinstance(rt, BlockingRuntime)
        agent = rt.spawn_agent(_echo_spec(), name="echo")
        assert isinstance(agent, BlockingAgent)
        assert (agent.name, agent.path) == ("echo", "echo")
        result = agent.run("hello")
        assert (result.final_text, result.stop_reason) == ("echo: hello", "done")
        assert agent.run("again", max_iterations=1).final_text == "echo: again"
        assert agent.usage().requests == 2
        assert rt.usage().input_tokens == 20
        assert rt.thread.is_alive() and rt.thread is not threading.current_thread()
    assert rt.closed
    assert not rt.thread.is_alive()


def test_spawn_agent_under_a_supervisor() -> None:
    with agentrio.open_runtime_sync() as rt:
        team = rt.call(functools.partial(rt.runtime.spawn_supervisor, name="team"))
        agent = rt.spawn_agent(_echo_spec(), under=team, name="r1")
        assert agent.path == "team/r1"
        assert agent.run("hi").final_text == "echo: hi"
        assert rt.spawn_agent(_echo_spec(), under=rt.runtime, name="r1").path == "r1"

        async def from_asyncio() -> str:
            return (await rt.aspawn_agent(_echo_spec(), under=team, name="r2")).path

        assert asyncio.run(from_asyncio()) == "team/r2"
        with pytest.raises(InvalidArgument, match="under"):
            rt.spawn_agent(_echo_spec(), under="team", name="r3")  # type: ignore[arg-type]
        # Stopping the supervisor stops its agents with it.
        rt.call(team.stop)
        with pytest.raises(RuntimeClosed):
            rt.spawn_agent(_echo_spec(), under=team, name="r4")


def test_run_sync_is_one_call_and_routes_runtime_and_run_options() -> None:
    assert agentrio.run_sync(_echo_spec(), "hi").final_text == "echo: hi"
    budget = Budget()
    gate = Gate()
    # budget goes to the runtime, tool_names to the run: the tool call is denied.
    result = agentrio.run_sync(gate.spec(), "wait", budget=budget, tool_names=[], timeout=GUARD)
    assert result.tool_calls[0].status == "denied"
    assert result.final_text.startswith("after ")
    assert budget.usage().requests == 2
    assert not gate.started.is_set()
    assert _runtime_threads() == []


def test_handles_have_no_public_constructor() -> None:
    for cls in (BlockingRuntime, BlockingAgent, BlockingStream):
        with pytest.raises(TypeError, match="no public constructor"):
            cls()


def test_a_bad_argument_raises_and_leaves_no_thread() -> None:
    with pytest.raises(InvalidArgument, match="budget"):
        agentrio.open_runtime_sync(budget="lots")  # type: ignore[arg-type]
    assert _runtime_threads() == []


def test_every_call_after_stop_raises_runtime_closed() -> None:
    rt = agentrio.open_runtime_sync()
    agent = rt.spawn_agent(_echo_spec())
    rt.stop()
    rt.stop()  # again: nothing
    assert not rt.thread.is_alive()
    calls: list[Callable[[], object]] = [
        lambda: rt.spawn_agent(_echo_spec("other")),
        lambda: agent.run("hello"),
        rt.usage,
        agent.usage,
        rt.events,
        lambda: rt.call(trio.sleep, 0),
        agent.stop,
    ]
    for call in calls:
        with pytest.raises(RuntimeClosed):
            call()

    async def from_asyncio() -> None:
        with pytest.raises(RuntimeClosed):
            await agent.arun("hello")
        with pytest.raises(RuntimeClosed):
            await rt.aspawn_agent(_echo_spec("other"))

    asyncio.run(from_asyncio())


def test_a_call_from_the_runtimes_own_thread_is_refused() -> None:
    with agentrio.open_runtime_sync() as rt:
        with pytest.raises(SelfAsk, match="own runtime's thread"):
            rt.call(rt.usage)  # rt.usage() runs in the runtime's thread: it would wait for itself
        assert rt.call(lambda: threading.current_thread()) is rt.thread
        # The escape hatch reaches the Trio API: here, an actor of the runtime itself.
        ref = rt.call(rt.runtime.spawn, Releaser, trio.Event())
        assert isinstance(ref, agentrio.ActorRef)


def test_leaving_the_block_stops_gracefully_and_joins_the_thread() -> None:
    # A phase is running when the block ends; the runtime stops gracefully: the
    # releaser (spawned last, stopped first) runs on_stop, which lets the phase end.
    gate = Gate()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    with agentrio.open_runtime_sync(shutdown_timeout=GUARD) as rt:
        agent = rt.spawn_agent(gate.spec())
        running = pool.submit(agent.run, "wait")
        assert gate.started.wait(GUARD)
        rt.call(rt.runtime.spawn, Releaser, gate.release)
    assert running.result(GUARD).final_text == "after released"
    assert not gate.cancelled.is_set()
    assert not rt.thread.is_alive()
    assert _runtime_threads() == []
    pool.shutdown()


def test_an_exception_in_the_block_cancels_everything_and_propagates() -> None:
    gate = Gate()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    # ValueError itself, not in a group:
    with (
        pytest.raises(ValueError, match="boom"),
        agentrio.open_runtime_sync(shutdown_timeout=GUARD) as rt,
    ):
        agent = rt.spawn_agent(gate.spec())
        running = pool.submit(agent.run, "wait")
        assert gate.started.wait(GUARD)
        raise ValueError("boom")
    assert gate.cancelled.is_set()
    with pytest.raises(agentrio.AgentrioError):
        running.result(GUARD)
    assert not rt.thread.is_alive()
    pool.shutdown()


def test_stop_cancels_what_still_runs_in_the_portal() -> None:
    # A call that is none of the runtime's work (it would never end) does not keep
    # the thread alive: its caller gets RuntimeClosed.
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await trio.sleep_forever()

    pool = concurrent.futures.ThreadPoolExecutor(1)
    rt = agentrio.open_runtime_sync()
    forever_call = pool.submit(rt.call, forever)
    assert started.wait(GUARD)
    stopper = threading.Thread(target=rt.stop)
    stopper.start()
    stopper.join(GUARD)
    assert not stopper.is_alive()
    with pytest.raises(RuntimeClosed):
        forever_call.result(GUARD)
    assert not rt.thread.is_alive()
    pool.shutdown()


def test_calls_from_many_threads_at_once() -> None:
    threads, runs = 8, 5
    with agentrio.open_runtime_sync() as rt:
        shared = rt.spawn_agent(_echo_spec("shared"))

        def work(i: int) -> list[str]:
            own = rt.spawn_agent(_echo_spec(f"worker-{i}"))
            texts = []
            for j in range(runs):
                texts.append(own.run(f"{i}.{j}").final_text)
                texts.append(shared.run(f"shared {i}.{j}").final_text)
            own.stop()
            return texts

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(work, range(threads)))
        for i, texts in enumerate(results):
            assert texts[0::2] == [f"echo: {i}.{j}" for j in range(runs)]
            assert texts[1::2] == [f"echo: shared {i}.{j}" for j in range(runs)]
        assert rt.usage().requests == threads * runs * 2
        assert shared.usage().requests == threads * runs


def test_events_are_read_with_for_and_end_when_the_runtime_stops() -> None:
    with agentrio.open_runtime_sync() as rt:
        agent = rt.spawn_agent(_echo_spec())
        events = rt.events()  # subscribed now, before the run
        agent.run("hello")
        mine = []
        with events:
            for event in events:
                if event.path == agent.path:
                    mine.append(event)
                if isinstance(event, PhaseEnded):
                    break
        assert isinstance(mine[0], PhaseStarted)
        assert isinstance(mine[-1], PhaseEnded) and mine[-1].stop_reason == "done"

        reader_events = rt.events()
        seen: list[Event] = []
        reader = threading.Thread(target=lambda: seen.extend(reader_events))
        reader.start()
    reader.join(GUARD)
    assert not reader.is_alive()  # the stream ended with the runtime
    assert any(isinstance(e, ActorExited) for e in seen)


def test_the_runtimes_own_failure_is_raised_when_it_stops() -> None:
    class Boom(agentrio.Message):
        pass

    class Crasher(agentrio.Actor[Boom]):
        async def handle(self, msg: Boom) -> None:
            raise RuntimeError("crash")

    with (
        pytest.raises(ExceptionGroup) as info,
        agentrio.open_runtime_sync(max_restarts=0) as rt,
    ):
        ref = rt.call(rt.runtime.spawn, Crasher)
        rt.call(ref.send, Boom())
    assert info.group_contains(RestartIntensityExceeded)
    assert not rt.thread.is_alive()


# -- asyncio ---------------------------------------------------------------------------


def test_asyncio_awaits_a_phase_without_blocking_its_loop() -> None:
    gate = Gate()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        phase_waits = asyncio.Event()
        gate.on_start = lambda: loop.call_soon_threadsafe(phase_waits.set)
        async with agentrio.open_runtime_sync() as rt:
            agent = await rt.aspawn_agent(gate.spec())
            run = asyncio.create_task(agent.arun("wait"))
            # The phase now waits in the runtime for this loop to release it: a
            # blocked loop would never get here (the tool would give up after GUARD).
            await phase_waits.wait()
            ticks = [await asyncio.sleep(0, i) for i in range(3)]
            assert ticks == [0, 1, 2] and not run.done()
            await rt.acall(gate.release.set)
            result = await run
            assert result.final_text == "after released"
            assert (await agent.ausage()).requests == 2
            assert (await rt.ausage()).requests == 2
        assert not rt.thread.is_alive()

    asyncio.run(main())


def test_cancelling_an_asyncio_caller_cancels_its_phase_first() -> None:
    gate = Gate()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        phase_waits = asyncio.Event()
        gate.on_start = lambda: loop.call_soon_threadsafe(phase_waits.set)
        async with agentrio.open_runtime_sync() as rt:
            agent = await rt.aspawn_agent(gate.spec())
            run = asyncio.create_task(agent.arun("wait"))
            await phase_waits.wait()
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            assert gate.cancelled.is_set()  # the phase ended before the caller saw it
            assert (await agent.arun("hello")).final_text == "echo: hello"

    asyncio.run(main())


def test_asyncio_reads_events_with_async_for() -> None:
    async def main() -> None:
        async with agentrio.open_runtime_sync() as rt:
            agent = await rt.aspawn_agent(_echo_spec())
            mine = []
            async with await rt.aevents() as events:
                run = asyncio.create_task(agent.arun("hello"))
                async for event in events:
                    if event.path == agent.path:
                        mine.append(type(event).__name__)
                    if isinstance(event, PhaseEnded):
                        break
            assert (await run).final_text == "echo: hello"
            assert mine[0] == "PhaseStarted" and mine[-1] == "PhaseEnded"
            await agent.astop()
            await rt.astop()
            assert not rt.thread.is_alive()

    asyncio.run(main())


# -- a run's own stream -------------------------------------------------------------------


def _streaming_spec(name: str = "agent") -> AgentSpec:
    return AgentSpec(name=name, model=FunctionModel(_answer, chunk_size=2))


def test_a_runs_stream_is_read_with_for_and_ends_with_its_result() -> None:
    with agentrio.open_runtime_sync() as rt:
        agent = rt.spawn_agent(_streaming_spec())
        with agent.stream("hello", max_buffer_size=1) as stream:
            items = list(stream)
        assert isinstance(stream, BlockingStream)
        deltas = [i.text for i in items if isinstance(i, TextDelta)]
        assert deltas == ["ec", "ho", ": ", "he", "ll", "o"]
        assert [type(i).__name__ for i in items][-2:] == ["TurnEnded", "RunDone"]
        done = items[-1]
        assert isinstance(done, RunDone) and done.result.final_text == "echo: hello"
        with pytest.raises(InvalidArgument, match="max_buffer_size"):
            agent.stream("hello", max_buffer_size=0)
        with pytest.raises(InvalidArgument, match="tool_names"):
            agent.stream("hello", tool_names="wait")  # type: ignore[typeddict-item]


def test_a_runs_stream_gives_its_text_alone_and_its_result_as_a_run_stream_does() -> None:
    # RunStream's result() and text() (#23), from sync code and from asyncio.
    with agentrio.open_runtime_sync() as rt:
        agent = rt.spawn_agent(_streaming_spec())
        with agent.stream("hello") as stream:
            assert isinstance(stream, BlockingStream)
            assert list(stream.text()) == ["ec", "ho", ": ", "he", "ll", "o"]
            assert stream.result().final_text == "echo: hello"
            assert stream.result().final_text == "echo: hello"  # (at once, again)
        with agent.stream("again") as stream:
            assert stream.result().final_text == "echo: again"  # (nothing read first)
        with agent.stream("left") as stream:
            pass
        with pytest.raises(UsageError, match="closed before its result"):
            stream.result()

    async def main() -> None:
        async with agentrio.open_runtime_sync() as rt:
            agent = await rt.aspawn_agent(_streaming_spec())
            async with await agent.astream("hi") as stream:
                assert [text async for text in stream.atext()] == ["ec", "ho", ": ", "hi"]
                assert (await stream.aresult()).final_text == "echo: hi"

    asyncio.run(main())


def test_closing_a_runs_stream_early_cancels_the_run() -> None:
    gate = Gate()
    with agentrio.open_runtime_sync() as rt:
        agent = rt.spawn_agent(gate.spec())
        with agent.stream("wait") as stream:
            for item in stream:
                if isinstance(item, ToolStarted):
                    break
        # The block's end waited for the run to end, cancelled in its tool.
        assert gate.cancelled.is_set()
        assert agent.run("hello").final_text == "echo: hello"


def test_a_runs_stream_ends_when_the_runtime_stops() -> None:
    gate = Gate()
    rt = agentrio.open_runtime_sync(shutdown_timeout=0.1)
    agent = rt.spawn_agent(gate.spec())
    stream = agent.stream("wait")
    gate.started.wait(GUARD)
    rt.cancel()
    assert [type(i).__name__ for i in stream] in (["TurnEnded", "ToolStarted"], [])
    stream.close()
    with pytest.raises(RuntimeClosed):
        agent.stream("hello")


def test_a_stream_whose_caller_gave_up_before_getting_it_cancels_its_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The caller is interrupted (an exception, a cancelled await) once the run has
    # started but before stream() returns: nobody can close the stream, so the
    # run must not be left going (waiting for a reader that never comes).
    gate = Gate()
    opened = agentrio.host._HostedRun.opened
    tool_started = trio.Event()
    gate.on_start = tool_started.set

    class Interrupted(Exception):
        pass

    async def interrupted(self: agentrio.host._HostedRun) -> None:
        await opened(self)
        await tool_started.wait()
        raise Interrupted

    monkeypatch.setattr(agentrio.host._HostedRun, "opened", interrupted)
    with agentrio.open_runtime_sync() as rt:
        agent = rt.spawn_agent(gate.spec())
        with pytest.raises(Interrupted):
            agent.stream("wait")
        assert gate.cancelled.wait(GUARD)  # the run was cancelled in its tool
        monkeypatch.undo()
        assert agent.run("hello").final_text == "echo: hello"


def test_asyncio_reads_a_runs_stream_with_async_for() -> None:
    async def main() -> None:
        async with agentrio.open_runtime_sync() as rt:
            agent = await rt.aspawn_agent(_streaming_spec())
            async with await agent.astream("hi") as stream:
                items = [item async for item in stream]
            text = "".join(i.text for i in items if isinstance(i, TextDelta))
            assert text == "echo: hi"
            assert isinstance(items[-1], RunDone)
            # Leaving early, with the run still going: it is cancelled, then the block ends.
            async with await agent.astream("hello", max_buffer_size=1) as stream:
                async for _ in stream:
                    break
            assert (await agent.arun("again")).final_text == "echo: again"
            with pytest.raises(InvalidArgument):
                await agent.astream("hi", max_buffer_size=0)

    asyncio.run(main())


async def test_trio_code_is_sent_to_open_runtime() -> None:
    # Under Trio a blocking call would block Trio's own thread: refused, no thread made.
    with pytest.raises(RuntimeError, match="open_runtime"):
        agentrio.open_runtime_sync()
    assert _runtime_threads() == []


# -- the API stays equal to what it hosts ----------------------------------------------


def _keywords(fn: Callable[..., object]) -> set[str]:
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_run_options_are_agentref_runs_keywords() -> None:
    assert set(_RunOptions.__annotations__) == _keywords(agentrio.AgentRef.run)


def test_stream_takes_agentref_streams_keywords() -> None:
    expected = _keywords(agentrio.AgentRef.stream)
    assert expected == {*_StreamOptions.__annotations__, "max_buffer_size"}
    assert _keywords(BlockingAgent.stream) | set(_StreamOptions.__annotations__) == expected
    assert _keywords(BlockingAgent.astream) | set(_StreamOptions.__annotations__) == expected
    # run()'s, but planning (#26): a stream is one phase.
    assert set(_RunOptions.__annotations__) - set(_StreamOptions.__annotations__) == {"planning"}


def test_spawn_agent_takes_runtime_spawn_agents_keywords() -> None:
    expected = _keywords(agentrio.Runtime.spawn_agent)
    assert _keywords(BlockingRuntime.spawn_agent) == expected
    assert _keywords(BlockingRuntime.aspawn_agent) == expected


def test_runtime_options_are_open_runtimes_keywords() -> None:
    assert set(_RuntimeOptions.__annotations__) == _keywords(agentrio.open_runtime)


def test_import_agentrio_does_not_import_anyios_portal() -> None:
    code = "import sys, agentrio; print(sorted(m for m in sys.modules if m.startswith('anyio')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "anyio.from_thread" not in out and "anyio.to_thread" not in out, out
