"""Reading a trace file back: one typed record per line, a line of bounded length."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import IO, Any, Union

import msgspec

from ..errors import TraceError
from ..messages import Event

__all__ = ["MAX_LINE_BYTES", "TraceReader", "TraceRecord", "event_types", "read_trace"]


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


_QUOTED = re.compile(r"'.*'", re.DOTALL)

MAX_LINE_BYTES = 16 * 1024 * 1024  # the longest line read_trace reads (without its newline)


class TraceReader:
    """The records of a trace file, in order (what [`read_trace`][agentrio.tracing.read_trace]
    returns): an iterator, read line by line as it is iterated.

    Attributes:
        path: the trace file.
        torn: the number of the last line, if it was torn (no newline at its end,
            and not a record: the writer was killed in the middle of it) and left
            out; None if it was not (known once the iteration has ended).
    """

    def __init__(self, path: str | os.PathLike[str], max_line_bytes: int) -> None:
        self.path = os.fspath(path)
        self.torn: int | None = None
        self._max_line_bytes = max_line_bytes
        self._records = self._read()

    def __iter__(self) -> TraceReader:
        return self

    def __next__(self) -> TraceRecord:
        return next(self._records)

    def _read(self) -> Iterator[TraceRecord]:
        decode = _record_decoder().decode
        try:
            handle = open(self.path, "rb")  # noqa: SIM115
        except (OSError, ValueError) as exc:  # (ValueError: a NUL in the path)
            raise TraceError(f"cannot open trace file {self.path!r}: {exc}") from None
        with handle:
            number = 0
            while raw := self._line(handle, number + 1):
                number += 1
                if not raw.strip():
                    continue
                try:
                    line = decode(raw)
                except (msgspec.DecodeError, ValueError, RecursionError) as exc:
                    if not raw.endswith(b"\n"):
                        self.torn = number  # the writer died in the middle of it
                        return
                    raise self._error(number, exc) from None
                yield TraceRecord(t=line.t, e=line.e)

    def _line(self, handle: IO[bytes], number: int) -> bytes:
        """The next line (b"" at the end), read without holding more than the limit."""
        try:
            raw = handle.readline(self._max_line_bytes + 1)
        except OSError as exc:
            raise TraceError(f"cannot read trace file {self.path!r}: {exc}") from None
        if len(raw) > self._max_line_bytes and not raw.endswith(b"\n"):
            raise TraceError(
                f"trace file {self.path!r}, line {number}: longer than"
                f" {self._max_line_bytes} bytes (max_line_bytes): not a trace record"
            )
        return raw

    def _error(self, number: int, exc: Exception) -> TraceError:
        if isinstance(exc, RecursionError):
            why = "nested too deep"
        elif isinstance(exc, UnicodeDecodeError):
            why = f"not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
        else:  # (msgspec quotes a bad value, 'like this': not shown)
            why = _QUOTED.sub("(a value not shown)", str(exc))[:200]
        return TraceError(f"trace file {self.path!r}, line {number}: not a trace record ({why})")


def read_trace(
    path: str | os.PathLike[str], *, max_line_bytes: int = MAX_LINE_BYTES
) -> TraceReader:
    """The records of the trace file at *path*, in order, each event typed: a
    [`TraceReader`][agentrio.tracing.TraceReader], which reads the file line by
    line as it is iterated (the file is opened at the first record asked for).

    A last line without its newline that is not a record (the writer was
    killed in the middle of it) is left out, and noted in the reader's
    ``torn``; the file is complete up to the writer's last write. A line
    longer than *max_line_bytes* is never read whole: it is an error.

    Raises:
        TraceError: the file cannot be opened or read, or a line before the last is
            not a record (not JSON, not UTF-8, nested too deep for the decoder, or
            longer than *max_line_bytes*); the message names the file and the line
            number, never the line's content.
    """
    return TraceReader(path, max_line_bytes)
