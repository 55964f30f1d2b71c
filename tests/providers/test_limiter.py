"""The shared guards of a provider instance: Retry-After, the circuit breaker, rate windows,
the lanes' order and limiter (who gets a freed slot), and the hold the server's
rate-limit headers call for (against the fake server).

Time is Trio's MockClock (``autojump_clock``): the breaker's cool-down and the
windows' minutes pass in virtual time.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    ConfigError,
    InvalidArgument,
    ModelReply,
    Provider,
    ProviderConfig,
    Usage,
)
from agentrio.config import parse_config
from agentrio.providers.limiter import (
    DEFAULT_LANE,
    LANES,
    CircuitBreaker,
    LaneLimiter,
    RateWindow,
    ServerLimits,
    lane_caps,
    lane_index,
    parse_rate_reset,
    parse_rate_reset_time,
    parse_remaining,
    parse_retry_after,
)
from agentrio.testing import FakeLLMServer, FakeRequest, open_fake_llm

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


# -- the server's rate-limit headers -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        (" 0s ", 0.0),
        ("59.52s", 59.52),
        ("1500us", 0.0015),
        ("87600h", 315_360_000.0),  # ten years: read, then capped by the hold
    ],
)
def test_an_openai_reset_is_a_go_duration(value: str, expected: float) -> None:
    assert parse_rate_reset(value) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "5",
        "-1s",
        "1x",
        "s",
        "1e9s",
        "inf",
        "nan",
        "1 s",
        "1.s",
        "9" * 13 + "s",
        "1s" * 40,
    ],
)
def test_an_unreadable_openai_reset_is_none(value: str | None) -> None:
    assert parse_rate_reset(value) is None


def test_an_anthropic_reset_is_an_rfc_3339_time() -> None:
    assert parse_rate_reset_time("2026-11-27T12:00:05Z", now=1_795_780_800.0) == 5.0
    assert parse_rate_reset_time("2026-11-27T13:00:05+01:00", now=1_795_780_800.0) == 5.0
    assert parse_rate_reset_time("2026-11-27T11:00:00Z", now=1_795_780_800.0) == 0.0  # past


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "tomorrow",
        "2026-11-27T12:00:05",  # no offset
        "2026-11-27",
        "2026-13-45T99:00:00Z",
        "1795780805",
        "2026-11-27T12:00:05." + "0" * 60 + "Z",  # too long to read
        "\uff12\uff10\uff12\uff16-11-27T12:00:05Z",  # full-width digits
    ],
)
def test_an_unreadable_anthropic_reset_is_none(value: str | None) -> None:
    assert parse_rate_reset_time(value, now=1_795_780_800.0) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[("0", 0), ("59", 59), (" 7 ", 7), ("-1", None), ("1.5", None), ("1e3", None)],
        *[("", None), ("\uff10", None), ("9" * 19, None), ("0x10", None), (None, None)],
    ],
)
def test_a_remaining_count(value: str | None, expected: int | None) -> None:
    assert parse_remaining(value) == expected


@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_an_answer_without_the_headers_costs_two_lookups(
    family: Literal["openai", "anthropic"],
) -> None:
    asked: list[bytes] = []

    def header(name: bytes) -> bytes | None:
        asked.append(name)
        return None

    limits = ServerLimits(family, 60.0)
    limits.read(header)
    assert len(asked) == 2 and not limits.seen


@pytest.mark.parametrize("family", ["openai", "anthropic"])
async def test_random_bytes_in_the_headers_raise_nothing(
    family: Literal["openai", "anthropic"],
) -> None:
    rng = random.Random(22)
    limits = ServerLimits(family, 60.0)
    near = [b"0", b"7", b"1s", b"6m0s", b"-0", b"0s", b"2026-11-27T12:00:05Z", b"", b" "]

    def header(name: bytes) -> bytes:
        if rng.random() < 0.5:
            return rng.choice(near) + rng.choice([b"", rng.randbytes(rng.randrange(1, 80))])
        return rng.randbytes(rng.randrange(0, 80))

    for _ in range(2000):
        limits.read(header)
    # (and an answer with the counts but nothing readable leaves the limits unset)
    ServerLimits(family, 60.0).read(lambda name: b"\xff\x00garbage")


HI = [ChatMessage("user", "hi")]
OK = ModelReply(text="fine", usage=Usage(3, 2))


class WaitMeter:
    """An AttemptMeter that notes the waits it is told of."""

    def __init__(self) -> None:
        self.waits: list[tuple[str, float, str]] = []

    def failed(self, input_tokens: int | None, output_tokens: int | None, received: str) -> None:
        pass

    async def retry(self) -> bool:
        return True

    def waited(self, what: str, seconds: float, provider: str) -> None:
        self.waits.append((what, seconds, provider))


Make = Callable[[], dict[str, str]]


def openai_headers(
    requests: str = "100", reset: str = "1s", tokens: str = "100000", tokens_reset: str = "1s"
) -> Make:
    return lambda: {
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": requests,
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": "100000",
        "x-ratelimit-remaining-tokens": tokens,
        "x-ratelimit-reset-tokens": tokens_reset,
    }


def rfc3339(seconds_from_now: float) -> str:
    when = datetime.datetime.fromtimestamp(time.time() + seconds_from_now, datetime.UTC)
    return when.isoformat().replace("+00:00", "Z")


def anthropic_headers(
    requests: str = "100",
    reset_in: float = 1.0,
    *,
    output: str = "100000",
    reset: str | None = None,
) -> Make:
    def make() -> dict[str, str]:
        at = rfc3339(reset_in) if reset is None else reset
        headers = {}
        for name, left in [
            ("requests", requests),
            ("tokens", "100000"),
            ("input-tokens", "100000"),
            ("output-tokens", output),
        ]:
            headers[f"anthropic-ratelimit-{name}-limit"] = "100000"
            headers[f"anthropic-ratelimit-{name}-remaining"] = left
            headers[f"anthropic-ratelimit-{name}-reset"] = at
        return headers

    return make


class Answers:
    """A fake server's response_headers: each answer's from the next of *makes*
    (the last repeats); it notes each request's (virtual) time."""

    def __init__(self, *makes: Make) -> None:
        self.makes = list(makes)
        self.times: list[float] = []

    def __call__(self, request: FakeRequest) -> list[tuple[str, str]]:
        self.times.append(trio.current_time())
        make = self.makes.pop(0) if len(self.makes) > 1 else self.makes[0]
        return list(make().items())


