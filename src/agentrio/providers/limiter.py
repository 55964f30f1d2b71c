"""The shared guards of a provider instance: circuit breaker, rate windows, 429 pause."""

from __future__ import annotations

import email.utils
import heapq
import itertools
import math
import time
from collections import deque

import trio

__all__ = ["CircuitBreaker", "RateWindow", "parse_retry_after"]


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

    async def take(self, amount: float, priority: int = 1) -> list[float]:
        """Wait until *amount* fits, record it, and return its entry (for `adjust`).

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
            return entry
        return await self._queued(amount, priority)

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
