"""What a budget has spent: `Budget`'s totals, read (``usage``), restored from an
earlier life's checkpoints, and the token details counted up its chain. A base of
`Budget` (budget.py), which holds the counters."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ...messages import Usage
from .usage import UsageTotals

__all__: list[str] = []

_T = TypeVar("_T")


class _Spent:
    """`Budget`'s totals (the state is the budget's: see ``Budget.__init__``)."""

    __slots__ = (
        "_attempts",
        "_cost",
        "_details",
        "_in",
        "_out",
        "_overruns",
        "_requests",
        "_restored",
        "_tool_calls",
    )

    if TYPE_CHECKING:  # (the budget's counters)
        parent: _Spent | None
        _in: int
        _out: int
        _requests: int
        _tool_calls: int
        _overruns: int
        _attempts: int
        _cost: float
        _r_in: int
        _r_out: int
        _details: list[int] | None
        _restored: UsageTotals | None

    def usage(self) -> UsageTotals:
        """What this budget (with its children) has spent so far."""
        cached, written, reasoning = self._details or (0, 0, 0)
        return UsageTotals(
            input_tokens=self._in,
            output_tokens=self._out,
            total_tokens=self._in + self._out,
            requests=self._requests,
            tool_calls=self._tool_calls,
            cost_usd=self._cost,
            overruns=self._overruns,
            attempts=self._attempts,
            cached_input_tokens=cached,
            cache_write_tokens=written,
            reasoning_tokens=reasoning,
        )

    def _totals(self, make: Callable[..., _T]) -> _T:
        """*make* (``checkpoint.Totals``) of this budget's settled totals, in one call."""
        cached, written, reasoning = self._details or (0, 0, 0)
        return make(
            self._in,
            self._out,
            self._requests,
            self._tool_calls,
            self._cost,
            self._overruns,
            self._attempts,
            cached,
            written,
            reasoning,
        )

    @property
    def restored(self) -> UsageTotals | None:
        """What an earlier life spent, as the checkpoints of the store its runtime
        opened say (their last totals; None: no store, or none in it). Part of
        `usage`. ``agentrio.ray`` reads it from a lost host's store."""
        return self._restored

    def _restore(self, totals: UsageTotals) -> None:
        """Add *totals*, spent by an earlier life of the runtime (its checkpoints),
        to this root budget's."""
        self._restored = totals
        self._in += totals.input_tokens
        self._out += totals.output_tokens
        self._requests += totals.requests
        self._tool_calls += totals.tool_calls
        self._cost += totals.cost_usd
        self._overruns += totals.overruns
        self._attempts += totals.attempts
        details = (totals.cached_input_tokens, totals.cache_write_tokens, totals.reasoning_tokens)
        if any(details):
            mine = self._details
            if mine is None:
                mine = self._details = [0, 0, 0]
            for i, n in enumerate(details):
                mine[i] += n

    def _count_details(self, usage: Usage) -> None:
        """Add *usage*'s cached input, cache writes and reasoning here and above."""
        budget: _Spent | None = self
        while budget is not None:
            details = budget._details
            if details is None:
                details = budget._details = [0, 0, 0]
            details[0] += usage.cached_input_tokens
            details[1] += usage.cache_write_tokens
            details[2] += usage.reasoning_tokens
            budget = budget.parent

    @property
    def reserved_tokens(self) -> int:
        """Tokens reserved by model calls in flight (input and output)."""
        return self._r_in + self._r_out
