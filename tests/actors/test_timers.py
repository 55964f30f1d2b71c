"""interrupt_after and Timers: the runtime's one timer task and its heap of alarms (ringing
order, disarm, waking for an earlier deadline, the task's lifetime, the heap's bound, a
closed runtime)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

import agentrio
from agentrio.actors import Alarm, interrupt_after
from agentrio.actors.timers import Timers

if TYPE_CHECKING:
    from conftest import TaskTracker

TASK_NAME = "agentrio timers"


class Job(agentrio.Message):
    name: str
    takes: float  # how long the work sleeps
    limit: float  # its alarm


class Ping(agentrio.Message):
    pass


class Worker(agentrio.Actor[Job]):
    """Gives each job an alarm of ``job.limit`` seconds; a job delivered again timed out."""

    def __init__(
        self, log: list[tuple[str, str, float]], alarms: list[Alarm] | None = None
    ) -> None:
        self.log = log
        self.alarms = alarms if alarms is not None else []
        self.alarm: Alarm | None = None
        self.job: Job | None = None

    async def handle(self, job: Job) -> str:
        if job is self.job:  # delivered again: its alarm interrupted it
            assert self.alarm is not None and self.alarm.rang
            self.job = None
            self.log.append((job.name, "timeout", trio.current_time()))
            return "timeout"
        self.job = job
        alarm = self.alarm = interrupt_after(self.ref, job.limit)
        assert alarm is not None
        self.alarms.append(alarm)
        try:
            await trio.sleep(job.takes)
        finally:
            alarm.disarm()
        self.job = None
        self.log.append((job.name, "done", trio.current_time()))
        return "done"


class Idle(agentrio.Actor[Ping]):
    async def handle(self, msg: Ping) -> None:
        pass


def timers_of(rt: agentrio.Runtime) -> Timers:
    timers = rt._sup.shared.timers
    assert timers is not None
    return timers


def timer_tasks(tracker: TaskTracker) -> list[trio.lowlevel.Task]:
    return [t for t in tracker.spawned if t.name == TASK_NAME]


async def test_alarms_interrupt_in_deadline_order_at_their_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str, float]] = []
    async with agentrio.open_runtime() as rt:
        t0 = trio.current_time()
        workers = [await rt.spawn(Worker, log) for _ in range(3)]
        for worker, (name, limit) in zip(
            workers, [("c", 3.0), ("a", 1.0), ("b", 2.0)], strict=True
        ):
            worker.send_nowait(Job(name, takes=100, limit=limit))
        await trio.sleep(10)
        stats = [w.statistics() for w in workers]
    assert [(name, what) for name, what, _ in log] == [
        ("a", "timeout"),
        ("b", "timeout"),
        ("c", "timeout"),
    ]
    assert [t - t0 for _, _, t in log] == pytest.approx([1.0, 2.0, 3.0])
    # the same incarnations went on, each message counted once
    assert [(s.restarts, s.messages_handled) for s in stats] == [(0, 1)] * 3


async def test_an_alarm_is_armed_until_it_rings(autojump_clock: trio.testing.MockClock) -> None:
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        t0 = trio.current_time()
        alarm = interrupt_after(idle, 5)
        assert alarm is not None
        assert (alarm.deadline, alarm.rang) == (t0 + 5, False)
        await trio.sleep(4.5)
        assert alarm.rang is False
        await trio.sleep(1)
        # It rang; the actor was idle: nothing to interrupt, and nothing happened to it.
        assert alarm.rang is True
        assert alarm.disarm() is False
        stats = idle.statistics()
        assert (stats.state, stats.restarts, stats.messages_handled) == ("running", 0, 0)


async def test_a_disarmed_alarm_never_rings(autojump_clock: trio.testing.MockClock) -> None:
    log: list[tuple[str, str, float]] = []
    alarms: list[Alarm] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log, alarms)
        t0 = trio.current_time()
        assert await worker.ask(Job("quick", takes=1, limit=5)) == "done"
        (alarm,) = alarms
        assert alarm.rang is False
        assert alarm.disarm() is False  # disarmed already: twice is harmless
        await trio.sleep(100)
        assert alarm.rang is False
        assert timers_of(rt)._live == 0
    assert [(name, what, t - t0) for name, what, t in log] == [("quick", "done", 1.0)]


async def test_disarming_after_it_rang_does_not_count_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        first, second = interrupt_after(idle, 1), interrupt_after(idle, 5)
        assert first is not None and second is not None
        await trio.sleep(2)
        assert first.disarm() is False  # it rang: the live count must stay 1
        assert timers_of(rt)._live == 1
        await trio.sleep(10)
        assert (first.rang, second.rang) == (True, True)


async def test_an_earlier_deadline_armed_later_wakes_the_sleeping_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str, float]] = []
    async with agentrio.open_runtime() as rt:
        t0 = trio.current_time()
        far, near = await rt.spawn(Worker, log), await rt.spawn(Worker, log)
        far.send_nowait(Job("far", takes=1000, limit=100))
        await trio.sleep(1)  # the task now sleeps until t0 + 100
        assert timers_of(rt)._sleep is not None
        near.send_nowait(Job("near", takes=1000, limit=2))
        await trio.sleep(200)
    assert [(name, t - t0) for name, _, t in log] == [("near", 3.0), ("far", 100.0)]


async def test_the_timer_task_runs_only_while_something_is_armed(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        timers = timers_of(rt)
        await trio.testing.wait_all_tasks_blocked()
        assert timer_tasks(task_tracker) == []  # none until something is armed
        alarm = interrupt_after(idle, 50)
        assert alarm is not None
        await trio.testing.wait_all_tasks_blocked()
        (first,) = timer_tasks(task_tracker)
        assert task_tracker.alive([first]) == [first]
        alarm.disarm()
        await trio.testing.wait_all_tasks_blocked()
        assert task_tracker.alive([first]) == []
        assert timers._running is False and timers._heap == []
        # The next arm starts a new task, which ends when its alarm rings.
        t0 = trio.current_time()
        alarm = interrupt_after(idle, 7)
        assert alarm is not None
        await trio.testing.wait_all_tasks_blocked()
        assert len(timer_tasks(task_tracker)) == 2
        second = timer_tasks(task_tracker)[1]
        assert task_tracker.alive([second]) == [second]
        await trio.sleep(6.5)
        assert alarm.rang is False
        await trio.sleep(1)
        assert alarm.rang is True and trio.current_time() - t0 == pytest.approx(7.5)
        await trio.testing.wait_all_tasks_blocked()
        assert task_tracker.alive([second]) == []
        assert timers._running is False
    assert len(timer_tasks(task_tracker)) == 2


async def test_rearming_before_the_ending_task_runs_keeps_the_alarm(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The last disarm cancels the sleep, but the task has not run yet when the
    # next arm comes: that arm must not be lost with the ending task.
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        first = interrupt_after(idle, 50)
        assert first is not None
        await trio.testing.wait_all_tasks_blocked()
        first.disarm()
        second = interrupt_after(idle, 5)  # no checkpoint in between
        assert second is not None
        await trio.sleep(10)
        assert (first.rang, second.rang) == (False, True)


@pytest.mark.parametrize("step", [0.0, 0.001], ids=["at-once", "time-passing"])
async def test_arm_disarm_cycles_do_not_grow_the_heap(
    autojump_clock: trio.testing.MockClock, step: float
) -> None:
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        timers = timers_of(rt)
        long_lived = interrupt_after(idle, 1_000_000)
        assert long_lived is not None
        await trio.testing.wait_all_tasks_blocked()
        peak = 0
        for _ in range(5_000):
            alarm = interrupt_after(idle, 100)
            assert alarm is not None
            if step:
                await trio.sleep(step)
            alarm.disarm()
            peak = max(peak, len(timers._heap))
        await trio.testing.wait_all_tasks_blocked()
        # Compaction keeps the heap within 2 * live + 256, live counting the
        # alarm being armed (2): a bound, not 5,001 alarms.
        assert peak <= 2 * 2 + 256
        assert len(timers._heap) <= 2 * 2 + 256
        assert timers._live == 1 and long_lived.disarm() is True


async def test_interrupt_after_returns_none_once_the_runtime_has_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        timers = timers_of(rt)
    assert interrupt_after(idle, 1) is None
    assert timers._heap == [] and timers._live == 0


async def test_an_armed_alarm_does_not_keep_the_runtime_open(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    async with agentrio.open_runtime() as rt:
        t0 = trio.current_time()
        idle = await rt.spawn(Idle)
        alarm = interrupt_after(idle, 1_000)
        await trio.testing.wait_all_tasks_blocked()
    # The root's nursery cancels the timer task as the runtime closes.
    assert trio.current_time() - t0 < 1
    assert alarm is not None and alarm.rang is False
    assert task_tracker.alive(timer_tasks(task_tracker)) == []


@pytest.mark.parametrize("seconds", [-1, float("nan"), "5", None, True])
async def test_interrupt_after_checks_its_seconds(seconds: object) -> None:
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Idle)
        with pytest.raises(agentrio.InvalidArgument, match="seconds"):
            interrupt_after(idle, seconds)  # type: ignore[arg-type]
