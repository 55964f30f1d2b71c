"""HTTP/1.1 on one connection, read by hand: what agentrio's connection pool is made of.

A [`Response`][agentrio.types.Response] reads an answer's head (the status line, the header
lines; interim ``1xx`` answers skipped) and then its body, framed by
``Content-Length``, by chunked transfer-encoding, or by the end of the
connection, from the bytes its connection has received; ``gzip`` and
``deflate`` content codings are undone a bounded piece at a time. A
connection is plain TCP (`TCPConnection`, on ``RawSocket``) or TLS
(`TLSConnection`, on ``trio.SSLStream``).

Failures are raised as the ``httpx`` exceptions httpx raises for them
(``ReadError``, ``WriteError``, ``ReadTimeout``, ``RemoteProtocolError``,
``DecodingError``), and no message holds a header.

Why by hand, not with ``h11``: parsing with ``h11`` was built and measured
(issue 22) and cost about 40% of ``bench/http.py``'s throughput, most of it
a state-machine step per chunk of a stream (``docs/design.md``). The grammar
is ``h11``'s (header names are tokens, values hold no control character but
HTAB), and ``tests/providers/test_http11.py`` holds this parser to what
``h11`` reads.
"""

from __future__ import annotations

import re
import zlib
from typing import TYPE_CHECKING, cast

import httpx
import trio

from .._net import RawSocket

if TYPE_CHECKING:
    from .transport import ConnectionPool, Origin

__all__ = ["MAX_HEAD", "Connection", "Response", "TCPConnection", "TLSConnection", "seconds"]

# Interim (1xx) answers skipped before one is refused: a server must not
# keep a call waiting with them for ever.
_MAX_INTERIM = 10
MAX_HEAD = 64 * 1024  # bytes of a response's status line and headers
_MAX_CHUNK_LINE = 4096  # bytes of a chunk-size line or a trailer line
_RECEIVE = 65536
_DECODED = 256 * 1024  # the most bytes undoing a content coding yields at a time
_HEX = re.compile(rb"[0-9A-Fa-f]{1,20}")  # (as h11 reads chunk sizes)
# RFC 9110's grammar, as h11 reads it: a field name is a token; a field value
# holds no control character but HTAB (a bare CR or a NUL could end it early
# for a proxy or a log that reads it again).
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_MAX_LENGTH_DIGITS = 20  # a Content-Length of more digits is refused (as h11 does)

# How a body ends.
_NONE, _LENGTH, _CHUNKED, _CLOSE = range(4)
# Where a chunked body is: before a size line, inside a chunk's data, before
# the CRLF that ends the data, in the trailer section.
_SIZE, _DATA, _DATA_END, _TRAILERS = range(4)


# -- connections ---------------------------------------------------------------------------


class TCPConnection:
    """One plain HTTP/1.1 connection, and the bytes received on it and not read yet."""

    __slots__ = ("buffer", "idle_since", "raw")

    def __init__(self, raw: RawSocket) -> None:
        self.raw = raw
        self.buffer = b""
        self.idle_since = 0.0

    async def receive(self) -> bytes:
        """The next bytes from the server (b"" once it closed the connection)."""
        try:
            return await self.raw.receive(_RECEIVE)
        except OSError as exc:
            raise httpx.ReadError(_why(exc, "reading the response")) from exc

    async def send(self, data: bytes) -> None:
        """Send all of *data*."""
        try:
            await self.raw.send_all(data)
        except OSError as exc:
            raise httpx.WriteError(_why(exc, "sending the request")) from exc

    def is_readable(self) -> bool:
        """Whether bytes (or the end) have come: on an idle connection, it cannot be used."""
        return self.raw.is_readable()

    def close(self) -> None:
        """Close it now (no checkpoint)."""
        self.raw.close()

    async def aclose(self) -> None:
        """Close it."""
        await self.raw.aclose()