BASE = {"openai": "/v1", "anthropic": "/v1"}


@asynccontextmanager
async def serving(
    answers: Answers, kind: Literal["openai", "anthropic"] = "openai", **options: Any
) -> AsyncIterator[tuple[FakeLLMServer, Provider]]:
    async with open_fake_llm(lambda request: OK) as server:
        server.response_headers = answers
        settings: dict[str, Any] = {"max_retries": 0, "seed": 1, **options}
        url = server.base_url + BASE[kind]
        async with Provider(ProviderConfig(name="p", kind=kind, base_url=url, **settings)) as p:
            yield server, p


async def calls(provider: Provider, count: int, max_output_tokens: int = 16) -> list[WaitMeter]:
    """Make *count* calls one after the other; their meters."""
    meters = [WaitMeter() for _ in range(count)]
    for meter in meters:
        reply = await provider.complete(
            "m", HI, [], max_output_tokens=max_output_tokens, meter=meter
        )
        assert reply.text == OK.text
    return meters


@pytest.mark.parametrize("stream", [False, True])
async def test_no_requests_left_holds_the_next_call_until_the_reset(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    answers = Answers(openai_headers(requests="0", reset="2s"), openai_headers())
    async with serving(answers, stream=stream) as (server, p):
        meters = await calls(p, 3)
        assert server.statistics().faults["rate_limit"] == 0 and len(server.requests) == 3
    assert [m.waits for m in meters] == [[], [("rate_limit_headers", 2, "p")], []]
    assert answers.times[1] - answers.times[0] == 2


async def test_anthropic_headers_hold_the_next_call_until_the_reset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answers = Answers(anthropic_headers(requests="0", reset_in=3), anthropic_headers())
    async with serving(answers, "anthropic") as (server, p):
        meters = await calls(p, 3)
        assert len(server.requests) == 3
    assert meters[0].waits == [] and meters[2].waits == []
    ((what, seconds, provider),) = meters[1].waits
    # (an RFC 3339 time is measured from the wall clock, which moved on a little)
    assert (what, provider) == ("rate_limit_headers", "p") and 2 < seconds <= 3


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        ("openai", openai_headers(tokens="10", tokens_reset="4s")),
        ("anthropic", anthropic_headers(output="10", reset_in=4)),
    ],
    ids=["openai", "anthropic"],
)
@pytest.mark.parametrize(("max_output_tokens", "held"), [(16, True), (8, False)])
async def test_too_few_tokens_left_for_the_call_holds_it(
    autojump_clock: trio.testing.MockClock,
    kind: Literal["openai", "anthropic"],
    make: Make,
    max_output_tokens: int,
    held: bool,
) -> None:
    full = openai_headers() if kind == "openai" else anthropic_headers()
    async with serving(Answers(make, full), kind) as (_, p):
        meters = await calls(p, 2, max_output_tokens)
    assert meters[0].waits == []
    if held:
        ((what, seconds, _),) = meters[1].waits
        assert what == "rate_limit_headers" and 3 < seconds <= 4
    else:
        assert meters[1].waits == []


