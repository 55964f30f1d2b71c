"""Reading a trace file back: one typed record per line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Union

import msgspec

from ..errors import TraceError
from ..messages import Event

__all__ = ["TraceRecord", "event_types", "read_trace"]


def event_types() -> tuple[type[Event], ...]:
    """Every concrete event class (the subclasses of ``Event``, at any depth)."""
    found: list[type[Event]] = []
    todo = list(Event.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return tuple(sorted(set(found), key=lambda c: c.__name__))


class TraceRecord(msgspec.Struct, frozen=True, gc=False):
    """One line of a trace file.

    Attributes:
        t: when the writer took the event from the bus, in seconds since the
            epoch (``time.time()``; within a scheduling round of its publication).
        e: the event, typed (an [`Event`][agentrio.events.Event]).
    """

    t: float
    e: Event


_decoder: msgspec.json.Decoder[Any] | None = None


def _record_decoder() -> msgspec.json.Decoder[Any]:
    global _decoder
    if _decoder is None:
        union = Union[event_types()]  # type: ignore[valid-type]  # noqa: UP007
        line = msgspec.defstruct("_Line", [("t", float), ("e", union)], frozen=True)
        _decoder = msgspec.json.Decoder(line)
    return _decoder


def read_trace(path: str | os.PathLike[str]) -> Iterator[TraceRecord]:
    """Yield the records of the trace file at *path*, in order, each event typed.

    A last line without its newline (the writer was killed in the middle of
    it) is ignored; the file is complete up to the writer's last flush.

    Raises:
        TraceError: the file cannot be opened, or a line before the last is
            not a record (the message names the file and the line number).
    """
    decode = _record_decoder().decode
    try:
        handle = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise TraceError(f"cannot open trace file {os.fspath(path)!r}: {exc}") from None
    with handle:
        number = 0
        for raw in handle:
            number += 1
            if not raw.endswith(b"\n"):
                return  # a torn last line: the writer died in the middle of it
            if not raw.strip():
                continue
            try:
                line = decode(raw)
            except msgspec.DecodeError as exc:
                raise TraceError(
                    f"trace file {os.fspath(path)!r}, line {number}: not a trace record ({exc})"
                ) from None
            yield TraceRecord(t=line.t, e=line.e)
