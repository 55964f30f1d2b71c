"""The shared guards of a provider: the lanes' limiter, circuit breaker, rate windows, 429 pause,
and the hold the server's rate-limit headers call for.

The lanes (see ``agents/tools/lanes.py``) are ordered here, highest priority first:
``interactive`` (also called ``"control"``), ``query`` (the default),
``execute``, ``background``; a lane's index is its priority. The tool calls'
lanes use the same order and the same `LaneLimiter`.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import math
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Literal

import trio

from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_LANE",
    "LANES",
    "CircuitBreaker",
    "LaneLimiter",
    "RateWindow",
    "ServerLimits",
    "lane_caps",
    "lane_index",
    "parse_rate_reset",
    "parse_rate_reset_time",
    "parse_remaining",
    "parse_retry_after",
]

# The lanes, highest priority first; a lane's index is its priority (0 first).
LANES: tuple[str, ...] = ("interactive", "query", "execute", "background")
DEFAULT_LANE = "query"
_INDEX: dict[str, int] = {name: i for i, name in enumerate(LANES)}
_INDEX["control"] = 0  # a3s-code's name for the lane that is served first
_UNLIMITED = sys.maxsize


def lane_index(lane: object, argument: str = "lane") -> int:
    """The priority of *lane* (0 is served first).

    Raises:
        InvalidArgument: *lane* is not one of the lanes' names.
    """
    index = _INDEX.get(lane) if isinstance(lane, str) else None
    if index is None:
        raise InvalidArgument(f"{argument} must be one of {sorted(_INDEX)}, got {lane!r}")
    return index


def lane_caps(caps: Mapping[str, int | None] | None) -> list[int]:
    """Per-lane caps by lane index, from a mapping of lane names (absent: no cap)."""
    out = [_UNLIMITED] * len(LANES)
    for name, cap in (caps or {}).items():
        if cap is not None:
            out[_INDEX[name]] = cap
    return out


# -- the limiter ------------------------------------------------------------------------


class _Waiter:
    """A task waiting for a slot; its own abort function (a cancelled wait leaves the queue)."""

    __slots__ = ("limiter", "task")

    def __init__(self, limiter: LaneLimiter, task: trio.lowlevel.Task) -> None:
        self.limiter = limiter
        self.task: trio.lowlevel.Task | None = task

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        # Left in its deque, marked: the limiter skips it when it comes to it.
        self.task = None
        self.limiter._waiting -= 1
        return trio.lowlevel.Abort.SUCCEEDED


class LaneLimiter:
    """At most *total* holders at once, and at most ``caps[lane]`` of one lane.

    A task that finds room takes a slot at once. The others wait in one FIFO
    queue per lane; a freed slot is handed straight to the first waiter of
    the highest-priority lane whose cap allows it. So while the limit is
    full, an ``interactive`` waiter goes before every ``background`` one,
    however long those have waited. (Waiters only ever wait because the
    total or their own lane's cap is full: each release serves every waiter
    it can, so a newcomer who finds room jumps no one who could have used it.)

    The uncontended path is a comparison, two increments and one checkpoint,
    less than `trio.CapacityLimiter`'s.

    Args:
        total: slots in all (None: no limit but the lanes' own).
        caps: each lane's cap, by lane index (see `lane_caps`).
    """

    __slots__ = ("_caps", "_held", "_lane_held", "_queues", "_total", "_waiting")

    def __init__(self, total: int | None, caps: list[int] | None = None) -> None:
        self._total = _UNLIMITED if total is None else total
        self._caps = caps if caps is not None else [_UNLIMITED] * len(LANES)
        self._held = 0
        self._lane_held = [0] * len(LANES)
        self._queues: list[deque[_Waiter]] = [deque() for _ in LANES]
        self._waiting = 0

    @property
    def held(self) -> int:
        """Slots taken now."""
        return self._held

    @property
    def waiting(self) -> int:
        """Tasks waiting for a slot."""
        return self._waiting

    def lane_held(self, lane: int) -> int:
        """Slots taken now by the lane of index *lane*."""
        return self._lane_held[lane]

    async def acquire(self, lane: int) -> float | None:
        """Take a slot for the lane of index *lane*, waiting in its queue while there is none.

        A checkpoint either way; cancelled while waiting, the task leaves the
        queue and holds nothing.

        Returns:
            None if a slot was free; else the seconds it waited for one (the
            clock is read only then).
        """
        if self._held < self._total and self._lane_held[lane] < self._caps[lane]:
            self._held += 1
            self._lane_held[lane] += 1
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self.release(lane)
                raise
            return None
        waiter = _Waiter(self, trio.lowlevel.current_task())
        self._queues[lane].append(waiter)
        self._waiting += 1
        since = trio.current_time()
        # Woken by release() with the slot already counted as ours.
        await trio.lowlevel.wait_task_rescheduled(waiter)
        return trio.current_time() - since

    def release(self, lane: int) -> None:
        """Give back a slot of the lane of index *lane*; hand it on to the next waiter."""
        self._held -= 1
        self._lane_held[lane] -= 1
        if self._waiting:
            self._wake()

    def _wake(self) -> None:
        for lane, queue in enumerate(self._queues):
            while queue and self._held < self._total and self._lane_held[lane] < self._caps[lane]:
                waiter = queue.popleft()
                task = waiter.task
                if task is None:  # its wait was cancelled
                    continue
                waiter.task = None
                self._held += 1
                self._lane_held[lane] += 1
                self._waiting -= 1
                trio.lowlevel.reschedule(task)
            if self._held >= self._total:
                return


# -- the other guards -------------------------------------------------------------------


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date.

    Args:
        value: the header's value, or None.
        now: the wall-clock time to measure an HTTP date from (default ``time.time()``).

    Returns:
        The delay (never negative), or None when the header is absent or unreadable.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        import email.utils  # (here: an HTTP date is rare; the module costs 0.4 MB)

        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


class CircuitBreaker:
    """Opens after *threshold* consecutive failures; half-opens after *cooldown* seconds.

    Closed: every request goes. Open: none does. Half-open: one trial request
    goes; its success closes the breaker, its failure opens it again.
    """

    __slots__ = ("_failures", "_open_until", "_trial", "cooldown", "threshold")

    def __init__(self, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self._failures = 0
        self._open_until: float | None = None
        self._trial = False

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"``."""
        if self._open_until is None:
            return "closed"
        return "open" if trio.current_time() < self._open_until else "half_open"

    def allow(self) -> bool:
        """May a request go now? (Takes the half-open trial slot if it is free.)"""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._trial:
            self._trial = True
            return True
        return False

    def success(self) -> None:
        self._failures = 0
        self._open_until = None
        self._trial = False

    def failure(self) -> None:
        self._failures += 1
        if self._trial or self._failures >= self.threshold:
            self._open_until = trio.current_time() + self.cooldown
            self._trial = False

    def release(self) -> None:
        """A trial request ended with neither success nor failure (cancelled)."""
        self._trial = False


class _RateWaiter:
    """A taker waiting for room in a `RateWindow`; ordered by (priority, arrival)."""

    __slots__ = ("amount", "entry", "event", "priority", "seq")

    def __init__(self, priority: int, seq: int, amount: float) -> None:
        self.priority = priority
        self.seq = seq
        self.amount = amount
        self.entry: list[float] | None = None  # set when it is granted its room
        self.event = trio.Event()

    def __lt__(self, other: _RateWaiter) -> bool:
        return (self.priority, self.seq) < (other.priority, other.seq)


class RateWindow:
    """At most *limit* units (requests or tokens) within any *period* seconds.

    What fits goes: a taker never waits for room it does not need (a small
    amount may pass a large one waiting). When room frees, the waiters are
    served by priority (lower first: a lane's index), then in arrival order,
    each that fits in turn.
    """

    __slots__ = ("_entries", "_seq", "_total", "_waiters", "limit", "period")

    def __init__(self, limit: int, period: float = 60.0) -> None:
        self.limit = limit
        self.period = period
        self._entries: deque[list[float]] = deque()
        self._total = 0.0
        # A heap of the takers waiting. Its head alone watches the clock (it
        # sleeps until the oldest entry leaves the window, then serves them
        # all); the others sleep until they are served or become the head.
        self._waiters: list[_RateWaiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        """Takers waiting for room."""
        return len(self._waiters)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and entries[0][0] <= now - self.period:
            self._total -= entries.popleft()[1]
        if not entries:
            self._total = 0.0  # (no float residue left behind by the subtractions)

    def _record(self, now: float, amount: float) -> list[float]:
        entry = [now, amount]
        self._entries.append(entry)
        self._total += amount
        return entry

    async def take(self, amount: float, priority: int = 1) -> tuple[list[float], float | None]:
        """Wait until *amount* fits, record it, and return its entry (for `adjust`)
        and the seconds it waited (None if it fitted at once).

        Args:
            amount: the units to take (more than ``limit`` waits for a clear window).
            priority: among the takers waiting when room frees, the lower goes
                first (a lane's index; 1, ``query``, by default).
        """
        amount = min(amount, self.limit)  # a request larger than the limit waits for a clear window
        now = trio.current_time()
        self._expire(now)
        if self._waiters:
            self._serve(now)  # room freed since the head last looked is theirs first
        if self._total + amount <= self.limit:
            entry = self._record(now, amount)
            await trio.lowlevel.checkpoint()
            return entry, None
        entry = await self._queued(amount, priority)
        return entry, trio.current_time() - now

    async def _queued(self, amount: float, priority: int) -> list[float]:
        waiter = _RateWaiter(priority, next(self._seq), amount)
        heapq.heappush(self._waiters, waiter)
        try:
            while waiter.entry is None:
                if waiter.event.is_set():
                    waiter.event = trio.Event()
                if self._waiters[0] is not waiter:
                    await waiter.event.wait()
                    continue
                entries = self._entries
                with trio.move_on_at(entries[0][0] + self.period if entries else -math.inf):
                    await waiter.event.wait()
                if waiter.entry is None:
                    self._serve(trio.current_time())
            return waiter.entry
        except BaseException:
            if waiter.entry is None:  # (one served as it was cancelled keeps its entry)
                self._waiters.remove(waiter)
                heapq.heapify(self._waiters)
                self._wake_head()
            raise

    def _serve(self, now: float) -> None:
        """Give room to the waiters that fit, by priority then arrival; wake the new head."""
        self._expire(now)
        if self._total >= self.limit:
            return
        kept = []
        for waiter in sorted(self._waiters):
            if self._total + waiter.amount <= self.limit:
                waiter.entry = self._record(now, waiter.amount)
                waiter.event.set()
            else:
                kept.append(waiter)
        if len(kept) < len(self._waiters):
            self._waiters = kept  # (sorted: a heap already)
            self._wake_head()

    def _wake_head(self) -> None:
        if self._waiters:
            self._waiters[0].event.set()

    def adjust(self, entry: list[float], amount: float) -> None:
        """Replace what *entry* recorded by the real *amount* (if it is still in the window)."""
        if entry in self._entries:
            self._total += amount - entry[1]
            entry[1] = amount


# -- the server's rate-limit headers ----------------------------------------------------

_MAX_FIELD = 64  # characters: a longer value is none of these headers' (ignored unread)
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
# A Go duration, as OpenAI writes its resets: "1s", "6m0s", "20ms", "1h2m3.5s".
# (Each part ends in a unit, so no run of digits can be split two ways.)
_PART = r"\d{1,12}(?:\.\d{1,12})?(?:h|ms|m|s|us|ns)"
_DURATION = re.compile(f"(?:{_PART})+")
_DURATION_PART = re.compile(r"(\d{1,12}(?:\.\d{1,12})?)(h|ms|m|s|us|ns)")


def parse_remaining(value: str | None) -> int | None:
    """A count left from a rate-limit header (``"59"``): ASCII digits, at most 18.

    Returns:
        The count, or None when the header is absent or is anything else.
    """
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def parse_rate_reset(value: str | None) -> float | None:
    """Seconds until a count resets, from OpenAI's ``x-ratelimit-reset-*`` (a Go
    duration: ``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"``).

    Returns:
        The seconds (finite, never negative), or None when the header is
        absent or is anything else (a bare number, a sign, another unit).
    """
    if value is None:
        return None
    text = value.strip()
    if len(text) > _MAX_FIELD or _DURATION.fullmatch(text) is None:
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def parse_rate_reset_time(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds until a count resets, from Anthropic's ``anthropic-ratelimit-*-reset``
    (an RFC 3339 time with its offset: ``"2026-11-27T12:00:05Z"``).

    Args:
        value: the header's value, or None.
        now: the wall-clock time to measure it from (default ``time.time()``).

    Returns:
        The seconds (never negative: a time past is 0), or None when the
        header is absent or unreadable, or has no offset.
    """
    if value is None:
        return None
    text = value.strip()
    if len(text) > _MAX_FIELD or not text.isascii():
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    except (ValueError, OverflowError, OSError):
        return None
    return max(0.0, seconds)


# Each family's counts: (its remaining header, its reset header, what a call takes of it:
# "requests" one, "tokens" its max_output_tokens, "input" nothing known before it is sent).
_Takes = Literal["requests", "tokens", "input"]
_OPENAI_HEADERS: tuple[tuple[bytes, bytes, _Takes], ...] = (
    (b"x-ratelimit-remaining-requests", b"x-ratelimit-reset-requests", "requests"),
    (b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens", "tokens"),
)
_ANTHROPIC_HEADERS: tuple[tuple[bytes, bytes, _Takes], ...] = (
    (b"anthropic-ratelimit-requests-remaining", b"anthropic-ratelimit-requests-reset", "requests"),
    (b"anthropic-ratelimit-tokens-remaining", b"anthropic-ratelimit-tokens-reset", "tokens"),
    (
        b"anthropic-ratelimit-input-tokens-remaining",
        b"anthropic-ratelimit-input-tokens-reset",
        "input",
    ),
    (
        b"anthropic-ratelimit-output-tokens-remaining",
        b"anthropic-ratelimit-output-tokens-reset",
        "tokens",
    ),
)

HeaderLookup = Callable[[bytes], "bytes | str | None"]
"""A response header's value by its lower-case name (None when absent)."""


class ServerLimits:
    """What a server's rate-limit headers say is left, and the hold that calls for.

    Each answer's headers replace what the last one said of a count (its
    requests, its tokens; Anthropic's input and output tokens too). A new
    call is held while a count whose reset is still ahead has less left than
    the call takes of it: one request; for tokens, the call's
    ``max_output_tokens`` (what both APIs count a call at before it runs);
    for Anthropic's input tokens, any at all. The calls that go are taken
    off what is left, so that calls made before the next answer's headers
    do not all go on the same count. The hold lasts until the count resets,
    *cap* seconds at most from when the headers came.

    Everything here is the server's word: a value that cannot be read is
    ignored (never an exception), a count is used only with its reset, and
    a reset is capped at *cap*.

    Args:
        family: ``"openai"`` (``x-ratelimit-*``, resets as Go durations) or
            ``"anthropic"`` (``anthropic-ratelimit-*``, resets as RFC 3339 times).
        cap: the longest hold, in seconds (the provider's ``max_retry_wait``).

    Attributes:
        seen: whether an answer has carried a count it could read (until
            then, no call needs `wait`).
    """

    __slots__ = ("_cap", "_gate", "_headers", "_left", "_parse_reset", "_resets", "seen")

    def __init__(self, family: Literal["openai", "anthropic"], cap: float) -> None:
        self._headers = _ANTHROPIC_HEADERS if family == "anthropic" else _OPENAI_HEADERS
        self._parse_reset = parse_rate_reset_time if family == "anthropic" else parse_rate_reset
        # An answer without the remaining requests and tokens is not read further.
        self._gate = (self._headers[0][0], self._headers[1][0])
        self._cap = cap
        self._left = [0] * len(self._headers)
        self._resets = [-math.inf] * len(self._headers)  # Trio times: past, no hold
        self.seen = False

    def read(self, header: HeaderLookup) -> None:
        """Note what an answer's headers say (two lookups when it has none of them).

        Args:
            header: the answer's header values by lower-case name.
        """
        first, second = self._gate
        if header(first) is None and header(second) is None:
            return
        now = trio.current_time()
        for i, (remaining, reset, _) in enumerate(self._headers):
            left = parse_remaining(_text(header(remaining)))
            delay = self._parse_reset(_text(header(reset)))
            if left is not None and delay is not None:
                self._left[i] = left
                self._resets[i] = now + min(delay, self._cap)
                self.seen = True

    async def wait(self, tokens: int) -> float | None:
        """Hold until the counts have room for a call of *tokens* output tokens; take it.

        A checkpoint either way; cancelled while held, the call takes nothing.

        Returns:
            None if it went at once, else the seconds it was held.
        """
        await trio.lowlevel.checkpoint()
        start = now = trio.current_time()
        while (until := self._held_until(tokens, now)) is not None:
            await trio.sleep_until(until)
            now = trio.current_time()
        self._take(tokens, now)
        return None if now == start else now - start

    def _held_until(self, tokens: int, now: float) -> float | None:
        """The latest reset of the counts with too little left for the call, if any."""
        until = None
        for i, (_, _, takes) in enumerate(self._headers):
            reset = self._resets[i]
            if reset > now and self._left[i] < (tokens if takes == "tokens" else 1):
                until = reset if until is None else max(until, reset)
        return until

    def _take(self, tokens: int, now: float) -> None:
        for i, (_, _, takes) in enumerate(self._headers):
            if self._resets[i] > now and takes != "input":
                self._left[i] -= tokens if takes == "tokens" else 1


def _text(value: bytes | str | None) -> str | None:
    """A header's value as text (bytes read as Latin-1, as HTTP has them)."""
    return value.decode("latin-1") if isinstance(value, bytes) else value
