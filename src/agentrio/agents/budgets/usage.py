"""UsageTotals, usage_problem: what calls spent, summed; a usage checked before it counts."""

from __future__ import annotations

import math

import msgspec

from ..._checks import short_repr
from ...messages import Usage

_INF = math.inf

__all__ = ["UsageTotals", "usage_problem"]


class UsageTotals(msgspec.Struct, frozen=True):
    """Usage summed over many model and tool calls (``rt.usage()``, ``Budget.usage()``,
    ``AgentRef.usage()``).

    Attributes:
        input_tokens: prompt tokens, of every kind (cached and cache writes
            included).
        output_tokens: completion tokens (reasoning included).
        total_tokens: both.
        requests: model calls, failed ones included (what ``max_requests``
            bounds); a call retried by its provider counts once.
        tool_calls: tool calls the model asked for that were allowed and
            within the budget, whatever their status (denied and direct calls
            are not counted).
        cost_usd: the reported cost.
        overruns: calls (or failed attempts) whose usage exceeded what was
            reserved for them (the provider ignored its output limit, or the
            prompt estimate was low); those are still charged in full.
        attempts: HTTP requests sent for those calls, retries included (a
            provider's models count every attempt; a model that makes no
            HTTP request, like ``ScriptedModel``, counts none). No limit
            bounds it; each attempt's tokens count against the token limits.
        cached_input_tokens: of ``input_tokens``, those read from a prompt cache.
        cache_write_tokens: of ``input_tokens``, those written to a prompt cache.
        reasoning_tokens: of ``output_tokens``, those spent reasoning.
        cache_hit_ratio: ``cached_input_tokens / input_tokens`` (0.0 before
            any input): the share of the input read from a prompt cache.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    requests: int = 0
    tool_calls: int = 0
    cost_usd: float = 0.0
    overruns: int = 0
    attempts: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def cache_hit_ratio(self) -> float:
        """The share of the input read from a prompt cache (0.0 before any input)."""
        return self.cached_input_tokens / self.input_tokens if self.input_tokens else 0.0


_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cache_write_1h_tokens",
)


def usage_problem(usage: object) -> str:
    """What makes *usage* unfit to charge ("" if nothing): not a ``Usage``, a
    token count that is not an int >= 0, details larger than the totals they
    are part of, or a cost that is not a finite number >= 0."""
    if not isinstance(usage, Usage):
        return f"usage={short_repr(usage)} (expected a Usage)"
    i, o, c = usage.input_tokens, usage.output_tokens, usage.cost_usd
    r, w, t = usage.cached_input_tokens, usage.cache_write_tokens, usage.reasoning_tokens
    # (The common case in one expression: exact types, no bool, no NaN.)
    if (
        type(i) is int
        and type(o) is int
        and i >= 0
        and o >= 0
        and (type(c) is float or type(c) is int)
        and 0.0 <= c < _INF
        and (
            (r == 0 and w == 0 and t == 0 and usage.cache_write_1h_tokens == 0)
            or _details_fit(usage)
        )
    ):
        return ""
    for name in _COUNTS:
        value = getattr(usage, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{name}={short_repr(value)} (expected an int >= 0)"
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 <= c < _INF:
        return f"cost_usd={short_repr(c)} (expected a finite number >= 0)"
    if r + w > i:
        return (
            f"cached_input_tokens + cache_write_tokens = {r + w} is more than "
            f"input_tokens={i} (which counts them)"
        )
    if t > o:
        return f"reasoning_tokens={t} is more than output_tokens={o} (which counts them)"
    if usage.cache_write_1h_tokens > w:
        return (
            f"cache_write_1h_tokens={usage.cache_write_1h_tokens} is more than "
            f"cache_write_tokens={w} (which counts them)"
        )
    return ""


def _details_fit(usage: Usage) -> bool:
    """Are the detail counts ints >= 0 within the totals they are part of?"""
    r, w, t = usage.cached_input_tokens, usage.cache_write_tokens, usage.reasoning_tokens
    h = usage.cache_write_1h_tokens
    return (
        type(r) is int
        and type(w) is int
        and type(t) is int
        and type(h) is int
        and min(r, w, t, h) >= 0
        and r + w <= usage.input_tokens
        and t <= usage.output_tokens
        and h <= w
    )
