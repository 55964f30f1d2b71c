"""The shared guards of a provider instance: Retry-After, the circuit breaker, rate windows,
and the lanes' order and limiter (who gets a freed slot).

Time is Trio's MockClock (``autojump_clock``): the breaker's cool-down and the
windows' minutes pass in virtual time.
"""

from __future__ import annotations

import email.utils

import pytest
import trio
import trio.testing

from agentrio import InvalidArgument
from agentrio.providers.limiter import (
    DEFAULT_LANE,
    LANES,
    CircuitBreaker,
    LaneLimiter,
    RateWindow,
    lane_caps,
    lane_index,
    parse_retry_after,
)

# -- Retry-After -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", 5.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("-3", 0.0),  # never negative
        ("120", 120.0),
    ],
)
def test_retry_after_in_seconds(value: str, expected: float) -> None:
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize("value", [None, "", "soon", "nan", "inf", "-inf", "1e999", "Mon, 99 Foo"])
def test_retry_after_unreadable_is_none(value: str | None) -> None:
    assert parse_retry_after(value) is None


def test_retry_after_as_an_http_date() -> None:
    now = 1_700_000_000.0
    in_30s = email.utils.formatdate(now + 30, usegmt=True)  # "Tue, 14 Nov 2023 22:13:50 GMT"
    assert parse_retry_after(in_30s, now=now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 600, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0
    # "-0000" means "time zone unknown": unreadable, not a guess. An offset counts.
    assert parse_retry_after(email.utils.formatdate(now + 90), now=now) is None
    assert parse_retry_after("Tue, 14 Nov 2023 23:13:50 +0100", now=now) == pytest.approx(30.0)


def test_retry_after_http_date_defaults_to_the_wall_clock() -> None:
    import time

    when = email.utils.formatdate(time.time() + 60, usegmt=True)
    delay = parse_retry_after(when)
    assert delay is not None and 55 <= delay <= 61


# -- circuit breaker ---------------------------------------------------------------------


async def test_breaker_opens_after_threshold_failures_in_a_row(
    autojump_clock: trio.testing.MockClock,
) -> None:
    breaker = CircuitBreaker(threshold=3, cooldown=10.0)
    assert breaker.state == "closed"
    for _ in range(2):
        assert breaker.allow()
        breaker.failure()
    assert breaker.state == "closed"
    breaker.failure()
    assert breaker.state == "open"
    assert not breaker.allow()
    await trio.sleep(9.9)
    assert breaker.state == "open" and not breaker.allow()


async def test_a_success_resets_the_count(autojump_clock: trio.testing.MockClock) -> None:
    breaker = CircuitBreaker(threshold=3, cooldown=10.0)
    breaker.failure()
    breaker.failure()
    breaker.success()
    breaker.failure()
    breaker.failure()
    assert breaker.state == "closed"


async def test_half_open_lets_one_trial_through(autojump_clock: trio.testing.MockClock) -> None:
    breaker = CircuitBreaker(threshold=1, cooldown=10.0)
    breaker.failure()
    assert breaker.state == "open"
    await trio.sleep(10)
    assert breaker.state == "half_open"
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # only one at a time
    breaker.success()
    assert breaker.state == "closed"
    assert breaker.allow() and breaker.allow()


async def test_a_failed_trial_opens_it_again(autojump_clock: trio.testing.MockClock) -> None:
    breaker = CircuitBreaker(threshold=5, cooldown=10.0)
    for _ in range(5):
        breaker.failure()
    await trio.sleep(10)
    assert breaker.allow()
    breaker.failure()  # one failure is enough in half-open, whatever the threshold
    assert breaker.state == "open"
    assert not breaker.allow()
    await trio.sleep(10)
    assert breaker.state == "half_open" and breaker.allow()


async def test_a_released_trial_frees_the_slot(autojump_clock: trio.testing.MockClock) -> None:
    breaker = CircuitBreaker(threshold=1, cooldown=1.0)
    breaker.failure()
    await trio.sleep(1)
    assert breaker.allow()
    breaker.release()  # e.g. the trial was cancelled: neither success nor failure
    assert breaker.state == "half_open"
    assert breaker.allow()


# -- rate windows ------------------------------------------------------------------------


async def _take_all(window: RateWindow, amounts: list[float]) -> list[float]:
    """Take each amount from its own task, in order; return when each got through."""
    times: list[float] = [0.0] * len(amounts)

    async def one(i: int) -> None:
        await window.take(amounts[i])
        times[i] = trio.current_time()

    async with trio.open_nursery() as nursery:
        for i in range(len(amounts)):
            nursery.start_soon(one, i)
            await trio.testing.wait_all_tasks_blocked()  # a fixed arrival order
    return times


async def test_requests_are_spread_over_windows(autojump_clock: trio.testing.MockClock) -> None:
    window = RateWindow(3, period=60.0)
    times = await _take_all(window, [1] * 7)
    # Waiters woken together go in Trio's (randomised) order: only the counts are fixed.
    assert sorted(times) == [0, 0, 0, 60, 60, 60, 120]


async def test_tokens_are_spread_over_windows(autojump_clock: trio.testing.MockClock) -> None:
    window = RateWindow(100, period=60.0)
    times = await _take_all(window, [60, 30, 20, 50])
    # 60+30 fit; 20 would make 110: wait for the first entries to leave at 60.
    assert times == [0, 0, 60, 60]


async def test_an_amount_above_the_limit_waits_for_a_clear_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = RateWindow(100, period=60.0)
    times = await _take_all(window, [10, 500])
    assert times == [0, 60]  # taken as the whole limit, not waited on forever


async def test_a_small_amount_may_pass_a_waiting_large_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Not first come, first served: what fits goes. The limit still holds.
    window = RateWindow(100, period=60.0)
    times = await _take_all(window, [50, 80, 40])
    assert times == [0, 60, 0]


async def test_adjust_settles_the_real_amount(autojump_clock: trio.testing.MockClock) -> None:
    window = RateWindow(100, period=60.0)
    entry, waited = await window.take(80)
    assert waited is None  # it fitted at once
    window.adjust(entry, 10)  # the estimate was 80, the request used 10
    with trio.fail_after(0.001):
        await window.take(90)  # 10 + 90 fits now
    with trio.move_on_after(59):
        await window.take(1)
        pytest.fail("the window is full until the first entry leaves")


async def test_adjust_after_the_entry_left_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = RateWindow(100, period=60.0)
    entry, _ = await window.take(100)
    await trio.sleep(60)
    window.adjust(entry, 1000)  # too late: it no longer counts
    with trio.fail_after(0.001):
        await window.take(100)


async def test_a_cancelled_wait_takes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    window = RateWindow(1, period=60.0)
    await window.take(1)
    with trio.move_on_after(10):
        await window.take(1)
    await trio.sleep(50)
    with trio.fail_after(0.001):
        await window.take(1)  # at 60 the first entry left, and the cancelled one never entered


async def _take_in_order(window: RateWindow, takers: list[tuple[str, float, int]]) -> list[str]:
    """Start the takers (name, amount, priority) in this order; the names as they got room."""
    order: list[str] = []

    async def one(name: str, amount: float, priority: int) -> None:
        await window.take(amount, priority)
        order.append(name)

    async with trio.open_nursery() as nursery:
        for name, amount, priority in takers:
            nursery.start_soon(one, name, amount, priority)
            await trio.testing.wait_all_tasks_blocked()  # a fixed arrival order
    return order


async def test_waiters_are_served_by_priority_then_arrival(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = RateWindow(1, period=60.0)
    # priority 0 is the interactive lane, 3 the background lane
    order = await _take_in_order(
        window, [("first", 1, 1), ("bg1", 1, 3), ("bg2", 1, 3), ("q", 1, 1), ("i", 1, 0)]
    )
    assert order == ["first", "i", "q", "bg1", "bg2"]
    assert trio.current_time() == 240  # one a minute


async def test_a_new_taker_does_not_take_room_freed_for_a_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = RateWindow(1, period=60.0)
    order: list[str] = []

    async def take(name: str, priority: int) -> None:
        await window.take(1, priority)
        order.append(name)

    await window.take(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "waiting interactive", 0)
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(60)  # the room frees now; a background taker arrives at that moment
        nursery.start_soon(take, "late background", 3)
    assert order == ["waiting interactive", "late background"]


async def test_what_fits_goes_in_priority_order(autojump_clock: trio.testing.MockClock) -> None:
    window = RateWindow(100, period=60.0)
    order = await _take_in_order(
        window, [("big", 100, 1), ("bg 60", 60, 3), ("i 70", 70, 0), ("q 30", 30, 1)]
    )
    # At 60 the window is clear: the interactive 70 goes first, then the 30 that still
    # fits; the background 60 waits for the next minute.
    assert order == ["big", "i 70", "q 30", "bg 60"]
    assert trio.current_time() == 120


# -- the lanes ---------------------------------------------------------------------------

INTERACTIVE, QUERY, EXECUTE, BACKGROUND = range(4)


def test_the_lanes_in_order() -> None:
    assert LANES == ("interactive", "query", "execute", "background")
    assert [lane_index(name) for name in LANES] == [0, 1, 2, 3]
    assert lane_index("control") == 0  # a3s-code's name for the first lane
    assert lane_index(DEFAULT_LANE) == QUERY


@pytest.mark.parametrize("bad", ["urgent", "", None, 0, "Interactive"])
def test_an_unknown_lane_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match=r"lane must be one of \['background', 'control'"):
        lane_index(bad)


def test_lane_caps() -> None:
    caps = lane_caps({"background": 2, "control": 1, "query": None})
    assert caps[INTERACTIVE] == 1 and caps[BACKGROUND] == 2
    assert caps[QUERY] == caps[EXECUTE] > 1_000_000


# -- the lanes' limiter ------------------------------------------------------------------


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


async def test_acquire_says_how_long_it_waited(autojump_clock: trio.testing.MockClock) -> None:
    limiter = LaneLimiter(1)
    assert await limiter.acquire(QUERY) is None  # a free slot: no wait (and no clock read)
    waited: list[float | None] = []

    async def second() -> None:
        waited.append(await limiter.acquire(QUERY))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.sleep(4)
        limiter.release(QUERY)
    assert waited == [4]


async def test_take_says_how_long_it_waited(autojump_clock: trio.testing.MockClock) -> None:
    window = RateWindow(1, period=60.0)
    _, waited = await window.take(1)
    assert waited is None
    _, waited = await window.take(1)  # waits for the first to leave the window
    assert waited == 60
