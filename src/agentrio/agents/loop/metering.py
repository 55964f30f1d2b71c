"""A model call metered and settled: its lease charged for each attempt, its usage checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ...errors import UsageInvalid
from ...messages import (
    ModelReply,
    Usage,
    Waited,
)
from ..budgets.budget import Lease
from ..budgets.usage import usage_problem

if TYPE_CHECKING:
    from ...providers.base import Model, Prices
    from .state import _AgentState

__all__ = ["settle_reply"]


def _priced(reply: ModelReply, pricing: Prices) -> ModelReply:
    """*reply* with its cost from the model's pricing (the provider did not price it)."""
    usage = reply.usage
    try:
        priced = pricing.cost(usage)
    except TypeError:  # counts that are not numbers: the settle refuses them
        return reply
    return msgspec.structs.replace(reply, usage=msgspec.structs.replace(usage, cost_usd=priced))


def settle_reply(
    lease: Lease, reply: ModelReply, pricing: Prices | None, attempts: int
) -> ModelReply | None:
    """Settle *lease* with what *reply* used (priced from *pricing* if the model
    has one and the reply has no cost); the reply as charged.

    None if its usage cannot be charged (not a ``Usage``, or negative, NaN or
    infinite numbers): the call's room was charged instead.
    """
    usage = reply.usage
    if not isinstance(usage, Usage):  # (None, a tuple, a dict: from a model object)
        lease.settle_unusable(attempts=attempts)
        return None
    if pricing and not usage.cost_usd:
        reply = _priced(reply, pricing)
    if not lease.settle(reply.usage, attempts=attempts):
        return None
    return reply


def _usage_invalid(model: object, usage: object) -> UsageInvalid:
    provider = getattr(model, "provider", None)
    name = getattr(provider, "name", None) or type(model).__name__
    return UsageInvalid(
        f"model {name!r} reported usage that cannot be charged: {usage_problem(usage)}; "
        "the call's reservation was charged instead",
        provider=name,
    )


class _Meter:
    """Charges each failed attempt of one model call, and allows a retry only
    when the budget has room for it (an ``AttemptMeter``: see providers/base.py).

    A failed attempt that did not report its usage is charged the call's input
    estimate (what was reserved for it) plus the estimate of what it received,
    at most ``max_out``: never more than the room the call held.
    """

    __slots__ = ("cost", "estimate", "lease", "max_out", "model", "pricing", "refused", "st")

    def __init__(
        self,
        st: _AgentState,
        lease: Lease,
        estimate: int,
        max_out: int,
        cost: float,
        model: Model | None = None,
        pricing: Prices | None = None,
    ) -> None:
        self.st = st
        self.lease = lease
        self.estimate = estimate
        self.max_out = max_out
        self.cost = cost
        # The model called, if not the agent's (a summary model): its pricing too.
        self.model, self.pricing = (st.model, st.pricing) if model is None else (model, pricing)
        self.refused = ""  # the limit that left no room for a retry

    def failed(self, input_tokens: int | None, output_tokens: int | None, received: str) -> None:
        st = self.st
        if input_tokens is None:
            input_tokens = self.estimate
        if output_tokens is None:
            output_tokens = min(st.info.estimator(received), self.max_out) if received else 0
        pricing = self.pricing
        # (How the attempt's input split between cache reads, writes and the
        # rest is not known: it is priced as the reservation was.)
        cost = pricing.reserve(input_tokens, output_tokens) if pricing else 0.0
        spent = Usage(input_tokens, output_tokens, cost)
        if not self.lease.charge(spent):
            st.count(Usage(self.estimate, self.max_out, self.cost), 0, 1)
            raise _usage_invalid(self.model, spent)
        st.count(spent, 0, 1)

    def waited(self, what: str, seconds: float, provider: str) -> None:
        st = self.st
        bus = st.services.bus
        if bus.active and st.ref is not None:
            bus.publish(Waited(path=st.ref.path, what=what, seconds=seconds, provider=provider))
        if st.services.otel is not None:  # (its agentrio.wait.duration)
            st.services.otel.waited(st, what, seconds)

    def _budget_waited(self, seconds: float) -> None:
        self.waited("budget", seconds, "")

    async def retry(self) -> bool:
        services = self.st.services
        waited = self._budget_waited if services.bus.active or services.otel else None
        if await self.lease.renew(waited=waited):
            return True
        self.refused = self.st.budget.exhausted(self.estimate, self.max_out, self.cost) or "budget"
        return False
