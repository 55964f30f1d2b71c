"""Retention: how long a store keeps the phases that have ended."""

from __future__ import annotations

import math

import attrs

from .._checks import check_int, check_seconds

__all__ = ["Retention"]


@attrs.frozen
class Retention:
    """Which finished phases a store keeps: ``open_runtime(retention=...)``.

    When the runtime closes (and when it opens), the phases that have ended,
    of agents that will not be resumed, are moved out of the store's live area
    into its archive, where a runtime opening the store does not read them;
    then the archived phases that ended longer than *max_age* seconds ago, and
    the oldest beyond the *max_count* newest, are deleted (their bytes gone,
    as [`delete_phases`][agentrio.store.ArchivingStore.delete_phases] deletes
    them). ``Retention()`` archives and keeps everything.

    Example:

        # keep a week of finished phases, at most 10,000 of them
        retention = Retention(max_age=7 * 86400, max_count=10_000)
        async with agentrio.open_runtime(store="ckpt", specs=specs, retention=retention):
            ...

    Attributes:
        max_age: seconds a finished phase is kept after it ended (None: no limit).
        max_count: the most finished phases kept (None: no limit).

    Raises:
        InvalidArgument: *max_age* is not a number of seconds >= 0, or *max_count*
            not an int >= 0.
    """

    max_age: float | None = None
    max_count: int | None = None

    def __attrs_post_init__(self) -> None:
        check_seconds("Retention.max_age", self.max_age, optional=True)
        if self.max_age is not None and math.isinf(self.max_age):
            object.__setattr__(self, "max_age", None)
        if self.max_count is not None:
            check_int("Retention.max_count", self.max_count, 0)
