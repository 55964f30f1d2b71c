"""The trace writer: the runtime's events, one JSON line each, written off the agents' path.

A callback attached to the runtime's bus takes each event as it is
published (an append to a bounded list) and stamps it with ``time.time()``;
a second task writes what has gathered every ``FLUSH_INTERVAL`` seconds, or
as soon as ``BATCH`` events wait, in a worker thread, so a slow disk slows
no agent. At most ``MAX_PENDING`` events wait to be written: past that, events
are dropped, counted in [`TraceWriter.dropped`][agentrio.tracing.TraceWriter],
and an [`EventsLost`][agentrio.events.EventsLost] record with their number is
written in their place. Each batch is written and flushed to the operating
system (not ``fsync``-ed): after a crash of the process the file holds
everything up to its last flush, and at most its last line is torn (the
reader ignores it).
"""

from __future__ import annotations

import os
import time
from typing import IO

import msgspec
import trio

from ..core.bus import EventBus
from ..errors import TraceError
from ..messages import Event, EventsLost

__all__ = ["BATCH", "FLUSH_INTERVAL", "MAX_PENDING", "TraceWriter"]

FLUSH_INTERVAL = 0.2  # seconds between writes of what has gathered
BATCH = 1000  # events that make the writer write at once
MAX_PENDING = 100_000  # events waiting to be written, past which events are dropped


class _Line(msgspec.Struct, gc=False):
    t: float
    e: Event


class TraceWriter:
    """Writes a runtime's events to a trace file (made by ``open_runtime(trace=...)``).

    The file is opened (created, or truncated) when the runtime opens; an
    error there raises [`TraceError`][agentrio.errors.TraceError] naming the
    path.

    Attributes:
        path: the trace file's path.
        written: events written so far.
        dropped: events dropped because ``MAX_PENDING`` were waiting.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_pending: int = MAX_PENDING) -> None:
        self.path = os.fspath(path)
        self.written = 0
        self.dropped = 0
        self._max_pending = max_pending
        self._pending: list[_Line] = []
        self._lost = 0  # dropped since the last EventsLost record
        self._wake = trio.Event()
        self._ended = False
        self._encoder = msgspec.json.Encoder()
        try:
            self._file: IO[bytes] = open(self.path, "wb")  # noqa: SIM115
        except OSError as exc:
            raise TraceError(f"cannot open trace file {self.path!r}: {exc}") from None

    def _take(self, event: Event) -> None:
        if len(self._pending) >= self._max_pending:
            self._lost += 1
            self.dropped += 1
            return
        if self._lost:
            self._pending.append(_Line(time.time(), EventsLost(path="", count=self._lost)))
            self._lost = 0
        self._pending.append(_Line(time.time(), event))
        if len(self._pending) >= BATCH:
            self._wake.set()

    async def run(self, bus: EventBus, task_status: trio.TaskStatus[None]) -> None:
        """Take every event of *bus* and write them until the bus closes or this is
        cancelled; then write what is left and close the file."""
        detach = bus.attach(self._take, self._end)
        task_status.started()
        try:
            await self._flusher()
        finally:
            detach()
            with trio.CancelScope(shield=True):
                await self._write()
                self._file.close()

    def _end(self) -> None:
        self._ended = True
        self._wake.set()

    async def _flusher(self) -> None:
        while not self._ended:
            with trio.move_on_after(FLUSH_INTERVAL):
                await self._wake.wait()
            self._wake = trio.Event()
            await self._write()

    async def _write(self) -> None:
        if self._lost:
            self._pending.append(_Line(time.time(), EventsLost(path="", count=self._lost)))
            self._lost = 0
        lines, self._pending = self._pending, []
        if not lines:
            return
        buffer = bytearray()
        for line in lines:
            self._encoder.encode_into(line, buffer, len(buffer))
            buffer += b"\n"
        await trio.to_thread.run_sync(self._append, bytes(buffer))
        self.written += len(lines)

    def _append(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()
