"""ContextActor: one named conversation history, and fitting it to a context window.

Each ``(agent, context_label)`` history lives in its own ContextActor. An agent
reads it once at the start of a phase (an ask) and writes the phase's new
messages back once at the end (a tell), so a phase costs the context actor two
messages however many turns it has.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence

from ...actors.actor import InlineActor
from ...messages import (
    ChatMessage,
    ContextAppend,
    ContextCompact,
    ContextRead,
    ContextReadTurns,
    ContextReset,
    Message,
    Turn,
)

__all__ = ["ContextActor", "fit_window", "turn_units"]


class ContextActor(InlineActor[Message]):
    """Holds one conversation history; answers ``ContextRead`` with a tuple of it,
    and ``ContextReadTurns`` with a tuple of [`Turn`][agentrio.types.Turn] (each with its time).

    ``ContextAppend`` and ``ContextReset`` change it; ``ContextCompact``
    replaces a span of it with a summary, and answers whether it could.

    An inline actor: it never waits, so it needs no task of its own, and a
    read or a write is handled in the agent's task at once.
    """

    __slots__ = ("history", "timestamps")

    def __init__(self) -> None:
        self.history: list[ChatMessage] = []
        # When each turn of the history was made (time.time()), index for index:
        # an array beside it rather than a Turn per message, so that reading
        # the history for a phase (ContextRead) costs what it did; and an
        # array of doubles, not a list of floats: 8 bytes a turn, and nothing
        # for the cyclic GC to walk on each of 10k agents.
        self.timestamps = array("d")

    def handle(self, msg: Message) -> object:
        if type(msg) is ContextRead:
            return tuple(self.history)
        if type(msg) is ContextAppend:
            # (Inline, once a phase: a phase's turns come with their times.)
            self.history.extend(msg.messages)
            if len(msg.timestamps) == len(msg.messages):
                # (fromlist of a list: half the cost of extend with the tuple,
                # which goes through the generic iterator path.)
                self.timestamps.fromlist([*msg.timestamps])
            else:  # (a hand-made ContextAppend: its turns are made now)
                self._stamp_now(len(msg.messages))
            return None
        if type(msg) is ContextReset:
            self.history.clear()
            del self.timestamps[:]
            return None
        if type(msg) is ContextReadTurns:
            return self.turns()
        if type(msg) is ContextCompact:
            return self._compact(msg)
        raise TypeError(f"ContextActor cannot handle {type(msg).__name__}")

    def _stamp_now(self, count: int) -> None:
        """Give the *count* turns just appended the time of now."""
        self.timestamps.extend(array("d", [time.time()]) * count)

    def turns(self) -> tuple[Turn, ...]:
        """The history, each message with the time it was made."""
        history, stamps = self.history, self.timestamps
        if len(stamps) != len(history):
            # The history was changed without its times (a turn replaced or
            # dropped by hand): the newest turns keep theirs, and older turns
            # without one get the time of this read.
            missing = len(history) - len(stamps)
            if missing > 0:
                stamps[:0] = array("d", [time.time()]) * missing
            else:
                del stamps[:-missing]
        return tuple(map(Turn, history, stamps))

    def _compact(self, msg: ContextCompact) -> bool:
        # One message, one step: no reader sees the history half compacted.
        history = self.history
        if len(history) != msg.length or not 0 <= msg.start <= msg.end <= msg.length:
            return False  # written to since it was read: the plan no longer fits it
        history[msg.start : msg.end] = msg.summary
        # The summary's turns get the time they were made; the kept ones keep theirs.
        if len(self.timestamps) == msg.length:
            now = array("d", [time.time()]) * len(msg.summary)
            self.timestamps[msg.start : msg.end] = now
        return True


def turn_units(messages: Sequence[ChatMessage]) -> list[tuple[int, int]]:
    """Split *messages* into the spans ``(start, end)`` that are kept or left out whole.

    An assistant message with tool calls and the tool results that follow it
    are one span (a provider refuses a call without its result, and a result
    without its call); every other message is a span of its own.
    """
    units = []
    i, n = 0, len(messages)
    while i < n:
        j = i + 1
        if messages[i].role == "assistant" and messages[i].tool_calls:
            while j < n and messages[j].role == "tool":
                j += 1
        units.append((i, j))
        i = j
    return units


def fit_window(
    messages: Sequence[ChatMessage], sizes: Sequence[int], limit: int
) -> tuple[list[ChatMessage], int, int]:
    """Leave out old turns until the estimated size fits *limit* tokens.

    A tool call and its results go together, as one unit (see
    `turn_units`): first the oldest such units (and any tool result
    without its call), then the oldest assistant turns without tool results.
    The system prompt, the user messages and the newest unit always stay.

    Args:
        messages: the history, oldest first.
        sizes: the estimated tokens of each message.
        limit: the most tokens the result may hold.

    Returns:
        The kept messages, how many were left out, and the kept estimate.
    """
    total = sum(sizes)
    if total <= limit:
        return list(messages), 0, total
    units = turn_units(messages)[:-1]  # (the newest unit stays)
    keep = [True] * len(messages)
    dropped = 0
    for with_results in (True, False):
        for start, end in units:
            if total <= limit:
                break
            role = messages[start].role
            if role in ("system", "user") or (end - start > 1 or role == "tool") != with_results:
                continue
            for i in range(start, end):
                keep[i] = False
                total -= sizes[i]
            dropped += end - start
    return [m for m, k in zip(messages, keep, strict=True) if k], dropped, total
