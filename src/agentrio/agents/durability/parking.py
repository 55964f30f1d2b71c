"""The phases waiting for one sync of the checkpoint store, parked as cheaply as can be.

Before a tool not declared idempotent runs, its phase waits until the call's start
is on disk; with thousands of agents at once, they all wait for one sync (a group
commit: ``Checkpoints.sync_wait``). Each wait is a task parked with Trio and woken
with ``trio.lowlevel.reschedule``.

Trio's public ``wait_task_rescheduled(abort_fn)`` makes, for each wait, a coroutine,
the message it yields to Trio's scheduler and (to know which task to take out of the
group if it is cancelled) an abort function of its own: objects that each of 10,000
parked agents holds until its wake, and that each wake walks through again. Here a
waiting phase yields the group's one message itself (``_wait``, a generator), and the
group's one abort function lets any cancelled waiter go (a task rescheduled by a
cancellation no longer has the group's abort function as its own: ``wake`` leaves
it alone). Those two names are Trio's private ones (``trio._core._traps
.WaitTaskRescheduled``, ``Task._abort_func``), looked for once, as this module is
imported, and what is relied on of them (a parked task holds the message's abort
function itself; a task rescheduled no longer does) is tried once, in a Trio run
of its own, the first time a group is made (`_behaves`): if a Trio lacks either
or behaves otherwise, every group waits through the public API (``_PublicGroup``),
which does the same with more objects.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Awaitable, Callable, Generator
from functools import partial
from typing import Any

import outcome
import trio

from ...errors import StoreError

__all__ = ["SyncGroup", "new_group"]

_TrioWait: Callable[[Callable[[object], trio.lowlevel.Abort]], object] | None
try:  # Trio's message for "park me until I am rescheduled" (see the module's docstring)
    from trio._core._traps import WaitTaskRescheduled as _TrioWait
except ImportError:  # pragma: no cover (a Trio that moved it: the public API is used)
    _TrioWait = None

LEAN = _TrioWait is not None and hasattr(trio.lowlevel.Task, "_abort_func")
"""Do groups park their phases with Trio's private names (else the public API)?"""


@types.coroutine
def _wait(message: object) -> Generator[Any, Any, object]:
    """Park the calling task with *message* until it is rescheduled; what it was
    rescheduled with (raised, for an error)."""
    woken: outcome.Outcome[object] = yield message
    return woken.unwrap()


def _succeeded(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED


class SyncGroup:
    """The phases waiting for one sync. Joined only before its sync starts
    (``Checkpoints._sync`` takes it out of reach first); woken once."""

    __slots__ = ("abort", "message", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[trio.lowlevel.Task, None] = {}
        # (One abort function, bound once, whose identity marks a task still parked
        # here; one message, yielded by every waiter.)
        self.abort: Callable[[object], trio.lowlevel.Abort] = partial(_succeeded)
        self.message = None if _TrioWait is None else _TrioWait(self.abort)

    def join(self) -> Awaitable[object]:
        """The calling task's wait for the sync, to await at once: it returns when
        the sync ends, and raises its ``StoreError`` if it failed."""
        self.tasks[trio.lowlevel.current_task()] = None
        return _wait(self.message)

    def wake(self, error: StoreError | None = None) -> None:
        """Wake every phase still waiting (each raising *error*, a new one of its own,
        if any); a phase cancelled while it waited is gone already."""
        tasks, self.tasks = self.tasks, {}
        abort, reschedule = self.abort, trio.lowlevel.reschedule
        for task in tasks:
            if task._abort_func is not abort:  # (cancelled, and on its way since)
                continue
            if error is None:
                reschedule(task)
            else:
                reschedule(task, outcome.Error(_own(error)))


class _PublicGroup(SyncGroup):
    """A `SyncGroup` through Trio's public API (a Trio without the private names)."""

    __slots__ = ()

    def _abort(self, task: trio.lowlevel.Task, _: object) -> trio.lowlevel.Abort:
        del self.tasks[task]  # (a phase cancelled while it waits: it goes at once)
        return trio.lowlevel.Abort.SUCCEEDED

    def join(self) -> Awaitable[object]:
        task = trio.lowlevel.current_task()
        self.tasks[task] = None
        return trio.lowlevel.wait_task_rescheduled(partial(self._abort, task))

    def wake(self, error: StoreError | None = None) -> None:
        tasks, self.tasks = self.tasks, {}
        reschedule = trio.lowlevel.reschedule
        for task in tasks:
            if error is None:
                reschedule(task)
            else:
                reschedule(task, outcome.Error(_own(error)))


def _own(error: StoreError) -> StoreError:
    """A copy of *error* for one phase (each raises its own: a traceback is per raise)."""
    failed = StoreError(str(error))
    failed.__cause__ = error.__cause__
    return failed


_lean: bool | None = None  # (LEAN, and Trio behaving as relied on: tried once)


def new_group(lean: bool | None = None) -> SyncGroup:
    """A group for the next sync: parked with Trio's private names if *lean*
    (None: if this Trio has them and behaves as relied on, tried the first time)."""
    global _lean
    if lean is None:
        if _lean is None:
            _lean = LEAN and _behaves(SyncGroup)
        lean = _lean
    return SyncGroup() if lean else _PublicGroup()


def _behaves(make: Callable[[], SyncGroup]) -> bool:
    """Does a group made by *make* park and wake as this module relies on, in this
    Trio? Tried in a Trio run of its own, in a thread (a few milliseconds, once):
    two tasks parked on it hold its abort function; the one cancelled goes, the
    other is woken once. Never hangs (two seconds at most: the probe's own
    deadline; five for its thread), never raises."""
    answer: list[bool] = []

    def run() -> None:
        try:
            answer.append(trio.run(_probe, make))
        except BaseException:  # (whatever it is, the public API is used)
            answer.append(False)

    thread = threading.Thread(target=run, name="agentrio-parking-probe", daemon=True)
    thread.start()
    thread.join(5.0)
    return answer == [True]


async def _probe(make: Callable[[], SyncGroup]) -> bool:
    group = make()
    woken: list[str] = []
    cancel = trio.CancelScope()

    async def stays() -> None:
        await group.join()
        woken.append("stays")

    async def goes() -> None:
        with cancel:
            await group.join()
            woken.append("woken")  # (the failure: a cancelled waiter woken by its group)
        woken.append("goes")

    with trio.move_on_after(2.0):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stays)
            nursery.start_soon(goes)
            for _ in range(5):
                await trio.lowlevel.checkpoint()
            parked = list(group.tasks)
            if len(parked) != 2 or any(t._abort_func is not group.abort for t in parked):
                nursery.cancel_scope.cancel()
                return False
            cancel.cancel()
            for _ in range(5):
                await trio.lowlevel.checkpoint()
            group.wake()
        return sorted(woken) == ["goes", "stays"]
    return False
