"""Budget: global, hierarchical, reservation-based accounting.

Every actor runs on one Trio thread, so budget updates are plain synchronous
code with no lock: a reservation is checked and taken in one step, with no
checkpoint in between, so no interleaving of agents can overspend.

Before a model call an agent reserves its estimate (prompt estimate plus the
output tokens it asks for, and one request) on its budget and every ancestor
budget; the reply's reported usage settles the lease, and what was reserved
but not used is released. A reservation that does not fit means the budget is
exhausted: the call is not made.
"""

from __future__ import annotations

import math
from collections import deque

import msgspec
import outcome
import trio

from ..errors import InvalidArgument
from ..messages import Usage

__all__ = ["Budget", "Lease", "UsageTotals"]

_LIMITS = (
    "max_total_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "max_requests",
    "max_tool_calls",
    "max_cost_usd",
)


class UsageTotals(msgspec.Struct, frozen=True):
    """Usage summed over many model and tool calls (``rt.usage()``, ``Budget.usage()``).

    Attributes:
        input_tokens: prompt tokens.
        output_tokens: completion tokens.
        total_tokens: both.
        requests: model calls.
        tool_calls: model-driven tool calls.
        cost_usd: the reported cost.
        overruns: calls whose reported usage exceeded what was reserved for
            them (the provider ignored its output limit, or the prompt
            estimate was low); those are still charged in full.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    requests: int = 0
    tool_calls: int = 0
    cost_usd: float = 0.0
    overruns: int = 0


def _check_limit(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"Budget.{name} must be a number or None, got {value!r}")
    if math.isnan(value) or value < 0:
        raise InvalidArgument(f"Budget.{name} must be >= 0, got {value!r}")


class Budget:
    """Limits on tokens, requests, tool calls and cost, shared by a subtree of agents.

    A runtime has one root budget (``open_runtime(budget=...)``); a
    :meth:`child` budget draws from its parent, so exhausting any level stops
    the agents under it. ``None`` means no limit on that counter.

    Example::

        budget = agentrio.Budget(max_total_tokens=100_000, max_requests=500)
        async with agentrio.open_runtime(budget=budget) as rt:
            ...
            print(rt.usage().total_tokens)
    """

    __slots__ = (
        "_cost",
        "_in",
        "_out",
        "_overruns",
        "_r_cost",
        "_r_in",
        "_r_out",
        "_r_requests",
        "_requests",
        "_tool_calls",
        "_waiters",
        "max_cost_usd",
        "max_input_tokens",
        "max_output_tokens",
        "max_requests",
        "max_tool_calls",
        "max_total_tokens",
        "parent",
    )

    def __init__(
        self,
        *,
        max_total_tokens: int | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_requests: int | None = None,
        max_tool_calls: int | None = None,
        max_cost_usd: float | None = None,
    ) -> None:
        for name, value in zip(
            _LIMITS,
            (
                max_total_tokens,
                max_input_tokens,
                max_output_tokens,
                max_requests,
                max_tool_calls,
                max_cost_usd,
            ),
            strict=True,
        ):
            _check_limit(name, value)
        self.max_total_tokens = max_total_tokens
        self.max_input_tokens = max_input_tokens
        self.max_output_tokens = max_output_tokens
        self.max_requests = max_requests
        self.max_tool_calls = max_tool_calls
        self.max_cost_usd = max_cost_usd
        self.parent: Budget | None = None
        self._in = self._out = self._requests = self._tool_calls = self._overruns = 0
        self._cost = 0.0
        self._r_in = self._r_out = self._r_requests = 0
        self._r_cost = 0.0
        self._waiters: deque[_Waiter] | None = None

    def __repr__(self) -> str:
        limits = ", ".join(
            f"{n}={getattr(self, n)!r}" for n in _LIMITS if getattr(self, n) is not None
        )
        return f"Budget({limits})"

    def child(
        self,
        *,
        max_total_tokens: int | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_requests: int | None = None,
        max_tool_calls: int | None = None,
        max_cost_usd: float | None = None,
    ) -> Budget:
        """Return a budget for a subtree; what it spends is spent from this one too."""
        budget = Budget(
            max_total_tokens=max_total_tokens,
            max_input_tokens=max_input_tokens,
            max_output_tokens=max_output_tokens,
            max_requests=max_requests,
            max_tool_calls=max_tool_calls,
            max_cost_usd=max_cost_usd,
        )
        budget.parent = self
        return budget

    # -- checks ------------------------------------------------------------------------

    def _blocked_here(self, tokens_in: int, tokens_out: int, cost: float, reserved: bool) -> str:
        """The limit of *this level* a call of this size breaks, or "".

        With *reserved*, what is reserved in flight counts as spent.
        """
        r = 1 if reserved else 0
        if self.max_requests is not None and (
            self._requests + r * self._r_requests + 1 > self.max_requests
        ):
            return "max_requests"
        if self.max_input_tokens is not None and (
            self._in + r * self._r_in + tokens_in > self.max_input_tokens
        ):
            return "max_input_tokens"
        if self.max_output_tokens is not None and (
            self._out + r * self._r_out + tokens_out > self.max_output_tokens
        ):
            return "max_output_tokens"
        if self.max_total_tokens is not None and (
            self._in + self._out + r * (self._r_in + self._r_out) + tokens_in + tokens_out
            > self.max_total_tokens
        ):
            return "max_total_tokens"
        if self.max_cost_usd is not None:
            cost_so_far = self._cost + r * self._r_cost
            if cost_so_far + cost > self.max_cost_usd or cost_so_far >= self.max_cost_usd:
                return "max_cost_usd"
        return ""

    def blocked(self, tokens_in: int = 1, tokens_out: int = 0, cost: float = 0.0) -> str:
        """The first limit (here or in an ancestor) a model call of this size breaks now,
        counting what is reserved in flight; "" if it fits."""
        return self._first_blocked(tokens_in, tokens_out, cost, reserved=True)

    def exhausted(self, tokens_in: int = 1, tokens_out: int = 0, cost: float = 0.0) -> str:
        """The first limit a call of this size breaks even when every call in flight
        has settled for nothing; "" if it may still fit later."""
        return self._first_blocked(tokens_in, tokens_out, cost, reserved=False)

    def _first_blocked(
        self, tokens_in: int, tokens_out: int, cost: float, *, reserved: bool
    ) -> str:
        budget: Budget | None = self
        while budget is not None:
            why = budget._blocked_here(tokens_in, tokens_out, cost, reserved)
            if why:
                return why
            budget = budget.parent
        return ""

    def _attach(self, parent: Budget) -> None:
        """Make this top-level budget draw from *parent* from now on.

        Refused while calls it reserved are in flight or queued: settling them
        would take from ancestors that never reserved them.
        """
        assert self.parent is None
        if self._r_requests or self._waiters:
            raise InvalidArgument(
                f"{self!r} has model calls in flight; it cannot be carved out of another "
                "budget until they settle"
            )
        self.parent = parent

    def _root(self) -> Budget:
        budget = self
        while budget.parent is not None:
            budget = budget.parent
        return budget

    def reserve_now(
        self, input_tokens: int, output_tokens: int, cost_usd: float = 0.0
    ) -> Lease | None:
        """Reserve at once if no call is queued and this one fits; else None.

        What :meth:`acquire` does first, without its checkpoint: a caller
        that gets None goes on to ``acquire`` (which queues it, or says the
        budget is exhausted). Never jumps the queue.
        """
        if self._root()._waiters:
            return None
        return self.reserve(input_tokens, output_tokens, cost_usd)

    async def acquire(
        self, input_tokens: int, output_tokens: int, cost_usd: float = 0.0
    ) -> Lease | None:
        """Reserve one model call, waiting while calls in flight hold the room it needs.

        Waiters are admitted first come, first served as leases settle. A call
        that would not fit even if every call in flight used nothing is not
        waited for: the budget is exhausted for it.

        Returns:
            The :class:`Lease`, or ``None`` when the budget is exhausted.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        root = self._root()
        if not root._waiters:
            lease = self.reserve(input_tokens, output_tokens, cost_usd)
            if lease is not None:
                return lease
        if self.exhausted(input_tokens, output_tokens, cost_usd):
            return None
        waiter = _Waiter(root, self, input_tokens, output_tokens, cost_usd)
        if root._waiters is None:
            root._waiters = deque()
        root._waiters.append(waiter)
        granted: Lease | None = await trio.lowlevel.wait_task_rescheduled(waiter)
        return granted

    def _admit(self) -> None:
        """Hand leases to waiters, in order, while the head of the queue fits (root only)."""
        waiters = self._waiters
        while waiters:
            w = waiters[0]
            lease = w.budget.reserve(w.tokens_in, w.tokens_out, w.cost)
            if lease is None and not w.budget.exhausted(w.tokens_in, w.tokens_out, w.cost):
                return
            waiters.popleft()
            trio.lowlevel.reschedule(w.task, outcome.Value(lease))

    def reserve(self, input_tokens: int, output_tokens: int, cost_usd: float = 0.0) -> Lease | None:
        """Reserve one model call of this size on this budget and its ancestors.

        Returns:
            A :class:`Lease` to settle with the reported usage, or ``None``
            when some level cannot fit it (the call must not be made).
        """
        if self.blocked(input_tokens, output_tokens, cost_usd):
            return None
        budget: Budget | None = self
        while budget is not None:
            budget._r_in += input_tokens
            budget._r_out += output_tokens
            budget._r_requests += 1
            budget._r_cost += cost_usd
            budget = budget.parent
        return Lease(self, input_tokens, output_tokens, cost_usd)

    def take_tool_call(self) -> bool:
        """Count one model-driven tool call; False (and nothing counted) if over a limit."""
        budget: Budget | None = self
        while budget is not None:
            if budget.max_tool_calls is not None and budget._tool_calls >= budget.max_tool_calls:
                return False
            budget = budget.parent
        budget = self
        while budget is not None:
            budget._tool_calls += 1
            budget = budget.parent
        return True

    def usage(self) -> UsageTotals:
        """What this budget (with its children) has spent so far."""
        return UsageTotals(
            input_tokens=self._in,
            output_tokens=self._out,
            total_tokens=self._in + self._out,
            requests=self._requests,
            tool_calls=self._tool_calls,
            cost_usd=self._cost,
            overruns=self._overruns,
        )

    @property
    def reserved_tokens(self) -> int:
        """Tokens reserved by model calls in flight."""
        return self._r_in + self._r_out


