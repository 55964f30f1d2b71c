"""open_runtime(): the root supervisor's lifetime, failure at the root, lookups, statistics."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    ActorCrashed,
    ActorStopped,
    InvalidArgument,
    RestartIntensityExceeded,
    RuntimeClosed,
    UnknownName,
)
from agentrio.testing import FunctionModel, Reply

if TYPE_CHECKING:
    from conftest import TaskTracker

RecordEvents = Callable[..., list[agentrio.Event]]


# Virtual seconds (MockClock): a test that deadlocks jumps here and fails at once.
DEADLINE = 1000


class Put(agentrio.Message):
    n: int


class Crash(agentrio.Message):
    pass


class Block(agentrio.Message):
    pass


class Worker(agentrio.Actor[agentrio.Message]):
    def __init__(self, log: list[str], gate: trio.Event | None = None) -> None:
        self.log = log
        self.gate = gate

    async def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Put):
            self.log.append(f"{self.ref.path} put {msg.n}")
            return msg.n
        if isinstance(msg, Crash):
            raise RuntimeError("boom")
        if isinstance(msg, Block):
            assert self.gate is not None
            await self.gate.wait()
            return "unblocked"
        raise AssertionError(msg)

    async def on_stop(self) -> None:
        self.log.append(f"{self.ref.path} stop")


def _runtime_tasks(tracker: TaskTracker) -> list[trio.lowlevel.Task]:
    root = tracker.named("agentrio root supervisor")
    return [root, *tracker.descendants(root)]


async def test_the_runtime_is_the_root_supervisor() -> None:
    async with agentrio.open_runtime() as rt:
        assert isinstance(rt, agentrio.Runtime)
        assert isinstance(rt, agentrio.SupervisorRef)
        assert (rt.name, rt.path) == ("", "")
        assert not rt.closed
        assert rt.statistics().state == "running"
        team = await rt.spawn_supervisor(name="team")
        ref = await team.spawn(Worker, [], name="w")
        assert rt.lookup("team/w") is ref
        assert rt.lookup_supervisor("team") is team
        assert rt.children() == [team]
    assert rt.closed
    assert rt.statistics().state == "exited"


async def test_leaving_the_block_stops_everything_gracefully(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            team = await rt.spawn_supervisor(name="team")
            refs = [await team.spawn(Worker, log, name=f"w{i}") for i in range(3)]
            top = await rt.spawn(Worker, log, name="top")
            for ref in (*refs, top):
                for n in range(3):
                    ref.send_nowait(Put(n=n))  # still queued when the block ends
            tasks = _runtime_tasks(task_tracker)
        # Every queued message was handled, then on_stop ran, last spawned first.
        for path in ("team/w0", "team/w1", "team/w2", "top"):
            assert [line for line in log if line.startswith(path)] == [
                f"{path} put 0",
                f"{path} put 1",
                f"{path} put 2",
                f"{path} stop",
            ]
        stops = [line for line in log if line.endswith(" stop")]
        assert stops == ["top stop", "team/w2 stop", "team/w1 stop", "team/w0 stop"]
        # Nothing outlives the block.
        assert len(tasks) >= 2
        assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
        for ref in (*refs, top):
            assert ref.statistics().state == "exited"
            with pytest.raises(ActorStopped):
                ref.send_nowait(Put(n=9))


async def test_a_child_can_use_earlier_siblings_while_it_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Children stop one at a time, last spawned first (as in OTP)."""
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging

        class Store(agentrio.Actor[Put]):
            def __init__(self) -> None:
                self.total = 0

            async def handle(self, msg: Put) -> object:
                self.total += msg.n
                return self.total

        class User(agentrio.Actor[Put]):
            def __init__(self, store: agentrio.ActorRef, results: list[object]) -> None:
                self.store = store
                self.results = results

            async def handle(self, msg: Put) -> object:
                return await self.store.ask(msg)

            async def on_stop(self) -> None:
                # The store was spawned first, so it is still running.
                self.results.append(await self.store.ask(Put(n=100)))

        results: list[object] = []
        async with agentrio.open_runtime() as rt:
            store = await rt.spawn(Store, name="store")
            users = [await rt.spawn(User, store, results, name=f"u{i}") for i in range(3)]
            for user in users:
                user.send_nowait(Put(n=1))
        assert results == [103, 203, 303]


