"""Limits: the bounds every agent phase runs within."""

from __future__ import annotations

import math

import attrs

from ..._checks import check_int
from ...errors import InvalidArgument

__all__ = ["Limits"]


def _positive_int(name: str, value: object, minimum: int = 1) -> None:
    check_int(f"Limits.{name}", value, minimum)


def _threshold(name: str, value: object) -> None:
    # (0 is None by now: see _off_is_none.) 1 would stall on every call, so a
    # rule that is on needs 2 or more.
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise InvalidArgument(
            f"Limits.{name} must be an int >= 2, or None or 0 (off), got {value!r}"
        )


def _off_is_none(value: object) -> object:
    """0 and None both turn a stall rule off (0 is how agentrio.toml says it:
    TOML has no null); stored as None."""
    if isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return None
    return value


def _seconds(name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"Limits.{name} must be a number of seconds, got {value!r}")
    if math.isnan(value) or value <= 0:
        raise InvalidArgument(f"Limits.{name} must be > 0 seconds, got {value!r}")


@attrs.frozen
class Limits:
    """The bounds of an agent's phases.

    Set on [`AgentSpec`][agentrio.AgentSpec], or read from the ``[limits]`` table of
    an agentrio.toml ([`Config`][agentrio.Config]).

    Attributes:
        max_iterations: model calls per phase (>= 1), unless ``run()`` says
            otherwise (with ``final_answer``, one more call without tools
            may follow).
        timeout: seconds a whole phase may take (``None``: no deadline); past
            it the phase ends with ``timeout`` and keeps its tool calls so far.
        max_parallel_tools: tool calls of one model turn that run at once.
        tool_timeout: seconds one tool call may take before it is a
            ``timeout`` result. A sync tool's worker thread is then
            abandoned: it runs on, and its result is dropped.
        max_output_tokens: the output tokens reserved from the budget for each
            model call (and asked of the model).
        final_answer: when the iteration cap is hit with tool results the
            model has not seen, make one last model call without tools.
        context_fill: the share (0 to 1, 1 included) of the model's context
            window a call may fill before old turns are left out.
        mailbox: the agent's mailbox capacity (queued ``run()`` calls, >= 0).
        max_parse_retries: model turns in a row whose tool-call arguments
            could not be parsed before the phase ends with ``error``.
        max_tool_calls_per_turn: tool calls of one model reply that are run
            (>= 1); the calls past it are not run (nor counted against the
            budget's ``max_tool_calls``) and each gets a ``"denied"`` result
            whose content says so and names this limit. Direct tool calls
            are not capped.
        max_continuation_turns: times per phase (>= 0) a reply without tool
            calls that reads as unfinished (see
            ``AgentSpec.continuation_detector``) gets the continuation
            message as a user turn, and the phase goes on with another model
            call (one of its ``max_iterations``) instead of ending
            ``"done"``; 0 (the default) turns it off. See
            [Continuation][continuation].
        max_identical_calls: the phase [stalls][stalls] when one call (same
            tool, same arguments in any key order) is made this many times,
            anywhere in the phase (>= 2; 2 is the first repeat); ``None`` or
            0 turns the rule off (stored as ``None``).
        max_identical_results: the phase stalls after this many identical
            results in a row (same tool, same content; >= 2); ``None`` or 0
            turns the rule off (stored as ``None``).

    Raises:
        InvalidArgument: a field out of range, named in the message
            (including a stall threshold of 1, a negative one, or one that
            is not an int).
    """

    max_iterations: int = 10
    timeout: float | None = None
    max_parallel_tools: int = 4
    tool_timeout: float = 60.0
    max_output_tokens: int = 1024
    final_answer: bool = True
    context_fill: float = 0.75
    mailbox: int = 16
    max_parse_retries: int = 2
    max_tool_calls_per_turn: int = 64
    max_continuation_turns: int = 0
    max_identical_calls: int | None = attrs.field(default=2, converter=_off_is_none)
    max_identical_results: int | None = attrs.field(default=3, converter=_off_is_none)

    def __attrs_post_init__(self) -> None:
        _positive_int("max_iterations", self.max_iterations)
        _seconds("timeout", self.timeout, optional=True)
        _positive_int("max_parallel_tools", self.max_parallel_tools)
        _seconds("tool_timeout", self.tool_timeout, optional=False)
        _positive_int("max_output_tokens", self.max_output_tokens)
        if not isinstance(self.final_answer, bool):
            raise InvalidArgument(f"Limits.final_answer must be a bool, got {self.final_answer!r}")
        fill = self.context_fill
        if isinstance(fill, bool) or not isinstance(fill, (int, float)) or not 0 < fill <= 1:
            raise InvalidArgument(f"Limits.context_fill must be in (0, 1], got {fill!r}")
        _positive_int("mailbox", self.mailbox, minimum=0)
        _positive_int("max_parse_retries", self.max_parse_retries)
        _positive_int("max_tool_calls_per_turn", self.max_tool_calls_per_turn)
        _positive_int("max_continuation_turns", self.max_continuation_turns, minimum=0)
        _threshold("max_identical_calls", self.max_identical_calls)
        _threshold("max_identical_results", self.max_identical_results)