class Lease:
    """A reservation for one model call, from :meth:`Budget.reserve`."""

    __slots__ = ("_budget", "_cost", "_in", "_out", "settled")

    def __init__(self, budget: Budget, tokens_in: int, tokens_out: int, cost: float) -> None:
        self._budget = budget
        self._in = tokens_in
        self._out = tokens_out
        self._cost = cost
        self.settled = False

    def settle(self, usage: Usage | None) -> None:
        """Charge what the call really used (None: it failed, charge nothing) and release the rest.

        The request itself is counted even when the call failed.
        """
        if self.settled:
            return
        self.settled = True
        used_in = used_out = 0
        cost = 0.0
        if usage is not None:
            used_in, used_out, cost = usage.input_tokens, usage.output_tokens, usage.cost_usd
        overrun = used_in + used_out > self._in + self._out
        budget: Budget | None = self._budget
        while budget is not None:
            budget._r_in -= self._in
            budget._r_out -= self._out
            budget._r_requests -= 1
            budget._r_cost -= self._cost
            budget._in += used_in
            budget._out += used_out
            budget._requests += 1
            budget._cost += cost
            budget._overruns += overrun
            if budget.parent is None and budget._waiters:
                budget._admit()
            budget = budget.parent


class _Waiter:
    """A model call waiting for room; it is its own abort function."""

    __slots__ = ("budget", "cost", "root", "task", "tokens_in", "tokens_out")

    def __init__(self, root: Budget, budget: Budget, tin: int, tout: int, cost: float) -> None:
        self.root = root
        self.budget = budget
        self.tokens_in = tin
        self.tokens_out = tout
        self.cost = cost
        self.task = trio.lowlevel.current_task()

    def __call__(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        waiters = self.root._waiters
        if waiters is not None:
            head = bool(waiters) and waiters[0] is self
            waiters.remove(self)
            if head:  # those queued behind it may fit now
                self.root._admit()
        return trio.lowlevel.Abort.SUCCEEDED