class TLSConnection:
    """One HTTP/1.1 connection over TLS, and the bytes received on it and not read yet."""

    __slots__ = ("buffer", "idle_since", "stream")

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.buffer = b""
        self.idle_since = 0.0

    async def receive(self) -> bytes:
        """The next bytes from the server (b"" once it closed the connection)."""
        try:
            # (bytes from an SSLStream; bytearray only in the signature)
            return cast(bytes, await self.stream.receive_some(_RECEIVE))
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpx.ReadError(_why(exc, "reading the response")) from exc

    async def send(self, data: bytes) -> None:
        """Send all of *data*."""
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpx.WriteError(_why(exc, "sending the request")) from exc

    def is_readable(self) -> bool:
        """Whether bytes (or the end) have come: on an idle connection, it cannot be used."""
        return self.stream.transport_stream.socket.is_readable()

    def close(self) -> None:
        """Close it now (no checkpoint), without a close_notify: an answer read to
        its end needs none."""
        self.stream.transport_stream.socket.close()

    async def aclose(self) -> None:
        """Close it, without waiting for the server's close_notify."""
        await trio.aclose_forcefully(self.stream)


Connection = TCPConnection | TLSConnection


def _why(exc: BaseException, doing: str) -> str:
    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
    detail = (str(cause) or type(cause).__name__) if cause is not None else "connection lost"
    return f"the connection broke while {doing} ({detail})"


def seconds(timeout: float | None) -> float:
    """*timeout* for a cancel scope (None: no timeout)."""
    return float("inf") if timeout is None else timeout


# -- responses -----------------------------------------------------------------------------


