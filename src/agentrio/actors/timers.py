"""Timers: one task per runtime that keeps the deadlines of many short waits.

A lone tool call runs in its agent's own task. Giving each call a Trio cancel
scope with a deadline costs two scope entries per call, about a fifth of an
agent's whole run at 1,000 agents. Instead the call arms an [`Alarm`][agentrio.actors.Alarm]
here (a push on a heap, [`interrupt_after`][agentrio.actors.interrupt_after]) and disarms it when it
returns (one attribute). The timer task sleeps until the earliest armed
deadline; when one passes while its alarm is still armed, it interrupts the
alarm's actor (``actor.interrupt``), as a Trio deadline cancels its
scope: the message being handled is cut short and delivered again, and the
actor works out why. The task runs only while something is armed.
"""

from __future__ import annotations

import heapq
import itertools

import trio

from .._checks import check_seconds
from .._handles import NoPublicConstructor
from .actor import ActorRef, Cell, Parent, _interrupt
from .primitives import not_a_ref

__all__ = ["Alarm", "Timers", "interrupt_after"]


class Alarm(metaclass=NoPublicConstructor):
    """An armed deadline from [`interrupt_after`][agentrio.actors.interrupt_after]: disarm it
    when the wait ends in time.

    Attributes:
        deadline: when it goes off, on Trio's clock (``trio.current_time()``).
        rang: True once it has gone off (it interrupted its actor, or found
            nothing to interrupt).
    """

    __slots__ = ("_cell", "_timers", "deadline", "rang")

    def __init__(self, timers: Timers, cell: Cell, deadline: float) -> None:
        self._timers = timers
        self._cell: Cell | None = cell  # None once it has rung or been disarmed
        self.deadline = deadline
        self.rang = False

    def disarm(self) -> bool:
        """The wait ended in time: the deadline no longer matters.

        Returns:
            True if it was armed; False if it had rung already (its
            interrupt is under way) or was disarmed before.
        """
        if self._cell is None:
            return False
        self._cell = None
        timers = self._timers
        timers._live -= 1
        if timers._live == 0 and timers._sleep is not None:
            timers._sleep.cancel()  # nothing left to time: the task ends
        elif len(timers._heap) > 2 * timers._live + 256:
            # Most waits end in time, long before their deadline: the disarmed
            # alarms are dropped as they pile up, not kept until no alarm is
            # left (10k agents' tool calls ending: 10k entries, ~190 bytes each).
            timers._compact()
        return True


def interrupt_after(ref: ActorRef, seconds: float) -> Alarm | None:
    """Interrupt *ref*'s actor in *seconds*, unless the returned alarm is disarmed first.

    At the deadline the runtime's timer task calls
    [`interrupt`][agentrio.actors.interrupt] on the actor, as a Trio deadline calls
    ``cancel()``: the message it is handling then is cut short and handed to
    ``handle`` again, which can tell from ``Alarm.rang`` (or its own
    record of the deadline) that its time ran out. Costs a push on the
    runtime's timer heap instead of a cancel scope: made for a wait in an
    actor's own task, armed and disarmed many times per second.

    For example, in the actor's ``handle``:

    ```python
    alarm = agentrio.actors.interrupt_after(self.ref, 5.0)
    if alarm is None:  # no runtime timer: keep a deadline of your own
        with trio.fail_after(5.0):
            await slow_work()
    else:
        try:
            await slow_work()
        finally:
            alarm.disarm()
    ```

    Returns:
        The [`Alarm`][agentrio.actors.Alarm]; None when the runtime's root supervisor is not
        running (before ``open_runtime`` has started it, or after it has
        closed): the caller then keeps a deadline of its own.

    Raises:
        InvalidArgument: *ref* is not an [`ActorRef`][agentrio.ActorRef];
            *seconds* is not a number >= 0.
    """
    # (One identity test, and the usual float or int in one test: this runs
    # for every lone tool call.)
    if type(ref) is not ActorRef:
        not_a_ref("interrupt_after", "ref", ref)
    if not ((type(seconds) is float or type(seconds) is int) and seconds >= 0):
        check_seconds("seconds", seconds)  # (raises)
    cell = ref._cell
    timers = cell.parent.shared.timers
    if type(timers) is not Timers:  # (None: no tree's timer task)
        return None
    # (Timers' arming, inlined: one call less for every lone tool call.)
    if not timers._running and not timers._start():
        return None
    deadline = trio.current_time() + seconds
    # (Not Alarm._create: the metaclass's call path costs more than the steps
    # it takes.)
    alarm = object.__new__(Alarm)
    alarm._timers = timers
    alarm._cell = cell
    alarm.deadline = deadline
    alarm.rang = False
    heap = timers._heap
    heapq.heappush(heap, (deadline, next(timers._seq), alarm))
    timers._live += 1
    sleep = timers._sleep
    if sleep is not None and deadline < sleep.deadline:
        sleep.deadline = deadline  # a shorter wait than any armed: wake for it
    elif len(heap) > 2 * timers._live + 256:
        timers._compact()
    return alarm


class Timers:
    """The runtime's timer task and its heap of ``(deadline, seq, alarm)``
    ([`interrupt_after`][agentrio.actors.interrupt_after] pushes on it)."""

    __slots__ = ("_heap", "_live", "_root", "_running", "_seq", "_sleep")

    def __init__(self, root: Parent) -> None:
        self._root = root
        self._heap: list[tuple[float, int, Alarm]] = []
        self._live = 0
        self._seq = itertools.count()
        self._running = False
        self._sleep: trio.CancelScope | None = None

    def _start(self) -> bool:
        """Start the timer task for a first alarm; False if the root is not running."""
        nursery = self._root.nursery
        if nursery is None:
            return False
        nursery.start_soon(self._run, name="agentrio timers")
        self._running = True
        return True

    def _compact(self) -> None:
        """Drop the disarmed alarms from the heap.

        They wait there for their deadline to be popped; this keeps them from
        piling up when waits end long before it.
        """
        # (In place: the timer task's loop holds the list while it sleeps.)
        heap = self._heap
        heap[:] = [item for item in heap if item[2]._cell is not None]
        heapq.heapify(heap)

    async def _run(self) -> None:
        try:
            while True:
                now = trio.current_time()
                heap = self._heap
                while heap and (heap[0][2]._cell is None or heap[0][0] <= now):
                    alarm = heapq.heappop(heap)[2]
                    cell = alarm._cell
                    if cell is not None:
                        alarm._cell = None
                        alarm.rang = True
                        self._live -= 1
                        _interrupt(cell)
                if not self._live:
                    # No task is kept waiting for nothing: the next arm() starts one.
                    heap.clear()
                    return
                with trio.CancelScope(deadline=heap[0][0]) as self._sleep:
                    await trio.sleep_forever()
                self._sleep = None
        finally:
            self._sleep = None
            self._running = False