async def test_leaving_with_an_exception_cancels_everything(task_tracker: TaskTracker) -> None:
    log: list[str] = []
    never = trio.Event()
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="user code failed")):
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, never, name="w")
            ref.send_nowait(Block())
            ref.send_nowait(Put(n=1))
            await trio.testing.wait_all_tasks_blocked()
            tasks = _runtime_tasks(task_tracker)
            raise ValueError("user code failed")
    assert log == []  # no on_stop, the queued Put was never handled
    assert len(tasks) >= 2
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    assert ref.statistics().state == "exited"
    with pytest.raises(ActorStopped) as info:
        await ref.send(Put(n=2))
    assert info.value.reason == "cancelled"


async def test_an_outer_cancel_scope_cancels_the_runtime(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    log: list[str] = []
    with trio.move_on_after(5) as scope:
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, trio.Event(), name="w")
            ref.send_nowait(Block())
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() == 5
    assert log == []
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    assert ref.statistics().state == "exited"


async def test_a_cancel_from_above_reaches_every_busy_child_at_once(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    # A child's task swallows the Cancelled that ends it (see _child_main): safe
    # only because it is the task's top frame. The cancel must still reach the
    # supervisors and the scope that made it, with nothing left running.
    async def stuck(messages: object, tools: object) -> Reply:
        await trio.sleep_forever()
        raise AssertionError

    log: list[str] = []
    never = trio.Event()
    went_on = False
    with trio.CancelScope() as scope:
        async with agentrio.open_runtime(shutdown_timeout=60) as rt:
            workers = [await rt.spawn(Worker, log, never, name=f"w{i}") for i in range(20)]
            team = await rt.spawn_supervisor(name="team")
            workers += [await team.spawn(Worker, log, never, name=f"t{i}") for i in range(20)]
            for ref in workers:
                ref.send_nowait(Block())
            spec = agentrio.AgentSpec("a", FunctionModel(stuck))
            agents = [await rt.spawn_agent(spec, name=f"a{i}") for i in range(10)]
            agents += [await agent.spawn_subagent(spec) for agent in agents]
            async with trio.open_nursery() as nursery:
                for agent in agents:
                    nursery.start_soon(agent.run, "hi")
                await trio.testing.wait_all_tasks_blocked()
                start = trio.current_time()
                scope.cancel()
                await trio.sleep_forever()
        went_on = True  # (never: the cancel reaches this scope)
    assert scope.cancelled_caught and not went_on
    assert trio.current_time() == start  # no shutdown_timeout, no on_stop
    assert log == []
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    assert {ref.statistics().state for ref in [*workers, *agents]} == {"exited"}


async def test_shutdown_timeout_at_the_root(autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    async with agentrio.open_runtime(shutdown_timeout=2.5) as rt:
        stuck = await rt.spawn(Worker, log, trio.Event(), name="stuck")
        fine = await rt.spawn(Worker, log, name="fine")
        stuck.send_nowait(Block())
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
    assert trio.current_time() - start == 2.5
    assert log == ["fine stop"]  # stuck was cancelled: no on_stop
    assert stuck.statistics().state == fine.statistics().state == "exited"


async def test_root_gives_up_with_an_exception_group_naming_actor_and_cause(
    task_tracker: TaskTracker,
) -> None:
    with pytest.RaisesGroup(RestartIntensityExceeded) as info:
        async with agentrio.open_runtime(max_restarts=2, period=10) as rt:
            team = await rt.spawn_supervisor(name="team", max_restarts=10)
            bystander = await team.spawn(Worker, [], trio.Event(), name="bystander")
            bystander.send_nowait(Block())
            ref = await rt.spawn(Worker, [], name="w", restart="permanent")
            for _ in range(2):
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash())
            with pytest.raises(ActorCrashed):
                await ref.ask(Crash())  # the third restart in 10 s: too many
            await trio.sleep_forever()  # the block is cancelled
    (err,) = info.value.exceptions
    assert isinstance(err, RestartIntensityExceeded)
    assert err.child == "w"
    assert isinstance(err.cause, RuntimeError)
    assert err.__cause__ is err.cause
    text = str(err)
    assert "'w'" in text
    assert "RuntimeError('boom')" in text
    assert "more than 2 restarts within 10" in text
    assert rt.closed
    assert bystander.statistics().state == "exited"
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    with pytest.raises(RuntimeClosed):
        await rt.spawn(Worker, [])


async def test_a_failing_subtree_escalates_up_to_the_root(record_events: RecordEvents) -> None:
    with pytest.RaisesGroup(RestartIntensityExceeded) as info:
        async with agentrio.open_runtime(max_restarts=1) as rt:
            events = record_events(rt)
            team = await rt.spawn_supervisor(name="team", max_restarts=0)
            ref = await team.spawn(Worker, [], name="w")
            for _ in range(2):  # each crash fails team; the second is one team restart too many
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash())
                await trio.testing.wait_all_tasks_blocked()
            await trio.sleep_forever()
    (err,) = info.value.exceptions
    assert isinstance(err, RestartIntensityExceeded)
    assert err.child == "team"
    assert isinstance(err.cause, RestartIntensityExceeded)
    assert err.cause.child == "team/w"
    assert "'team'" in str(err)
    assert "'team/w'" in str(err)
    await trio.testing.wait_all_tasks_blocked()  # let the recorder read the last events
    escalated = [e for e in events if isinstance(e, agentrio.SupervisorEscalated)]
    assert [(e.path, e.child) for e in escalated] == [
        ("team", "team/w"),
        ("team", "team/w"),
        ("", "team"),
    ]


