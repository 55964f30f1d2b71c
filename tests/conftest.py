"""Shared fixtures: an event recorder and a task tracker (a Trio instrument).

Time is controlled per test by naming pytest-trio's ``autojump_clock``
fixture (a ``MockClock(autojump_threshold=0)``) in the test's arguments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio

import agentrio


@pytest.fixture
def record_events(nursery: trio.Nursery) -> Callable[[agentrio.Runtime], list[agentrio.Event]]:
    """Subscribe to a runtime's events; the returned list fills in the background.

    After ``await trio.testing.wait_all_tasks_blocked()`` it holds every event
    published so far. The collector ends when the runtime closes.
    """

    def start(rt: agentrio.Runtime, capacity: int = 100_000) -> list[agentrio.Event]:
        events: list[agentrio.Event] = []
        stream = rt.events(capacity=capacity)

        async def collect() -> None:
            async with stream:
                async for event in stream:
                    events.append(event)

        nursery.start_soon(collect)
        return events

    return start


class TaskTracker(trio.abc.Instrument):
    """Records every task spawned while installed, and which were still alive
    when a watched task exited."""

    def __init__(self) -> None:
        self.spawned: list[trio.lowlevel.Task] = []
        self.exited: set[trio.lowlevel.Task] = set()
        self.alive_at_exit: dict[trio.lowlevel.Task, list[trio.lowlevel.Task]] = {}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.exited.add(task)
        # What of this task's subtree was still running when it ended?
        self.alive_at_exit[task] = [t for t in self.descendants(task) if t not in self.exited]

    def named(self, name: str) -> trio.lowlevel.Task:
        (task,) = [t for t in self.spawned if t.name == name]
        return task

    def descendants(self, root: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
        out = []
        for task in self.spawned:
            parent = task.parent_nursery.parent_task if task.parent_nursery else None
            while parent is not None:
                if parent is root:
                    out.append(task)
                    break
                nursery = parent.parent_nursery
                parent = nursery.parent_task if nursery is not None else None
        return out

    def alive(self, tasks: list[trio.lowlevel.Task]) -> list[trio.lowlevel.Task]:
        return [t for t in tasks if t not in self.exited]


@pytest.fixture
async def task_tracker() -> AsyncIterator[TaskTracker]:
    tracker = TaskTracker()
    trio.lowlevel.add_instrument(tracker)
    try:
        yield tracker
    finally:
        trio.lowlevel.remove_instrument(tracker)
