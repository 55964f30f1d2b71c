"""A host's lease on a cluster's budget: its root budget's limits come from a ledger.

``agentrio.ray`` keeps one budget for a whole cluster in a ledger
(``agentrio.ray._ledger.Ledger``, in a Ray actor). Each host's root
[`Budget`][agentrio.Budget] has *leased* limits: its `LeaseHolder` sets them to
what the ledger granted, and the host's agents reserve against them exactly
as in one process. The holder renews the lease every ``renew_every``
seconds (a heartbeat that reports the host's settled usage), and at once
when the free room falls under the low-water mark or a call waits for room;
a call that does not fit the lease waits for the refill, unless the ledger's
*ceiling* says it cannot fit even if every other host's lease came back
unused (then it is exhausted, as in one process).

This module holds no Ray: the holder talks to the ledger through an ``ask``
function (`Ask`), so hosts in one process can share one ledger object.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeAlias

import msgspec
import trio

from ..._checks import short_repr
from ..._log import log_extra
from ...errors import InvalidArgument
from .budget import Budget
from .usage import UsageTotals

__all__ = [
    "COUNTERS",
    "NO_COUNTS",
    "Ask",
    "Counts",
    "Grant",
    "LeaseHolder",
    "Lost",
    "Report",
    "check_counts",
    "leased_budget",
    "limits_of",
    "report_lost",
    "usage_counts",
]

_log = logging.getLogger("agentrio.agents.budgets.lease")
RENEW_TIMEOUT_PERIODS = 4  # a renewal not answered within 4 periods is given up, tried again
_INF = math.inf

# The counters, in the order of every Counts: the Budget limits of the same names.
COUNTERS = (
    "max_total_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "max_requests",
    "max_tool_calls",
    "max_cost_usd",
)
_COST = COUNTERS.index("max_cost_usd")  # the one counter that is not a whole number
_TOOLS = COUNTERS.index("max_tool_calls")
Counts: TypeAlias = tuple[float, float, float, float, float, float]
NO_COUNTS: Counts = (0, 0, 0, 0, 0, 0.0)


class Report(msgspec.Struct, frozen=True):
    """A host's renewal: what its root budget has settled and holds in flight.

    Attributes:
        host: the host's name (its lease's key).
        spent: settled usage, whole (not a delta: a retried report counts once).
        reserved: what calls in flight hold.
        limit: the limits the host holds now (``inf``: none); lower than the
            last grant only if it gave room back.
        need: the size of the call waiting at the head of its queue (zeros: none).
        closing: the host is closing: its lease ends, what it did not spend goes back.
    """

    host: str
    spent: Counts
    reserved: Counts = NO_COUNTS
    limit: Counts = (_INF,) * 6
    need: Counts = NO_COUNTS
    closing: bool = False


class Lost(msgspec.Struct, frozen=True):
    """A lost host's checkpointed usage, sent by the live host that opened its store.

    Attributes:
        host: the lost host's name.
        spent: its root budget's totals in its last checkpoint (None: its store
            holds none, and its lease stays counted as spent).
    """

    host: str
    spent: Counts | None


class Grant(msgspec.Struct, frozen=True):
    """The ledger's answer to a `Report`.

    Attributes:
        limit: the limits the host may hold now (``inf``: the cluster has none).
        ceiling: the highest each limit could ever go for this host (the
            cluster's limit less what the other hosts have spent): a call
            that passes it is exhausted.
        low: the low-water mark of free room (a refill is asked under it).
        renew_every: seconds between heartbeats.
        release: other hosts wait for room: give back what no call of yours holds.
        closed: the lease has ended (the host closed, or was declared lost):
            nothing more may be spent on it.
    """

    limit: Counts
    ceiling: Counts
    low: Counts
    renew_every: float
    release: bool = False
    closed: bool = False


def limits_of(budget: Budget) -> Counts:
    """*budget*'s limits as Counts (``inf``: no limit)."""
    values = [getattr(budget, name) for name in COUNTERS]
    return tuple(_INF if v is None else float(v) for v in values)  # type: ignore[return-value]


def _counts(values: list[float]) -> Counts:
    return tuple(values)  # type: ignore[return-value]


def check_counts(what: str, counts: object) -> Counts:
    """*counts* as Counts, or InvalidArgument: six numbers >= 0 (``inf`` allowed)."""
    if not isinstance(counts, tuple) or len(counts) != 6:
        raise InvalidArgument(f"{what} must be 6 numbers, got {short_repr(counts)}")
    for value in counts:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InvalidArgument(f"{what} must be numbers >= 0, got {short_repr(counts)}")
    return counts


def usage_counts(usage: UsageTotals) -> Counts:
    """*usage* as Counts (the order of `COUNTERS`)."""
    return (
        usage.input_tokens + usage.output_tokens,
        usage.input_tokens,
        usage.output_tokens,
        usage.requests,
        usage.tool_calls,
        usage.cost_usd,
    )


_ONE_TOOL_CALL: Counts = (0, 0, 0, 0, 1, 0.0)

# Sends a message to the ledger, returns its answer (Ledger.handle's).
Ask: TypeAlias = Callable[[Report | Lost], Awaitable[object]]


def _spent(root: Budget) -> list[float]:
    return [
        root._in + root._out,
        root._in,
        root._out,
        root._requests,
        root._tool_calls,
        root._cost,
    ]


def _reserved(root: Budget) -> list[float]:
    return [root._r_in + root._r_out, root._r_in, root._r_out, root._r_requests, 0, root._r_cost]


def _limits(root: Budget) -> Counts:
    return limits_of(root)


def _set_limits(root: Budget, limits: Counts | list[float]) -> None:
    for i, name in enumerate(COUNTERS):
        value = limits[i]
        if value == _INF:
            setattr(root, name, None)
        else:
            setattr(root, name, value if i == _COST else int(value))


class LeaseHolder:
    """A host's lease on the cluster's budget: its root budget's limits come from the ledger.

    Not made by you: ``agentrio.ray`` makes one per host (`leased_budget`).
    It is the root budget's `LeaseSource`: the budget calls it after a
    reservation (to refill under the low-water mark) and when a call does
    not fit the lease (to wait for a refill instead of failing, unless the
    cluster is exhausted for it). Everything runs on the host's Trio thread.
    """

    def __init__(self, ask: Ask, host: str, budget: Budget) -> None:
        if budget.parent is not None or budget._source is not None:
            raise InvalidArgument(f"{budget!r} is not a root budget free to lease")
        self.host = host
        self.budget = budget
        self._ask = ask
        self._limited: tuple[int, ...] = ()
        self._low: Counts = NO_COUNTS
        self._ceiling: Counts = (_INF,) * 6
        self._renew_every = 1.0
        self.closed = False
        self._tool_need = 0
        self._wake = trio.Event()
        self._granted = trio.Event()
        self.renewals = 0
        # The last renewal left the host short (the pool is dry): the next waits a heartbeat.
        self._dry = False

    # -- LeaseSource: called by the budget -----------------------------------------------

    def low(self, root: Budget) -> None:
        """Wake the refill if the root's free room is under the low-water mark, or a call waits."""
        if not self._wake.is_set() and self._short(root):
            self._wake.set()

    def may_grow(
        self, budget: Budget, tokens_in: int, tokens_out: int, cost: float, requests: int
    ) -> bool:
        """May a call that does not fit the root's lease fit once it is refilled? (It
        may unless a level below the root is exhausted, the lease has ended, or
        the call passes the cluster's ceiling for this host.) Asks for the refill."""
        level = budget
        while level.parent is not None:
            if level._blocked_here(tokens_in, tokens_out, cost, False, requests):
                return False
            level = level.parent
        if self.closed:
            return False
        call = (tokens_in + tokens_out, tokens_in, tokens_out, requests, 0, cost)
        if not self._fits_ceiling(level, call):
            return False
        self._wake.set()
        return True

    async def tool_call(self, budget: Budget) -> bool:
        """Count one tool call once the lease has room for it; False when the cluster's
        ``max_tool_calls`` is exhausted for this host (or a level below the root's is)."""
        while not budget.take_tool_call():
            level = budget
            while level.parent is not None:
                if level.max_tool_calls is not None and level._tool_calls >= level.max_tool_calls:
                    return False
                level = level.parent
            if self.closed or not self._fits_ceiling(level, _ONE_TOOL_CALL):
                return False
            self._tool_need += 1
            self._wake.set()
            granted = self._granted
            try:
                await granted.wait()
            finally:
                self._tool_need -= 1
        return True

    def _fits_ceiling(self, root: Budget, call: tuple[float, ...]) -> bool:
        """Could *call* fit if every other host's lease came back unused? (A model
        call is refused once the cost reached the ceiling, as in one process; a
        tool call costs nothing.)"""
        spent = _spent(root)
        ceiling = self._ceiling
        model_call = call is not _ONE_TOOL_CALL
        for i in self._limited:
            if spent[i] + call[i] > ceiling[i]:
                return False
            if i == _COST and model_call and spent[i] >= ceiling[i]:
                return False
        return True

    # -- the refill task ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """`open` the lease, then `serve` it (``await nursery.start(holder.run)``)."""
        await self.open()
        task_status.started()
        await self.serve()

    async def open(self) -> None:
        """Take the first lease and lease the root budget's limits from it.

        Raises:
            Whatever the ledger's transport raises (a host cannot run without
            a lease).
        """
        await self._renew()
        self.budget._source = self

    async def serve(self) -> None:
        """Renew the lease until cancelled; then end it (what was not spent goes back).

        A renewal that fails is logged and tried again: meanwhile the host
        spends only its lease.
        """
        try:
            while True:
                await self._wait_for_renewal()
                why = ""
                # (A ledger that does not answer: the grant it may still make is never
                # held, so the host holds less than the ledger counts, never more.)
                with trio.move_on_after(self._renew_every * RENEW_TIMEOUT_PERIODS) as scope:
                    try:
                        await self._renew()
                    except Exception as exc:  # (the transport's: the lease stands)
                        why = type(exc).__name__
                if scope.cancelled_caught:
                    why = "no answer"
                if why:
                    _log.warning(
                        "agentrio: host %s could not renew its budget lease: %s",
                        self.host,
                        why,
                        extra=log_extra(),
                    )
        finally:
            with trio.move_on_after(self._renew_every * 2) as scope:
                scope.shield = True
                await self._close()

    async def _wait_for_renewal(self) -> None:
        """Until a heartbeat is due or the budget asked for a refill (not sooner than
        a heartbeat after a renewal that granted nothing: the pool is dry)."""
        with trio.move_on_after(self._renew_every):
            if not self._dry:
                await self._wake.wait()
            else:
                await trio.sleep_forever()
        self._wake = trio.Event()

    async def _renew(self) -> None:
        root = self.budget
        report = Report(
            host=self.host,
            spent=_counts(_spent(root)),
            reserved=_counts(_reserved(root)),
            limit=_limits(root),
            need=self._need(root),
        )
        grant = await self._ask(report)
        if not isinstance(grant, Grant):
            raise InvalidArgument(
                f"the ledger answered a Report with {short_repr(grant)}, not a Grant"
            )
        self.renewals += 1
        self._apply(grant)
        self._dry = self._short(root)

    def _short(self, root: Budget) -> bool:
        """Is a call waiting, or the free room under the low-water mark?"""
        if root._waiters or self._tool_need:
            return True
        spent, reserved = _spent(root), _reserved(root)
        return any(
            _limit_value(root, i) - spent[i] - reserved[i] < self._low[i] for i in self._limited
        )

    def _need(self, root: Budget) -> Counts:
        """The size of the call waiting first on the root (and of the tool calls waiting)."""
        need = [0.0, 0.0, 0.0, 0.0, float(self._tool_need), 0.0]
        if root._waiters:
            w = root._waiters[0]
            need[0], need[1], need[2] = w.tokens_in + w.tokens_out, w.tokens_in, w.tokens_out
            need[3] = 0 if w.lease is not None else 1
            need[_COST] = w.cost
        return _counts(need)

    def _apply(self, grant: Grant) -> None:
        """Hold what *grant* says (never more than the ledger counts), let waiters in."""
        root = self.budget
        self._limited = tuple(i for i, v in enumerate(grant.ceiling) if v < _INF)
        self._ceiling = grant.ceiling
        self._low = grant.low
        self._renew_every = grant.renew_every
        _set_limits(root, grant.limit)
        if grant.closed:
            self.closed = True
        if root._waiters:
            root._admit()
        if grant.release and not grant.closed:
            self._give_back(root)
        granted, self._granted = self._granted, trio.Event()
        granted.set()

    def _give_back(self, root: Budget) -> None:
        """Others wait, before this host's own waiting calls (the ledger serves hosts
        first come, first served): keep only what calls in flight (and tool calls
        woken by this grant) hold; the next renewal tells the ledger."""
        limits = list(_limits(root))
        spent, reserved = _spent(root), _reserved(root)
        reserved[_TOOLS] = self._tool_need
        for i in self._limited:
            limits[i] = min(limits[i], spent[i] + reserved[i])
        _set_limits(root, limits)

    async def _close(self) -> None:
        """End the lease: report what was spent; the ledger takes back the rest."""
        root = self.budget
        root._source = None
        report = Report(
            host=self.host,
            spent=_counts(_spent(root)),
            reserved=_counts(_reserved(root)),
            limit=_limits(root),
            closing=True,
        )
        try:
            await self._ask(report)
        except Exception as exc:  # (its room stays counted as spent: never overspent)
            _log.warning(
                "agentrio: host %s could not end its budget lease: %s",
                self.host,
                type(exc).__name__,
                extra=log_extra(),
            )
        self.closed = True

    async def report_lost(self, host: str, spent: UsageTotals | None) -> None:
        """Tell the ledger what lost *host*'s checkpoints say it spent (the
        ``restored`` usage of the budget of a runtime opened on its store), so its
        unspent lease can go back once expired."""
        counts = None if spent is None else usage_counts(spent)
        await self._ask(Lost(host, counts))


def _limit_value(root: Budget, i: int) -> float:
    value = getattr(root, COUNTERS[i])
    return _INF if value is None else float(value)


@asynccontextmanager
async def leased_budget(ask: Ask, host: str) -> AsyncIterator[LeaseHolder]:
    """A root budget whose limits a ledger leases, for a host's runtime.

    Open the runtime inside the block (``open_runtime(budget=holder.budget)``):
    the first lease is taken before the block starts, renewed while it runs,
    and ended (what was not spent goes back) when it ends.

    Args:
        ask: sends a message to the ledger and returns its answer (in one
            process: `Ledger.handle` with the time; on a cluster, the ledger
            actor's ``handle``).
        host: the host's name, its lease's key.
    """
    holder = LeaseHolder(ask, host, Budget())
    await holder.open()  # (its error raised as itself, not in a group)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder.serve)
        yield holder
        nursery.cancel_scope.cancel()


async def report_lost(budget: Budget, host: str, spent: UsageTotals | None) -> None:
    """Tell the ledger that *budget*'s host opened lost *host*'s store, whose checkpoints
    say it spent *spent* (the ``restored`` usage of the adopted runtime's budget); so
    the lost host's unspent lease goes back to the pool once it has expired.

    Nothing is sent if *budget*'s root is not leased (no ledger).

    Raises:
        whatever the ledger's transport raises.
    """
    source = budget._root()._source
    if isinstance(source, LeaseHolder):
        await source.report_lost(host, spent)
