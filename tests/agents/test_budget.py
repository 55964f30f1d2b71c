"""Budget: limits, reservations (leases), settling, child budgets, FIFO waiting,
overruns, and the guarantee that a swarm of agents never overspends."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrio
from agentrio import (
    AgentSpec,
    Budget,
    ChatMessage,
    InvalidArgument,
    Limits,
    ToolCallRequest,
    Usage,
)
from agentrio.agents.budgets.usage import usage_problem
from agentrio.providers.tokens import message_text
from agentrio.testing import FunctionModel, Reply, ScriptedModel
from agentrio.types import Lease, ToolSchema, UsageTotals

LIMIT_NAMES = [
    "max_total_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "max_requests",
    "max_tool_calls",
    "max_cost_usd",
]


# -- construction ----------------------------------------------------------------------


@pytest.mark.parametrize("name", LIMIT_NAMES)
@pytest.mark.parametrize("value", [-1, True, "3", math.nan, [1]], ids=repr)
def test_bad_limits_are_named(name: str, value: object) -> None:
    with pytest.raises(InvalidArgument, match=rf"Budget\.{name}"):
        Budget(**{name: value})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=rf"Budget\.{name}"):
        Budget().child(**{name: value})  # type: ignore[arg-type]


def test_defaults_and_repr() -> None:
    budget = Budget()
    assert all(getattr(budget, n) is None for n in LIMIT_NAMES)
    assert budget.parent is None
    assert repr(budget) == "Budget()"
    assert repr(Budget(max_requests=3, max_cost_usd=1.5)) == (
        "Budget(max_requests=3, max_cost_usd=1.5)"
    )
    assert budget.usage() == UsageTotals()
    assert budget.reserved_tokens == 0
    assert Budget(max_requests=0).max_requests == 0  # zero is a valid limit


# -- reservations ----------------------------------------------------------------------


def test_reserve_settle_release() -> None:
    budget = Budget(max_total_tokens=1000)
    lease = budget.reserve(100, 200)
    assert isinstance(lease, Lease)
    assert budget.reserved_tokens == 300
    assert budget.usage() == UsageTotals()  # reserved is not spent
    lease.settle(Usage(input_tokens=90, output_tokens=20, cost_usd=0.25))
    assert budget.reserved_tokens == 0
    assert budget.usage() == UsageTotals(
        input_tokens=90, output_tokens=20, total_tokens=110, requests=1, cost_usd=0.25
    )
    lease.settle(Usage(1000, 1000))  # settling twice charges once
    assert budget.usage().total_tokens == 110


def test_a_failed_call_counts_the_request_only() -> None:
    budget = Budget()
    lease = budget.reserve(10, 10)
    assert lease is not None
    lease.settle(None)
    assert budget.usage() == UsageTotals(requests=1)
    assert budget.reserved_tokens == 0


def test_reservations_in_flight_count_against_the_limit() -> None:
    budget = Budget(max_total_tokens=100)
    first = budget.reserve(30, 30)
    assert first is not None
    assert budget.blocked(30, 30) == "max_total_tokens"  # 60 held + 60 > 100
    assert budget.exhausted(30, 30) == ""  # it would fit once the first settles
    assert budget.reserve(30, 30) is None
    assert budget.reserve(20, 20) is not None  # a smaller call still fits
    first.settle(Usage(0, 0))  # 40 held + 60 <= 100
    assert budget.reserve(30, 30) is not None


@pytest.mark.parametrize(
    ("limits", "size", "why"),
    [
        ({"max_requests": 1}, (1, 0), "max_requests"),
        ({"max_input_tokens": 10}, (6, 0), "max_input_tokens"),
        ({"max_output_tokens": 10}, (0, 6), "max_output_tokens"),
        ({"max_total_tokens": 10}, (3, 3), "max_total_tokens"),
    ],
)
def test_each_counter_blocks(limits: dict[str, int], size: tuple[int, int], why: str) -> None:
    budget = Budget(**limits)
    lease = budget.reserve(*size)
    assert lease is not None
    assert budget.reserve(*size) is None
    assert budget.blocked(*size) == why
    lease.settle(Usage(*size))
    assert budget.exhausted(*size) == why
    assert budget.reserve(*size) is None


def test_cost_limit_stops_calls_once_reached() -> None:
    budget = Budget(max_cost_usd=1.0)
    lease = budget.reserve(1, 1)
    assert lease is not None
    lease.settle(Usage(1, 1, cost_usd=0.6))
    lease = budget.reserve(1, 1)
    assert lease is not None
    lease.settle(Usage(1, 1, cost_usd=0.6))  # the price is only known afterwards
    assert budget.usage().cost_usd == pytest.approx(1.2)
    assert budget.exhausted() == "max_cost_usd"
    assert budget.reserve(1, 1) is None


def test_overrun_is_charged_in_full_and_counted() -> None:
    budget = Budget(max_total_tokens=1000)
    lease = budget.reserve(10, 10)
    assert lease is not None
    lease.settle(Usage(15, 100))
    usage = budget.usage()
    assert (usage.total_tokens, usage.overruns) == (115, 1)
    lease = budget.reserve(10, 10)
    assert lease is not None
    lease.settle(Usage(10, 10))  # exactly the reservation is not an overrun
    assert budget.usage().overruns == 1


async def test_overrun_through_an_agent(autojump_clock: trio.testing.MockClock) -> None:
    # the model ignores its output limit: charged in full, counted as an overrun
    model = ScriptedModel([Reply(text="long", usage=Usage(5, 500))])
    spec = AgentSpec("a", model, limits=Limits(max_output_tokens=10))
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=10_000)) as rt:
        agent = await rt.spawn_agent(spec)
        await agent.run("hi")
        usage = rt.usage()
    assert (usage.input_tokens, usage.output_tokens, usage.overruns) == (5, 500, 1)


def test_tool_calls() -> None:
    budget = Budget(max_tool_calls=2)
    assert budget.take_tool_call()
    assert budget.take_tool_call()
    assert not budget.take_tool_call()
    assert budget.usage().tool_calls == 2


# -- child budgets ---------------------------------------------------------------------


def test_child_spends_from_its_parent() -> None:
    root = Budget(max_total_tokens=100)
    child = root.child(max_requests=2)
    assert child.parent is root
    lease = child.reserve(10, 10)
    assert lease is not None
    assert root.reserved_tokens == child.reserved_tokens == 20
    lease.settle(Usage(10, 5))
    assert root.usage().total_tokens == child.usage().total_tokens == 15
    assert root.usage().requests == 1


def test_exhausting_a_child_stops_only_its_subtree() -> None:
    root = Budget(max_requests=10)
    child = root.child(max_requests=1)
    sibling = root.child()
    lease = child.reserve(1, 1)
    assert lease is not None
    lease.settle(Usage(1, 1))
    assert child.reserve(1, 1) is None
    assert child.exhausted() == "max_requests"
    assert sibling.reserve(1, 1) is not None
    assert root.reserve(1, 1) is not None


def test_exhausting_the_parent_stops_every_child() -> None:
    root = Budget(max_total_tokens=10)
    a, b = root.child(), root.child(max_total_tokens=1000)
    lease = a.reserve(5, 5)
    assert lease is not None
    lease.settle(Usage(5, 5))
    assert b.reserve(1, 0) is None
    assert b.exhausted(1, 0) == "max_total_tokens"
    grandchild = b.child()
    assert grandchild.reserve(1, 0) is None


def test_child_tool_calls_count_upwards() -> None:
    root = Budget(max_tool_calls=3)
    child = root.child(max_tool_calls=5)
    assert all(child.take_tool_call() for _ in range(3))
    assert not child.take_tool_call()
    assert root.usage().tool_calls == child.usage().tool_calls == 3


async def test_child_budget_of_a_subtree_of_agents(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([Reply(text=str(i), usage=Usage(10, 1)) for i in range(10)])
    spec = AgentSpec("a", model)
    async with agentrio.open_runtime(budget=Budget(max_requests=5)) as rt:
        team = rt.budget.child(max_requests=2)
        agents = [await rt.spawn_agent(spec, name=f"a{i}", budget=team) for i in range(3)]
        reasons = [(await a.run("go")).stop_reason for a in agents]
        assert reasons == ["done", "done", "budget_exhausted"]
        outside = await rt.spawn_agent(spec, name="free")
        assert (await outside.run("go")).stop_reason == "done"
        assert (team.usage().requests, rt.usage().requests) == (2, 3)


# -- acquire: waiting for room -----------------------------------------------------------


async def test_acquire_returns_at_once_when_it_fits() -> None:
    budget = Budget(max_total_tokens=100)
    lease = await budget.acquire(10, 10)
    assert lease is not None
    assert budget.reserved_tokens == 20


async def test_acquire_returns_none_when_exhausted() -> None:
    budget = Budget(max_total_tokens=100)
    assert await budget.acquire(60, 50) is None
    assert await Budget(max_requests=0).acquire(0, 0) is None


async def test_acquire_waits_fifo_while_calls_in_flight_hold_the_room() -> None:
    budget = Budget(max_total_tokens=100)
    held = budget.reserve(40, 40)
    assert held is not None
    order: list[str] = []
    leases: dict[str, Lease] = {}

    async def wait(name: str, size: int) -> None:
        lease = await budget.acquire(size, size)
        assert lease is not None
        leases[name] = lease
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "big", 30)  # 60: waits for the 80 in flight
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait, "small", 5)  # 10 would fit now, but queues behind "big"
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        held.settle(Usage(35, 0))  # 35 spent: room for "big" only
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["big"]
        leases["big"].settle(Usage(0, 0))
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["big", "small"]
    assert budget.reserved_tokens == 10


async def test_reserve_now_never_jumps_the_queue() -> None:
    budget = Budget(max_total_tokens=100)
    child = budget.child(max_total_tokens=100)
    held = budget.reserve_now(40, 40)
    assert held is not None and budget.reserved_tokens == 80
    assert budget.reserve_now(15, 15) is None  # does not fit: the caller must acquire
    got: list[Lease | None] = []

    async def wait() -> None:
        got.append(await budget.acquire(15, 15))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        # 10 would fit, but a call is queued (at the root, so for a child too)
        assert budget.reserve_now(5, 5) is None
        assert child.reserve_now(5, 5) is None
        held.settle(Usage(0, 0))
    assert got[0] is not None and budget.reserved_tokens == 30
    assert child.reserve_now(5, 5) is not None  # the queue is empty again
    assert budget.reserved_tokens == 40


async def test_waiters_get_none_once_the_budget_is_exhausted() -> None:
    budget = Budget(max_total_tokens=100)
    held = budget.reserve(50, 50)
    assert held is not None
    got: list[Lease | None] = []

    async def wait() -> None:
        got.append(await budget.acquire(20, 20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        held.settle(Usage(50, 20))  # 70 spent: a 40 never fits again
    assert got == [None, None]


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    budget = Budget(max_total_tokens=100)
    held = budget.reserve(50, 50)
    assert held is not None
    got: list[str] = []

    async def wait(name: str, scope: trio.CancelScope) -> None:
        with scope:
            lease = await budget.acquire(20, 20)
            assert lease is not None
            got.append(name)

    first, second = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "first", first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait, "second", second)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
        await trio.testing.wait_all_tasks_blocked()
        held.settle(Usage(0, 0))
    assert got == ["second"]
    assert first.cancelled_caught
    assert budget.reserved_tokens == 40


async def test_agents_wait_their_turn_for_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A call that does not fit beside the calls in flight waits for them (it is
    # not budget_exhausted), and newcomers queue behind it instead of taking the
    # room it waits for: otherwise a stream of small calls could starve it.
    def chars(text: str) -> int:
        return len(text)

    started: list[tuple[str, float]] = []

    async def model_fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        who = messages[-1].content
        started.append((who, trio.current_time()))
        await trio.sleep(10)
        return Reply(text="ok", usage=Usage(1, 1))

    model = FunctionModel(model_fn)
    small = AgentSpec("s", model, token_estimator=chars, limits=Limits(max_output_tokens=30))
    big = AgentSpec("b", model, token_estimator=chars, limits=Limits(max_output_tokens=70))
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=100)) as rt:
        s1 = await rt.spawn_agent(small, name="s1")
        s2 = await rt.spawn_agent(small, name="s2")
        b = await rt.spawn_agent(big, name="b")
        reasons: dict[str, str] = {}

        async def run(agent: agentrio.AgentRef, text: str, delay: float) -> None:
            await trio.sleep(delay)
            reasons[text] = (await agent.run(text)).stop_reason

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, s1, "1", 0)  # holds 31 from t=0 to t=10
            nursery.start_soon(run, b, "B", 1)  # needs 71: waits for s1
            nursery.start_soon(run, s2, "2", 2)  # 31 fits beside s1, but B is first in line
    assert reasons == {"1": "done", "B": "done", "2": "done"}
    assert started == [("1", 0), ("B", 10), ("2", 20)]
    assert rt.usage().total_tokens == 6


# -- the swarm never overspends ----------------------------------------------------------


def prompt_estimate(messages: Sequence[ChatMessage]) -> int:
    return sum(agentrio.estimate_tokens(message_text(m)) for m in messages)


@agentrio.tool
async def probe(n: int) -> int:
    """A quick tool."""
    await trio.lowlevel.checkpoint()
    return n


def run_swarm(
    limits: dict[str, int | None],
    child_limits: dict[str, int | None],
    n_agents: int,
    max_output: int,
    max_iterations: int,
    seed: int,
) -> None:
    rng = random.Random(seed)
    reported: list[Usage] = []

    async def model_fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        # honest usage: within the prompt estimate and the output tokens reserved
        usage = Usage(
            input_tokens=rng.randint(0, prompt_estimate(messages)),
            output_tokens=rng.randint(0, max_output),
        )
        await trio.sleep(rng.choice([0, 0, 0.5, 1, 2.5, 7]))
        reported.append(usage)
        calls = tuple(
            ToolCallRequest("probe", {"n": rng.randint(0, 9)}) for _ in range(rng.randint(0, 2))
        )
        return Reply(text="t", tool_calls=calls if tools else (), usage=usage)

    spec = AgentSpec(
        "agent",
        FunctionModel(model_fn),
        instructions="answer",
        tools=[probe],
        limits=Limits(max_output_tokens=max_output, max_iterations=max_iterations),
    )

    async def main() -> None:
        root = Budget(**limits)  # type: ignore[arg-type]
        child = root.child(**child_limits)  # type: ignore[arg-type]
        reasons: list[str] = []
        with trio.fail_after(1_000_000):  # a deadlock fails instead of hanging
            async with agentrio.open_runtime(budget=root) as rt:
                agents = [
                    await rt.spawn_agent(spec, name=f"a{i}", budget=child if i % 3 == 0 else None)
                    for i in range(n_agents)
                ]

                async def one(agent: agentrio.AgentRef) -> None:
                    await trio.sleep(rng.choice([0, 0.1, 3]))
                    reasons.append((await agent.run("q")).stop_reason)

                async with trio.open_nursery() as nursery:
                    for agent in agents:
                        nursery.start_soon(one, agent)
                usage = rt.usage()
                assert sum(a.usage().requests for a in agents) == usage.requests
        assert len(reasons) == n_agents
        assert set(reasons) <= {"done", "max_iterations", "budget_exhausted", "stalled"}
        assert root.reserved_tokens == 0
        for budget, lim in ((root, limits), (child, child_limits)):
            spent = budget.usage()
            for name, limit in lim.items():
                if limit is not None:
                    assert getattr(spent, name.removeprefix("max_")) <= limit, (name, spent)
        assert usage.overruns == 0
        assert usage.requests == len(reported)
        assert usage.input_tokens == sum(u.input_tokens for u in reported)
        assert usage.output_tokens == sum(u.output_tokens for u in reported)
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def budget_limits(scale: int) -> st.SearchStrategy[dict[str, int | None]]:
    maybe = st.one_of(st.none(), st.integers(0, scale))
    return st.fixed_dictionaries(
        {
            "max_total_tokens": maybe,
            "max_input_tokens": maybe,
            "max_output_tokens": maybe,
            "max_requests": st.one_of(st.none(), st.integers(0, scale // 20)),
            "max_tool_calls": st.one_of(st.none(), st.integers(0, scale // 20)),
        }
    )


@settings(deadline=None, max_examples=25)
@given(
    limits=budget_limits(6000),
    child_limits=budget_limits(3000),
    n_agents=st.integers(1, 300),
    max_output=st.integers(1, 60),
    max_iterations=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_a_swarm_never_overspends(
    limits: dict[str, int | None],
    child_limits: dict[str, int | None],
    n_agents: int,
    max_output: int,
    max_iterations: int,
    seed: int,
) -> None:
    run_swarm(limits, child_limits, n_agents, max_output, max_iterations, seed)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_thousand_agents_never_overspend(seed: int) -> None:
    limits: dict[str, int | None] = {
        "max_total_tokens": 20_000,
        "max_input_tokens": 15_000,
        "max_output_tokens": 8_000,
        "max_requests": 900,
        "max_tool_calls": 700,
    }
    child: dict[str, int | None] = {"max_total_tokens": 3_000, "max_requests": 200}
    run_swarm(limits, child, 1000, 40, 3, seed)


async def test_a_cancelled_head_of_the_queue_lets_the_others_in(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = Budget(max_total_tokens=100)
    held = budget.reserve(60, 0)
    assert held is not None
    got: list[tuple[str, object]] = []
    big_scope = trio.CancelScope()

    async def big() -> None:
        with big_scope:
            got.append(("big", await budget.acquire(50, 0)))

    async def small() -> None:
        got.append(("small", await budget.acquire(30, 0)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(big)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(small)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # first come, first served: small waits behind big
        big_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert [name for name, _ in got] == ["small"]  # admitted at once, not at a settle
        lease = got[0][1]
        assert isinstance(lease, agentrio.types.Lease)
        lease.settle(None)
        held.settle(None)


# -- a retried call: every attempt charged, each retry reserved ---------------------------


def test_a_failed_attempt_is_charged_and_its_room_kept_for_the_retry() -> None:
    budget = Budget(max_total_tokens=100)
    lease = budget.reserve(20, 20)
    assert lease is not None
    assert lease.charge(Usage(20, 5))  # the attempt that failed
    assert budget.usage() == UsageTotals(
        input_tokens=20, output_tokens=5, total_tokens=25, attempts=1
    )
    assert budget.reserved_tokens == 40  # the room is held again, for the retry
    lease.settle(Usage(20, 10), attempts=1)
    assert budget.usage() == UsageTotals(
        input_tokens=40, output_tokens=15, total_tokens=55, requests=1, attempts=2
    )
    assert budget.reserved_tokens == 0


def test_a_retry_that_cannot_fit_is_refused_and_the_spend_stays() -> None:
    budget = Budget(max_total_tokens=70, max_requests=5)
    lease = budget.reserve(20, 20)
    assert lease is not None
    assert lease.charge(Usage(20, 20))  # 40 spent, 40 more would make 80 > 70
    assert budget.reserved_tokens == 0

    async def renew() -> bool:
        return await lease.renew()

    assert trio.run(renew) is False
    lease.settle(None)
    usage = budget.usage()
    assert (usage.total_tokens, usage.requests, usage.attempts) == (40, 1, 1)
    assert usage.total_tokens <= 70


async def test_a_retry_waits_while_calls_in_flight_hold_the_room() -> None:
    budget = Budget(max_total_tokens=100)
    retried = budget.reserve(20, 20)
    other = budget.reserve(20, 20)
    assert retried is not None and other is not None
    assert retried.charge(Usage(20, 20))  # 40 spent + 40 held by each: 120 > 100
    renewed: list[bool] = []
    async with trio.open_nursery() as nursery:

        async def renew() -> None:
            renewed.append(await retried.renew())

        nursery.start_soon(renew)
        await trio.testing.wait_all_tasks_blocked()
        assert renewed == []  # blocked, not exhausted: it waits
        other.settle(Usage(5, 5))
    assert renewed == [True]
    assert budget.reserved_tokens == 40
    retried.settle(Usage(10, 10))
    assert budget.usage().total_tokens == 70


async def test_a_retry_goes_before_calls_waiting_to_start() -> None:
    # The retry holds its request: were it queued behind a new call that waits
    # for that very request, neither could go on.
    budget = Budget(max_total_tokens=100, max_requests=1)
    lease = budget.reserve(30, 30)
    assert lease is not None
    got: list[object] = []
    async with trio.open_nursery() as nursery:

        async def new_call() -> None:
            got.append(await budget.acquire(10, 10))

        nursery.start_soon(new_call)
        await trio.testing.wait_all_tasks_blocked()  # queued: the one request is held
        assert lease.charge(Usage(30, 10))
        assert await lease.renew()  # at once, though a call waits
        lease.settle(Usage(0, 0))
    assert got == [None]  # max_requests=1 was the retried call's
    assert budget.usage().requests == 1


async def test_a_waiting_retry_goes_first_when_room_frees() -> None:
    budget = Budget(max_total_tokens=100)
    retried = budget.reserve(25, 25)
    holder = budget.reserve(31, 0)
    assert retried is not None and holder is not None
    order: list[str] = []
    async with trio.open_nursery() as nursery:

        async def new_call() -> None:
            lease = await budget.acquire(30, 0)
            order.append("new")
            assert lease is not None
            lease.settle(None)

        async def retry() -> None:
            assert await retried.renew()
            order.append("retry")

        nursery.start_soon(new_call)  # 50 + 31 held: 30 more waits
        await trio.testing.wait_all_tasks_blocked()
        assert retried.charge(Usage(25, 0))  # 25 spent + 31 held + 50 > 100
        nursery.start_soon(retry)
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        holder.settle(Usage(0, 0))  # 25 spent: room for the retry (50), not both
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["retry"]  # queued last, admitted first
        retried.settle(None)
    assert order == ["retry", "new"]


async def test_a_cancelled_retry_leaves_the_queue(autojump_clock: trio.testing.MockClock) -> None:
    budget = Budget(max_total_tokens=100)
    retried = budget.reserve(30, 30)
    holder = budget.reserve(30, 0)
    assert retried is not None and holder is not None
    assert retried.charge(Usage(30, 0))  # 30 spent + 30 held + 60 > 100
    with trio.move_on_after(1):
        await retried.renew()
    retried.settle(None)
    holder.settle(None)
    assert budget.reserved_tokens == 0
    assert budget.usage() == UsageTotals(input_tokens=30, total_tokens=30, requests=2, attempts=1)
    assert await budget.acquire(40, 0) is not None  # nothing left in the queue


# -- usage is validated ------------------------------------------------------------------


BAD_USAGE = [
    Usage(-100, 0),
    Usage(0, -1),
    Usage(5, 5, cost_usd=-0.5),
    Usage(5, 5, cost_usd=math.nan),
    Usage(5, 5, cost_usd=math.inf),
    Usage(math.nan, 0),  # type: ignore[arg-type]
    Usage(0, math.inf),  # type: ignore[arg-type]
    Usage(2.5, 0),  # type: ignore[arg-type]
    Usage(True, 0),
    Usage("7", 0),  # type: ignore[arg-type]
    Usage(10, 5, cached_input_tokens=-1),
    Usage(10, 5, cached_input_tokens=6, cache_write_tokens=5),  # more than the input
    Usage(10, 5, reasoning_tokens=6),  # more than the output
    Usage(10, 5, cache_write_tokens=1.5),  # type: ignore[arg-type]
    Usage(10, 5, reasoning_tokens=True),
]


@pytest.mark.parametrize("usage", BAD_USAGE, ids=repr)
def test_usage_that_cannot_be_charged_charges_the_reservation(usage: Usage) -> None:
    assert usage_problem(usage)
    budget = Budget(max_total_tokens=1000, max_cost_usd=1.0)
    lease = budget.reserve(10, 20, 0.25)
    assert lease is not None
    assert lease.settle(usage) is False
    assert budget.usage() == UsageTotals(
        input_tokens=10, output_tokens=20, total_tokens=30, requests=1, cost_usd=0.25
    )
    lease = budget.reserve(10, 20, 0.25)
    assert lease is not None
    assert lease.charge(usage) is False  # a failed attempt's, likewise
    assert budget.usage().total_tokens == 60
    lease.settle(None)


def test_good_usage_has_no_problem() -> None:
    assert usage_problem(Usage(0, 0)) == ""
    assert usage_problem(Usage(3, 4, cost_usd=1)) == ""
    assert usage_problem(Usage(10, 5, 0.1, 6, 4, 5)) == ""


def test_usage_details_are_counted_here_and_above() -> None:
    root = Budget()
    child = root.child()
    for usage in (Usage(100, 50, 0.0, 60, 30, 20), Usage(10, 5)):
        lease = child.reserve(100, 50)
        assert lease is not None and lease.settle(usage)
    lease = child.reserve(100, 50)
    assert lease is not None and lease.charge(Usage(40, 0, cached_input_tokens=40))
    lease.settle(None)
    for budget in (root, child):
        totals = budget.usage()
        assert (totals.input_tokens, totals.output_tokens) == (150, 55)
        assert (totals.cached_input_tokens, totals.cache_write_tokens) == (100, 30)
        assert totals.reasoning_tokens == 20
    assert Budget().usage() == UsageTotals()


@pytest.mark.parametrize("usage", BAD_USAGE[:5], ids=repr)
async def test_a_model_reporting_bad_usage_ends_the_phase_with_error(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    usage: Usage,
) -> None:
    # 200 agents on a 1,000-token budget: negative usage used to refund it, so
    # all 200 calls went through; a NaN cost switched max_cost_usd off.
    calls = 0

    def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        nonlocal calls
        calls += 1
        return Reply(text="ok", usage=usage)

    spec = AgentSpec("a", FunctionModel(model), limits=Limits(max_output_tokens=20))
    budget = Budget(max_total_tokens=1000, max_cost_usd=10.0)
    async with agentrio.open_runtime(budget=budget) as rt:
        events = record_events(rt)
        agents = [await rt.spawn_agent(spec, name=f"a{i}") for i in range(200)]
        results = [await agent.run("hi") for agent in agents]
        await trio.testing.wait_all_tasks_blocked()
    reasons = {r.stop_reason for r in results}
    assert reasons == {"error", "budget_exhausted"}
    spent = rt.usage()
    assert calls == 47  # 1,000 tokens / 21 reserved per call: each call's room stays spent
    assert spent.total_tokens == 47 * 21 <= 1000
    assert math.isfinite(spent.cost_usd) and spent.cost_usd >= 0
    errors = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert len(errors) == 47 and {e.error_type for e in errors} == {"UsageInvalid"}
    assert "cannot be charged" in errors[0].error and "FunctionModel" in errors[0].error
    assert agents[0].usage().total_tokens == 21  # the agent counts what was charged


@pytest.mark.parametrize("usage", [None, (10, 5), {"input_tokens": 10}], ids=repr)
@pytest.mark.parametrize("pricing", [None, (1e-6, 2e-6)], ids=["unpriced", "priced"])
async def test_a_reply_whose_usage_is_not_a_usage_is_charged_its_reservation(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    usage: object,
    pricing: tuple[float, float] | None,
) -> None:
    # usage=None was charged 0 tokens (settled as a failed call), so a token
    # limit never ran out; a tuple or dict crashed the agent (AttributeError).
    model = FunctionModel(lambda m, t: Reply(text="ok", usage=usage), pricing=pricing)  # type: ignore[arg-type]
    spec = AgentSpec("a", model, limits=Limits(max_output_tokens=20))
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=100)) as rt:
        events = record_events(rt)
        agents = [await rt.spawn_agent(spec, name=f"a{i}") for i in range(6)]
        results = [await agent.run("hi") for agent in agents]
        await trio.testing.wait_all_tasks_blocked()
    # each call's room (1 + 20) stays spent: the fifth has no room left
    assert [r.stop_reason for r in results] == ["error"] * 4 + ["budget_exhausted"] * 2
    assert {r.error_type for r in results[:4]} == {"UsageInvalid"}
    assert "expected a Usage" in results[0].error
    spent = rt.usage()
    assert (spent.total_tokens, spent.requests) == (4 * 21, 4)
    assert agents[0].usage().total_tokens == 21
    assert rt.budget.reserved_tokens == 0
    errors = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert [e.error_type for e in errors] == ["UsageInvalid"] * 4


def test_usage_that_is_not_a_usage_has_a_problem() -> None:
    assert usage_problem(None) == "usage=None (expected a Usage)"
    assert usage_problem((1, 2)) == "usage=(1, 2) (expected a Usage)"
    long = usage_problem("x" * 1000)
    assert len(long) < 150 and long.endswith("... (expected a Usage)")


async def test_a_nan_cost_does_not_switch_the_cost_limit_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    costs = iter([math.nan] + [0.3] * 20)
    model = FunctionModel(lambda m, t: Reply(text="ok", usage=Usage(1, 1, cost_usd=next(costs))))
    spec = AgentSpec("a", model)
    async with agentrio.open_runtime(budget=Budget(max_cost_usd=1.0)) as rt:
        agent = await rt.spawn_agent(spec)
        reasons = [(await agent.run("hi")).stop_reason for _ in range(10)]
    assert (
        reasons
        == ["error", "done", "done", "done", "done", "budget_exhausted"] + ["budget_exhausted"] * 4
    )
    assert rt.usage().cost_usd == pytest.approx(1.2)


# -- a model that retries (takes a meter) -------------------------------------------------


class Retrying:
    """A model that retries like a provider: each failure is an attempt's
    (input_tokens, output_tokens, received), told to the meter before a retry."""

    def __init__(
        self, failures: Sequence[tuple[int | None, int | None, str]], usage: Usage
    ) -> None:
        self.failures = failures
        self.usage = usage

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        *,
        max_output_tokens: int,
        meter: agentrio.types.AttemptMeter | None = None,
    ) -> agentrio.ModelReply:
        assert meter is not None  # the agent passes one to a model that takes it
        for failure in self.failures:
            await trio.sleep(1)
            meter.failed(*failure)
            if not await meter.retry():
                raise agentrio.errors.ProviderUnavailable("no retry", provider="r")
        return Reply(text="answer", usage=self.usage)


async def test_a_retrying_model_is_charged_for_every_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    failures = [
        (None, None, "seventeen chars.."),  # unreported: 1 (the prompt's estimate) + 5
        (7, None, "ab"),  # the input reported, the output estimated: 7 + 1
        (0, 0, ""),  # nothing generated (a 429)
        (None, None, "x" * 500),  # the output estimate is at most max_output_tokens
    ]
    model = Retrying(failures, Usage(10, 5))
    spec = AgentSpec("a", model, limits=Limits(max_output_tokens=20))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        assert (await agent.run("hi")).stop_reason == "done"
    expected = UsageTotals(
        input_tokens=1 + 7 + 0 + 1 + 10,
        output_tokens=5 + 1 + 0 + 20 + 5,
        total_tokens=50,
        requests=1,
        attempts=5,
    )
    assert rt.usage() == agent.usage() == expected


async def test_a_retry_past_the_budget_is_not_made(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    # Each attempt's room is 21 (1 + 20); each failed attempt spends it all.
    model = Retrying([(None, None, "x" * 500)] * 5, Usage(1, 1))
    spec = AgentSpec("a", model, limits=Limits(max_output_tokens=20))
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=50)) as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("hi")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "budget_exhausted"
    usage = rt.usage()
    assert (usage.total_tokens, usage.requests, usage.attempts) == (42, 1, 2)
    assert rt.budget.reserved_tokens == 0
    assert [e.limit for e in events if isinstance(e, agentrio.events.BudgetExhausted)] == [
        "max_total_tokens"
    ]
    assert not [e for e in events if isinstance(e, agentrio.events.PhaseError)]


async def test_a_retrying_model_that_reports_negative_usage_is_an_error(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    model = Retrying([(-500, 0, "")], Usage(1, 1))
    spec = AgentSpec("a", model, limits=Limits(max_output_tokens=20))
    async with agentrio.open_runtime(budget=Budget(max_total_tokens=1000)) as rt:
        events = record_events(rt)
        result = await (await rt.spawn_agent(spec)).run("hi")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "error"
    (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert error.error_type == "UsageInvalid" and "input_tokens=-500" in error.error
    usage = rt.usage()
    assert (usage.total_tokens, usage.requests, usage.attempts) == (21, 1, 1)


# -- when "never overspent" holds ----------------------------------------------------------


async def test_cjk_text_stays_inside_its_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The model counts a token per character (CJK measured 2.1x over characters
    # / 3.5; a token a character is the high end): each call's reservation
    # covers what it reports, so no settled limit is passed.
    prompt = "请用中文简要回答这个问题并说明理由" * 6  # 102 characters

    async def model(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(1)  # many calls in flight at once
        used = sum(len(m.content) for m in messages)
        return Reply(text="好的", usage=Usage(used, 2))

    spec = AgentSpec("a", FunctionModel(model), limits=Limits(max_output_tokens=10))
    budget = Budget(max_input_tokens=1000, max_total_tokens=1200)
    async with agentrio.open_runtime(budget=budget) as rt:
        reasons: list[str] = []

        async def one(i: int) -> None:
            agent = await rt.spawn_agent(spec, name=f"a{i}")
            reasons.append((await agent.run(prompt)).stop_reason)

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(one, i)
    usage = rt.usage()
    assert usage.overruns == 0
    assert usage.input_tokens <= 1000 and usage.total_tokens <= 1200
    assert reasons.count("done") == 9  # 102 reported of 103 reserved: nine fit in 1,000
    assert usage.input_tokens == 9 * 102


@pytest.mark.parametrize("priced", [True, False])
async def test_the_cost_limit_is_exact_for_priced_models_only(
    autojump_clock: trio.testing.MockClock, priced: bool
) -> None:
    # Each call uses what it reserved, 1 + 10 tokens, $0.21 at $0.01 + $0.02 a
    # token. A priced model reserves that before the call; an unpriced one
    # reserves no cost, so the calls in flight together pass the limit.
    async def chat(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(1)
        return Reply(text="ok", usage=Usage(1, 10, cost_usd=0.0 if priced else 0.21))

    model = FunctionModel(chat, pricing=(0.01, 0.02) if priced else None)
    spec = AgentSpec("a", model, limits=Limits(max_output_tokens=10))
    budget = Budget(max_cost_usd=1.0)
    async with agentrio.open_runtime(budget=budget) as rt, trio.open_nursery() as nursery:
        for i in range(10):
            agent = await rt.spawn_agent(spec, name=f"a{i}")
            nursery.start_soon(agent.run, "hi")
    cost = rt.usage().cost_usd
    if priced:
        assert cost == pytest.approx(4 * 0.21)  # a fifth would not fit in $1
    else:
        assert cost == pytest.approx(10 * 0.21)  # all ten were in flight before any cost was known


def run_retrying_swarm(
    limits: dict[str, int | None], child_limits: dict[str, int | None], n_agents: int, seed: int
) -> None:
    rng = random.Random(seed)
    max_output = 30
    attempts = {"failed": 0, "answered": 0}

    class Flaky:
        async def complete(
            self,
            messages: Sequence[ChatMessage],
            tools: Sequence[ToolSchema],
            *,
            max_output_tokens: int,
            meter: agentrio.types.AttemptMeter | None = None,
        ) -> agentrio.ModelReply:
            assert meter is not None
            estimate = prompt_estimate(messages)
            for _ in range(rng.choice([0, 0, 1, 2, 3])):  # failed attempts, honest sizes
                await trio.sleep(rng.choice([0, 0.5, 2]))
                reported = rng.choice([None, rng.randint(0, estimate)])
                meter.failed(reported, None, "x" * rng.randint(0, 200))
                attempts["failed"] += 1
                if not await meter.retry():
                    raise agentrio.errors.ProviderUnavailable("gave up", provider="flaky")
            await trio.sleep(rng.choice([0, 1]))
            attempts["answered"] += 1
            usage = Usage(rng.randint(0, estimate), rng.randint(0, max_output))
            return Reply(text="t", usage=usage)

    spec = AgentSpec("agent", Flaky(), limits=Limits(max_output_tokens=max_output))

    async def main() -> None:
        root = Budget(**limits)  # type: ignore[arg-type]
        child = root.child(**child_limits)  # type: ignore[arg-type]
        with trio.fail_after(1_000_000):  # a deadlock fails instead of hanging
            async with agentrio.open_runtime(budget=root) as rt:
                agents = [
                    await rt.spawn_agent(spec, name=f"a{i}", budget=child if i % 3 else None)
                    for i in range(n_agents)
                ]
                async with trio.open_nursery() as nursery:
                    for agent in agents:
                        nursery.start_soon(agent.run, "q")
        usage = rt.usage()
        assert root.reserved_tokens == child.reserved_tokens == 0
        for budget, lim in ((root, limits), (child, child_limits)):
            spent = budget.usage()
            for name, limit in lim.items():
                if limit is not None:
                    assert getattr(spent, name.removeprefix("max_")) <= limit, (name, spent)
        assert usage.overruns == 0
        assert usage.attempts == attempts["failed"] + attempts["answered"]
        assert usage.attempts == sum(a.usage().attempts for a in agents)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(deadline=None, max_examples=25)
@given(
    limits=budget_limits(3000),
    child_limits=budget_limits(1500),
    n_agents=st.integers(1, 200),
    seed=st.integers(0, 2**32),
)
def test_a_swarm_of_retrying_calls_never_overspends(
    limits: dict[str, int | None], child_limits: dict[str, int | None], n_agents: int, seed: int
) -> None:
    run_retrying_swarm(limits, child_limits, n_agents, seed)


# -- waits are told (the agent publishes them as Waited events) ----------------------------


async def test_acquire_tells_how_long_it_waited_and_only_if_it_did(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = Budget(max_total_tokens=100)
    told: list[float] = []
    at_once = await budget.acquire(10, 10, waited=told.append)
    assert at_once is not None and told == []  # room at once: nothing told
    assert await budget.acquire(60, 60, waited=told.append) is None  # never fits
    assert told == []
    got: list[Lease | None] = []

    async def wait() -> None:
        got.append(await budget.acquire(45, 45, waited=told.append))  # 90 + 20 held > 100

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(3)
        assert told == []  # told when the wait ends
        at_once.settle(Usage(0, 0))
    assert got[0] is not None and told == [3]


async def test_renew_tells_how_long_it_waited_and_only_if_it_did(
    autojump_clock: trio.testing.MockClock,
) -> None:
    budget = Budget(max_total_tokens=100)
    retried = budget.reserve(20, 20)
    other = budget.reserve(20, 20)
    assert retried is not None and other is not None
    told: list[float] = []
    assert await retried.renew(waited=told.append)  # still held: at once
    assert retried.charge(Usage(20, 20))  # 40 spent + 40 held by each: 120 > 100
    async with trio.open_nursery() as nursery:

        async def renew() -> None:
            assert await retried.renew(waited=told.append)

        nursery.start_soon(renew)
        await trio.sleep(2)
        other.settle(Usage(5, 5))
    assert told == [2]
