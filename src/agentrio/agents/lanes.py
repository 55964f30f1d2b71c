"""Priority lanes: who is served first when a limit is full, and how failed tool calls retry.

Every model call and tool call of a phase belongs to the phase's lane. The
lanes, highest priority first (the order of a3s-code's session lanes):

``interactive``
    someone is waiting for the answer (``"control"`` is another name for it).
``query``
    the default: ordinary work.
``execute``
    work that acts rather than answers (writes, runs commands).
``background``
    work nobody waits for.

Lanes order only the *waiters* of a full limit: a call that finds room goes
at once, whatever its lane, and nothing is preempted. Where the limit is
full, the next free slot goes to the oldest waiter of the highest lane that
may take it (`LaneLimiter`). A provider's ``max_concurrent`` is such
a limit for model calls; ``Lanes.tool_concurrency`` and each lane's
``max_concurrency`` are the limits for tool calls.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Mapping
from typing import cast

import attrs
import trio

from ..errors import ConfigError, InvalidArgument
from ..messages import Lane

__all__ = [
    "DEFAULT_LANE",
    "LANES",
    "LaneLimiter",
    "LanePolicy",
    "Lanes",
    "ToolLanes",
    "check_lane",
    "lane_caps",
    "lane_index",
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


def check_lane(lane: object, argument: str = "lane") -> Lane:
    """*lane*'s name as events give it (``"control"`` is ``"interactive"``).

    Raises:
        InvalidArgument: *lane* is not one of the lanes' names.
    """
    return cast(Lane, LANES[lane_index(lane, argument)])


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

    async def acquire(self, lane: int) -> None:
        """Take a slot for the lane of index *lane*, waiting in its queue while there is none.

        A checkpoint either way; cancelled while waiting, the task leaves the
        queue and holds nothing.
        """
        if self._held < self._total and self._lane_held[lane] < self._caps[lane]:
            self._held += 1
            self._lane_held[lane] += 1
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self.release(lane)
                raise
            return
        waiter = _Waiter(self, trio.lowlevel.current_task())
        self._queues[lane].append(waiter)
        self._waiting += 1
        # Woken by release() with the slot already counted as ours.
        await trio.lowlevel.wait_task_rescheduled(waiter)

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


# -- the configuration ------------------------------------------------------------------


def _optional_count(owner: str, name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}.{name} must be an int >= 1 or None, got {value!r}")


def _seconds(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{owner}.{name} must be a number of seconds >= 0, got {value!r}")


@attrs.frozen
class LanePolicy:
    """How one lane's tool calls run: how many at once, and how a failed one is retried.

    Attributes:
        max_concurrency: the lane's tool calls running at once in the
            runtime (None: no cap of the lane's own). A call at its lane's
            cap waits even when ``tool_concurrency`` has room, and a call of
            another lane may go past it.
        attempts: tries of a tool call that raises, the first included (1,
            the default: no retry, and a tool that raises is a
            ``"failed"`` result). Above 1, each retry publishes a
            ``ToolRetry``; a call that raised on its last attempt is a dead
            letter: a ``ToolDeadLetter`` event, and a ``"denied"`` result
            whose content tells the model it was given up, after how many
            attempts, and the last error. Bad arguments, an unusable result
            and a timeout are not retried. Each attempt takes a slot of the
            lane (waited for outside its ``tool_timeout``), and gives it back
            before the wait for the next.
        backoff_initial: seconds before the first retry; doubled for each
            retry after it...
        backoff_max: ...up to this many seconds. No jitter.

    Raises:
        ConfigError: *max_concurrency* is not an int >= 1 or None,
            *attempts* not an int >= 1, a backoff not a number of seconds
            >= 0.
    """

    max_concurrency: int | None = None
    attempts: int = 1
    backoff_initial: float = 0.5
    backoff_max: float = 30.0

    def __attrs_post_init__(self) -> None:
        _optional_count("LanePolicy", "max_concurrency", self.max_concurrency)
        attempts = self.attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError(f"LanePolicy.attempts must be an int >= 1, got {attempts!r}")
        _seconds("LanePolicy", "backoff_initial", self.backoff_initial)
        _seconds("LanePolicy", "backoff_max", self.backoff_max)

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number *retry* (1 for the first):
        ``min(backoff_initial * 2 ** (retry - 1), backoff_max)``."""
        return float(min(self.backoff_initial * 2.0 ** (retry - 1), self.backoff_max))


def _policy(value: object) -> LanePolicy:
    if not isinstance(value, LanePolicy):
        raise ConfigError(f"a lane's policy must be an agentrio.LanePolicy, got {value!r}")
    return value


@attrs.frozen
class Lanes:
    """The runtime's lanes for tool calls: ``open_runtime(lanes=...)`` or ``[lanes]``.

    In agentrio.toml, ``[lanes]`` holds ``tool_concurrency``, ``[lanes.NAME]``
    a lane's policy, and ``[lanes.control]`` the interactive lane's. See
    [Lanes][lanes] and the how-to [Keeping interactive agents
    responsive][how-to-keep-interactive-agents-responsive].

    The default (``Lanes()``) limits nothing and retries nothing: tool calls
    run as they would without lanes, and cost nothing more. A call of an
    [`agent_tool`][agentrio.agent_tool] takes no slot (its child's calls do).
    Model calls are limited by their provider instead (``max_concurrent``,
    ``lane_concurrency``), and retried by it (``max_retries``).

    Attributes:
        interactive: the policy of the ``interactive`` lane (served first).
        query: the policy of the ``query`` lane (the default lane).
        execute: the policy of the ``execute`` lane.
        background: the policy of the ``background`` lane (served last).
        tool_concurrency: tool calls running at once in the runtime, every
            lane together (None: no limit); when it is full, the next free
            slot goes to the highest lane waiting.

    Raises:
        ConfigError: *tool_concurrency* is not an int >= 1 or None, or a
            lane's policy is not a ``LanePolicy``.
    """

    interactive: LanePolicy = attrs.field(factory=LanePolicy, converter=_policy)
    query: LanePolicy = attrs.field(factory=LanePolicy, converter=_policy)
    execute: LanePolicy = attrs.field(factory=LanePolicy, converter=_policy)
    background: LanePolicy = attrs.field(factory=LanePolicy, converter=_policy)
    tool_concurrency: int | None = None

    def __attrs_post_init__(self) -> None:
        _optional_count("Lanes", "tool_concurrency", self.tool_concurrency)

    def policy(self, lane: str) -> LanePolicy:
        """The policy of *lane* (``"control"``: the ``interactive`` lane's).

        Raises:
            InvalidArgument: *lane* is not a lane's name.
        """
        policy: LanePolicy = getattr(self, check_lane(lane))
        return policy

    @property
    def active(self) -> bool:
        """Do these lanes limit or retry tool calls at all: a ``tool_concurrency``, a
        lane's ``max_concurrency``, or a lane's ``attempts`` above 1?"""
        return self.tool_concurrency is not None or any(
            p.max_concurrency is not None or p.attempts > 1 for p in self._policies()
        )

    def _policies(self) -> tuple[LanePolicy, ...]:
        return (self.interactive, self.query, self.execute, self.background)


class ToolLanes:
    """The runtime's tool-call lanes at work: their limiter (if any limit is set) and policies."""

    __slots__ = ("limiter", "policies")

    def __init__(self, lanes: Lanes) -> None:
        self.policies = lanes._policies()
        caps = [
            _UNLIMITED if p.max_concurrency is None else p.max_concurrency for p in self.policies
        ]
        limited = lanes.tool_concurrency is not None or any(c != _UNLIMITED for c in caps)
        self.limiter = LaneLimiter(lanes.tool_concurrency, caps) if limited else None
