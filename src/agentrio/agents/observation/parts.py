"""OpenTelemetry's parts: attributes, a phase's span record, the observed runtimes."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ...actors import exit_reason
from ...messages import (
    ModelReply,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from ...supervisors import Tree
    from ..budgets.budget import Budget
    from ..loop.phase import Phase

__all__ = ["model_name", "provider_name"]

_Attributes = dict[str, Any]


# The conventions' bucket boundaries for the two histograms.
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)


_SECONDS_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def provider_name(model: object) -> str:
    """``gen_ai.provider.name`` of *model*: a provider's wire format (``"openai"``,
    also for ``"openai-responses"``, ``"anthropic"``, ``"ollama"``), else the model's
    class name."""
    provider = getattr(model, "provider", None)
    config = getattr(provider, "config", None)
    kind = getattr(config, "kind", None)
    if isinstance(kind, str) and kind:
        return "openai" if kind == "openai-responses" else kind  # (the API's maker)
    return type(model).__name__


def model_name(model: object) -> str | None:
    """``gen_ai.request.model`` of *model*: its ``name`` at its provider, if it has one."""
    name = getattr(model, "name", None)
    return name if isinstance(name, str) and name else None


class _Shared:
    """The attributes of a phase's model calls and of their measurements: the same
    for every phase of one agent name, provider, model and output limit, so made
    once and shared (`OpenTelemetry._shared`), never changed (a call that needs
    others copies them)."""

    __slots__ = ("chat", "chat_name", "metric", "phase_name", "tokens")

    def __init__(self, name: str, provider: str, requested: str | None, max_tokens: int) -> None:
        metric: _Attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
        if requested is not None:
            metric["gen_ai.request.model"] = requested
        self.metric = metric
        self.tokens = (
            {**metric, "gen_ai.token.type": "input"},
            {**metric, "gen_ai.token.type": "output"},
        )
        self.chat: _Attributes = {
            **metric,
            "gen_ai.agent.name": name,
            "gen_ai.request.max_tokens": max_tokens,
        }
        self.chat_name = "chat" if requested is None else f"chat {requested}"
        self.phase_name = f"invoke_agent {name}"


class _PhaseSpan:
    """A phase's span, what its model calls added up to, and their attributes
    (the agent's model does not change during a phase)."""

    __slots__ = (
        "context",
        "input_tokens",
        "measured",
        "output_tokens",
        "recording",
        "shared",
        "span",
    )

    def __init__(self, span: Span, context: Context, shared: _Shared, unsampled: Context) -> None:
        self.span = span
        self.context = context  # the caller's, with this span current
        self.input_tokens = 0
        self.output_tokens = 0
        self.shared = shared
        # False: the sampler dropped the phase. Its calls then get no span at all
        # (not even asked for), no attributes and no context of their own: the
        # histograms are all they record.
        self.recording = span.is_recording()
        # The context its measurements are given, for their exemplars: none for a
        # phase not recorded (its trace is nowhere; and the SDK looks no further).
        self.measured = context if self.recording else unsampled


# The conventions' finish reasons are "stop", "length", "content_filter", "tool_call"
# and "error" (others allowed): a reply that asks for tools ended with "tool_call".
def _finish_reason(reply: ModelReply) -> str:
    """The conventions' finish reason of *reply*."""
    if reply.tool_calls and reply.finish_reason == "stop":
        return "tool_call"
    return reply.finish_reason


# A phase's stop reason as the finish reason of its final message (others as they are).
_PHASE_FINISH = {"done": "stop", "max_output_tokens": "length"}


def _error_type(exc: BaseException) -> str:
    name = type(exc).__name__
    return "cancelled" if name == "Cancelled" else name


def _limited(budget: Budget) -> bool:
    return not (
        budget.max_total_tokens is None
        and budget.max_requests is None
        and budget.max_cost_usd is None
    )


def _budget_left(budget: Budget) -> dict[str, int | float]:
    """What is left of the budget's limits, the least over it and the budgets it draws on."""
    left: dict[str, int | float] = {}
    b: Budget | None = budget
    while b is not None:
        used = b.usage()
        for key, limit, spent in (
            ("agentrio.budget.tokens_left", b.max_total_tokens, used.total_tokens),
            ("agentrio.budget.requests_left", b.max_requests, used.requests),
            ("agentrio.budget.cost_left_usd", b.max_cost_usd, used.cost_usd),
        ):
            if limit is not None:
                now = max(limit - spent, 0)
                left[key] = min(left.get(key, now), now)
        b = b.parent
    return left


def _in_flight(phase: Phase) -> bool:
    """Is *phase* still its agent's, and its agent alive (not cancelled mid-phase)?"""
    ref = phase.st.ref
    return phase.st.phase is phase and (ref is None or exit_reason(ref) is None)


class _Runtimes:
    """The runtimes an `OpenTelemetry` reads its counters and gauges from.

    The counters are the sums over the runtimes, closed ones included (so they
    never go down): a runtime found closed is added to the totals and let go.
    The metrics are collected in the reader's thread, so a lock guards the list.
    """

    __slots__ = ("_closed_dropped", "_closed_restarts", "_lock", "_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[tuple[Tree[Any], Budget]] = []
        self._closed_restarts = 0
        self._closed_dropped = 0

    def add(self, tree: Tree[Any], budget: Budget) -> None:
        with self._lock:
            self._let_go()
            self._open.append((tree, budget))

    def _let_go(self) -> None:
        """Add the closed runtimes' counts to the totals, and drop them (lock held)."""
        still: list[tuple[Tree[Any], Budget]] = []
        for tree, budget in self._open:
            if tree.closed:
                self._closed_restarts += tree.restarts
                self._closed_dropped += tree.bus.dropped
            else:
                still.append((tree, budget))
        self._open = still

    def restarts(self) -> int:
        with self._lock:
            self._let_go()
            return self._closed_restarts + sum(tree.restarts for tree, _ in self._open)

    def dropped(self) -> int:
        with self._lock:
            self._let_go()
            return self._closed_dropped + sum(tree.bus.dropped for tree, _ in self._open)

    def budget_left(self) -> list[tuple[str, int | float]]:
        """(kind, what is left) of each limit of each open runtime's root budget."""
        with self._lock:
            self._let_go()
            budgets = [budget for _, budget in self._open]
        left: list[tuple[str, int | float]] = []
        for budget in budgets:
            used = budget.usage()
            for kind, limit, spent in (
                ("tokens", budget.max_total_tokens, used.total_tokens),
                ("requests", budget.max_requests, used.requests),
                ("cost_usd", budget.max_cost_usd, used.cost_usd),
            ):
                if limit is not None:
                    left.append((kind, max(limit - spent, 0)))
        return left
