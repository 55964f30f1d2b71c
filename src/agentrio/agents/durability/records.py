"""The checkpoint records: tagged msgpack arrays, one union decoded at once."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal, Union

import msgspec

from ...errors import (
    StoreCorrupt,
)
from ...messages import (
    ChatMessage,
    PhaseResult,
    RunPhase,
    ToolCallRequest,
    ToolResult,
)
from ...store.base import Entry
from ..budgets.usage import UsageTotals

if TYPE_CHECKING:
    pass

__all__ = ["INTERRUPTED", "Record", "Totals", "decode_records", "tool_message"]


class _Record(msgspec.Struct, frozen=True, tag=True, array_like=True, gc=False):
    """A checkpoint record: tagged with its class's name like a ``Message``, and
    frozen, but encoded as an array, not a map (a record is written for every turn
    of every durable agent, and field names would be most of its bytes). What it
    holds is the actors' own messages (``RunPhase``, ``ChatMessage``, ``ToolResult``,
    ``PhaseResult``)."""


# (Totals read back from a store go into the root budget, and are written again
# with its next totals: a count that is negative or over _MAX_COUNT (the budget's
# sums would soon pass what msgpack can hold, 2**64 - 1), or a cost that is
# negative, NaN or infinite, is refused as the record is decoded, and so is a
# time that is not one time.time() gives. Checked only when decoding: making and
# encoding records pays nothing for it.)
_MAX_COUNT = 2**53


_Count = Annotated[int, msgspec.Meta(ge=0, le=_MAX_COUNT)]


_Cost = Annotated[float, msgspec.Meta(ge=0.0, le=1e300)]


_Time = Annotated[float, msgspec.Meta(ge=0.0, le=1e12)]


class Totals(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The root budget's settled totals (``UsageTotals`` but ``total_tokens``)."""

    input_tokens: _Count = 0
    output_tokens: _Count = 0
    requests: _Count = 0
    tool_calls: _Count = 0
    cost_usd: _Cost = 0.0
    overruns: _Count = 0
    attempts: _Count = 0
    cached_input_tokens: _Count = 0
    cache_write_tokens: _Count = 0
    reasoning_tokens: _Count = 0

    def usage(self) -> UsageTotals:
        return UsageTotals(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
            requests=self.requests,
            tool_calls=self.tool_calls,
            cost_usd=self.cost_usd,
            overruns=self.overruns,
            attempts=self.attempts,
            cached_input_tokens=self.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )


class PhaseBegun(_Record, frozen=True):
    phase: str
    agent: str  # the agent's path
    agent_id: str  # the durable agent's id, the same in each life
    spec: str  # its spec's registered name
    command: RunPhase
    at: _Time = 0.0
    # (#27: the session the phase belongs to, if any, and its spec's version)
    session: str | None = None
    version: str | None = None


class TurnsAdded(_Record, frozen=True):
    phase: str
    messages: tuple[ChatMessage, ...]
    timestamps: tuple[_Time, ...]
    totals: Totals | None = None


class ToolsDone(_Record, frozen=True):
    phase: str
    results: tuple[ToolResult, ...]
    at: _Time = 0.0


class ToolBegun(_Record, frozen=True):
    phase: str
    call_id: str
    tool: str = ""


class ToolDone(_Record, frozen=True):
    phase: str
    result: ToolResult


class ApprovalAsked(_Record, frozen=True):
    phase: str
    call_id: str
    tool: str = ""


class ApprovalAnswered(_Record, frozen=True):
    phase: str
    call_id: str
    approved: bool = False
    reason: str = ""


class PhaseDone(_Record, frozen=True):
    phase: str
    result: PhaseResult[str]
    messages: tuple[ChatMessage, ...] = ()
    timestamps: tuple[_Time, ...] = ()
    totals: Totals | None = None
    at: _Time = 0.0


class TotalsKept(_Record, frozen=True):
    """The budget's last totals, kept in the live area when the phases that
    recorded them are archived (its ``phase`` is ``""``: no phase's)."""

    phase: str
    totals: Totals


# -- deferred decisions (#27: durability/deferred.py) ----------------------------------


class ParkedCall(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A call a parked phase waits for: an approval (``kind="approval"``) or the
    result of a tool that deferred it (``"result"``)."""

    call: ToolCallRequest
    kind: Literal["approval", "result"]
    note: str = ""


class PhaseParked(_Record, frozen=True):
    """The phase parked, waiting for *calls* (its turns are in the records before
    this one; a decision is an ``ApprovalAnswered``, a result a ``ToolDone``)."""

    phase: str
    calls: tuple[ParkedCall, ...]
    at: _Time = 0.0


class MemoryKept(_Record, frozen=True):
    """A record of a memory (#26: agents/memory): opaque here, read by the memory."""

    memory: str
    data: bytes


Record = Union[  # noqa: UP007  (msgspec reads a Union of the tagged records)
    PhaseBegun,
    TurnsAdded,
    ToolsDone,
    ToolBegun,
    ToolDone,
    ApprovalAsked,
    ApprovalAnswered,
    PhaseDone,
    MemoryKept,
    PhaseParked,
    TotalsKept,
]


def waiting(run: list[Record]) -> dict[str, ParkedCall]:
    """The calls a phase's records (*run*) still wait for: those of its last
    ``PhaseParked`` without a decision or result after it ({}: not parked)."""
    out: dict[str, ParkedCall] = {}
    for record in run:
        if isinstance(record, PhaseParked):
            out = {p.call.id: p for p in record.calls}
        elif out and isinstance(record, ApprovalAnswered):
            out.pop(record.call_id, None)
        elif out and isinstance(record, ToolDone):
            out.pop(record.result.id, None)
    return out


_QUOTED = re.compile(r"'.*'", re.DOTALL)


_ENCODE = msgspec.msgpack.Encoder().encode


_DECODER = msgspec.msgpack.Decoder(Record)


def decode_records(entries: list[Entry]) -> list[Record]:
    """The records of *entries*, in order.

    Raises:
        StoreCorrupt: a record that is not msgpack, or of no known type or shape,
            naming its source and offset (never its content).
    """
    decode = _DECODER.decode
    out: list[Record] = []
    for entry in entries:
        try:
            out.append(decode(entry.data))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            kind = (
                "of an unknown type or shape"
                if isinstance(exc, msgspec.ValidationError)
                else ("not a checkpoint record (undecodable bytes)")
            )
            # (msgspec quotes a bad value, 'like this': not shown.)
            why = _QUOTED.sub("(a value not shown)", str(exc))[:200]
            raise StoreCorrupt(
                f"checkpoint record at {entry.source!r} offset {entry.offset} is {kind}: {why}",
                source=entry.source,
                offset=entry.offset,
            ) from None
    return out


def tool_message(result: ToolResult) -> ChatMessage:
    """The history's message for the tool call's *result* (as ``Phase._settle_batch``
    adds it)."""
    return ChatMessage(
        "tool",
        result.content,
        tool_call_id=result.id,
        name=result.name,
        is_error=result.status != "ok",
        parts=result.parts,
    )


INTERRUPTED = (
    "tool {name!r} was interrupted by a restart (a crash of the process or of the "
    "agent) while it ran: it may have taken effect, or not. It was not run again, "
    "as it is not declared idempotent"
)
"""The content of the ``"failed"`` result a model sees for a call that was in flight
at a crash, of a tool not declared idempotent."""
