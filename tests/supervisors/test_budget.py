"""Budget: limits, reservations (leases), settling, child budgets, FIFO waiting,
overruns, and the guarantee that a swarm of agents never overspends."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

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
    Lease,
    Limits,
    ToolCallRequest,
    ToolSchema,
    Usage,
    UsageTotals,
)
from agentrio.actors.context import message_text
from agentrio.testing import FunctionModel, Reply, ScriptedModel

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
        assert isinstance(lease, agentrio.Lease)
        lease.settle(None)
        held.settle(None)
