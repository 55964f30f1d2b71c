"""Restart policy pieces: supervision strategies, restart intensity and backoff."""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import attrs

from .._checks import check_int, check_seconds
from ..errors import InvalidArgument

__all__ = ["Backoff", "RestartIntensity", "Strategy"]

Strategy = Literal["one_for_one", "one_for_all"]
"""A supervisor's ``strategy``: ``"one_for_one"`` restarts only the crashed child;
``"one_for_all"`` restarts all the supervisor's children."""
STRATEGIES = frozenset(("one_for_one", "one_for_all"))


@attrs.frozen
class Backoff:
    """Exponential, capped delay before restarting a crashed child.

    The n-th crash in a row of one child (a crash after the child handled at
    least one message starts a new run) waits ``initial * factor ** (n - 1)``
    seconds, at most ``maximum``. Pass it as ``backoff=`` to ``open_runtime``
    or ``spawn_supervisor``.

    Raises:
        InvalidArgument: a field is not a number >= 0, or *factor* is below 1.
    """

    initial: float = 0.1
    factor: float = 2.0
    maximum: float = 10.0

    def __attrs_post_init__(self) -> None:
        for field in ("initial", "factor", "maximum"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidArgument(f"Backoff.{field} must be a number, got {value!r}")
            if math.isnan(value) or value < 0:
                raise InvalidArgument(f"Backoff.{field} must be >= 0, got {value!r}")
        if self.factor < 1:
            raise InvalidArgument(f"Backoff.factor must be >= 1, got {self.factor!r}")

    def delay(self, streak: int) -> float:
        """Seconds to wait before the restart that follows the *streak*-th crash in a row.

        ``0.0`` when *streak* is below 1.
        """
        if streak < 1:
            return 0.0
        return float(min(self.initial * self.factor ** (streak - 1), self.maximum))


class RestartIntensity:
    """OTP's restart intensity: at most *max_restarts* restarts within *period* seconds.

    Supervisors make their own from their ``max_restarts`` and ``period``
    options, and no API accepts one: you do not need it to use agentrio.

    Attributes:
        max_restarts: the restarts allowed within *period*.
        period: the window, in seconds.

    Raises:
        InvalidArgument: *max_restarts* is not an int >= 0, or *period* is
            not a number >= 0.
    """

    __slots__ = ("_times", "max_restarts", "period")

    def __init__(self, max_restarts: int, period: float) -> None:
        check_int("max_restarts", max_restarts, 0)
        check_seconds("period", period)
        self.max_restarts = max_restarts
        self.period = period
        self._times: deque[float] = deque()

    def reset(self) -> None:
        """Forget the restarts counted so far."""
        self._times.clear()

    def record(self, now: float) -> bool:
        """Count a restart at time *now* (seconds, such as ``trio.current_time()``).

        Returns:
            False if that makes more than ``max_restarts`` restarts within
            the last ``period`` seconds.
        """
        times = self._times
        cutoff = now - self.period
        while times and times[0] <= cutoff:
            times.popleft()
        times.append(now)
        return len(times) <= self.max_restarts
