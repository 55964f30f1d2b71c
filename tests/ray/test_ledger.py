"""One budget for a cluster: the ledger's logic, hosts' lease holders drawing from one
ledger in one process (no Ray), and (marked ``ray``) a swarm on two real hosts."""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrio
from agentrio import AgentSpec, Budget, ChatMessage, InvalidArgument, Limits, ToolCallRequest
from agentrio.agents.budgets.lease import (
    Grant,
    LeaseHolder,
    Lost,
    Report,
    leased_budget,
    usage_counts,
)
from agentrio.providers.tokens import message_text
from agentrio.testing import FunctionModel, Reply
from agentrio.types import ToolSchema, UsageTotals

pytest.importorskip("ray")  # (agentrio.ray imports it; its ledger's logic needs no cluster)
from agentrio.ray._ledger import LeaseTerms, Ledger, check_budget

INF = math.inf
ZERO = (0, 0, 0, 0, 0, 0.0)
TERMS = LeaseTerms(share=0.1, low_water=0.5, ttl=5.0, renew_every=1.0)


def counts(tokens: float = 0, requests: float = 0, tools: float = 0, cost: float = 0.0) -> tuple:
    """Counts of total tokens (as input), requests, tool calls and cost."""
    return (tokens, tokens, 0, requests, tools, cost)


def report(host: str, spent: tuple = ZERO, **kw: object) -> Report:
    return Report(host=host, spent=spent, **kw)  # type: ignore[arg-type]


def renew(ledger: Ledger, host: str, grant: Grant | None, now: float, **kw: object) -> Grant:
    """A host's renewal holding what it was granted last (*grant*)."""
    limit = grant.limit if grant is not None else (INF,) * 6
    return ledger.renew(report(host, limit=limit, **kw), now)


# -- the ledger alone --------------------------------------------------------------------


def test_a_first_renewal_grants_a_lease_of_the_share() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000, max_requests=50), TERMS)
    grant = renew(ledger, "h1", None, 0.0)
    assert grant.limit[0] == 100 and grant.limit[3] == 5  # 10 % of each limit
    assert grant.limit[1] == INF and grant.limit[5] == INF  # not limited: no limit on hosts
    assert grant.low[0] == 50 and grant.ceiling[0] == 1000
    assert not grant.release and not grant.closed
    stats = ledger.statistics()
    assert stats.committed[0] == 100 and stats.live == 1


def test_leases_never_sum_past_the_limit() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), LeaseTerms(share=0.3))
    grants = [renew(ledger, f"h{i}", None, 0.0) for i in range(5)]
    assert [g.limit[0] for g in grants] == [300, 300, 300, 100, 0]  # the pool runs dry
    assert ledger.statistics().committed[0] == 1000


