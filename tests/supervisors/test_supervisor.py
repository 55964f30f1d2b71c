"""Supervisors: restart policies, strategies, restart intensity and backoff in action,
escalation, subtree cancellation, stopping."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from test_restart import intensity_model

import agentrio
from agentrio import (
    ActorCrashed,
    ActorStopped,
    Backoff,
)
from agentrio.errors import RuntimeClosed, UnknownName
from agentrio.events import (
    ActorExited,
    ActorFailed,
    ActorRestarted,
    ActorStarted,
    DeadLetter,
    SupervisorEscalated,
)
from agentrio.testing import FunctionModel, Reply

if TYPE_CHECKING:
    from conftest import TaskTracker

RecordEvents = Callable[..., list[agentrio.events.Event]]


# Virtual seconds (MockClock): a test that deadlocks jumps here and fails at once.
DEADLINE = 1000


class Put(agentrio.Message):
    n: int


class Gen(agentrio.Message):
    pass


class Crash(agentrio.Message):
    text: str = "boom"


class Block(agentrio.Message):
    pass


class StopSelf(agentrio.Message):
    pass


class Worker(agentrio.Actor[agentrio.Message]):
    """Each incarnation appends to *births* and knows its generation number."""

    def __init__(
        self, births: list[int], gate: trio.Event | None = None, log: list[str] | None = None
    ) -> None:
        births.append(len(births) + 1)
        self.gen = len(births)
        self.gate = gate
        self.log = log if log is not None else []

    async def on_start(self) -> None:
        self.log.append(f"start {self.gen}")

    async def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Put):
            self.log.append(f"put {msg.n} by {self.gen}")
            return (self.gen, msg.n)
        if isinstance(msg, Gen):
            return self.gen
        if isinstance(msg, Crash):
            raise RuntimeError(msg.text)
        if isinstance(msg, Block):
            assert self.gate is not None
            try:
                await self.gate.wait()
            except trio.Cancelled:
                self.log.append(f"cancelled {self.gen}")
                raise
            return "unblocked"
        if isinstance(msg, StopSelf):
            await self.ref.stop()
            return "stopping"
        raise AssertionError(msg)

    async def on_stop(self) -> None:
        self.log.append(f"stop {self.gen}")


async def _crash(ref: agentrio.ActorRef, text: str = "boom") -> None:
    with pytest.raises(ActorCrashed) as info:
        await ref.ask(Crash(text=text))
    assert str(info.value.cause) == text


def _of(events: list[agentrio.events.Event], *types: type) -> list[agentrio.events.Event]:
    return [e for e in events if isinstance(e, types)]


@settings(max_examples=50, deadline=None)
@given(
    max_restarts=st.integers(min_value=0, max_value=4),
    period=st.integers(min_value=1, max_value=16).map(lambda n: n / 2),
    gaps=st.lists(st.integers(min_value=0, max_value=16).map(lambda n: n / 4), max_size=15),
)
def test_supervisor_fails_exactly_when_the_model_says(
    max_restarts: int, period: float, gaps: list[float]
) -> None:
    times = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    verdicts = intensity_model(times, max_restarts, period)
    fails_at = verdicts.index(False) if False in verdicts else None

    async def main() -> None:
        async with agentrio.open_runtime() as rt:
            escalations: list[agentrio.events.Event] = []
            stream = rt.events()
            sup = await rt.spawn_supervisor(
                name="s", max_restarts=max_restarts, period=period, restart="temporary"
            )
            ref = await sup.spawn(Worker, [], name="w", restart="permanent")
            for i, t in enumerate(times):
                await trio.sleep_until(t)
                await _crash(ref)
                await trio.testing.wait_all_tasks_blocked()
                assert trio.current_time() == t
                failed = sup.statistics().state == "exited"
                assert failed == (i == fails_at), (i, t, fails_at)
                if failed:
                    with pytest.raises(UnknownName):
                        rt.lookup_supervisor("s")
                    break
                assert await ref.ask(Gen()) == i + 2  # restarted: a new incarnation
            await stream.__aexit__(None, None, None)
            escalations = [e async for e in stream if isinstance(e, SupervisorEscalated)]
        expected = [] if fails_at is None else [SupervisorEscalated("s", child="s/w", error="boom")]
        assert escalations == expected

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- restart policies -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "how", "restarted", "on_stops"),
    [
        # on_stop runs after graceful stops only: a self-stop, a stop, the final shutdown.
        ("permanent", "crash", True, 1),
        ("transient", "crash", True, 1),
        ("temporary", "crash", False, 0),
        ("permanent", "self_stop", True, 2),
        ("transient", "self_stop", False, 1),
        ("temporary", "self_stop", False, 1),
        ("permanent", "stop", False, 1),
        ("transient", "stop", False, 1),
        ("temporary", "stop", False, 1),
        ("permanent", "cancel", False, 0),
        ("transient", "cancel", False, 0),
        ("temporary", "cancel", False, 0),
    ],
)
async def test_restart_policies(
    policy: str, how: str, restarted: bool, on_stops: int, record_events: RecordEvents
) -> None:
    births: list[int] = []
    log: list[str] = []
    async with agentrio.open_runtime(max_restarts=5) as rt:
        events = record_events(rt)
        ref = await rt.spawn(Worker, births, None, log, name="w", restart=policy)  # type: ignore[arg-type]
        assert await ref.ask(Gen()) == 1
        if how == "crash":
            await _crash(ref)
        elif how == "self_stop":
            assert await ref.ask(StopSelf()) == "stopping"
        elif how == "stop":
            await ref.stop()
        else:
            ref.cancel()
        await trio.testing.wait_all_tasks_blocked()
        if restarted:
            assert await ref.ask(Gen()) == 2
            assert ref.statistics().restarts == 1
            assert ref.statistics().state == "running"
            assert rt.lookup("w") is ref
            assert ActorRestarted(path="w", restarts=1, delay=0.0) in events
        else:
            reason = {"crash": "crashed", "cancel": "cancelled"}.get(how, "stopped")
            with pytest.raises(ActorStopped) as info:
                await ref.ask(Gen())
            assert info.value.reason == reason
            assert births == [1]
            assert ref.statistics().state == "exited"
            with pytest.raises(UnknownName):
                rt.lookup("w")
            assert ActorExited(path="w", reason=reason) in events  # type: ignore[arg-type]
            assert not _of(events, ActorRestarted)
    assert sum(1 for line in log if line.startswith("stop")) == on_stops


async def test_restart_keeps_the_mailbox_and_dead_letters_the_crashing_message(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        births: list[int] = []
        gate = trio.Event()
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            ref = await rt.spawn(Worker, births, gate, name="w", restart="transient")
            ref.send_nowait(Block())
            await trio.testing.wait_all_tasks_blocked()
            results: dict[str, object] = {}

            async def ask(key: str, msg: agentrio.Message) -> None:
                try:
                    results[key] = await ref.ask(msg)
                except ActorCrashed as exc:
                    results[key] = exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, "crash", Crash(text="bad input"))
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(ask, "after", Put(n=1))
                await trio.testing.wait_all_tasks_blocked()
                ref.send_nowait(Put(n=2))
                assert ref.statistics().mailbox_size == 3
                gate.set()
            crashed = results["crash"]
            assert isinstance(crashed, ActorCrashed)
            assert isinstance(crashed.cause, RuntimeError)
            assert str(crashed.cause) == "bad input"
            # Queued behind the crashing message: handled by the new incarnation.
            assert results["after"] == (2, 1)
            assert await ref.ask(Put(n=3)) == (2, 3)
            assert births == [1, 2]
            await trio.testing.wait_all_tasks_blocked()
            assert (
                DeadLetter(
                    path="w",
                    reason="crashed_on",
                    message_type="Crash",
                    message="Crash(text='bad input')",
                )
                in events
            )
            assert rt.statistics().dead_letters == 1
            lifecycle = [e for e in events if e.path == "w" and not isinstance(e, DeadLetter)]
            assert lifecycle == [
                ActorStarted(path="w", restarts=0),
                ActorFailed(path="w", error_type="RuntimeError", error="bad input"),
                ActorRestarted(path="w", restarts=1, delay=0.0),
                ActorStarted(path="w", restarts=1),
            ]


async def test_crash_in_on_start_is_a_crash() -> None:
    attempts: list[float] = []

    class BadStart(agentrio.Actor[Gen]):
        async def on_start(self) -> None:
            attempts.append(trio.current_time())
            raise ValueError("no start")

        async def handle(self, msg: Gen) -> object:
            raise AssertionError("never started")

    with pytest.RaisesGroup(agentrio.errors.RestartIntensityExceeded):
        async with agentrio.open_runtime(max_restarts=2) as rt:
            await rt.spawn(BadStart, name="bad", restart="permanent")
            await trio.sleep_forever()
    assert len(attempts) == 3


async def test_backoff_delays(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    starts: list[float] = []

    class Timed(Worker):
        async def on_start(self) -> None:
            starts.append(trio.current_time())

    backoff = Backoff(initial=1, factor=2, maximum=5)
    async with agentrio.open_runtime(max_restarts=100, period=1000, backoff=backoff) as rt:
        events = record_events(rt)
        ref = await rt.spawn(Timed, [], name="w", restart="permanent")
        for _ in range(5):
            ref.send_nowait(Crash())  # five crashes in a row: nothing handled between
        assert await ref.ask(Gen()) == 6
        assert starts == [0, 1, 3, 7, 12, 17]
        assert [e.delay for e in _of(events, ActorRestarted)] == [1, 2, 4, 5, 5]  # type: ignore[attr-defined]
        # A crash after a message was handled starts a new run: back to `initial`.
        t0 = trio.current_time()
        await _crash(ref)
        assert await ref.ask(Gen()) == 7
        assert starts[-1] - t0 == 1


async def test_an_actor_that_raises_never_takes_down_its_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        log: list[str] = []
        async with agentrio.open_runtime(max_restarts=10) as rt:
            sup = await rt.spawn_supervisor(name="team", strategy="one_for_one", max_restarts=10)
            steady_births: list[int] = []
            steady = await sup.spawn(Worker, steady_births, gate, log, name="steady")
            crasher = await sup.spawn(Worker, [], name="crasher", restart="permanent")
            async with trio.open_nursery() as nursery:
                replies: list[object] = []

                async def wait_for_block() -> None:
                    replies.append(await steady.ask(Block()))

                nursery.start_soon(wait_for_block)
                await trio.testing.wait_all_tasks_blocked()
                for _ in range(5):
                    await _crash(crasher)
                await trio.testing.wait_all_tasks_blocked()
                assert replies == []
                gate.set()
            assert replies == ["unblocked"]  # the same handle() call ran to the end
            assert steady_births == [1]
            assert "cancelled 1" not in log
            assert steady.statistics().restarts == 0
            assert crasher.statistics().restarts == 5


# -- one_for_all ----------------------------------------------------------------------


async def test_one_for_all_restarts_siblings_and_cancels_temporary_ones(
    autojump_clock: trio.testing.MockClock,
    record_events: RecordEvents,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        log: list[str] = []
        births = {name: [] for name in ("a", "b", "t", "c")}  # type: ignore[var-annotated]
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            sup = await rt.spawn_supervisor(name="s", strategy="one_for_all", max_restarts=5)
            a = await sup.spawn(Worker, births["a"], gate, log, name="a", restart="permanent")
            b = await sup.spawn(Worker, births["b"], None, None, name="b", restart="transient")
            t = await sup.spawn(Worker, births["t"], None, None, name="t", restart="temporary")
            c = await sup.spawn(Worker, births["c"], None, None, name="c", restart="transient")
            outcome: list[BaseException] = []

            async def ask_blocked() -> None:
                try:
                    await a.ask(Block())
                except ActorStopped as exc:
                    outcome.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask_blocked)
                await trio.testing.wait_all_tasks_blocked()
                a.send_nowait(Put(n=1))  # queued behind the Block a is handling
                await _crash(c)
            # a's interrupted ask is settled (it would otherwise wait forever) ...
            (err,) = outcome
            assert isinstance(err, ActorStopped)
            assert err.reason == "cancelled"
            await trio.testing.wait_all_tasks_blocked()
            assert log[:3] == ["start 1", "cancelled 1", "start 2"]
            # ... and the queued message is handled by a's new incarnation.
            assert "put 1 by 2" in log
            for ref, gen in ((a, 2), (b, 2), (c, 2)):
                assert await ref.ask(Gen()) == gen
                assert ref.statistics().restarts == 1
            assert births["t"] == [1]
            with pytest.raises(ActorStopped) as info:
                await t.ask(Gen())
            assert info.value.reason == "cancelled"
            assert ActorExited(path="s/t", reason="cancelled") in events
            assert {e.path for e in _of(events, ActorRestarted)} == {"s/a", "s/b", "s/c"}
            assert (
                DeadLetter(path="s/a", reason="cancelled", message_type="Block", message="Block()")
                in events
            )


async def test_one_for_all_restarts_a_sibling_supervisor_with_its_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        async with agentrio.open_runtime() as rt:
            sup = await rt.spawn_supervisor(name="s", strategy="one_for_all")
            inner = await sup.spawn_supervisor(name="inner")
            births: list[int] = []
            leaf = await inner.spawn(Worker, births, name="leaf")
            crasher = await sup.spawn(Worker, [], name="crasher")
            assert await leaf.ask(Gen()) == 1
            await _crash(crasher)
            assert await leaf.ask(Gen()) == 2
            assert rt.lookup("s/inner/leaf") is leaf
            assert inner.statistics().restarts == 1  # the leaf's restart, seen from inner


# -- escalation ---------------------------------------------------------------------------


async def test_a_failing_supervisor_is_restarted_by_its_parent(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        log: list[str] = []
        async with agentrio.open_runtime(max_restarts=5) as rt:
            events = record_events(rt)
            team = await rt.spawn_supervisor(name="team", max_restarts=1, period=10)
            w_births: list[int] = []
            steady_births: list[int] = []
            w = await team.spawn(Worker, w_births, name="w", restart="permanent")
            steady = await team.spawn(Worker, steady_births, gate, log, name="steady")
            asked: list[BaseException] = []

            async def ask_steady() -> None:
                try:
                    await steady.ask(Block())
                except ActorStopped as exc:
                    asked.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask_steady)
                await trio.testing.wait_all_tasks_blocked()
                steady.send_nowait(Put(n=7))  # waits in steady's mailbox through the failure
                await _crash(w)  # restart 1: within the intensity
                await _crash(w, "again")  # restart 2: over it, the supervisor fails
            await trio.testing.wait_all_tasks_blocked()
            # The supervisor cancelled its children and was restarted by the root ...
            assert [e.reason for e in asked] == ["cancelled"]  # type: ignore[attr-defined]
            assert "cancelled 1" in log
            assert rt.lookup_supervisor("team") is team
            assert team.statistics().state == "running"
            assert rt.statistics().restarts >= 1
            # ... and its children came back, behind the same refs, with their mailboxes.
            assert await w.ask(Gen()) == 3
            assert await steady.ask(Gen()) == 2
            assert "put 7 by 2" in log
            assert rt.lookup("team/w") is w
            assert steady.statistics().restarts == 1
            assert SupervisorEscalated(path="team", child="team/w", error="again") in events
            failed = [e for e in _of(events, ActorFailed) if e.path == "team"]
            assert len(failed) == 1
            assert failed[0].error_type == "RestartIntensityExceeded"  # type: ignore[attr-defined]
            assert "'team/w'" in failed[0].error  # type: ignore[attr-defined]
            assert ActorRestarted(path="team", restarts=1, delay=0.0) in events
            # The restarted supervisor starts with a fresh restart intensity: one
            # more crash is within max_restarts=1 again.
            await _crash(w, "third")
            await trio.testing.wait_all_tasks_blocked()
            assert await w.ask(Gen()) == 4
            assert len(_of(events, SupervisorEscalated)) == 1


async def test_a_temporary_supervisor_that_fails_ends_with_its_children(
    record_events: RecordEvents,
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team", max_restarts=0, restart="temporary")
        w = await team.spawn(Worker, [], name="w")
        other = await team.spawn(Worker, [], name="other")
        await _crash(w)
        await trio.testing.wait_all_tasks_blocked()
        assert team.statistics().state == "exited"
        for ref in (w, other):
            with pytest.raises(ActorStopped):
                await ref.ask(Gen())
        with pytest.raises(RuntimeClosed, match="'team'"):
            await team.spawn(Worker, [])
        assert ActorExited(path="team", reason="crashed") in events
        assert {e.path for e in _of(events, ActorExited)} == {"team", "team/w", "team/other"}
        assert rt.statistics().supervisors == 0


# -- cancelling a subtree ----------------------------------------------------------------------


class Pusher(agentrio.Actor[Put]):
    """Sends to *target* until it blocks on the full mailbox."""

    def __init__(self, target: agentrio.ActorRef) -> None:
        self.target = target

    async def handle(self, msg: Put) -> object:
        for n in range(msg.n):
            await self.target.send(Put(n=n))
        return "all sent"


class Asker(agentrio.Actor[Gen]):
    def __init__(self, target: agentrio.ActorRef) -> None:
        self.target = target

    async def handle(self, msg: Gen) -> object:
        return await self.target.ask(Block())


class Spawner(agentrio.Actor[Gen]):
    """Runs helper tasks of its own inside handle()."""

    async def handle(self, msg: Gen) -> object:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(trio.sleep_forever)
        return "never"


async def test_cancelling_a_supervisor_leaves_nothing_running(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker, record_events: RecordEvents
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        never = trio.Event()
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            outsider = await rt.spawn(Worker, [], name="outsider")
            # Outside the subtree: one that never answers, one whose mailbox stays full.
            far_silent = await rt.spawn(Worker, [], never, name="far_silent")
            far_full = await rt.spawn(Worker, [], never, name="far_full", mailbox=1)
            team = await rt.spawn_supervisor(name="team")
            stuck = await team.spawn(Worker, [], never, name="stuck", mailbox=1)
            pusher = await team.spawn(Pusher, stuck, name="pusher")
            silent = await team.spawn(Worker, [], never, name="silent")
            asker = await team.spawn(Asker, silent, name="asker")
            inner = await team.spawn_supervisor(name="inner")
            spawner = await inner.spawn(Spawner, name="spawner")
            far_asker = await team.spawn(Asker, far_silent, name="far_asker")
            far_pusher = await team.spawn(Pusher, far_full, name="far_pusher")
            stuck.send_nowait(Block())  # stuck waits forever ...
            far_full.send_nowait(Block())
            await trio.testing.wait_all_tasks_blocked()
            stuck.send_nowait(Put(n=-1))  # ... with a full mailbox
            far_full.send_nowait(Put(n=-1))
            far_asker.send_nowait(Gen())  # asks outside the subtree, never answered
            far_pusher.send_nowait(Put(n=5))  # blocked sending outside the subtree
            pusher.send_nowait(Put(n=5))  # blocked in send
            asker.send_nowait(Gen())  # blocked in an ask that never gets answered
            spawner.send_nowait(Gen())  # blocked in its own nursery
            outside: list[str] = []

            async def outside_sender() -> None:
                try:
                    await stuck.send(Put(n=100))
                except ActorStopped as exc:
                    outside.append(exc.reason)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(outside_sender)
                await trio.testing.wait_all_tasks_blocked()
                assert pusher.statistics().messages_handled == 0
                assert stuck.statistics().mailbox_size == 1
                team_task = task_tracker.named("team")
                subtree = task_tracker.descendants(team_task)
                # stuck, pusher, silent, asker, far_asker, far_pusher, inner,
                # spawner and its three helpers
                assert len(task_tracker.alive(subtree)) == 11
                team.cancel()
            assert outside == ["cancelled"]
            await trio.testing.wait_all_tasks_blocked()
            assert team_task in task_tracker.exited
            assert task_tracker.alive_at_exit[team_task] == []
            assert task_tracker.alive(task_tracker.descendants(team_task)) == []
            for ref in (stuck, pusher, silent, asker, spawner, far_asker, far_pusher):
                assert ref.statistics().state == "exited"
            # The actors outside were only talked to: they are untouched.
            assert far_silent.statistics().state == far_full.statistics().state == "running"
            assert far_full.statistics().mailbox_size == 1
            with pytest.raises(UnknownName):
                rt.lookup_supervisor("team")
            exited = {e.path: e.reason for e in _of(events, ActorExited)}  # type: ignore[attr-defined]
            assert exited == {
                path: "cancelled"
                for path in (
                    "team",
                    "team/stuck",
                    "team/pusher",
                    "team/silent",
                    "team/asker",
                    "team/inner",
                    "team/inner/spawner",
                    "team/far_asker",
                    "team/far_pusher",
                )
            }
            # Only the subtree: the actor beside it still works.
            assert await outsider.ask(Gen()) == 1


async def test_cancelling_a_nested_supervisor_spares_its_parent(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        never = trio.Event()
        async with agentrio.open_runtime() as rt:
            team = await rt.spawn_supervisor(name="team")
            keeper = await team.spawn(Worker, [], name="keeper")
            inner = await team.spawn_supervisor(name="inner")
            a = await inner.spawn(Worker, [], never, name="a")
            a.send_nowait(Block())
            await trio.testing.wait_all_tasks_blocked()
            inner_task = task_tracker.named("team/inner")
            assert len(task_tracker.alive(task_tracker.descendants(inner_task))) == 1
            inner.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert task_tracker.alive_at_exit[inner_task] == []
            assert a.statistics().state == "exited"
            assert await keeper.ask(Gen()) == 1
            assert [c.name for c in team.children()] == ["keeper"]


# -- stopping a supervisor ----------------------------------------------------------------


async def test_stop_stops_children_last_spawned_first_and_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []

        class Named(agentrio.Actor[Gen]):
            def __init__(self, name: str) -> None:
                self.name = name

            async def handle(self, msg: Gen) -> object:
                await trio.sleep(0)
                return self.name

            async def on_stop(self) -> None:
                await trio.sleep(0)
                log.append(self.name)

        async with agentrio.open_runtime() as rt:
            team = await rt.spawn_supervisor(name="team")
            refs = [await team.spawn(Named, n, name=n) for n in ("one", "two", "three")]
            for ref in refs:
                ref.send_nowait(Gen())
            await team.stop()
            assert log == ["three", "two", "one"]
            assert team.statistics().state == "exited"
            assert [ref.statistics().messages_handled for ref in refs] == [1, 1, 1]
            with pytest.raises(RuntimeClosed, match="'team' has stopped"):
                await team.spawn(Named, "four")
            with pytest.raises(RuntimeClosed):
                await team.spawn_supervisor()
            with pytest.raises(UnknownName):
                rt.lookup("team/one")
            await team.stop()  # again: nothing to do


async def test_idle_children_stop_at_once_in_the_same_order(
    record_events: RecordEvents, task_tracker: TaskTracker
) -> None:
    # Idle actors with no on_stop are finalized by the supervisor itself (no
    # trip through the scheduler each); the order and the events stay those
    # of a one-at-a-time stop, and none of their tasks outlives the runtime.
    seen: list[tuple[str, str, str]] = []

    class Idle(agentrio.Actor[Gen]):
        async def handle(self, msg: Gen) -> object:
            return None

    class Watcher(agentrio.Actor[Gen]):
        def __init__(self, before: list[agentrio.ActorRef]) -> None:
            self.before = before

        async def handle(self, msg: Gen) -> object:
            return None

        async def on_stop(self) -> None:
            after = self.before[2]
            seen.append(
                (
                    self.before[0].statistics().state,
                    self.before[1].statistics().state,
                    after.statistics().state,
                )
            )

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        refs = [await rt.spawn(Idle, name=f"early{i}") for i in range(2)]
        await rt.spawn(Watcher, refs, name="watcher")
        late = await rt.spawn(Idle, name="late")
        refs.append(late)
        busy = await rt.spawn(Idle, name="busy", mailbox=10)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):
            busy.send_nowait(Gen())  # queued: busy is not idle, it drains first
        root_task = trio.lowlevel.current_task()
    assert seen == [("running", "running", "exited")]
    assert late.statistics().state == "exited"
    assert busy.statistics().messages_handled == 3
    await trio.testing.wait_all_tasks_blocked()
    exits = [e.path for e in _of(events, ActorExited)]  # type: ignore[attr-defined]
    assert exits == ["busy", "late", "watcher", "early1", "early0"]
    actors = [t for t in task_tracker.descendants(root_task) if "collect" not in t.name]
    assert len(actors) >= 5 and task_tracker.alive(actors) == []


async def test_stop_cancels_children_after_shutdown_timeout(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    never = trio.Event()
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team", shutdown_timeout=3)
        early = await team.spawn(Worker, [], None, log, name="early")
        stuck = await team.spawn(Worker, [], never, log, name="stuck")
        quick = await team.spawn(Worker, [], None, log, name="quick")
        stuck.send_nowait(Block())
        await trio.testing.wait_all_tasks_blocked()
        log.clear()
        start = trio.current_time()
        await team.stop()
        assert trio.current_time() - start == 3
        for ref in (early, stuck, quick):
            assert ref.statistics().state == "exited"
        # quick stopped gracefully; stuck held up early, which was spawned
        # before it, until the deadline; then both were cancelled.
        assert sorted(log) == ["cancelled 1", "stop 1"]
        await trio.testing.wait_all_tasks_blocked()
        exits = {e.path: e.reason for e in _of(events, ActorExited)}  # type: ignore[attr-defined]
        assert exits == {
            "team/quick": "stopped",
            "team/stuck": "cancelled",
            "team/early": "cancelled",
            "team": "stopped",
        }


async def test_permanent_actor_is_not_restarted_while_its_supervisor_stops() -> None:
    births: list[int] = []
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        await team.spawn(Worker, births, name="w", restart="permanent")
        await team.stop()
    assert births == [1]


class StuckOnStop(agentrio.Actor[Gen]):
    """Handles nothing and never finishes its on_stop."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def handle(self, msg: Gen) -> object:
        return None

    async def on_stop(self) -> None:
        self.log.append(self.name)
        await trio.sleep_forever()