class Response:
    """A response whose head was read; its body is read with `receive`.

    Attributes:
        status_code: the status (1xx interim responses are skipped).
        reason: the reason phrase.
        headers: (name, value) pairs as received, in order.
    """

    __slots__ = (
        "_chunk_left",
        "_conn",
        "_decoder",
        "_done",
        "_fields",
        "_framing",
        "_head_only",
        "_keep",
        "_left",
        "_more",
        "_origin",
        "_pool",
        "_state",
        "_timeout",
        "headers",
        "reason",
        "status_code",
    )

    def __init__(
        self,
        pool: ConnectionPool,
        origin: Origin,
        conn: Connection,
        read_timeout: float | None,
        head_only: bool,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn: Connection | None = conn
        self._timeout = read_timeout
        self._head_only = head_only
        self.status_code = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self._fields: dict[bytes, bytes] = {}  # lower-case names; repeats joined by ", "
        self._framing = _NONE
        self._left = 0  # _LENGTH: bytes of the body still to come
        self._state = _SIZE  # _CHUNKED: where the decoder is
        self._chunk_left = 0  # _CHUNKED: bytes of the current chunk still to come
        self._more = False  # the buffer ends in an incomplete line: read before parsing it
        self._keep = True
        self._done = False
        self._decoder: _Decoder | None = None

    def header(self, name: bytes) -> bytes | None:
        """The value of header *name* (lower case; repeats joined by ``, ``), else None."""
        return self._fields.get(name)

    @property
    def is_closed(self) -> bool:
        """Whether the body was read to its end or the response closed."""
        return self._conn is None

    async def _start(self, decode: bool, scope: trio.CancelScope) -> None:
        """Read the head (skipping 1xx responses) and work out how the body ends."""
        conn = self._conn
        assert conn is not None
        for _ in range(_MAX_INTERIM + 1):
            head = await self._read_head(conn, scope)
            self._parse_head(head)
            if self.status_code >= 200:
                break
            if self.status_code == 101:
                raise httpx.RemoteProtocolError("the server switched protocols (101)")
        else:
            raise httpx.RemoteProtocolError(
                f"the server sent over {_MAX_INTERIM} interim (1xx) answers"
            )
        self._frame()
        if decode:
            self._decoder = _decoder_for(self.header(b"content-encoding"))
        if self._framing == _NONE:
            self._finish()

    async def _read_head(self, conn: Connection, scope: trio.CancelScope) -> bytes:
        buffer = conn.buffer
        start = 0
        while True:
            if buffer[:1] in (b"\r", b"\n"):  # blank lines before a status line are ignored
                buffer = buffer.lstrip(b"\r\n")
            # The head ends at a blank line: CRLF CRLF, or LF LF from a lax server.
            end = buffer.find(b"\n\r\n", start)
            lax = buffer.find(b"\n\n", start, None if end < 0 else end)
            if lax >= 0:
                conn.buffer = buffer[lax + 2 :]
                return buffer[:lax]
            if end >= 0:
                conn.buffer = buffer[end + 3 :]
                return buffer[:end]
            if len(buffer) > MAX_HEAD:
                raise httpx.RemoteProtocolError(f"the response head is over {MAX_HEAD} bytes")
            start = max(0, len(buffer) - 2)
            if buffer:  # part of the head came: the read timeout starts again
                scope.deadline = trio.current_time() + seconds(self._timeout)
            data = await conn.receive()
            if not data:
                what = "in the middle of its head" if buffer else "before answering"
                raise httpx.RemoteProtocolError(f"the server closed the connection {what}")
            buffer += data

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\n")
        status = lines[0].rstrip(b"\r").split(b" ", 2)
        if (
            len(status) < 2
            or not status[0].startswith(b"HTTP/1.")
            or len(status[1]) != 3
            or not status[1].isdigit()
        ):
            raise httpx.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
        self.status_code = int(status[1])
        self.reason = status[2].strip() if len(status) > 2 else b""
        if status[0] == b"HTTP/1.0":
            self._keep = False  # unless it says keep-alive (below)
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            line = line.rstrip(b"\r")
            if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
                if _CONTROL.search(line):
                    raise httpx.RemoteProtocolError("a malformed header line")
                name, value = headers[-1]
                headers[-1] = (name, value + b" " + line.strip())
                continue
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name) or _CONTROL.search(value):
                # (not the line: a header may hold a secret)
                raise httpx.RemoteProtocolError("a malformed header line")
            headers.append((name, value.strip()))
        fields: dict[bytes, bytes] = {}
        for name, value in headers:
            key = name.lower()
            fields[key] = fields[key] + b", " + value if key in fields else value
        self.headers, self._fields = headers, fields

    def _frame(self) -> None:
        """How the body ends, and whether the connection outlives it."""
        connection = (self.header(b"connection") or b"").lower()
        if b"close" in connection:
            self._keep = False
        elif b"keep-alive" in connection:
            self._keep = True
        if self._head_only or self.status_code in (204, 304):
            self._framing = _NONE
            return
        coding = self.header(b"transfer-encoding")
        if coding is not None:
            if coding.lower().replace(b" ", b"") != b"chunked":
                raise httpx.RemoteProtocolError(f"unsupported Transfer-Encoding: {coding[:50]!r}")
            self._framing = _CHUNKED
            return
        length = self._content_length()
        if length is None:
            self._framing = _CLOSE
            self._keep = False
        elif length == 0:
            self._framing = _NONE
        else:
            self._framing, self._left = _LENGTH, length

    def _content_length(self) -> int | None:
        field = self._fields.get(b"content-length")
        if field is None:
            return None
        values = {v.strip() for v in field.split(b",")}
        if len(values) > 1 or not all(v.isdigit() and len(v) <= _MAX_LENGTH_DIGITS for v in values):
            raise httpx.RemoteProtocolError(f"a bad Content-Length: {sorted(values)[:3]!r}")
        return int(values.pop())

    async def receive(self) -> bytes:
        """The next piece of the body, b"" at its end.

        Raises:
            httpx.TransportError: the connection broke, the body was cut short
                or malformed (``RemoteProtocolError``), or no byte came within
                the read timeout (``ReadTimeout``).
            httpx.DecodingError: its content coding could not be undone.
        """
        if self._decoder is not None and self._decoder.pending():
            return self._decoder.more()
        while not self._done:
            conn = self._conn
            if conn is None:
                raise httpx.ReadError("the response was closed")
            try:
                data = conn.buffer
                if not data or self._more:
                    data += await self._wait(conn)
                    self._more = False
                conn.buffer = b""
                piece = self._take(conn, data)
                if self._decoder is not None:
                    piece = self._decoder.feed(piece)
            except BaseException:
                await self.aclose()
                raise
            if piece:
                return piece
        return b""

    async def _wait(self, conn: Connection) -> bytes:
        with trio.move_on_after(seconds(self._timeout)):
            data = await conn.receive()
            if data or self._framing == _CLOSE:
                return data
            raise httpx.RemoteProtocolError(
                "the server closed the connection before the end of the body"
                + (" (incomplete chunked read)" if self._framing == _CHUNKED else "")
            )
        raise httpx.ReadTimeout(f"no data within the read timeout ({self._timeout} s)")

    def _take(self, conn: Connection, data: bytes) -> bytes:
        """The body bytes in *data*; what follows the body stays in the buffer."""
        if self._framing == _LENGTH:
            if len(data) >= self._left:
                piece, conn.buffer = data[: self._left], data[self._left :]
                self._finish()
                return piece
            self._left -= len(data)
            return data
        if self._framing == _CHUNKED:
            return self._dechunk(conn, data)
        if not data:  # _CLOSE: the end of the connection is the end of the body
            self._finish()
        return data

    def _dechunk(self, conn: Connection, data: bytes) -> bytes:
        out: list[bytes] = []
        pos, size = 0, len(data)
        while pos < size:
            state = self._state
            if state == _DATA:
                end = min(size, pos + self._chunk_left)
                out.append(data[pos:end])
                self._chunk_left -= end - pos
                pos = end
                if not self._chunk_left:
                    self._state = _DATA_END
                continue
            end = data.find(b"\n", pos)
            if end < 0:
                if size - pos > _MAX_CHUNK_LINE:
                    raise httpx.RemoteProtocolError("a chunk-size or trailer line is too long")
                conn.buffer = data[pos:]  # an incomplete line: wait for the rest
                self._more = True
                break
            line = data[pos:end].rstrip(b"\r")
            pos = end + 1
            if state == _DATA_END:
                if line:
                    raise httpx.RemoteProtocolError("a chunk's data is longer than its size")
                self._state = _SIZE
            elif state == _SIZE:
                self._chunk_left = _chunk_size(line)
                self._state = _DATA if self._chunk_left else _TRAILERS
            elif not line:  # _TRAILERS: the blank line ends the body
                conn.buffer = data[pos:]
                self._finish()
                break
        return b"".join(out) if len(out) != 1 else out[0]

    def _finish(self) -> None:
        """The body has ended: the connection goes back to the pool if it may."""
        self._done = True
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Bytes beyond the response were not asked for: the connection is out of step.
        if self._keep and not conn.buffer and self._pool._release(self._origin, conn):
            return
        conn.close()  # (at once: this is no checkpoint)

    async def aclose(self) -> None:
        """Close the response; before the end of the body, that closes the connection."""
        self._done = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not _HEX.fullmatch(text):
        raise httpx.RemoteProtocolError(f"a bad chunk size: {line[:40]!r}")
    return int(text, 16)


