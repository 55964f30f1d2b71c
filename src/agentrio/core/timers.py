"""Timers: one task per runtime that keeps the deadlines of many short waits.

A lone tool call runs in its agent's own task. Giving each call a Trio cancel
scope with a deadline costs two scope entries per call, about a fifth of an
agent's whole run at 1,000 agents. Instead the call arms a timer here (a push
on a heap) and disarms it when it returns (one attribute). The timer task
sleeps until the earliest armed deadline; when one passes while still armed,
it calls the entry's ``expire()``, which cuts the agent's task short (see
``_Cell.interrupted``) so the runtime can resume its phase. The task runs
only while something is armed.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from .supervisor import _Supervisor

__all__ = ["Timers"]


class Timed(Protocol):
    """What can be armed: it says whether it still is, and what to do at its deadline."""

    armed: bool

    def expire(self) -> None: ...


class Timers:
    """The runtime's timer task and its heap of ``(deadline, seq, entry)``."""

    __slots__ = ("_heap", "_live", "_root", "_running", "_seq", "_sleep")

    def __init__(self, root: _Supervisor) -> None:
        self._root = root
        self._heap: list[tuple[float, int, Timed]] = []
        self._live = 0
        self._seq = itertools.count()
        self._running = False
        self._sleep: trio.CancelScope | None = None

    def arm(self, entry: Timed, seconds: float) -> bool:
        """Call ``entry.expire()`` in *seconds* unless it is disarmed first.

        Returns False (nothing armed) when the runtime's root is not running:
        the caller then keeps its own deadline.
        """
        if not self._running:
            nursery = self._root.nursery
            if nursery is None:
                return False
            nursery.start_soon(self._run, name="agentrio timers")
            self._running = True
        deadline = trio.current_time() + seconds
        heapq.heappush(self._heap, (deadline, next(self._seq), entry))
        entry.armed = True
        self._live += 1
        sleep = self._sleep
        if sleep is not None and deadline < sleep.deadline:
            sleep.deadline = deadline  # a shorter wait than any armed: wake for it
        elif len(self._heap) > 2 * self._live + 256:
            # Disarmed entries wait for their deadline to be popped; keep them
            # from piling up when calls end long before it.
            self._heap = [item for item in self._heap if item[2].armed]
            heapq.heapify(self._heap)
        return True

    def disarm(self, entry: Timed) -> None:
        """The wait ended in time: its deadline no longer matters."""
        if entry.armed:
            entry.armed = False
            self._live -= 1
            if self._live == 0 and self._sleep is not None:
                self._sleep.cancel()  # nothing left to time: the task ends

    async def _run(self) -> None:
        try:
            while True:
                now = trio.current_time()
                heap = self._heap
                while heap and (not heap[0][2].armed or heap[0][0] <= now):
                    entry = heapq.heappop(heap)[2]
                    if entry.armed:
                        entry.armed = False
                        self._live -= 1
                        entry.expire()
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
