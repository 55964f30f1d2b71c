"""What a phase's records say of it: its summary, its turns, a cut of it (a fork)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from ...errors import StoreCorrupt
from ...messages import ChatMessage
from .records import PhaseBegun, PhaseDone, Record, ToolsDone, TurnsAdded, tool_message

__all__ = [
    "PhaseStatus",
    "PhaseSummary",
    "RecordedTurn",
    "decode_summary",
    "messages_of",
    "summarize",
]

PhaseStatus = Literal["unfinished", "finished", "abandoned"]
"""A recorded phase's status: ``"unfinished"`` (live: a runtime opening the store
resumes it), ``"finished"`` (it ended), ``"abandoned"`` (it never ended and will not
be resumed: its agent's path or its id was taken by a later one)."""


class PhaseSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded phase, as a [`StoreReader`][agentrio.types.StoreReader] lists it.

    Attributes:
        phase_id: the phase's id.
        agent: the path of the agent that ran it.
        agent_id: the durable agent's id (the same in each life of the runtime).
        spec: its spec's registered name.
        version: its spec's ``version`` when it began (None: none was set).
        session: the session it belongs to (None: none).
        status: ``"unfinished"``, ``"finished"`` or ``"abandoned"``.
        started_at: when it began (``time.time()``).
        ended_at: when it ended (None: it did not).
        stop_reason: its result's ``stop_reason`` (None: it did not end).
        turns: the messages it recorded (its user turn, the model's replies,
            the tools' results).
        archived: is it in the store's archive (not read when a runtime opens)?
    """

    phase_id: str
    agent: str
    agent_id: str
    spec: str
    version: str | None = None
    session: str | None = None
    status: PhaseStatus = "unfinished"
    started_at: float = 0.0
    ended_at: float | None = None
    stop_reason: str | None = None
    turns: int = 0
    archived: bool = False


class RecordedTurn(msgspec.Struct, frozen=True, kw_only=True):
    """One message a phase recorded, as [`StoreReader.turns`][agentrio.types.StoreReader.turns]
    gives it.

    Attributes:
        index: its place among the phase's messages (0: the first); what
            [`fork`][agentrio.types.StoreReader.fork] takes as ``turn=``.
        message: the message.
        at: when it was made (``time.time()``; 0.0 if not recorded).
    """

    index: int
    message: ChatMessage
    at: float = 0.0


_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(PhaseSummary).decode


def encode_summary(summary: PhaseSummary) -> bytes:
    return _ENCODE(summary)


def decode_summary(meta: bytes, source: str) -> PhaseSummary:
    """The summary an archive's index holds (hostile bytes: a StoreCorrupt)."""
    try:
        return _DECODE(meta)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise StoreCorrupt(
            f"checkpoint archive {source!r} holds an undecodable phase summary",
            source=source,
            offset=0,
        ) from None


def last_run(records: Sequence[Record]) -> list[Record]:
    """The records of a phase's last run: from its last ``PhaseBegun`` on (a phase id
    may have been run again), or [] if it has none."""
    for i in range(len(records) - 1, -1, -1):
        if type(records[i]) is PhaseBegun:
            return list(records[i:])
    return []


def messages_of(run: Sequence[Record]) -> list[tuple[ChatMessage, float]]:
    """The messages the run recorded, with their times, in order."""
    out: list[tuple[ChatMessage, float]] = []
    for record in run:
        if type(record) is TurnsAdded or type(record) is PhaseDone:
            stamps = list(record.timestamps) + [0.0] * len(record.messages)
            out += zip(record.messages, stamps, strict=False)
        elif type(record) is ToolsDone:
            out += [(tool_message(result), record.at) for result in record.results]
    return out


def summarize(run: Sequence[Record], *, archived: bool, abandoned: bool = False) -> PhaseSummary:
    """The summary of *run* (its ``PhaseBegun`` first)."""
    begun = run[0]
    assert type(begun) is PhaseBegun
    last = run[-1]
    done = last if type(last) is PhaseDone else None
    turns = len(messages_of(run))
    status: PhaseStatus = (
        "finished" if done is not None else "abandoned" if abandoned else "unfinished"
    )
    return PhaseSummary(
        phase_id=begun.phase,
        agent=begun.agent,
        agent_id=begun.agent_id,
        spec=begun.spec,
        version=begun.version,
        session=begun.session,
        status=status,
        started_at=begun.at,
        ended_at=None if done is None else done.at or max((*done.timestamps, begun.at)),
        stop_reason=None if done is None else done.result.stop_reason,
        turns=turns,
        archived=archived,
    )


def cut(run: Sequence[Record], keep: int, phase_id: str) -> list[Record]:
    """*run*'s records as a new phase *phase_id* with only its first *keep*
    messages: its calls' starts, ends and approvals are left out (a call of the
    last kept turn is made again), and so is its end."""
    out: list[Record] = []
    left = keep
    for record in run:
        if left <= 0:
            break
        if type(record) is TurnsAdded or type(record) is PhaseDone:
            taken = record.messages[:left]
            if taken:
                stamps = tuple(record.timestamps[: len(taken)])
                out.append(TurnsAdded(phase_id, tuple(taken), stamps, record.totals))
                left -= len(taken)
        elif type(record) is ToolsDone:
            results = record.results[:left]
            out.append(ToolsDone(phase_id, tuple(results), record.at))
            left -= len(results)
    return out
