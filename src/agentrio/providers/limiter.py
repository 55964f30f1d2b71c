"""The shared guards of a provider instance: circuit breaker, rate windows, 429 pause."""

from __future__ import annotations

import email.utils
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


class RateWindow:
    """At most *limit* units (requests or tokens) within any *period* seconds."""

    __slots__ = ("_entries", "_total", "limit", "period")

    def __init__(self, limit: int, period: float = 60.0) -> None:
        self.limit = limit
        self.period = period
        self._entries: deque[list[float]] = deque()
        self._total = 0.0

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and entries[0][0] <= now - self.period:
            self._total -= entries.popleft()[1]

    async def take(self, amount: float) -> list[float]:
        """Wait until *amount* fits, record it, and return its entry (for :meth:`adjust`)."""
        amount = min(amount, self.limit)  # a request larger than the limit waits for a clear window
        while True:
            now = trio.current_time()
            self._expire(now)
            if self._total + amount <= self.limit:
                entry = [now, amount]
                self._entries.append(entry)
                self._total += amount
                await trio.lowlevel.checkpoint()
                return entry
            await trio.sleep_until(self._entries[0][0] + self.period)

    def adjust(self, entry: list[float], amount: float) -> None:
        """Replace what *entry* recorded by the real *amount* (if it is still in the window)."""
        if entry in self._entries:
            self._total += amount - entry[1]
            entry[1] = amount
