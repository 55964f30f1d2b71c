"""The shared guards of a provider: the lanes' limiter, circuit breaker, rate windows, 429 pause.

The lanes (see ``agents/lanes.py``) are ordered here, highest priority first:
``interactive`` (also called ``"control"``), ``query`` (the default),
``execute``, ``background``; a lane's index is its priority. The tool calls'
lanes use the same order and the same `LaneLimiter`.
"""

from __future__ import annotations

import email.utils
import heapq
import itertools
import math
import sys
import time
from collections import deque
from collections.abc import Mapping

import trio

from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_LANE",
    "LANES",
    "CircuitBreaker",
    "LaneLimiter",
    "RateWindow",
    "lane_caps",
    "lane_index",
    "parse_retry_after",
]

# The lanes, highest priority first; a lane's index is its priority (0 first).
LANES: tuple[str, ...] = ("interactive", "query", "execute", "background")
DEFAULT_LANE = "query"
_INDEX: dict[str, int] = {name: i for i, name in enumerate(LANES)}
_INDEX["control"] = 0  # a3s-code's name for the lane that is served first
_UNLIMITED = sys.maxsize


def lane_index(lane: object, argument: str = "lane") -> int:
    """The priority of *lane* (0 is served first).

    Raises:
        InvalidArgument: *lane* is not one of the lanes' names.
    """
    index = _INDEX.get(lane) if isinstance(lane, str) else None
    if index is None:
        raise InvalidArgument(f"{argument} must be one of {sorted(_INDEX)}, got {lane!r}")
    return index


def lane_caps(caps: Mapping[str, int | None] | None) -> list[int]:
    """Per-lane caps by lane index, from a mapping of lane names (absent: no cap)."""
    out = [_UNLIMITED] * len(LANES)
    for name, cap in (caps or {}).items():
        if cap is not None:
            out[_INDEX[name]] = cap
    return out


# -- the limiter ------------------------------------------------------------------------


class _Waiter:
    """A task waiting for a slot; its own abort function (a cancelled wait leaves the queue)."""

    __slots__ = ("limiter", "task")

    def __init__(self, limiter: LaneLimiter, task: trio.lowlevel.Task) -> None:
        self.limiter = limiter
        self.task: trio.lowlevel.Task | None = task

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        # Left in its deque, marked: the limiter skips it when it comes to it.
        self.task = None
        self.limiter._waiting -= 1
        return trio.lowlevel.Abort.SUCCEEDED


class LaneLimiter:
    """At most *total* holders at once, and at most ``caps[lane]`` of one lane.

    A task that finds room takes a slot at once. The others wait in one FIFO
    queue per lane; a freed slot is handed straight to the first waiter of
    the highest-priority lane whose cap allows it. So while the limit is
    full, an ``interactive`` waiter goes before every ``background`` one,
    however long those have waited. (Waiters only ever wait because the
    total or their own lane's cap is full: each release serves every waiter
    it can, so a newcomer who finds room jumps no one who could have used it.)

    The uncontended path is a comparison, two increments and one checkpoint,
    less than `trio.CapacityLimiter`'s.

    Args:
        total: slots in all (None: no limit but the lanes' own).
        caps: each lane's cap, by lane index (see `lane_caps`).
    """

    __slots__ = ("_caps", "_held", "_lane_held", "_queues", "_total", "_waiting")

    def __init__(self, total: int | None, caps: list[int] | None = None) -> None:
        self._total = _UNLIMITED if total is None else total
        self._caps = caps if caps is not None else [_UNLIMITED] * len(LANES)
        self._held = 0
        self._lane_held = [0] * len(LANES)
        self._queues: list[deque[_Waiter]] = [deque() for _ in LANES]
        self._waiting = 0

    @property
    def held(self) -> int:
        """Slots taken now."""
        return self._held

    @property
    def waiting(self) -> int:
        """Tasks waiting for a slot."""
        return self._waiting

    def lane_held(self, lane: int) -> int:
        """Slots taken now by the lane of index *lane*."""
        return self._lane_held[lane]

    async def acquire(self, lane: int) -> float | None:
        """Take a slot for the lane of index *lane*, waiting in its queue while there is none.

        A checkpoint either way; cancelled while waiting, the task leaves the
        queue and holds nothing.

        Returns:
            None if a slot was free; else the seconds it waited for one (the
            clock is read only then).
        """
        if self._held < self._total and self._lane_held[lane] < self._caps[lane]:
            self._held += 1
            self._lane_held[lane] += 1
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self.release(lane)
                raise
            return None
        waiter = _Waiter(self, trio.lowlevel.current_task())
        self._queues[lane].append(waiter)
        self._waiting += 1
        since = trio.current_time()
        # Woken by release() with the slot already counted as ours.
        await trio.lowlevel.wait_task_rescheduled(waiter)
        return trio.current_time() - since

    def release(self, lane: int) -> None:
        """Give back a slot of the lane of index *lane*; hand it on to the next waiter."""
        self._held -= 1
        self._lane_held[lane] -= 1
        if self._waiting:
            self._wake()

    def _wake(self) -> None:
        for lane, queue in enumerate(self._queues):
            while queue and self._held < self._total and self._lane_held[lane] < self._caps[lane]:
                waiter = queue.popleft()
                task = waiter.task
                if task is None:  # its wait was cancelled
                    continue
                waiter.task = None
                self._held += 1
                self._lane_held[lane] += 1
                self._waiting -= 1
                trio.lowlevel.reschedule(task)
            if self._held >= self._total:
                return