def test_a_refill_tops_up_to_spent_plus_a_lease_and_never_more() -> None:
    ledger = Ledger(Budget(max_total_tokens=10_000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    assert g.limit[0] == 1000
    g = renew(ledger, "h1", g, 0.5, spent=counts(700))
    assert g.limit[0] == 1700  # spent + one lease
    # What is reserved in flight is not topped up: the lease bounds it too.
    g = renew(ledger, "h1", g, 0.6, spent=counts(700), reserved=counts(900))
    assert g.limit[0] == 1700


def test_a_call_bigger_than_a_lease_is_granted_its_size() -> None:
    ledger = Ledger(Budget(max_total_tokens=10_000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    g = renew(ledger, "h1", g, 0.1, spent=counts(200), need=counts(2500, 1))
    assert g.limit[0] == 2700


def test_a_retried_renewal_grants_once() -> None:
    ledger = Ledger(Budget(max_total_tokens=10_000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    first = renew(ledger, "h1", g, 0.1, spent=counts(900))
    again = renew(ledger, "h1", g, 0.1, spent=counts(900))  # the same report, its answer lost
    assert first == again
    assert ledger.statistics().committed[0] == 1900


def test_a_host_past_its_lease_counts_what_it_spent() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    renew(ledger, "h1", g, 0.1, spent=counts(250))  # an overrun: 250 on a 100 lease
    assert ledger.statistics().committed[0] == 350  # spent + a lease
    assert renew(ledger, "h2", None, 0.2).ceiling[0] == 750


def test_a_closing_host_gives_back_what_it_did_not_spend() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    g = renew(ledger, "h1", g, 0.1, spent=counts(40), closing=True)
    assert g.closed and g.limit[0] == 40
    stats = ledger.statistics()
    assert stats.committed[0] == 40 and stats.closed == 1
    # An ended lease grants nothing more.
    assert renew(ledger, "h1", g, 0.2, spent=counts(40)).closed


def test_a_lease_not_renewed_expires_and_stays_spent() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    renew(ledger, "h1", g, 1.0, spent=counts(30))
    ledger.expire(5.9)
    assert ledger.statistics().expired == 0  # renewed at 1.0: live until 6.0
    ledger.expire(6.1)
    stats = ledger.statistics()
    assert stats.expired == 1 and stats.committed[0] == 130  # its room is not given back
    # Its whole lease counts as spent for the others' ceiling.
    assert renew(ledger, "h2", None, 6.2).ceiling[0] == 870


def test_a_lost_host_without_checkpoints_keeps_its_lease_forever() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    renew(ledger, "h1", g, 0.5, spent=counts(30))
    assert ledger.lost("h1", None, 10.0) is None
    ledger.expire(1000.0)
    assert ledger.statistics().committed[0] == 130  # spent 30 + a lease


def test_a_lost_lease_goes_back_only_once_expired_and_checkpointed() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000, max_requests=100), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    renew(ledger, "h1", g, 1.0, spent=counts(30, 2))
    # Its store says it spent 60 tokens and 3 requests (more than it reported).
    assert ledger.lost("h1", counts(60, 3), 2.0) is None  # not expired yet: nothing back
    assert ledger.statistics().committed[0] == 130
    ledger.expire(6.5)
    stats = ledger.statistics()
    assert stats.closed == 1 and stats.committed[0] == 60 and stats.committed[3] == 3


def test_a_lost_lease_uses_the_larger_of_checkpoint_and_report() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), TERMS)
    g = renew(ledger, "h1", None, 0.0)
    renew(ledger, "h1", g, 1.0, spent=counts(70))
    returned = ledger.lost("h1", counts(50), 7.0)  # expired already: back at once
    assert returned is not None and returned[0] == 100  # 170 granted, 70 spent
    assert ledger.statistics().committed[0] == 70
    assert ledger.lost("h1", counts(0), 8.0) is None  # a second word changes nothing


def test_exhausted_is_past_the_ceiling_not_past_the_pool() -> None:
    ledger = Ledger(Budget(max_total_tokens=1000), LeaseTerms(share=0.5))
    a = renew(ledger, "a", None, 0.0)
    b = renew(ledger, "b", None, 0.0)
    assert a.limit[0] == b.limit[0] == 500
    # a spent 450 and waits for a call of 400: the pool is dry, but b holds 500 it has
    # not spent, so the call may fit later (under a's ceiling of 1000).
    a = renew(ledger, "a", a, 0.1, spent=counts(450), need=counts(400, 1))
    assert a.ceiling[0] == 1000 and a.limit[0] == 500
    assert ledger.statistics().queued == 1
    # b is asked to give back what it does not hold in flight; it does.
    b = renew(ledger, "b", b, 0.2, spent=counts(100), reserved=counts(50))
    assert b.release
    b = ledger.renew(report("b", spent=counts(100), reserved=counts(50), limit=counts(150)), 0.3)
    a = renew(ledger, "a", a, 0.4, spent=counts(450), need=counts(400, 1))
    assert a.limit[0] == 850 and ledger.statistics().queued == 0
    # Once b has spent 600, a's next call of 400 is exhausted: past its ceiling.
    renew(ledger, "b", b, 0.5, spent=counts(600))
    a = renew(ledger, "a", a, 0.6, spent=counts(850), need=counts(400, 1))
    assert a.ceiling[0] == 400 and ledger.statistics().queued == 0


def test_bad_reports_and_terms_are_refused() -> None:
    ledger = Ledger(Budget(max_total_tokens=10), TERMS)
    with pytest.raises(InvalidArgument, match=r"Report\.spent"):
        ledger.renew(report("h", spent=(-1, 0, 0, 0, 0, 0.0)), 0.0)
    with pytest.raises(InvalidArgument, match=r"Report\.spent"):
        ledger.renew(report("h", spent=(math.nan, 0, 0, 0, 0, 0.0)), 0.0)
    with pytest.raises(InvalidArgument, match="a Report or a Lost"):
        ledger.handle("renew", 0.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="share"):
        LeaseTerms(share=0)
    with pytest.raises(InvalidArgument, match="under ttl"):
        LeaseTerms(ttl=1.0, renew_every=1.0)
    with pytest.raises(InvalidArgument, match="Budget"):
        Ledger(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="budget must be"):
        check_budget({"max_total_tokens": 5}, None)
    with pytest.raises(InvalidArgument, match="lease must be"):
        check_budget(Budget(), {"share": 0.1})
    with pytest.raises(InvalidArgument, match="give the cluster a budget"):
        check_budget(None, LeaseTerms())
    check_budget(None, None)


async def test_a_ledger_that_does_not_answer_leaves_the_lease_as_it_is(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewals that hang are given up (and logged, with no more than the reason),
    the host keeps its lease, and ending the lease is bounded too."""
    ledger = Ledger(Budget(max_total_tokens=1000), LeaseTerms(share=0.1))
    asked = 0

    async def hangs_after_the_first(message: Report | Lost) -> object:
        nonlocal asked
        asked += 1
        if asked > 1:
            await trio.sleep_forever()
        return ledger.handle(message, trio.current_time())

    async with leased_budget(hangs_after_the_first, "h") as holder:
        await trio.sleep(20)
        assert holder.renewals == 1 and holder.budget.max_total_tokens == 100
    assert trio.current_time() < 30  # the close gave up too
    assert "could not renew its budget lease: no answer" in caplog.text


async def test_a_host_without_its_first_lease_does_not_start() -> None:
    async def unreachable(message: Report | Lost) -> object:
        raise ConnectionError("no ledger")

    with pytest.raises(ConnectionError):
        async with leased_budget(unreachable, "h"):
            raise AssertionError("a host without a lease ran")


@settings(deadline=None, max_examples=60)
@given(
    limit=st.integers(0, 5000),
    share=st.floats(0.01, 1.0),
    steps=st.lists(
        st.tuples(
            st.integers(0, 3),  # host
            st.sampled_from(["spend", "need", "close", "lose", "wait"]),
            st.integers(0, 800),
        ),
        max_size=60,
    ),
)
def test_granted_room_never_passes_the_limit(
    limit: int, share: float, steps: list[tuple[int, str, int]]
) -> None:
    """Hosts that spend within what they hold: the room committed never passes the limit,
    and what hosts spent never passes it either."""
    ledger = Ledger(Budget(max_total_tokens=limit), LeaseTerms(share=share))
    held: dict[str, float] = {}
    spent: dict[str, float] = {}
    now = 0.0
    for host_i, what, amount in steps:
        host = f"h{host_i}"
        now += 1.0
        if what == "wait":
            now += 10.0
            ledger.expire(now)
            continue
        if what == "lose":
            ledger.lost(host, counts(spent.get(host, 0)), now)
            continue
        mine = spent.get(host, 0)
        if what == "spend":  # within the limit it holds
            mine = spent[host] = max(mine, min(mine + amount, held.get(host, 0)))
        grant = ledger.renew(
            report(
                host,
                spent=counts(mine),
                limit=counts(held.get(host, 0)),
                need=counts(amount, 1) if what == "need" else ZERO,
                closing=what == "close",
            ),
            now,
        )
        if grant.limit[0] > held.get(host, 0):  # raised: never past spent + lease (or call)
            assert grant.limit[0] <= mine + max(ledger.lease[0], amount if what == "need" else 0)
        held[host] = grant.limit[0]
        committed = ledger.statistics().committed[0]
        assert committed <= limit, (committed, limit)
        assert sum(spent.values()) <= limit


# -- hosts in one process, one ledger ----------------------------------------------------


def local(
    ledger: Ledger, cut: trio.Event | None = None
) -> Callable[[Report | Lost], Awaitable[object]]:
    """The ledger as a host reaches it, in one process: a millisecond away; once *cut*
    is set, not at all (the host's messages fail, as when its node is gone)."""

    async def ask(message: Report | Lost) -> object:
        await trio.sleep(0.001)
        if cut is not None and cut.is_set():
            raise ConnectionError("cut off")
        return ledger.handle(message, trio.current_time())

    return ask


def prompt_estimate(messages: Sequence[ChatMessage]) -> int:
    return sum(agentrio.estimate_tokens(message_text(m)) for m in messages)


@agentrio.tool
async def probe(n: int) -> int:
    """A quick tool."""
    await trio.lowlevel.checkpoint()
    return n


def swarm_spec(rng: random.Random, max_output: int, *, tools: bool = True) -> AgentSpec:
    async def model_fn(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        usage = agentrio.Usage(  # honest: within what the call reserved
            input_tokens=rng.randint(0, prompt_estimate(messages)),
            output_tokens=rng.randint(0, max_output),
        )
        await trio.sleep(rng.choice([0, 0.01, 0.1, 0.5, 2.0]))
        n = rng.randint(0, 2)
        calls = tuple(ToolCallRequest("probe", {"n": rng.randint(0, 10**9)}) for _ in range(n))
        return Reply(text="t", tool_calls=calls if schemas else (), usage=usage)

    return AgentSpec(
        "agent",
        FunctionModel(model_fn),
        instructions="answer",
        tools=[probe] if tools else [],
        limits=Limits(max_output_tokens=max_output, max_iterations=3),
    )


async def run_hosts(
    ledger: Ledger,
    spec: AgentSpec,
    hosts: int,
    agents: int,
    rng: random.Random,
) -> tuple[list[str], list[UsageTotals], list[LeaseHolder]]:
    """*hosts* runtimes, each with *agents* agents running one phase at once, their root
    budgets leased from *ledger*: the phases' stop reasons, each host's usage."""
    reasons: list[str] = []
    usages: list[UsageTotals] = []
    holders: list[LeaseHolder] = []
    ask = local(ledger)

    async def host(i: int) -> None:
        async with leased_budget(ask, f"host-{i}") as holder:
            holders.append(holder)
            async with agentrio.open_runtime(budget=holder.budget) as rt:
                refs = [await rt.spawn_agent(spec, name=f"a{j}") for j in range(agents)]

                async def one(ref: agentrio.AgentRef) -> None:
                    await trio.sleep(rng.choice([0, 0.05, 1.0]))
                    reasons.append((await ref.run("q")).stop_reason)

                async with trio.open_nursery() as nursery:
                    for ref in refs:
                        nursery.start_soon(one, ref)
            assert holder.budget.reserved_tokens == 0
            usages.append(rt.usage())

    with trio.fail_after(100_000):  # a deadlock fails instead of hanging
        async with trio.open_nursery() as nursery:
            for i in range(hosts):
                nursery.start_soon(host, i)
    return reasons, usages, holders


def total(usages: list[UsageTotals], name: str) -> float:
    return sum(getattr(u, name) for u in usages)


def cluster_limits() -> st.SearchStrategy[dict[str, int | None]]:
    maybe = st.one_of(st.none(), st.integers(0, 6000))
    return st.fixed_dictionaries(
        {
            "max_total_tokens": maybe,
            "max_input_tokens": maybe,
            "max_output_tokens": maybe,
            "max_requests": st.one_of(st.none(), st.integers(0, 300)),
            "max_tool_calls": st.one_of(st.none(), st.integers(0, 300)),
        }
    )


@settings(deadline=None, max_examples=20)
@given(
    limits=cluster_limits(),
    share=st.sampled_from([0.001, 0.01, 0.1, 0.5, 1.0]),
    hosts=st.integers(1, 4),
    agents=st.integers(1, 60),
    seed=st.integers(0, 2**32),
)
def test_any_swarm_on_any_hosts_ends_within_the_budget(
    limits: dict[str, int | None], share: float, hosts: int, agents: int, seed: int
) -> None:
    """Whatever the limits, lease size and hosts: every phase ends (no host waits for
    ever on room that another holds), and no limit is passed."""

    async def main() -> list[UsageTotals]:
        rng = random.Random(seed)
        ledger = Ledger(Budget(**limits), LeaseTerms(share=share))  # type: ignore[arg-type]
        reasons, usages, _ = await run_hosts(ledger, swarm_spec(rng, 20), hosts, agents, rng)
        assert len(reasons) == hosts * agents
        # ("stalled": a model that asks again for tool calls the budget denies)
        assert set(reasons) <= {"done", "max_iterations", "budget_exhausted", "stalled"}
        return usages

    usages = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    for name, limit in limits.items():
        if limit is not None:
            assert total(usages, name.removeprefix("max_")) <= limit, name


async def test_a_host_refills_at_its_low_water_mark(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ledger = Ledger(Budget(max_total_tokens=10_000), LeaseTerms(share=0.01))  # 100, low 50
    async with leased_budget(local(ledger), "h") as holder:
        budget = holder.budget
        assert budget.max_total_tokens == 100 and holder.renewals == 1
        lease = budget.reserve_now(40, 30)  # free room 30: under the low-water mark
        assert lease is not None
        lease.settle(agentrio.Usage(input_tokens=40, output_tokens=30))
        await trio.sleep(0.01)  # (a heartbeat is 1 s away)
        assert holder.renewals == 2 and budget.max_total_tokens == 170  # spent + a lease
        assert budget.reserve_now(10, 0) is not None  # free room 90: no refill
        await trio.sleep(0.01)
        assert holder.renewals == 2
        await trio.sleep(1)
        assert holder.renewals == 3  # the heartbeat
    stats = ledger.statistics()
    assert stats.closed == 1 and stats.committed[0] == 70 + 10  # spent, and what was held


async def test_hosts_wait_for_refills_instead_of_failing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Leases far smaller than the swarm's needs: hosts refill (and wait for it) many
    times, and no phase ends early while the cluster's budget holds enough."""
    rng = random.Random(7)
    budget = Budget(max_total_tokens=1_000_000, max_requests=2000, max_tool_calls=2000)
    ledger = Ledger(budget, LeaseTerms(share=0.005))  # 5,000 tokens, 10 requests a lease
    reasons, usages, holders = await run_hosts(ledger, swarm_spec(rng, 40), 3, 60, rng)
    assert reasons.count("done") + reasons.count("max_iterations") == 180
    assert all(h.renewals > 5 for h in holders)
    assert total(usages, "requests") > 180  # more than one lease's worth per host
    stats = ledger.statistics()
    assert stats.closed == 3 and stats.committed[0] == total(usages, "total_tokens")


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_swarm_on_several_hosts_never_passes_the_cluster_budget(
    autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    rng = random.Random(seed)
    limits = {
        "max_total_tokens": 30_000,
        "max_input_tokens": 24_000,
        "max_output_tokens": 6_000,
        "max_requests": 500,
        "max_tool_calls": 300,
    }
    ledger = Ledger(Budget(**limits), LeaseTerms(share=rng.choice([0.01, 0.05, 0.2])))
    reasons, usages, _ = await run_hosts(ledger, swarm_spec(rng, 30), 3, 150, rng)
    assert len(reasons) == 450
    assert set(reasons) <= {"done", "max_iterations", "budget_exhausted"}
    assert "budget_exhausted" in reasons  # the budget, not the swarm, was the bound
    for name, limit in limits.items():
        assert total(usages, name.removeprefix("max_")) <= limit, name
    assert total(usages, "overruns") == 0


async def test_tool_calls_wait_for_a_refill(autojump_clock: trio.testing.MockClock) -> None:
    """A lease of one tool call, a reply asking for five: each waits for its refill
    (none is denied), until the cluster's tool calls are spent."""
    ledger = Ledger(Budget(max_tool_calls=8), LeaseTerms(share=0.1))  # 1 a lease
    ran: list[int] = []

    @agentrio.tool
    async def count(n: int) -> int:
        """Count a call."""
        ran.append(n)
        return n

    async def model(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        turn = sum(1 for m in messages if m.role == "assistant")
        calls = tuple(ToolCallRequest("count", {"n": turn * 10 + i}) for i in range(5))
        return Reply(text="t", tool_calls=calls if turn < 2 else ())

    spec = AgentSpec("a", FunctionModel(model), tools=[count], limits=Limits(max_iterations=3))
    async with leased_budget(local(ledger), "h") as holder:
        assert holder.budget.max_tool_calls == 1
        async with agentrio.open_runtime(budget=holder.budget) as rt:
            result = await (await rt.spawn_agent(spec, name="a")).run("go")
    assert sorted(ran) == [0, 1, 2, 3, 4, 10, 11, 12]  # the cluster's 8, then refused
    assert result.stop_reason in ("done", "budget_exhausted", "max_iterations")
    assert rt.usage().tool_calls == 8


async def test_a_tool_call_waits_for_its_refill_even_once_the_cost_is_spent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As in one process, the cost limit stops model calls, not tool calls."""
    ledger = Ledger(Budget(max_tool_calls=10, max_cost_usd=1.0), LeaseTerms(share=0.1))
    ran: list[int] = []

    @agentrio.tool
    async def count(n: int) -> int:
        """Count a call."""
        ran.append(n)
        return n

    async def model(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        calls = tuple(ToolCallRequest("count", {"n": i}) for i in range(5))
        return Reply(text="t", tool_calls=calls, usage=agentrio.Usage(cost_usd=1.0))

    spec = AgentSpec("a", FunctionModel(model), tools=[count], limits=Limits(max_iterations=3))
    async with (
        leased_budget(local(ledger), "h") as holder,
        agentrio.open_runtime(budget=holder.budget) as rt,
    ):
        result = await (await rt.spawn_agent(spec, name="a")).run("go")
    assert sorted(ran) == [0, 1, 2, 3, 4]  # each waited for a lease of one
    assert result.stop_reason == "budget_exhausted"  # the next model call: no cost left


async def test_a_host_gives_back_its_lease_to_one_that_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """At the end of the budget the pool is dry but an idle host holds room: it gives
    it back at its next renewal, and the big call that waited runs."""
    ledger = Ledger(Budget(max_total_tokens=1000), LeaseTerms(share=0.5))
    ask = local(ledger)

    async def big(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        return Reply(text="ok", usage=agentrio.Usage(input_tokens=1, output_tokens=1))

    spec = AgentSpec("big", FunctionModel(big), limits=Limits(max_output_tokens=700))
    async with leased_budget(ask, "idle") as idle, leased_budget(ask, "busy") as busy:
        assert idle.budget.max_total_tokens == busy.budget.max_total_tokens == 500
        async with agentrio.open_runtime(budget=busy.budget) as rt:
            agent = await rt.spawn_agent(spec, name="b")
            result = await agent.run("go")
        assert result.stop_reason == "done"
        assert idle.budget.max_total_tokens == 0  # it gave its room back
        assert trio.current_time() < 5  # within a few renewals


async def test_a_call_waiting_for_room_is_cancellable_and_an_expired_lease_stays_spent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Host a holds the whole budget and then cannot reach the ledger: b's call waits
    (a's room may come back), can be cancelled while it waits, and once a's lease has
    expired, with no checkpoint to say what it spent, b's calls are exhausted."""
    ledger = Ledger(Budget(max_total_tokens=1000), LeaseTerms(share=1.0))
    cut = trio.Event()

    async def model(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        return Reply(text="ok", usage=agentrio.Usage(input_tokens=1, output_tokens=1))

    spec = AgentSpec("w", FunctionModel(model), limits=Limits(max_output_tokens=50))
    async with leased_budget(local(ledger, cut), "a") as a, leased_budget(local(ledger), "b") as b:
        assert a.budget.max_total_tokens == 1000 and b.budget.max_total_tokens == 0
        cut.set()
        async with agentrio.open_runtime(budget=b.budget) as rt:
            agent = await rt.spawn_agent(spec, name="w")
            with trio.move_on_after(2) as scope:
                await agent.run("waits")
            assert scope.cancelled_caught
            assert b.budget.reserved_tokens == 0 and not b.budget._waiters  # it left the queue
            await trio.sleep(5)  # a's lease expires
            result = await agent.run("again")
        assert result.stop_reason == "budget_exhausted"
    stats = ledger.statistics()
    assert stats.expired == 1 and stats.committed[0] == 1000


async def test_a_call_past_the_cluster_ceiling_is_exhausted_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ledger = Ledger(Budget(max_total_tokens=500), LeaseTerms(share=0.5))

    async def model(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        return Reply(text="ok", usage=agentrio.Usage(input_tokens=1, output_tokens=1))

    spec = AgentSpec("big", FunctionModel(model), limits=Limits(max_output_tokens=700))
    async with leased_budget(local(ledger), "h") as holder:
        rt = agentrio.open_runtime(budget=holder.budget)
        async with rt as runtime:
            result = await (await runtime.spawn_agent(spec, name="b")).run("go")
    assert result.stop_reason == "budget_exhausted"
    assert trio.current_time() < 1


async def test_a_lost_host_lease_comes_back_from_its_checkpoints(
    autojump_clock: trio.testing.MockClock, tmp_path: object
) -> None:
    """Host h1 dies (it can no longer reach the ledger, its lease expires); a live host
    opens h1's store, reads what its checkpoints say it spent, and the rest of h1's
    lease goes back to the pool."""
    import pathlib

    store = pathlib.Path(str(tmp_path)) / "host-1"
    ledger = Ledger(Budget(max_total_tokens=100_000), LeaseTerms(share=0.1))
    cut = trio.Event()

    async def model(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
        return Reply(text="ok", usage=agentrio.Usage(input_tokens=30, output_tokens=12))

    def make() -> AgentSpec:
        return AgentSpec("worker", FunctionModel(model), limits=Limits(max_output_tokens=50))

    specs = {"worker": make}
    async with leased_budget(local(ledger, cut), "h1") as h1:
        async with agentrio.open_runtime(budget=h1.budget, store=store, specs=specs) as rt:
            for i in range(3):
                result = await (await rt.spawn_agent(make(), name=f"w{i}")).run("q")
                assert result.stop_reason == "done"
        cut.set()  # gone: its lease is not ended, and it renews no more
    assert ledger.statistics().committed[0] == 10_000 + 126  # a refill: spent + a lease
    async with leased_budget(local(ledger), "h2") as h2:
        adopted = h2.budget.child()
        async with agentrio.open_runtime(budget=adopted, store=store, specs=specs) as rt:
            spent = adopted.restored
            assert spent is not None and spent.total_tokens == 126
            await h2.report_lost("h1", spent)
            await trio.sleep(10)  # past h1's ttl
            stats = ledger.statistics()
            assert stats.closed == 1 and stats.committed[0] == 126 + 10_000  # h1's + h2's
    assert usage_counts(spent)[0] == 126


def test_a_leased_budget_must_be_a_free_root() -> None:
    async def ask(message: Report | Lost) -> object:
        raise AssertionError

    with pytest.raises(InvalidArgument, match="root budget"):
        LeaseHolder(ask, "h", Budget().child())


# -- on a real Ray cluster: two hosts, one budget -----------------------------------------

CLUSTER_LIMITS = {"max_total_tokens": 6_000, "max_requests": 300}


async def swarm_model(messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> Reply:
    """Honest usage (within the call's reservation), a little later."""
    rng = random.Random(len(messages) * 7919 + len(message_text(messages[-1])))
    await trio.sleep(rng.choice([0, 0.001, 0.01, 0.05]))
    usage = agentrio.Usage(
        input_tokens=rng.randint(1, prompt_estimate(messages)), output_tokens=rng.randint(0, 20)
    )
    return Reply(text="t", usage=usage)


def make_swarm() -> AgentSpec:
    """The spec registered as "swarm" on the hosts (they import this module)."""
    return AgentSpec(
        "swarm",
        FunctionModel(swarm_model),
        limits=Limits(max_output_tokens=20, max_iterations=3),
    )


async def test_a_swarm_on_two_hosts_never_passes_one_budget(ray_cluster: object) -> None:
    """400 phases on two real hosts (two Ray nodes) under one budget too small for
    them: together they stop at its limits, with none passed, and the ledger's
    leases end with the cluster."""
    ray = pytest.importorskip("ray")
    import agentrio.ray

    address = ray_cluster.address  # type: ignore[attr-defined]
    budget = Budget(**CLUSTER_LIMITS)
    terms = agentrio.ray.LeaseTerms(share=0.05, ttl=5.0, renew_every=0.5)
    async with agentrio.ray.open_cluster(
        hosts=2, specs={"swarm": make_swarm}, budget=budget, lease=terms, address=address
    ) as cluster:
        inputs = [f"question {i}" for i in range(400)]
        results = await cluster.map(make_swarm(), inputs, concurrency=200)
        usage = cluster.usage()
        ledger = ray.get_actor(f"agentrio-{cluster.id}-ledger", namespace="agentrio")
        stats = await trio.to_thread.run_sync(ray.get, ledger.statistics.remote())
    reasons = [getattr(r, "stop_reason", type(r).__name__) for r in results]
    assert set(reasons) <= {"done", "max_iterations", "budget_exhausted"}, set(reasons)
    assert "budget_exhausted" in reasons and "done" in reasons
    assert usage.total_tokens <= CLUSTER_LIMITS["max_total_tokens"]
    assert usage.requests <= CLUSTER_LIMITS["max_requests"]
    assert usage.overruns == 0
    assert stats.live == 2  # both hosts held a lease
    assert stats.committed[0] <= CLUSTER_LIMITS["max_total_tokens"]
    assert stats.committed[3] <= CLUSTER_LIMITS["max_requests"]
