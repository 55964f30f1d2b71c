"""Timers: the runtime's one timer task and its heap of deadlines (expiry order, disarm,
waking for an earlier deadline, the task's lifetime, the heap's bound, a closed runtime)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

import agentrio
from agentrio.core.timers import Timers

if TYPE_CHECKING:
    from conftest import TaskTracker

TASK_NAME = "agentrio timers"


class Entry:
    """Something to time: it logs (name, virtual time) when it expires."""

    def __init__(self, name: str, log: list[tuple[str, float]]) -> None:
        self.name = name
        self.log = log
        self.armed = False

    def expire(self) -> None:
        self.log.append((self.name, trio.current_time()))


def timers_of(rt: agentrio.Runtime) -> Timers:
    timers = rt._sup.shared.timers
    assert timers is not None
    return timers


def timer_tasks(tracker: TaskTracker) -> list[trio.lowlevel.Task]:
    return [t for t in tracker.spawned if t.name == TASK_NAME]


async def test_entries_expire_in_deadline_order_at_their_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        t0 = trio.current_time()
        for name, seconds in [("c", 3.0), ("a", 1.0), ("b", 2.0)]:
            assert timers.arm(Entry(name, log), seconds) is True
        await trio.sleep(10)
    assert [name for name, _ in log] == ["a", "b", "c"]
    assert [t - t0 for _, t in log] == pytest.approx([1.0, 2.0, 3.0])


async def test_arm_marks_the_entry_and_expiry_unmarks_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        entry = Entry("a", log)
        timers.arm(entry, 5)
        assert entry.armed is True
        await trio.sleep(4.5)
        assert log == [] and entry.armed is True
        await trio.sleep(1)
        assert [name for name, _ in log] == ["a"]
        assert entry.armed is False


async def test_a_disarmed_entry_never_expires(autojump_clock: trio.testing.MockClock) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        t0 = trio.current_time()
        early, kept, late = Entry("early", log), Entry("kept", log), Entry("late", log)
        timers.arm(early, 1)
        timers.arm(kept, 2)
        timers.arm(late, 3)
        timers.disarm(early)
        await trio.sleep(2.5)
        timers.disarm(late)
        timers.disarm(late)  # twice is harmless
        await trio.sleep(100)
        assert (early.armed, kept.armed, late.armed) == (False, False, False)
    assert [name for name, _ in log] == ["kept"]
    assert [t - t0 for _, t in log] == pytest.approx([2.0])


async def test_disarming_after_expiry_does_nothing(autojump_clock: trio.testing.MockClock) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        first, second = Entry("first", log), Entry("second", log)
        timers.arm(first, 1)
        timers.arm(second, 5)
        await trio.sleep(2)
        timers.disarm(first)  # already expired: must not count the live entries down
        await trio.sleep(10)
    assert [name for name, _ in log] == ["first", "second"]


async def test_an_earlier_deadline_armed_later_wakes_the_sleeping_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        t0 = trio.current_time()
        timers.arm(Entry("far", log), 100)
        await trio.sleep(1)  # the task now sleeps until t0 + 100
        assert timers._sleep is not None
        timers.arm(Entry("near", log), 2)
        await trio.sleep(200)
    assert [name for name, _ in log] == ["near", "far"]
    assert [t - t0 for _, t in log] == pytest.approx([3.0, 100.0])


async def test_the_timer_task_runs_only_while_something_is_armed(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        await trio.testing.wait_all_tasks_blocked()
        assert timer_tasks(task_tracker) == []  # none until something is armed
        entry = Entry("a", log)
        timers.arm(entry, 50)
        await trio.testing.wait_all_tasks_blocked()
        (first,) = timer_tasks(task_tracker)
        assert task_tracker.alive([first]) == [first]
        timers.disarm(entry)
        await trio.testing.wait_all_tasks_blocked()
        assert task_tracker.alive([first]) == []
        assert timers._running is False and timers._heap == []
        # The next arm starts a new task, which ends when its entry expires.
        t0 = trio.current_time()
        timers.arm(entry, 7)
        await trio.testing.wait_all_tasks_blocked()
        assert len(timer_tasks(task_tracker)) == 2
        second = timer_tasks(task_tracker)[1]
        assert task_tracker.alive([second]) == [second]
        await trio.sleep(10)
        assert [name for name, _ in log] == ["a"]
        assert [t - t0 for _, t in log] == pytest.approx([7.0])
        await trio.testing.wait_all_tasks_blocked()
        assert task_tracker.alive([second]) == []
        assert timers._running is False
    assert len(timer_tasks(task_tracker)) == 2


async def test_rearming_before_the_ending_task_runs_keeps_the_entry_timed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The last disarm cancels the sleep, but the task has not run yet when the
    # next arm comes: that arm must not be lost with the ending task.
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        t0 = trio.current_time()
        first = Entry("first", log)
        timers.arm(first, 50)
        await trio.testing.wait_all_tasks_blocked()
        timers.disarm(first)
        second = Entry("second", log)
        timers.arm(second, 5)  # no checkpoint in between
        await trio.sleep(10)
    assert [name for name, _ in log] == ["second"]
    assert [t - t0 for _, t in log] == pytest.approx([5.0])


@pytest.mark.parametrize("step", [0.0, 0.001], ids=["at-once", "time-passing"])
async def test_arm_disarm_cycles_do_not_grow_the_heap(
    autojump_clock: trio.testing.MockClock, step: float
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
        long_lived = Entry("long", log)
        timers.arm(long_lived, 1_000_000)
        await trio.testing.wait_all_tasks_blocked()
        peak = 0
        for i in range(5_000):
            entry = Entry(f"short {i}", log)
            timers.arm(entry, 100)
            if step:
                await trio.sleep(step)
            timers.disarm(entry)
            peak = max(peak, len(timers._heap))
        await trio.testing.wait_all_tasks_blocked()
        # Compaction keeps the heap within 2 * live + 256, live counting the
        # entry being armed (2): a bound, not 5,001 entries.
        assert peak <= 2 * 2 + 256
        assert len(timers._heap) <= 2 * 2 + 256
        assert timers._live == 1 and long_lived.armed
        timers.disarm(long_lived)
    assert log == []


async def test_arm_returns_false_once_the_runtime_has_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        timers = timers_of(rt)
    entry = Entry("late", log)
    assert timers.arm(entry, 1) is False
    assert entry.armed is False
    assert timers._heap == [] and timers._live == 0
    await trio.sleep(5)
    assert log == []


async def test_an_armed_entry_does_not_keep_the_runtime_open(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    log: list[tuple[str, float]] = []
    async with agentrio.open_runtime() as rt:
        t0 = trio.current_time()
        timers_of(rt).arm(Entry("never", log), 1_000)
        await trio.testing.wait_all_tasks_blocked()
    # The root's nursery cancels the timer task as the runtime closes.
    assert trio.current_time() - t0 < 1
    assert log == []
    assert task_tracker.alive(timer_tasks(task_tracker)) == []
