"""Lanes: the priority limiter (who gets a freed slot), LanePolicy and Lanes (their
validation, backoff, when they are active)."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from agentrio import ConfigError, InvalidArgument, LanePolicy, Lanes
from agentrio.agents.lanes import (
    LANES,
    LaneLimiter,
    ToolLanes,
    check_lane,
    lane_caps,
    lane_index,
)

INTERACTIVE, QUERY, EXECUTE, BACKGROUND = range(4)


def test_the_lanes_in_order() -> None:
    assert LANES == ("interactive", "query", "execute", "background")
    assert [lane_index(name) for name in LANES] == [0, 1, 2, 3]
    assert lane_index("control") == 0  # a3s-code's name for the first lane
    assert check_lane("control") == "interactive"


@pytest.mark.parametrize("bad", ["urgent", "", None, 0, "Interactive"])
def test_an_unknown_lane_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match=r"lane must be one of \['background', 'control'"):
        lane_index(bad)


def test_lane_caps() -> None:
    caps = lane_caps({"background": 2, "control": 1, "query": None})
    assert caps[INTERACTIVE] == 1 and caps[BACKGROUND] == 2
    assert caps[QUERY] == caps[EXECUTE] > 1_000_000


# -- the limiter ----------------------------------------------------------------------------


async def _hold(limiter: LaneLimiter, lane: int, order: list[str], name: str) -> None:
    await limiter.acquire(lane)
    order.append(name)
    await trio.sleep(1)
    limiter.release(lane)


async def test_a_freed_slot_goes_to_the_highest_lane_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LaneLimiter(1)
    order: list[str] = []
    async with trio.open_nursery() as nursery:
        # Arrivals in this order: the holder, three background, one query, one interactive.
        for name, lane in [
            ("holder", QUERY),
            ("bg1", BACKGROUND),
            ("bg2", BACKGROUND),
            ("q", QUERY),
            ("bg3", BACKGROUND),
            ("i", INTERACTIVE),
        ]:
            nursery.start_soon(_hold, limiter, lane, order, name)
            await trio.testing.wait_all_tasks_blocked()
        assert limiter.held == 1 and limiter.waiting == 5
    # By lane, then first come first served within a lane.
    assert order == ["holder", "i", "q", "bg1", "bg2", "bg3"]
    assert limiter.held == limiter.waiting == 0


async def test_uncontended_acquire_is_immediate_whatever_the_lane(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LaneLimiter(3)
    for lane in (BACKGROUND, EXECUTE, QUERY):
        await limiter.acquire(lane)
    assert limiter.held == 3 and trio.current_time() == 0
    assert [limiter.lane_held(lane) for lane in range(4)] == [0, 1, 1, 1]


async def test_a_lane_cap_leaves_room_for_the_other_lanes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    caps = lane_caps({"background": 1})
    limiter = LaneLimiter(2, caps)
    order: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold, limiter, BACKGROUND, order, "bg1")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_hold, limiter, BACKGROUND, order, "bg2")
        await trio.testing.wait_all_tasks_blocked()
        # The total has room, the background lane has not: bg2 waits, a query goes.
        assert order == ["bg1"] and limiter.waiting == 1
        nursery.start_soon(_hold, limiter, QUERY, order, "q")
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["bg1", "q"] and trio.current_time() == 0
    assert order == ["bg1", "q", "bg2"]


async def test_a_capped_lane_does_not_block_a_lower_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # An interactive waiter held back by its own cap lets a background one take the slot.
    limiter = LaneLimiter(2, lane_caps({"interactive": 1}))
    order: list[str] = []
    async with trio.open_nursery() as nursery:
        for name, lane in [("i1", INTERACTIVE), ("b1", BACKGROUND), ("i2", INTERACTIVE)]:
            nursery.start_soon(_hold, limiter, lane, order, name)
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_hold, limiter, BACKGROUND, order, "b2")
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["i1", "b1"]
        # At 1 both end: i2 takes i1's lane slot, b2 the other one.
    assert order[:2] == ["i1", "b1"] and sorted(order[2:]) == ["b2", "i2"]


async def test_no_total_only_the_lanes_caps(autojump_clock: trio.testing.MockClock) -> None:
    limiter = LaneLimiter(None, lane_caps({"execute": 1}))
    order: list[str] = []
    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(_hold, limiter, EXECUTE, order, f"e{i}")
        for i in range(3):
            nursery.start_soon(_hold, limiter, QUERY, order, f"q{i}")
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.held == 4 and limiter.lane_held(EXECUTE) == 1
    assert trio.current_time() == 3  # the execute calls one at a time


async def test_a_cancelled_waiter_leaves_the_queue(autojump_clock: trio.testing.MockClock) -> None:
    limiter = LaneLimiter(1)
    order: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hold, limiter, QUERY, order, "holder")
        await trio.testing.wait_all_tasks_blocked()
        gone = trio.CancelScope()
        nursery.start_soon(_cancelled_wait, limiter, gone)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_hold, limiter, BACKGROUND, order, "bg")
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting == 2
        gone.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting == 1
    assert order == ["holder", "bg"]
    assert limiter.held == 0


async def _cancelled_wait(limiter: LaneLimiter, scope: trio.CancelScope) -> None:
    with scope:
        await limiter.acquire(INTERACTIVE)
        raise AssertionError("a cancelled waiter got a slot")


async def test_cancelled_at_its_checkpoint_the_slot_is_given_back() -> None:
    limiter = LaneLimiter(1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await limiter.acquire(QUERY)
    assert limiter.held == 0


# -- LanePolicy and Lanes --------------------------------------------------------------------


def test_lane_policy_defaults_retry_nothing() -> None:
    assert attrs.asdict(LanePolicy()) == {
        "max_concurrency": None,
        "attempts": 1,
        "backoff_initial": 0.5,
        "backoff_max": 30.0,
    }


def test_backoff_doubles_up_to_its_cap() -> None:
    policy = LanePolicy(attempts=6, backoff_initial=1, backoff_max=5)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_concurrency": 0}, "LanePolicy.max_concurrency must be an int >= 1 or None"),
        ({"max_concurrency": 1.5}, "max_concurrency"),
        ({"attempts": 0}, "LanePolicy.attempts must be an int >= 1"),
        ({"attempts": True}, "attempts"),
        ({"backoff_initial": -1}, "LanePolicy.backoff_initial must be a number of seconds"),
        ({"backoff_max": float("nan")}, "backoff_max"),
        ({"backoff_max": "1"}, "backoff_max"),
    ],
)
def test_lane_policy_checks_its_values(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LanePolicy(**options)  # type: ignore[arg-type]


def test_lanes_defaults_are_inactive() -> None:
    lanes = Lanes()
    assert not lanes.active
    assert lanes.tool_concurrency is None
    assert lanes.policy("control") is lanes.interactive


@pytest.mark.parametrize(
    "lanes",
    [
        Lanes(tool_concurrency=4),
        Lanes(background=LanePolicy(max_concurrency=1)),
        Lanes(query=LanePolicy(attempts=2)),
    ],
)
def test_a_limit_or_a_retry_makes_lanes_active(lanes: Lanes) -> None:
    assert lanes.active


def test_lanes_check_their_values() -> None:
    with pytest.raises(ConfigError, match=r"Lanes\.tool_concurrency must be an int >= 1"):
        Lanes(tool_concurrency=0)
    with pytest.raises(ConfigError, match=r"must be an agentrio\.LanePolicy"):
        Lanes(background={"attempts": 2})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="lane must be one of"):
        Lanes().policy("later")


def test_tool_lanes_make_a_limiter_only_for_a_limit() -> None:
    assert ToolLanes(Lanes(query=LanePolicy(attempts=3))).limiter is None
    limiter = ToolLanes(Lanes(background=LanePolicy(max_concurrency=2))).limiter
    assert limiter is not None
