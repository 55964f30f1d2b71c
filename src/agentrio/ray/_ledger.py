"""One budget for a cluster: a ledger that leases room to hosts, and each host's lease holder.

The cluster's limits live in one `Ledger` (in a named, detached Ray actor,
`start_ledger`; the class itself needs no Ray, so its logic is tested
alone). Each host's root [`Budget`][agentrio.Budget] has *leased* limits: its
lease holder (``agents/budgets/lease.py``, no Ray in it either; `run_leased` runs a
host's runtime inside one) sets them to what the ledger granted it, and the host reserves
against them exactly as one process does (no call is made that does not fit
its lease). The holder renews the lease every ``renew_every`` seconds (a
heartbeat that reports the host's settled usage) and at once when the
host's free room falls under the low-water mark or a call waits for room.

The ledger's invariants, per limited counter:

- the room it has granted (or a host has spent, if more) sums to at most the
  cluster's limit, so hosts that live never overspend it together;
- it never lets a host's limit pass ``spent + max(lease, call)``, where
  ``spent`` is the settled usage the host reported with that renewal: what a
  host spends without the ledger knowing is at most one lease (or its
  largest call);
- a host that stops renewing is *expired* after ``ttl``: its room stays
  counted as spent, and goes back to the pool only when its checkpoints say
  what it spent (`Ledger.lost`, called by the live host that opens its
  store), never on a timer alone.

A host whose lease is spent waits for a refill; it is told the budget is
exhausted only when the call cannot fit even if every other host's lease
came back unused (the *ceiling* each grant carries), the same rule as one
process's "blocked is not exhausted".
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import attrs
import msgspec

from .._checks import short_repr
from ..agents.budgets.budget import Budget
from ..agents.budgets.lease import (
    COUNTERS,
    NO_COUNTS,
    Ask,
    Counts,
    Grant,
    Lost,
    Report,
    check_counts,
    leased_budget,
    limits_of,
)
from ..errors import InvalidArgument

__all__ = [
    "LeaseTerms",
    "Ledger",
    "LedgerStatistics",
    "check_budget",
    "ray_ask",
    "run_leased",
    "start_ledger",
]

_INF = math.inf
_COST = COUNTERS.index("max_cost_usd")


class LedgerStatistics(msgspec.Struct, frozen=True):
    """What a `Ledger` holds (``Ledger.statistics()``).

    Attributes:
        limit: the cluster's limits (``inf``: none).
        committed: room granted to hosts (or spent, where more), summed.
        spent: settled usage reported (a lost host's checkpointed usage), summed.
        live: hosts renewing their leases.
        expired: hosts that stopped renewing, their room held until their
            checkpoints say what they spent.
        closed: leases ended (a host closed, or was lost and its room returned).
        queued: hosts waiting for room that the pool does not have yet.
    """

    limit: Counts
    committed: Counts
    spent: Counts
    live: int
    expired: int
    closed: int
    queued: int


def _check_share(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InvalidArgument(
            f"LeaseTerms.{attribute.name} must be in (0, 1], got {short_repr(value)}"
        )


def _check_seconds(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < _INF:
        raise InvalidArgument(
            f"LeaseTerms.{attribute.name} must be seconds > 0, got {short_repr(value)}"
        )


@attrs.frozen
class LeaseTerms:
    """How a cluster's budget is leased to its hosts.

    Attributes:
        share: a lease, as a share of each limit (0.02: 2 %). It bounds what
            a lost host can have spent unrecorded (see "One budget" in the
            cluster how-to), and what a host can hold in flight: calls that
            together reserve more than a lease wait on their host, as in a
            small budget.
        low_water: a host asks for a refill when its free room falls under
            this share of a lease.
        ttl: seconds without a renewal after which a host's lease expires.
        renew_every: seconds between a host's renewals (heartbeats); under ``ttl``.
    """

    share: float = attrs.field(default=0.02, validator=_check_share)
    low_water: float = attrs.field(default=0.5, validator=_check_share)
    ttl: float = attrs.field(default=5.0, validator=_check_seconds)
    renew_every: float = attrs.field(default=1.0, validator=_check_seconds)

    def __attrs_post_init__(self) -> None:
        if self.renew_every >= self.ttl:
            raise InvalidArgument(
                f"LeaseTerms.renew_every={self.renew_every!r} must be under ttl={self.ttl!r}"
            )


def _counts(values: list[float]) -> Counts:
    return tuple(values)  # type: ignore[return-value]


_State = Literal["live", "expired", "closed"]


class _Account:
    """One host's lease, as the ledger sees it."""

    __slots__ = ("deadline", "evidence", "granted", "host", "reserved", "spent", "state")

    def __init__(self, host: str, granted: Counts, deadline: float) -> None:
        self.host = host
        self.granted = granted  # the limits the host may hold
        self.spent = NO_COUNTS  # settled, as last reported (only grows)
        self.reserved = NO_COUNTS
        self.deadline = deadline
        self.state: _State = "live"
        self.evidence: Counts | None = None  # a lost host's checkpointed usage

    def ended(self) -> bool:
        return self.state == "closed"

    def committed(self, i: int) -> float:
        """What counts as taken from the pool: the room granted, or what was spent if more."""
        return max(self.granted[i], self.spent[i])

    def floor(self, i: int) -> float:
        """What this lease will have spent at the least: settled usage while the
        host lives; all of its room once it expired (until its checkpoints say)."""
        return self.spent[i] if self.state == "live" else self.committed(i)


class Ledger:
    """The cluster's budget: leases of its limits, granted to hosts (no Ray in it).

    Every method is synchronous and takes the time (*now*, in seconds of a
    monotonic clock) as an argument, so the logic is tested without a clock
    or a cluster; the Ray actor (`start_ledger`) calls it one message at a
    time.

    Args:
        budget: the cluster's limits (its ``max_*``; what it has spent is not read).
        terms: the lease size, low-water mark, ttl and renewal period.
    """

    def __init__(self, budget: Budget, terms: LeaseTerms | None = None) -> None:
        if not isinstance(budget, Budget):
            raise InvalidArgument(f"budget must be an agentrio.Budget, got {short_repr(budget)}")
        self.terms = terms if terms is not None else LeaseTerms()
        self.limit = limits_of(budget)
        self._limited = tuple(i for i, v in enumerate(self.limit) if v < _INF)
        self.lease = _counts([self._lease_of(i) for i in range(6)])
        low = [v * self.terms.low_water for v in self.lease]
        self.low = _counts(low)
        self._accounts: dict[str, _Account] = {}
        self._queue: list[str] = []  # hosts waiting for room, first come first served

    def _lease_of(self, i: int) -> float:
        limit = self.limit[i]
        if limit == _INF:
            return _INF
        share = limit * self.terms.share
        return share if i == _COST else float(max(1, math.ceil(share)))

    # -- messages ----------------------------------------------------------------------

    def handle(self, message: Report | Lost, now: float) -> Grant | Counts | None:
        """Answer one message: a `Report` with a `Grant`, a `Lost` with `lost`'s answer."""
        if isinstance(message, Report):
            return self.renew(message, now)
        if isinstance(message, Lost):
            return self.lost(message.host, message.spent, now)
        raise InvalidArgument(f"a ledger takes a Report or a Lost, got {short_repr(message)}")

    def renew(self, report: Report, now: float) -> Grant:
        """Take a host's report, renew its lease, and grant it room if it is low.

        A host's first report opens its lease. Its limit is raised toward
        ``spent + max(lease, need)`` out of the pool, first come first served
        while hosts wait; a closing report ends the lease (what it did not
        spend or hold goes back).
        """
        spent = check_counts("Report.spent", report.spent)
        self.expire(now)
        account = self._accounts.get(report.host)
        if account is None:
            granted = _counts([_INF if v == _INF else 0.0 for v in self.limit])
            account = self._accounts[report.host] = _Account(report.host, granted, now)
        if account.state == "closed":
            return self._grant(account, closed=True)
        limit = check_counts("Report.limit", report.limit)
        account.spent = _counts([max(a, b) for a, b in zip(account.spent, spent, strict=True)])
        account.reserved = check_counts("Report.reserved", report.reserved)
        # Room the host gave back (it lowered its limits before it reported them).
        account.granted = _counts([min(a, b) for a, b in zip(account.granted, limit, strict=True)])
        account.deadline = now + self.terms.ttl
        account.state = "live"
        if report.closing:
            held = [s + r for s, r in zip(account.spent, account.reserved, strict=True)]
            self._close(account, _counts(held))
            return self._grant(account, closed=True)
        need = check_counts("Report.need", report.need)
        self._grow(account, need)
        self._queue_if_unmet(account, need)
        return self._grant(account)

    def _grow(self, account: _Account, need: Counts) -> None:
        """Raise *account*'s limits toward ``spent + max(lease, need)``, as the pool allows."""
        queue = self._queue
        if queue and queue[0] != account.host:
            return  # hosts are waiting: the room goes to the first of them
        granted = list(account.granted)
        for i in self._limited:
            base = account.committed(i)
            target = account.spent[i] + max(self.lease[i], need[i])
            room = self.limit[i] - self._committed(i, but=account)
            if target > base and room > base:
                granted[i] = base + min(target - base, room - base)
        account.granted = _counts(granted)

    def _queue_if_unmet(self, account: _Account, need: Counts) -> None:
        """Queue a host whose waiting call still does not fit but may later; else unqueue it."""
        ceiling = self._ceiling(account)
        unmet = any(
            need[i] > 0
            and account.spent[i] + need[i] > account.granted[i]
            and account.spent[i] + need[i] <= ceiling[i]
            for i in self._limited
        )
        queued = account.host in self._queue
        if unmet and not queued:
            self._queue.append(account.host)
        elif not unmet and queued:
            self._queue.remove(account.host)

    def lost(self, host: str, spent: Counts | None, now: float) -> Counts | None:
        """A live host opened lost *host*'s store, which says it spent *spent* (None:
        its store holds no checkpoint).

        Its lease ends once it has expired (at once if it has): what it was
        granted beyond ``max(spent, what it last reported)`` goes back to the
        pool. Without *spent* nothing goes back, ever: its room stays counted
        as spent. A host that was never leased, or whose lease has ended,
        is left as it is.

        Returns:
            The room returned to the pool, or None if none is (yet).
        """
        if spent is not None:
            spent = check_counts("Lost.spent", spent)
        account = self._accounts.get(host)
        if account is None or account.state == "closed":
            return None
        account.evidence = spent
        before = account.granted
        self.expire(now)
        if not account.ended():
            return None
        return _counts([max(0.0, b - a) for a, b in zip(account.granted, before, strict=True)])

    def expire(self, now: float) -> None:
        """Expire the leases not renewed within ttl; end those whose checkpoints
        have spoken (their unspent room goes back)."""
        for account in self._accounts.values():
            if account.state == "live" and account.deadline < now:
                account.state = "expired"
                if account.host in self._queue:
                    self._queue.remove(account.host)
            if account.state == "expired" and account.evidence is not None:
                self._close(account, account.evidence)

    def _close(self, account: _Account, spent: Counts) -> None:
        """End *account*'s lease: it keeps what it spent (*spent*, or more if it reported
        more), the rest goes back."""
        final = [max(a, b) for a, b in zip(spent, account.spent, strict=True)]
        account.spent = account.granted = _counts(final)
        account.reserved = NO_COUNTS
        account.state = "closed"
        if account.host in self._queue:
            self._queue.remove(account.host)

    # -- what the pool holds -----------------------------------------------------------

    def _committed(self, i: int, *, but: _Account | None = None) -> float:
        return sum(a.committed(i) for a in self._accounts.values() if a is not but)

    def _ceiling(self, account: _Account) -> Counts:
        ceiling = list(self.limit)
        for i in self._limited:
            others = sum(a.floor(i) for a in self._accounts.values() if a is not account)
            ceiling[i] = max(0.0, self.limit[i] - others)
        return _counts(ceiling)

    def _grant(self, account: _Account, *, closed: bool = False) -> Grant:
        release = bool(self._queue) and self._queue[0] != account.host
        return Grant(
            limit=account.granted,
            ceiling=account.granted if closed else self._ceiling(account),
            low=self.low,
            renew_every=self.terms.renew_every,
            release=release and not closed,
            closed=closed,
        )

    def statistics(self) -> LedgerStatistics:
        """What the ledger holds: committed and spent room, leases by state, hosts queued."""
        accounts = self._accounts.values()
        committed = [0.0] * 6
        spent = [0.0] * 6
        for i in self._limited:
            committed[i] = sum(a.committed(i) for a in accounts)
            spent[i] = sum(a.spent[i] for a in accounts)
        states = [a.state for a in accounts]
        return LedgerStatistics(
            limit=self.limit,
            committed=_counts(committed),
            spent=_counts(spent),
            live=states.count("live"),
            expired=states.count("expired"),
            closed=states.count("closed"),
            queued=len(self._queue),
        )


# -- on a Ray cluster ---------------------------------------------------------------------


class _LedgerActor:
    """The ledger in a Ray actor: one message at a time (Ray runs a sync actor's
    methods in order), with the actor's monotonic clock."""

    def __init__(self, budget: Budget, terms: LeaseTerms) -> None:
        self._ledger = Ledger(budget, terms)

    def handle(self, message: Report | Lost) -> Grant | Counts | None:
        return self._ledger.handle(message, time.monotonic())

    def statistics(self) -> LedgerStatistics:
        self._ledger.expire(time.monotonic())
        return self._ledger.statistics()


def check_budget(budget: object, lease: object) -> None:
    """Refuse a cluster's *budget* that is not a Budget (or None), or *lease* terms
    that are not a LeaseTerms (or None), or given without a budget.

    Raises:
        InvalidArgument: naming which.
    """
    if budget is not None and not isinstance(budget, Budget):
        raise InvalidArgument(
            f"budget must be an agentrio.Budget or None, got {short_repr(budget)}"
        )
    if lease is not None and not isinstance(lease, LeaseTerms):
        raise InvalidArgument(
            f"lease must be an agentrio.ray.LeaseTerms or None, got {short_repr(lease)}"
        )
    if lease is not None and budget is None:
        raise InvalidArgument("lease= is how a budget is leased: give the cluster a budget=")


def start_ledger(
    name: str, budget: Budget, terms: LeaseTerms | None = None, *, namespace: str | None = None
) -> object:
    """Start the cluster's ledger: a named, detached Ray actor (no CPU of its own),
    on the driver's node, alive while the driver is (not a node that may be gone
    and not yet found dead by Ray, which takes 15 s or more); on another only if
    that one cannot take it.

    Ray does not restart it (``max_restarts=0``): a ledger that came back
    empty would grant the budget twice. Without it, hosts spend what their
    leases hold and then wait.

    Returns:
        The actor's handle.
    """
    import ray  # (only on a cluster)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    Ledger(budget, terms)  # (a bad budget or terms: InvalidArgument here, not in Ray)

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    actor = ray.remote(num_cpus=0, max_restarts=0)(_LedgerActor)
    options = actor.options(
        name=name,
        namespace=namespace,
        lifetime="detached",
        max_concurrency=1,
        scheduling_strategy=here,
    )
    return options.remote(budget, terms if terms is not None else LeaseTerms())


def ray_ask(ledger: Any, wait: Callable[[Any], Awaitable[Any]]) -> Ask:
    """The ledger actor *ledger* as a host's Trio thread asks it: *wait* is the host's
    ``await_ref`` (no thread held, no ``ray.get``)."""

    async def ask(message: Report | Lost) -> object:
        return await wait(ledger.handle.remote(message))

    return ask


async def run_leased(
    ledger: Any,
    host: str,
    main: Callable[[Budget | None], Awaitable[None]],
    wait: Callable[[Any], Awaitable[Any]],
) -> None:
    """Run a host's *main* (its runtime) with a root budget leased from the cluster's
    *ledger* (none: ``main(None)``, a budget of the runtime's own); *wait* awaits a
    Ray result from Trio (the host's ``await_ref``).

    The first lease is taken before *main* starts; the lease ends (what was not
    spent goes back) after it returns.
    """
    if ledger is None:
        await main(None)
        return
    async with leased_budget(ray_ask(ledger, wait), host) as holder:
        await main(holder.budget)
