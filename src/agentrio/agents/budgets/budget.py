"""Budget: global, hierarchical, reservation-based accounting.

Every actor runs on one Trio thread, so budget updates are plain synchronous
code with no lock: a reservation is checked and taken in one step, with no
checkpoint in between, so no interleaving of agents can overspend.

Before a model call an agent reserves its estimate (prompt estimate plus the
output tokens it asks for, and one request) on its budget and every ancestor
budget; the reply's reported usage settles the lease, and what was reserved
but not used is released. A reservation that does not fit means the budget is
exhausted: the call is not made.

A call retried by its provider is charged for every attempt: each failed
attempt is charged at once ([`Lease.charge`][agentrio.types.Lease.charge]) and the call's room is
reserved again before the next one ([`Lease.renew`][agentrio.types.Lease.renew]), so the attempts
together never take more than the budget holds.

A root budget may have *leased* limits (``agentrio.ray``: one budget for a
cluster): a `LeaseSource` set on it raises its limits as a ledger grants
room. Without one (``_source`` is None) nothing here changes: the hot path
tests that attribute once per reservation.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Protocol, TypeVar

import outcome
import trio

from ...errors import InvalidArgument
from ...messages import Usage
from .spent import _Spent
from .usage import UsageTotals, usage_problem

__all__ = ["Budget", "Lease", "LeaseSource"]

_INF = math.inf
_T = TypeVar("_T")

_LIMITS = (
    "max_total_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "max_requests",
    "max_tool_calls",
    "max_cost_usd",
)


class LeaseSource(Protocol):
    """Where a root budget's limits come from when a ledger leases them (``agentrio.ray``).

    Set on a root budget as its ``_source`` (by the lease holder of
    ``agents.lease``). The budget calls it only off its usual path but for
    one test: after the agent loop's reservation (`reserve_now`) and when a
    call queues (`low`), and when a call would not fit even with every call
    in flight settled for nothing at the root (`may_grow`, `tool_call`). The
    source raises the root's limits as room is granted and then calls
    ``root._admit()``.
    """

    def low(self, root: Budget) -> None:
        """A call reserved (or queued) on *root*: ask for a refill if its room is low."""

    def may_grow(
        self, budget: Budget, tokens_in: int, tokens_out: int, cost: float, requests: int
    ) -> bool:
        """May a call of this size on *budget*, which does not fit the root's
        limits now, fit once more room is granted? (True: it waits for it;
        a refill has been asked for.)"""
        ...

    async def tool_call(self, budget: Budget) -> bool:
        """Count one tool call on *budget* once the root's lease has room for it.

        Returns:
            False when the cluster's ``max_tool_calls`` is exhausted.
        """
        ...


def _check_limit(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"Budget.{name} must be a number or None, got {value!r}")
    if math.isnan(value) or value < 0:
        raise InvalidArgument(f"Budget.{name} must be >= 0, got {value!r}")


class Budget(_Spent):
    """Limits on tokens, requests, tool calls and cost, shared by a subtree of agents.

    A runtime has one root budget (``open_runtime(budget=...)``); a
    [`child`][agentrio.Budget.child] budget draws from its parent, so exhausting any level stops
    the agents under it: what a budget spends is spent from all its
    ancestors too. ``None`` means no limit on that counter. The limits are
    attributes of the same names, and ``parent`` is the budget this one
    draws from (``None`` for a root). All updates are synchronous code on
    the Trio thread: no locks, and a check and its reservation happen in one
    step. See [The budget][the-budget].

    Example:

        budget = agentrio.Budget(max_total_tokens=100_000, max_requests=500)
        async with agentrio.open_runtime(budget=budget) as rt:
            ...
            print(rt.usage().total_tokens)

    Raises:
        InvalidArgument: a limit is not a number >= 0 (or None).
    """

    __slots__ = (
        "_r_cost",
        "_r_in",
        "_r_out",
        "_r_requests",
        "_source",
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
        self._attempts = 0
        self._cost = 0.0
        # Cached input, cache writes, reasoning: made once a call reports one.
        self._details: list[int] | None = None
        self._r_in = self._r_out = self._r_requests = 0
        self._r_cost = 0.0
        self._waiters: deque[_Waiter] | None = None
        # Where a leased root's limits come from (agentrio.ray); None: they are its own.
        self._source: LeaseSource | None = None
        self._restored: UsageTotals | None = None

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

    def _blocked_here(
        self, tokens_in: int, tokens_out: int, cost: float, reserved: bool, requests: int = 1
    ) -> str:
        """The limit of *this level* a call of this size breaks, or "".

        With *reserved*, what is reserved in flight counts as spent. *requests*
        is 0 for another attempt of a call whose request is already held.
        """
        r = 1 if reserved else 0
        if self.max_requests is not None and (
            self._requests + r * self._r_requests + requests > self.max_requests
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
        self, tokens_in: int, tokens_out: int, cost: float, *, reserved: bool, requests: int = 1
    ) -> str:
        budget: Budget | None = self
        while budget is not None:
            why = budget._blocked_here(tokens_in, tokens_out, cost, reserved, requests)
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

        What [`acquire`][agentrio.Budget.acquire] does first, without its checkpoint: a caller
        that gets None goes on to ``acquire`` (which queues it, or says the
        budget is exhausted). Unlike ``reserve``, it never takes room a call
        queued on the root budget is waiting for. The agent loop uses it
        before ``acquire``, which spares a coroutine per model call in the
        common case.
        """
        root = self._root()
        if root._waiters:
            return None
        lease = self.reserve(input_tokens, output_tokens, cost_usd)
        if root._source is not None:  # (a leased root: its room may be low now)
            root._source.low(root)
        return lease

    async def acquire(
        self,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float = 0.0,
        *,
        waited: Callable[[float], None] | None = None,
    ) -> Lease | None:
        """Reserve one model call, waiting while calls in flight hold the room it needs.

        Waiters are queued on the root budget and admitted first come, first
        served as leases settle. A call that would not fit even if every call
        in flight used nothing is not waited for: the budget is exhausted for
        it. Cancellable. *waited*, if given, is called with the seconds the
        call waited in the queue, once it leaves it (not if it did not wait,
        nor if it was cancelled).

        Returns:
            The [`Lease`][agentrio.types.Lease], or ``None`` when the budget is exhausted
            for a call of this size, at once or when it becomes so while the
            call waits.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        root = self._root()
        if not root._waiters:
            lease = self.reserve(input_tokens, output_tokens, cost_usd)
            if lease is not None:
                return lease
        if self.exhausted(input_tokens, output_tokens, cost_usd) and not self._may_grow(
            input_tokens, output_tokens, cost_usd, 1
        ):
            return None
        waiter = _Waiter(root, self, input_tokens, output_tokens, cost_usd)
        if root._waiters is None:
            root._waiters = deque()
        root._waiters.append(waiter)
        if root._source is not None:
            root._source.low(root)  # (a waiter: a refill may let it in sooner)
        since = trio.current_time() if waited is not None else 0.0
        granted: Lease | None = await trio.lowlevel.wait_task_rescheduled(waiter)
        if waited is not None:
            waited(trio.current_time() - since)
        return granted

    def _may_grow(self, tokens_in: int, tokens_out: int, cost: float, requests: int) -> bool:
        """Does a leased root expect room for this call, which does not fit its limits
        now? (False without a lease: the budget is exhausted for it.)"""
        source = self._root()._source
        return source is not None and source.may_grow(self, tokens_in, tokens_out, cost, requests)

    def _admit(self) -> None:
        """Hand leases to waiters, in order, while the head of the queue fits (root only)."""
        waiters = self._waiters
        while waiters:
            w = waiters[0]
            lease = w.take()
            if lease is None and not w.exhausted():
                return
            waiters.popleft()
            trio.lowlevel.reschedule(w.task, outcome.Value(lease))

    def reserve(self, input_tokens: int, output_tokens: int, cost_usd: float = 0.0) -> Lease | None:
        """Reserve one model call of this size (and one request) on this budget and its
        ancestors, now.

        Returns:
            A [`Lease`][agentrio.types.Lease] to settle with the reported usage, or ``None``
            when some level cannot fit it, counting what calls in flight have
            reserved (the call must not be made).
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
        """Count one model-driven tool call on this budget and its ancestors.

        Returns:
            False, and nothing counted, when some level's ``max_tool_calls``
            is reached.
        """
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

    async def wait_tool_call(self) -> bool:
        """After [`take_tool_call`][agentrio.Budget.take_tool_call] refused: count the call once a
        leased root's refill makes room for it (``agentrio.ray``).

        Returns:
            False at once without a lease, or when the cluster's tool calls
            are exhausted; True once the call is counted.
        """
        source = self._root()._source
        if source is None:
            return False
        return await source.tool_call(self)