async def test_calls_that_go_are_taken_off_what_is_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two requests left: of three calls made at once, two go and the third is held.
    answers = Answers(openai_headers(requests="2", reset="5s"), openai_headers())
    async with serving(answers) as (server, p):
        await calls(p, 1)
        meters = [WaitMeter() for _ in range(3)]
        async with trio.open_nursery() as nursery:
            for meter in meters:
                call = functools.partial(p.complete, max_output_tokens=16, meter=meter)
                nursery.start_soon(call, "m", HI, [])
        assert len(server.requests) == 4
    assert sorted(len(m.waits) for m in meters) == [0, 0, 1]
    assert [w for m in meters for w in m.waits] == [("rate_limit_headers", 5, "p")]
    assert answers.times[1] == answers.times[2] and answers.times[3] - answers.times[1] == 5


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        ("openai", openai_headers(requests="0", reset="87600h")),  # ten years
        ("anthropic", anthropic_headers(requests="0", reset="2036-11-27T12:00:00Z")),
    ],
    ids=["openai", "anthropic"],
)
async def test_a_reset_far_off_is_capped_at_max_retry_wait(
    autojump_clock: trio.testing.MockClock, kind: Literal["openai", "anthropic"], make: Make
) -> None:
    full = openai_headers() if kind == "openai" else anthropic_headers()
    async with serving(Answers(make, full), kind, max_retry_wait=7) as (_, p):
        meters = await calls(p, 2)
    assert meters[1].waits == [("rate_limit_headers", 7, "p")]


GARBAGE_OPENAI = [
    openai_headers(requests="zero", reset="2s"),
    openai_headers(requests="0", reset="soon"),
    openai_headers(requests="0", reset="-5s"),
    openai_headers(requests="0", reset="5"),  # a bare number: not a duration
    openai_headers(requests="-1", reset="2s"),
    openai_headers(requests="0x0", reset="2s"),
    openai_headers(requests="0", reset="nan"),
    openai_headers(requests="0", reset="9" * 100 + "s"),
    openai_headers(requests="0", reset="2s, 3s"),  # the header sent twice
    openai_headers(requests="\uff10", reset="2s"),  # a full-width digit
    openai_headers(requests="0", reset="\uff12s"),
    openai_headers(requests="9" * 40, reset="2s"),
    openai_headers(tokens="1e3", tokens_reset="2s"),
    openai_headers(tokens="0", tokens_reset="0s"),  # reset already: nothing to hold for
]
GARBAGE_ANTHROPIC = [
    anthropic_headers(requests="0", reset="tomorrow"),
    anthropic_headers(requests="0", reset="2036-11-27T12:00:00"),  # no offset
    anthropic_headers(requests="0", reset="2036-11-27"),
    anthropic_headers(requests="0", reset="1795780805"),
    anthropic_headers(requests="0", reset="99999-01-01T00:00:00Z"),
    anthropic_headers(requests="0", reset="2000-01-01T00:00:00Z"),  # past
    anthropic_headers(requests="none", reset_in=3),
    anthropic_headers(requests="0", reset="2036-11-27T12:00:00Zé"),
]


