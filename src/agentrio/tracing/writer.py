"""The trace writer: the runtime's events, one JSON line each, written off the agents' path.

A callback attached to the runtime's bus takes each event as it is
published (an append to a bounded list) and stamps it with ``time.time()``;
a second task writes what has gathered every ``FLUSH_INTERVAL`` seconds, or
as soon as ``BATCH`` events wait, in a worker thread, so a slow disk slows
no agent. At most ``MAX_PENDING`` events wait to be written: past that, events
are dropped, counted in [`TraceWriter.dropped`][agentrio.tracing.TraceWriter],
and an [`EventsLost`][agentrio.events.EventsLost] record with their number is
written in their place. Each batch is written to the operating system (not
``fsync``-ed): after a crash of the process the file holds everything up to
its last write, and at most its last line is torn (the reader notes it).

The file is opened in a worker thread too (a FIFO with no reader blocks its
opener until one comes). A FIFO or a socket is written from the Trio thread
without blocking, so that a reader that reads nothing never makes the writer
uncancellable; once the bus has ended, such a reader is given ``_CLOSE_GRACE``
seconds to make room, then given up. A write that fails (a full disk, an I/O error, a
reader gone) never reaches the agents: the writer stops writing, publishes a
[`TraceWriteFailed`][agentrio.events.TraceWriteFailed], drops and counts every
later event, and the runtime raises [`TraceError`][agentrio.errors.TraceError]
when it closes.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from typing import IO, Any

import msgspec
import trio

from .._text import scrub
from ..actors.bus import EventBus
from ..errors import TraceError
from ..messages import Event, EventsLost, TraceWriteFailed

__all__ = ["BATCH", "FLUSH_INTERVAL", "MAX_PENDING", "TraceWriter"]

FLUSH_INTERVAL = 0.2  # seconds between writes of what has gathered
# At the runtime's end, how long a FIFO's (or socket's) reader may take nothing
# before the last write is given up (the runtime then raises TraceError).
_CLOSE_GRACE = 5.0
BATCH = 1000  # events that make the writer write at once
MAX_PENDING = 100_000  # events waiting to be written, past which events are dropped


class _Line(msgspec.Struct, gc=False):
    t: float
    e: Event


class _Failure(msgspec.Struct, frozen=True):
    """Why writing stopped: the error's kind, never its text's content."""

    error_type: str
    errno: str
    error: str


class TraceWriter:
    """Writes a runtime's events to a trace file (made by ``open_runtime(trace=...)``).

    The file is opened (created, or truncated) by [`open`][agentrio.tracing.TraceWriter.open]
    (``run`` opens it if that was not done), when the runtime opens; an error
    there raises [`TraceError`][agentrio.errors.TraceError] naming the path.
    Once a write has failed, nothing more is written (see ``error``).

    Attributes:
        path: the trace file's path.
        written: events written so far.
        dropped: events dropped: because ``MAX_PENDING`` were waiting, because
            one could not be encoded, or because writing had stopped.
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
        self._file: IO[bytes] | None = None
        self._bus: EventBus | None = None
        self._failure: _Failure | None = None
        # A FIFO or a socket is written from the Trio thread, without blocking:
        # a reader that reads nothing must not make the writer uncancellable.
        self._pollable = False
        self._closing = False  # the last write: a stalled reader is given _CLOSE_GRACE
        self._waiting: trio.CancelScope | None = None  # a write waiting for its reader

    @property
    def error(self) -> TraceError | None:
        """Why the file stopped being written (a write or its closing failed), with
        how many events were written and dropped; None while all is well."""
        failure = self._failure
        if failure is None:
            return None
        kind = failure.errno or failure.error_type
        return TraceError(
            f"trace file {self.path!r} could not be written ({kind}: {failure.error});"
            f" {self.written} events written, {self.dropped} dropped"
        )

    async def open(self) -> None:
        """Create (or truncate) the file, in a worker thread; does nothing if it is open.

        Cancelling it works even while the open waits (a FIFO with no reader):
        the waiting thread is let go, and the file it opens is closed.

        Raises:
            TraceError: the file cannot be opened (the message names it).
        """
        if self._file is None:
            self._file = await _Opening(self.path).open()
            mode = os.fstat(self._file.fileno()).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                os.set_blocking(self._file.fileno(), False)
                self._pollable = True

    async def aclose(self) -> None:
        """Close the file, if it is open, without writing what waits (``run`` closes
        it itself when it ends: this is for a writer that never ran)."""
        await self._close()

    def _take(self, event: Event) -> None:
        # Once writing has failed, _max_pending is 0: every event is counted, none kept.
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
        cancelled; then write what is left and close the file. A write that fails
        does not end it (see the class)."""
        await self.open()
        self._bus = bus
        detach = bus.attach(self._take, self._end)
        task_status.started()
        try:
            await self._flusher()
        finally:
            detach()
            self._closing = True
            with trio.CancelScope(shield=True):
                await self._write()
                await self._close()

    def _end(self) -> None:
        self._ended = True
        self._wake.set()
        if self._waiting is not None:  # (a reader that reads nothing now has _CLOSE_GRACE)
            self._waiting.cancel()

    async def _flusher(self) -> None:
        while not self._ended:
            with trio.move_on_after(FLUSH_INTERVAL):
                await self._wake.wait()
            self._wake = trio.Event()
            await self._write()

    async def _write(self) -> None:
        if self._failure is not None:
            return
        if self._lost:
            self._pending.append(_Line(time.time(), EventsLost(path="", count=self._lost)))
            self._lost = 0
        lines, self._pending = self._pending, []
        if not lines:
            return
        buffer = self._encode(lines)
        try:
            if self._pollable:
                await self._append_polled(bytes(buffer))
            else:
                await trio.to_thread.run_sync(self._append, bytes(buffer))
        except OSError as exc:
            self.dropped += len(lines)
            await self._fail(exc)
            return
        except trio.Cancelled:
            # Cut short waiting for a reader, maybe in the middle of a line: nothing
            # more may be written after it (the file is closed by run, shielded).
            self.dropped += len(lines)
            self._stop(TimeoutError(errno.ETIMEDOUT, "cancelled while its reader read nothing"))
            raise
        self.written += len(lines)

    def _encode(self, lines: list[_Line]) -> bytearray:
        buffer = bytearray()
        encode_into = self._encoder.encode_into
        for line in lines:
            start = len(buffer)
            try:
                encode_into(line, buffer, start)
            except (UnicodeEncodeError, TypeError, ValueError):
                del buffer[start:]
                if not self._encode_slowly(line, buffer):
                    self.dropped += 1
                    continue
            buffer += b"\n"
        return buffer

    def _encode_slowly(self, line: _Line, buffer: bytearray) -> bool:
        """Encode *line* with its text scrubbed (lone surrogates: U+FFFD); False if
        even that fails (an event of one's own holding what JSON cannot say)."""
        try:
            data = {"t": line.t, "e": scrubbed(msgspec.to_builtins(line.e))}
            self._encoder.encode_into(data, buffer, len(buffer))
        except (UnicodeEncodeError, TypeError, ValueError):
            return False
        return True

    def _append(self, data: bytes) -> None:
        assert self._file is not None
        view = memoryview(data)
        while view:  # (an unbuffered file may write less than it was given)
            view = view[self._file.write(view) :]

    async def _append_polled(self, data: bytes) -> None:
        """Write *data* to a FIFO or socket without blocking, waiting (cancellably)
        for its reader to make room; once the bus has ended, _CLOSE_GRACE at most for
        each wait."""
        assert self._file is not None
        fd = self._file.fileno()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                if self._closing or self._ended:
                    with trio.move_on_after(_CLOSE_GRACE):
                        await trio.lowlevel.wait_writable(fd)
                        continue
                    raise TimeoutError(
                        errno.ETIMEDOUT, f"its reader read nothing for {_CLOSE_GRACE:g} s"
                    ) from None
                with trio.CancelScope() as self._waiting:  # (cancelled by _end)
                    await trio.lowlevel.wait_writable(fd)
                self._waiting = None

    async def _fail(self, exc: OSError) -> None:
        """Stop writing for good: count what waited as dropped, say why once."""
        self._stop(exc)
        await self._close()

    def _stop(self, exc: OSError) -> None:
        """Stop writing for good (the file is left to close): count what waited as
        dropped, say why once."""
        self._failure = _Failure(
            type(exc).__name__, errno.errorcode.get(exc.errno or 0, ""), exc.strerror or "error"
        )
        self._max_pending = 0
        self.dropped += len(self._pending) + self._lost
        self._pending, self._lost = [], 0
        if self._bus is not None:
            self._bus.publish(
                TraceWriteFailed(
                    path="",
                    file=self.path,
                    error_type=self._failure.error_type,
                    errno=self._failure.errno,
                    error=self._failure.error,
                    written=self.written,
                    dropped=self.dropped,
                )
            )

    async def _close(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        try:
            await trio.to_thread.run_sync(file.close)
        except OSError as exc:
            if self._failure is None:
                await self._fail(exc)


class _Opening:
    """Opens a trace file in a worker thread that can be let go while it waits."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._abandoned = False
        self._file: IO[bytes] | None = None

    async def open(self) -> IO[bytes]:
        try:
            return await trio.to_thread.run_sync(self._open, abandon_on_cancel=True)
        except (OSError, ValueError) as exc:  # (ValueError: a NUL in the path)
            raise TraceError(f"cannot open trace file {self.path!r}: {exc}") from None
        except BaseException:
            self._abandon()
            raise

    def _open(self) -> IO[bytes]:
        # Unbuffered: what is written is with the OS, and closing has nothing to flush.
        file = open(self.path, "wb", buffering=0)  # noqa: SIM115
        with self._lock:
            kept = not self._abandoned
            if kept:
                self._file = file
        if not kept:
            file.close()
        return file

    def _abandon(self) -> None:
        """The opener is gone: close the file if it was opened, else end the wait."""
        with self._lock:
            self._abandoned = True
            file, self._file = self._file, None
        if file is not None:
            file.close()
        else:
            _unblock_fifo(self.path)


def _unblock_fifo(path: str) -> None:
    """If *path* is a FIFO, open and close its reading end, so that a thread
    waiting to open it for writing returns (and closes what it opened)."""
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        pass


def scrubbed(data: Any) -> Any:
    """*data* (builtins: what ``msgspec.to_builtins`` gives) with every str, keys
    included, passed through ``agentrio._text.scrub``: lone surrogates become
    U+FFFD, so the whole can be encoded as UTF-8 (the slow path of the writer)."""
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        return {scrubbed(key): scrubbed(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [scrubbed(item) for item in data]
    return data