# -- the other guards -------------------------------------------------------------------


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date.

    Args:
        value: the header's value, or None.
        now: the wall-clock time to measure an HTTP date from (default ``time.time()``).

    Returns:
        The delay (never negative), or None when the header is absent or unreadable.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


class CircuitBreaker:
    """Opens after *threshold* consecutive failures; half-opens after *cooldown* seconds.

    Closed: every request goes. Open: none does. Half-open: one trial request
    goes; its success closes the breaker, its failure opens it again.
    """

    __slots__ = ("_failures", "_open_until", "_trial", "cooldown", "threshold")

    def __init__(self, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self._failures = 0
        self._open_until: float | None = None
        self._trial = False

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"``."""
        if self._open_until is None:
            return "closed"
        return "open" if trio.current_time() < self._open_until else "half_open"

    def allow(self) -> bool:
        """May a request go now? (Takes the half-open trial slot if it is free.)"""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._trial:
            self._trial = True
            return True
        return False

    def success(self) -> None:
        self._failures = 0
        self._open_until = None
        self._trial = False

    def failure(self) -> None:
        self._failures += 1
        if self._trial or self._failures >= self.threshold:
            self._open_until = trio.current_time() + self.cooldown
            self._trial = False

    def release(self) -> None:
        """A trial request ended with neither success nor failure (cancelled)."""
        self._trial = False


class _RateWaiter:
    """A taker waiting for room in a `RateWindow`; ordered by (priority, arrival)."""

    __slots__ = ("amount", "entry", "event", "priority", "seq")

    def __init__(self, priority: int, seq: int, amount: float) -> None:
        self.priority = priority
        self.seq = seq
        self.amount = amount
        self.entry: list[float] | None = None  # set when it is granted its room
        self.event = trio.Event()

    def __lt__(self, other: _RateWaiter) -> bool:
        return (self.priority, self.seq) < (other.priority, other.seq)


class RateWindow:
    """At most *limit* units (requests or tokens) within any *period* seconds.

    What fits goes: a taker never waits for room it does not need (a small
    amount may pass a large one waiting). When room frees, the waiters are
    served by priority (lower first: a lane's index), then in arrival order,
    each that fits in turn.
    """

    __slots__ = ("_entries", "_seq", "_total", "_waiters", "limit", "period")

    def __init__(self, limit: int, period: float = 60.0) -> None:
        self.limit = limit
        self.period = period
        self._entries: deque[list[float]] = deque()
        self._total = 0.0
        # A heap of the takers waiting. Its head alone watches the clock (it
        # sleeps until the oldest entry leaves the window, then serves them
        # all); the others sleep until they are served or become the head.
        self._waiters: list[_RateWaiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        """Takers waiting for room."""
        return len(self._waiters)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and entries[0][0] <= now - self.period:
            self._total -= entries.popleft()[1]
        if not entries:
            self._total = 0.0  # (no float residue left behind by the subtractions)

    def _record(self, now: float, amount: float) -> list[float]:
        entry = [now, amount]
        self._entries.append(entry)
        self._total += amount
        return entry

    async def take(self, amount: float, priority: int = 1) -> tuple[list[float], float | None]:
        """Wait until *amount* fits, record it, and return its entry (for `adjust`)
        and the seconds it waited (None if it fitted at once).

        Args:
            amount: the units to take (more than ``limit`` waits for a clear window).
            priority: among the takers waiting when room frees, the lower goes
                first (a lane's index; 1, ``query``, by default).
        """
        amount = min(amount, self.limit)  # a request larger than the limit waits for a clear window
        now = trio.current_time()
        self._expire(now)
        if self._waiters:
            self._serve(now)  # room freed since the head last looked is theirs first
        if self._total + amount <= self.limit:
            entry = self._record(now, amount)
            await trio.lowlevel.checkpoint()
            return entry, None
        entry = await self._queued(amount, priority)
        return entry, trio.current_time() - now

    async def _queued(self, amount: float, priority: int) -> list[float]:
        waiter = _RateWaiter(priority, next(self._seq), amount)
        heapq.heappush(self._waiters, waiter)
        try:
            while waiter.entry is None:
                if waiter.event.is_set():
                    waiter.event = trio.Event()
                if self._waiters[0] is not waiter:
                    await waiter.event.wait()
                    continue
                entries = self._entries
                with trio.move_on_at(entries[0][0] + self.period if entries else -math.inf):
                    await waiter.event.wait()
                if waiter.entry is None:
                    self._serve(trio.current_time())
            return waiter.entry
        except BaseException:
            if waiter.entry is None:  # (one served as it was cancelled keeps its entry)
                self._waiters.remove(waiter)
                heapq.heapify(self._waiters)
                self._wake_head()
            raise

    def _serve(self, now: float) -> None:
        """Give room to the waiters that fit, by priority then arrival; wake the new head."""
        self._expire(now)
        if self._total >= self.limit:
            return
        kept = []
        for waiter in sorted(self._waiters):
            if self._total + waiter.amount <= self.limit:
                waiter.entry = self._record(now, waiter.amount)
                waiter.event.set()
            else:
                kept.append(waiter)
        if len(kept) < len(self._waiters):
            self._waiters = kept  # (sorted: a heap already)
            self._wake_head()

    def _wake_head(self) -> None:
        if self._waiters:
            self._waiters[0].event.set()

    def adjust(self, entry: list[float], amount: float) -> None:
        """Replace what *entry* recorded by the real *amount* (if it is still in the window)."""
        if entry in self._entries:
            self._total += amount - entry[1]
            entry[1] = amount