class Lease:
    """A reservation for one model call, from [`Budget.reserve`][agentrio.Budget.reserve] or
    [`Budget.acquire`][agentrio.Budget.acquire]; not meant to be constructed by you.

    A call that its provider retries is charged attempt by attempt: each
    failed attempt with [`charge`][agentrio.types.Lease.charge], the room for the next one taken
    with [`renew`][agentrio.types.Lease.renew], and the answer (or the failure) with
    [`settle`][agentrio.types.Lease.settle].
    """

    __slots__ = ("_budget", "_cost", "_held", "_in", "_out", "settled")

    def __init__(self, budget: Budget, tokens_in: int, tokens_out: int, cost: float) -> None:
        self._budget = budget
        self._in = tokens_in
        self._out = tokens_out
        self._cost = cost
        self._held = True  # the room is reserved (not between a failed attempt and a retry)
        self.settled = False

    def _release(
        self, used_in: int, used_out: int, cost: float, requests: int, attempts: int
    ) -> Budget:
        """Free the room held (and the request, with *requests*), charge what was used.

        More tokens used than the room held counts as an overrun. Returns the root.
        """
        held = self._held
        self._held = False
        overrun = int(used_in + used_out > (self._in + self._out if held else 0))
        budget = self._budget
        while True:
            if held:
                budget._r_in -= self._in
                budget._r_out -= self._out
                budget._r_cost -= self._cost
            budget._r_requests -= requests
            budget._in += used_in
            budget._out += used_out
            budget._requests += requests
            budget._cost += cost
            budget._attempts += attempts
            budget._overruns += overrun
            if budget.parent is None:
                return budget
            budget = budget.parent

    def _take(self) -> Lease | None:
        """Reserve the call's room again, if it fits now (its request is held already)."""
        budget: Budget | None = self._budget
        assert budget is not None
        if budget._first_blocked(self._in, self._out, self._cost, reserved=True, requests=0):
            return None
        while budget is not None:
            budget._r_in += self._in
            budget._r_out += self._out
            budget._r_cost += self._cost
            budget = budget.parent
        self._held = True
        return self

    def charge(self, spent: Usage) -> bool:
        """Charge one attempt of the call that failed, and keep its room for a retry if it fits.

        *spent* is what the attempt used (what the server reported, or the
        estimate); it counts one attempt, not a request. The call's room is
        freed, the spend charged, and the room reserved again at once when
        it still fits, so a retry is made only inside the limits; otherwise
        [`renew`][agentrio.types.Lease.renew] waits for it. A provider calls it for an attempt
        it will retry, or when it has given up. An attempt that used more than
        the room is counted in ``overruns``. Usage that is negative, NaN or
        infinite is not charged: the room the call held is charged instead.

        Returns:
            False if *spent* could not be charged as it is (see above).
        """
        if self.settled:
            return True
        ok = not usage_problem(spent)
        if ok:
            used_in, used_out, cost = spent.input_tokens, spent.output_tokens, spent.cost_usd
            if spent.cached_input_tokens or spent.cache_write_tokens or spent.reasoning_tokens:
                self._budget._count_details(spent)
        else:
            used_in, used_out, cost = self._spent_room()
        self._release(used_in, used_out, cost, 0, 1)
        # A retry comes before the calls waiting to start: it already holds
        # its request, and waiting behind them could deadlock on it.
        self._take()
        return ok

    async def renew(self, *, waited: Callable[[float], None] | None = None) -> bool:
        """Reserve the call's room again for its next attempt.

        At once if it is held or fits (a retry goes before the calls waiting
        to start, behind other waiting retries),
        else it waits at the head of the queue while calls in flight hold the
        room (then *waited*, if given, is called with the seconds it waited).
        Cancellable.

        Returns:
            True once the room is reserved; False when the budget is
            exhausted for it (it would not fit even if every call in flight
            settled for nothing): the retry must not be made.
        """
        if self.settled:
            return False
        if self._held:
            return True
        await trio.lowlevel.checkpoint_if_cancelled()
        budget = self._budget
        root = budget._root()
        if self._take() is not None:
            return True
        if budget._first_blocked(
            self._in, self._out, self._cost, reserved=False, requests=0
        ) and not budget._may_grow(self._in, self._out, self._cost, 0):
            if root._waiters:
                root._admit()  # the room this call gave up may fit them
            return False
        waiter = _Waiter(root, budget, self._in, self._out, self._cost, self)
        if root._waiters is None:
            root._waiters = deque()
        # At the head, behind the retries already waiting there.
        at = 0
        while at < len(root._waiters) and root._waiters[at].lease is not None:
            at += 1
        root._waiters.insert(at, waiter)
        since = trio.current_time() if waited is not None else 0.0
        granted: Lease | None = await trio.lowlevel.wait_task_rescheduled(waiter)
        if waited is not None:
            waited(trio.current_time() - since)
        return granted is not None

    def _spent_room(self) -> tuple[int, int, float]:
        if self._held:
            return self._in, self._out, self._cost
        return 0, 0, 0.0

    def settle_unusable(self, *, attempts: int = 0) -> None:
        """Settle a call that was answered with usage that cannot be charged (not
        a ``Usage`` at all: ``None``, a tuple, a dict; ``None`` given to ``settle``
        means a failed call): the room the call held is charged, as
        [`settle`][agentrio.types.Lease.settle] does for a ``Usage`` with bad numbers, and
        the request and *attempts* are counted. A second settle does nothing."""
        if self.settled:
            return
        self.settled = True
        root = self._release(*self._spent_room(), 1, attempts)
        if root._waiters:
            root._admit()

    def settle(self, usage: Usage | None, *, attempts: int = 0) -> bool:
        """Charge what the call used (None: it failed, no tokens) and release the rest.

        Charges the budget and its ancestors. The request is counted even
        when the call failed. A call that used more tokens than reserved is
        charged in full and counted in ``overruns``. Usage that is negative,
        NaN or infinite, or counts that are not ints, are not charged: the
        room the call held is charged instead, so a bad report can never
        refund the budget. Settling lets waiting calls in; a second
        ``settle`` does nothing.

        Args:
            usage: what the answered attempt used, as reported.
            attempts: HTTP attempts to count with it (1 for the answer of a
                provider's model; the failed ones were counted by
                [`charge`][agentrio.types.Lease.charge]).

        Returns:
            False if *usage* could not be charged as it is (see above), else
            True.
        """
        if self.settled:
            return True
        self.settled = True
        used_in = used_out = 0
        cost = 0.0
        ok = True
        if usage is not None:
            i = o = -1
            c = 0.0
            if type(usage) is Usage:
                i, o, c = usage.input_tokens, usage.output_tokens, usage.cost_usd
            # (The common case inline, as usage_problem's first test: exact
            # types, no bool, no NaN, no detail counts; anything else asks it.)
            if (
                type(i) is int
                and type(o) is int
                and i >= 0
                and o >= 0
                and (type(c) is float or type(c) is int)
                and 0.0 <= c < _INF
                and not (
                    usage.cached_input_tokens or usage.cache_write_tokens or usage.reasoning_tokens
                )
            ):
                used_in, used_out, cost = i, o, c
            elif usage_problem(usage):
                ok = False
                used_in, used_out, cost = self._spent_room()
            else:
                used_in, used_out, cost = usage.input_tokens, usage.output_tokens, usage.cost_usd
                if usage.cached_input_tokens or usage.cache_write_tokens or usage.reasoning_tokens:
                    self._budget._count_details(usage)
        if not self._held:
            root = self._release(used_in, used_out, cost, 1, attempts)
        else:  # (_release's common case inline: one call less for each model call)
            self._held = False
            tin, tout, tcost = self._in, self._out, self._cost
            overrun = int(used_in + used_out > tin + tout)
            root = self._budget
            while True:
                root._r_in -= tin
                root._r_out -= tout
                root._r_cost -= tcost
                root._r_requests -= 1
                root._in += used_in
                root._out += used_out
                root._requests += 1
                root._cost += cost
                root._attempts += attempts
                root._overruns += overrun
                if root.parent is None:
                    break
                root = root.parent
        if root._waiters:
            root._admit()
        return ok