async def test_shutdown_timeout_is_one_deadline_for_the_whole_supervisor(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    # Per child, in turn, 1,000 stuck children would take 1,000 timeouts.
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team", shutdown_timeout=5)
        names = [f"s{i}" for i in range(1000)]
        refs = [await team.spawn(StuckOnStop, name, log, name=name) for name in names]
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        await team.stop()
        assert trio.current_time() - start <= 1.5 * 5
        assert all(ref.statistics().state == "exited" for ref in refs)
        await trio.testing.wait_all_tasks_blocked()
    # The last spawned was asked to stop and held up the others, as in turn it
    # must: at the deadline it and all those not yet asked were cancelled.
    assert log == ["s999"]
    exits = [(e.path, e.reason) for e in _of(events, ActorExited)]  # type: ignore[attr-defined]
    assert exits[-1] == ("team", "stopped")
    assert sorted(exits[:-1]) == sorted((f"team/{name}", "cancelled") for name in names)


async def test_a_nested_supervisor_stops_within_its_own_timeout_and_its_parents_deadline(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    never = trio.Event()
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team", shutdown_timeout=4)
        await team.spawn(Worker, [], None, log, name="first")
        slow = await team.spawn_supervisor(name="slow", shutdown_timeout=100)
        fast = await team.spawn_supervisor(name="fast", shutdown_timeout=1)
        for sup in (slow, fast):
            stuck = await sup.spawn(Worker, [], never, log, name="stuck")
            stuck.send_nowait(Block())
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        await team.stop()
        # fast cancels its stuck child after its own 1 s; slow would wait 100 s,
        # but team's deadline (4 s from its stop) cancels it and its subtree.
        assert trio.current_time() - start == 4
        await trio.testing.wait_all_tasks_blocked()
    exits = [(e.path, e.reason) for e in _of(events, ActorExited)]  # type: ignore[attr-defined]
    assert exits[:2] == [("team/fast/stuck", "cancelled"), ("team/fast", "stopped")]
    assert sorted(exits[2:-1]) == [
        ("team/first", "cancelled"),
        ("team/slow", "cancelled"),
        ("team/slow/stuck", "cancelled"),
    ]
    assert exits[-1] == ("team", "stopped")
    assert "stop 1" not in log  # first was spawned before slow: no graceful stop


async def test_at_the_deadline_an_owner_still_exits_before_what_it_owns(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    async def model(messages: list[agentrio.ChatMessage], tools: object) -> Reply:
        if messages[-1].content == "wait":
            await trio.sleep_forever()
        return Reply(text="ok")

    spec = agentrio.AgentSpec(name="boss", model=FunctionModel(model))
    failed: list[str] = []

    async def run_stuck(agent: agentrio.AgentRef) -> None:
        with pytest.raises(ActorStopped) as info:
            await agent.run("wait")
        failed.append(info.value.reason)

    async with trio.open_nursery() as nursery:
        async with agentrio.open_runtime(shutdown_timeout=2) as rt:
            events = record_events(rt)
            boss = await rt.spawn_agent(spec, name="boss")
            sub = await boss.spawn_subagent(spec, name="sub")
            await trio.testing.wait_all_tasks_blocked()
            for agent in (boss, sub):
                await agent.run("hello")  # each gets a context actor
                nursery.start_soon(run_stuck, agent)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
        assert trio.current_time() - start == 2
    assert failed == ["cancelled", "cancelled"]
    await trio.testing.wait_all_tasks_blocked()
    started = [e.path for e in _of(events, ActorStarted)]  # type: ignore[attr-defined]
    assert sorted(started[:2]) == sorted([boss.path, sub.path])
    boss_context, sub_context = started[2:]  # (made by each one's first phase, in turn)
    exits = [(e.path, e.reason) for e in _of(events, ActorExited)]  # type: ignore[attr-defined]
    assert sorted(exits) == sorted(
        (path, "cancelled") for path in (boss.path, sub.path, boss_context, sub_context)
    )
    order = [path for path, _ in exits]
    assert order.index(boss.path) < order.index(boss_context)
    assert order.index(boss.path) < order.index(sub.path) < order.index(sub_context)


async def test_restarts_and_escalations_are_logged_without_the_error_text(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrio.supervisors.supervisor")
    backoff = Backoff(initial=2, factor=2, maximum=5)
    async with agentrio.open_runtime(max_restarts=5, backoff=backoff) as rt:
        team = await rt.spawn_supervisor(
            name="team", max_restarts=1, period=10, strategy="one_for_all"
        )
        w = await team.spawn(Worker, [], name="w", restart="permanent")
        await _crash(w, "secret text 1")  # restart 1: within the intensity
        await _crash(w, "secret text 2")  # over it: the team escalates, the root restarts it
        await trio.testing.wait_all_tasks_blocked()
        once = await rt.spawn(Worker, [], name="once", restart="temporary")
        await _crash(once, "secret text 3")
        await trio.testing.wait_all_tasks_blocked()
    records = [r for r in caplog.records if r.name == "agentrio.supervisors.supervisor"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (
            logging.WARNING,
            "child 'team/w' crashed (RuntimeError); restart 1 with all its siblings "
            "(one_for_all) in 0 s",
        ),
        (
            logging.WARNING,
            "supervisor 'team' escalates: more than 1 restarts within 10 s "
            "(the last: 'team/w', RuntimeError)",
        ),
        (logging.WARNING, "child 'team' crashed (RestartIntensityExceeded); restart 1 in 2 s"),
        (logging.WARNING, "child 'once' crashed (RuntimeError); it is temporary: not restarted"),
    ]
    assert "secret" not in caplog.text
