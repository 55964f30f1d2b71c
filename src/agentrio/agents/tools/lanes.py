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
may take it (`LaneLimiter`). A
provider's ``max_concurrent`` is such a limit for model calls;
``Lanes.tool_concurrency`` and each lane's ``max_concurrency`` are the limits
for tool calls. The lanes' order and the limiter live below, in
``providers/limiter.py``, where the providers use them too; this module holds
the tool calls' side: [`Lanes`][agentrio.Lanes], [`LanePolicy`][agentrio.LanePolicy], `ToolLanes`.
"""

from __future__ import annotations

from typing import cast

import attrs

from ...errors import ConfigError
from ...messages import Lane
from ...providers.limiter import LANES, LaneLimiter, lane_caps, lane_index

__all__ = ["LanePolicy", "Lanes", "ToolLanes", "check_lane"]


def check_lane(lane: object, argument: str = "lane") -> Lane:
    """*lane*'s name as events give it (``"control"`` is ``"interactive"``).

    Raises:
        InvalidArgument: *lane* is not one of the lanes' names.
    """
    return cast(Lane, LANES[lane_index(lane, argument)])


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
        self.policies = lanes._policies()  # (in the order of LANES)
        caps = {lane: p.max_concurrency for lane, p in zip(LANES, self.policies, strict=True)}
        limited = lanes.tool_concurrency is not None or any(c is not None for c in caps.values())
        self.limiter = LaneLimiter(lanes.tool_concurrency, lane_caps(caps)) if limited else None