class _Waiter:
    """A model call (or a retry of one: *lease*) waiting for room; its own abort function."""

    __slots__ = ("budget", "cost", "lease", "root", "task", "tokens_in", "tokens_out")

    def __init__(
        self,
        root: Budget,
        budget: Budget,
        tin: int,
        tout: int,
        cost: float,
        lease: Lease | None = None,
    ) -> None:
        self.root = root
        self.budget = budget
        self.tokens_in = tin
        self.tokens_out = tout
        self.cost = cost
        self.lease = lease
        self.task = trio.lowlevel.current_task()

    def take(self) -> Lease | None:
        """The lease, if the room fits now."""
        if self.lease is not None:
            return self.lease._take()
        return self.budget.reserve(self.tokens_in, self.tokens_out, self.cost)

    def exhausted(self) -> bool:
        """Would it not fit even if every call in flight settled for nothing?"""
        requests = 0 if self.lease is not None else 1
        return bool(
            self.budget._first_blocked(
                self.tokens_in, self.tokens_out, self.cost, reserved=False, requests=requests
            )
        ) and not self.budget._may_grow(self.tokens_in, self.tokens_out, self.cost, requests)

    def __call__(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        waiters = self.root._waiters
        if waiters is not None:
            head = bool(waiters) and waiters[0] is self
            waiters.remove(self)
            if head:  # those queued behind it may fit now
                self.root._admit()
        return trio.lowlevel.Abort.SUCCEEDED