async def test_stop_inside_the_block_begins_the_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, name="w")
            ref.send_nowait(Put(n=1))
            await rt.stop()
            assert rt.closed
            with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
                await rt.spawn(Worker, log)
            await trio.testing.wait_all_tasks_blocked()
            assert log == ["w put 1", "w stop"]
            assert ref.statistics().state == "exited"


async def test_cancel_inside_the_block_cancels_every_actor(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, trio.Event(), name="w")
            ref.send_nowait(Block())
            await trio.testing.wait_all_tasks_blocked()
            rt.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
            assert ref.statistics().state == "exited"
            assert log == []
            with pytest.raises(RuntimeClosed):
                await rt.spawn_supervisor()


async def test_spawning_on_a_closed_runtime() -> None:
    async with agentrio.open_runtime() as rt:
        pass
    with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
        await rt.spawn(Worker, [])
    with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
        await rt.spawn_supervisor(name="late")
    with pytest.raises(UnknownName, match="the runtime"):
        rt.lookup("anything")


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"strategy": "x"}, "strategy"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": "3"}, "max_restarts"),
        ({"period": math.nan}, "period"),
        ({"period": -5}, "period"),
        ({"backoff": "fast"}, "backoff"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"shutdown_timeout": "5"}, "shutdown_timeout"),
    ],
)
async def test_open_runtime_rejects_bad_arguments(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        async with agentrio.open_runtime(**kwargs):
            raise AssertionError("should not start")
    assert str(info.value).startswith(argument)


async def test_events_capacity_is_checked() -> None:
    async with agentrio.open_runtime() as rt:
        for bad in (0, -1, "5"):
            with pytest.raises(InvalidArgument, match="capacity"):
                rt.events(capacity=bad)  # type: ignore[arg-type]


async def test_root_strategy_and_backoff(autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    backoff = agentrio.Backoff(initial=2, factor=2, maximum=10)
    async with agentrio.open_runtime(strategy="one_for_all", backoff=backoff) as rt:
        a = await rt.spawn(Worker, log, name="a")
        b = await rt.spawn(Worker, log, name="b")
        await trio.testing.wait_all_tasks_blocked()  # both running before a crashes
        start = trio.current_time()
        with pytest.raises(ActorCrashed):
            await a.ask(Crash())
        assert await b.ask(Put(n=1)) == 1  # b was restarted at once
        assert trio.current_time() == start
        assert await a.ask(Put(n=2)) == 2  # a waits out its backoff
        assert trio.current_time() - start == 2
        assert a.statistics().restarts == b.statistics().restarts == 1


async def test_runtime_statistics() -> None:
    gate = trio.Event()
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        w = await team.spawn(Worker, [], gate, name="w", restart="permanent")
        top = await rt.spawn(Worker, [], name="top", mailbox=3)
        await top.ask(Put(n=1))
        with pytest.raises(ActorCrashed):
            await w.ask(Crash())
        w.send_nowait(Block())
        w.send_nowait(Put(n=1))
        await top.stop()
        with pytest.raises(ActorStopped):
            top.send_nowait(Put(n=2))
        await trio.testing.wait_all_tasks_blocked()
        stats = rt.statistics()
        assert stats == agentrio.SupervisorStatistics(
            path="",
            state="running",
            children=1,  # top has exited
            actors=1,
            supervisors=1,
            messages_handled=0,  # top's count left with it
            restarts=1,
            mailbox_size=1,
            dead_letters=2,  # the crashing message and the one sent to top
        )
        assert top.statistics().messages_handled == 1
        gate.set()
    assert rt.statistics().state == "exited"
    assert rt.statistics().actors == 0