# -- content codings ---------------------------------------------------------------------


class _Decoder:
    """Undoes gzip or deflate, yielding at most ``_DECODED`` bytes at a time
    (a small compressed body may expand a thousandfold)."""

    __slots__ = ("_tail", "_zlib")

    def __init__(self, wbits: int) -> None:
        self._zlib = zlib.decompressobj(wbits)
        self._tail = b""

    def pending(self) -> bool:
        return bool(self._tail)

    def feed(self, data: bytes) -> bytes:
        try:
            out = self._zlib.decompress(data, _DECODED)
        except zlib.error as exc:
            raise httpx.DecodingError(f"the body's content coding is broken ({exc})") from None
        self._tail = self._zlib.unconsumed_tail
        return out

    def more(self) -> bytes:
        return self.feed(self._tail)


def _decoder_for(coding: bytes | None) -> _Decoder | None:
    if coding is None:
        return None
    name = coding.strip().lower()
    if name in (b"", b"identity"):
        return None
    if name in (b"gzip", b"x-gzip"):
        return _Decoder(zlib.MAX_WBITS | 16)
    if name == b"deflate":
        return _Decoder(zlib.MAX_WBITS | 32)  # zlib or raw deflate: both are sent as "deflate"
    raise httpx.DecodingError(f"unsupported Content-Encoding: {coding[:50]!r}")