@pytest.mark.parametrize(
    ("kind", "garbage"),
    [("openai", GARBAGE_OPENAI), ("anthropic", GARBAGE_ANTHROPIC)],
    ids=["openai", "anthropic"],
)
async def test_garbage_headers_are_ignored(
    autojump_clock: trio.testing.MockClock,
    kind: Literal["openai", "anthropic"],
    garbage: list[Make],
) -> None:
    async with serving(Answers(*garbage, *garbage[-1:]), kind) as (server, p):
        meters = await calls(p, len(garbage) + 1)
        assert len(server.requests) == len(garbage) + 1
    assert [m.waits for m in meters] == [[]] * (len(garbage) + 1)


async def test_the_off_switch(autojump_clock: trio.testing.MockClock) -> None:
    answers = Answers(openai_headers(requests="0", reset="2s"))
    async with serving(answers, rate_limit_headers=False) as (_, p):
        meters = await calls(p, 3)
    assert [m.waits for m in meters] == [[], [], []]
    assert answers.times[0] == answers.times[2]


def test_the_off_switch_in_agentrio_toml() -> None:
    table = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}
    config = parse_config({"providers": {"p": {**table, "rate_limit_headers": False}}})
    assert config.providers["p"].rate_limit_headers is False
    assert parse_config({"providers": {"p": table}}).providers["p"].rate_limit_headers is True
    with pytest.raises(ConfigError, match="rate_limit_headers"):
        parse_config({"providers": {"p": {**table, "rate_limit_headers": "no"}}})
    with pytest.raises(ConfigError, match="rate_limit_headers must be a bool"):
        ProviderConfig(name="p", rate_limit_headers="no", **table)  # type: ignore[arg-type]


async def test_through_an_httpx_client_too(autojump_clock: trio.testing.MockClock) -> None:
    answers = Answers(openai_headers(requests="0", reset="2s"), openai_headers())
    async with open_fake_llm(lambda request: OK) as server, httpx.AsyncClient() as client:
        server.response_headers = answers
        config = ProviderConfig(name="p", kind="openai", base_url=server.base_url + "/v1")
        async with Provider(config, client=client) as p:
            meters = await calls(p, 2)
    assert meters[1].waits == [("rate_limit_headers", 2, "p")]


async def test_agents_publish_the_hold_as_waited(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    answers = Answers(openai_headers(requests="0", reset="2s"), openai_headers())
    async with serving(answers) as (_, p), agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(AgentSpec(name="a", model=p.model("m")))
        for _ in range(2):
            assert (await agent.run("hi")).stop_reason == "done"
        await trio.testing.wait_all_tasks_blocked()
    waits = [e for e in events if isinstance(e, agentrio.events.Waited)]
    assert waits == [
        agentrio.events.Waited(path="a", what="rate_limit_headers", seconds=2, provider="p")
    ]


async def test_a_held_call_can_be_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    limits = ServerLimits("openai", 60.0)
    limits.read({b"x-ratelimit-remaining-requests": b"1", b"x-ratelimit-reset-requests": b"9s"}.get)
    assert await limits.wait(16) is None  # the last request left
    with trio.move_on_after(1) as scope:
        await limits.wait(16)  # held: none left
    assert scope.cancelled_caught and trio.current_time() == 1
    assert await limits.wait(16) == 8  # held until the reset
    assert await limits.wait(16) is None  # past it, nothing holds
