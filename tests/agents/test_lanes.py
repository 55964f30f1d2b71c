"""The tool calls' lanes: check_lane, LanePolicy and Lanes (their validation, backoff,
when they are active), ToolLanes. (The lanes' order and their limiter: tests/providers/
test_limiter.py.)"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from agentrio import ConfigError, InvalidArgument, LanePolicy, Lanes
from agentrio.agents.tools.lanes import ToolLanes, check_lane
from agentrio.providers.limiter import LANES


def test_check_lane_gives_the_name_events_use() -> None:
    assert [check_lane(name) for name in LANES] == list(LANES)
    assert check_lane("control") == "interactive"  # a3s-code's name for the first lane
    with pytest.raises(InvalidArgument, match=r"RunPhase\.lane must be one of"):
        check_lane("urgent", "RunPhase.lane")


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


async def test_tool_lanes_cap_each_lane_by_its_own_policy() -> None:
    caps = {"interactive": 1, "query": 2, "execute": 3, "background": 4}
    lanes = Lanes(**{lane: LanePolicy(max_concurrency=cap) for lane, cap in caps.items()})
    limiter = ToolLanes(lanes).limiter
    assert limiter is not None
    async with trio.open_nursery() as nursery:
        for index, lane in enumerate(LANES):
            for _ in range(caps[lane]):
                await limiter.acquire(index)
            nursery.start_soon(limiter.acquire, index)  # one more than its cap: it waits
            await trio.testing.wait_all_tasks_blocked()
            assert limiter.waiting == index + 1, lane
        nursery.cancel_scope.cancel()
