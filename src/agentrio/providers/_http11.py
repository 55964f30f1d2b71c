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
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, cast

import h11
import httpx
import trio

from .._net import RawSocket

if TYPE_CHECKING:
    from .transport import ConnectionPool, Origin

__all__ = [
    "MAX_HEAD",
    "Connection",
    "Response",
    "TCPConnection",
    "TLSConnection",
    "seconds",
    "start_request",
]

# Interim (1xx) answers skipped before one is refused: a server must not
# keep a call waiting with them for ever.
_MAX_INTERIM = 10
MAX_HEAD = 64 * 1024  # bytes of a response's status line and headers
_RECEIVE = 65536
_DECODED = 256 * 1024  # the most bytes undoing a content coding yields at a time


# -- connections ---------------------------------------------------------------------------


class TCPConnection:
    """One plain HTTP/1.1 connection, and the parser of its answers."""

    __slots__ = ("h11", "idle_since", "raw")

    def __init__(self, raw: RawSocket) -> None:
        self.raw = raw
        self.h11 = _h11_connection()
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
    """One HTTP/1.1 connection over TLS, and the parser of its answers."""

    __slots__ = ("h11", "idle_since", "stream")

    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.h11 = _h11_connection()
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


def _h11_connection() -> h11.Connection:
    """The parser of one connection's answers; a head (or a chunk-size line) over
    ``MAX_HEAD`` bytes is refused."""
    return h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)


_REQUESTS: dict[bytes, h11.Request] = {}


def start_request(conn: Connection, method: bytes) -> None:
    """Tell the connection's parser a request with *method* was sent.

    The request's bytes are built by hand (`transport.request_head`, once
    per endpoint); the parser is only told its method (a ``HEAD`` answer has
    no body), through a request of that method it writes and that is not sent.

    Raises:
        httpx.LocalProtocolError: *method* is not an HTTP token.
    """
    request = _REQUESTS.get(method)
    if request is None:
        try:
            request = h11.Request(method=method, target=b"/", headers=[(b"host", b"_")])
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError("the request's method is not an HTTP token") from exc
        if len(_REQUESTS) < 16:
            _REQUESTS[method] = request
    conn.h11.send(request)
    conn.h11.send(_END)


_END = h11.EndOfMessage()
# What h11 says (the start of its message), and what agentrio says: the same
# words as before h11 parsed answers, and never a header's bytes.
_SAYS = (
    ("illegal status line", "not an HTTP/1.x status line"),
    ("no response line", "not an HTTP/1.x status line (a blank line)"),
    ("illegal request line", "not an HTTP/1.x status line"),
    ("illegal header line", "a malformed header line"),
    ("continuation line at start", "a malformed header line (folded first)"),
    ("conflicting Content-Length", "a bad Content-Length (values that differ)"),
    ("bad Content-Length", "a bad Content-Length"),
    ("Only Transfer-Encoding", "unsupported Transfer-Encoding (only chunked is)"),
    ("multiple Transfer-Encoding", "unsupported Transfer-Encoding (sent twice)"),
    ("illegal chunk header", "a bad chunk size"),
    ("malformed chunk footer", "a chunk's data is longer than its size"),
    ("Received server _SWITCH", "the server switched protocols (101)"),
    ("peer closed connection", "the server closed the connection before the end of the body"),
    ("peer unexpectedly closed", "the server closed the connection before the end of the body"),
)


def _protocol_error(exc: h11.RemoteProtocolError, in_head: bool) -> httpx.RemoteProtocolError:
    """h11's *exc* as httpx's error, in agentrio's words."""
    said = str(exc)
    if said.startswith("Receive buffer too long"):
        if in_head:
            return httpx.RemoteProtocolError(f"the response head is over {MAX_HEAD} bytes")
        return httpx.RemoteProtocolError("a chunk-size or trailer line is too long")
    for prefix, message in _SAYS:
        if said.startswith(prefix):
            if "chunked read" in said:
                message += " (incomplete chunked read)"
            return httpx.RemoteProtocolError(message)
    # h11's message may quote what came: only its first words are kept.
    return httpx.RemoteProtocolError(f"a malformed response ({said.split(':')[0][:80]})")


class Response:
    """A response whose head was read; its body is read with `receive`.

    Attributes:
        status_code: the status (1xx interim responses are skipped).
        reason: the reason phrase.
        headers: (name, value) pairs as received, in order.
    """

    __slots__ = (
        "_conn",
        "_decoder",
        "_done",
        "_fields",
        "_first",
        "_h11_headers",
        "_origin",
        "_pool",
        "_timeout",
        "reason",
        "status_code",
    )

    def __init__(
        self,
        pool: ConnectionPool,
        origin: Origin,
        conn: Connection,
        read_timeout: float | None,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn: Connection | None = conn
        self._timeout = read_timeout
        self.status_code = 0
        self.reason = b""
        self._h11_headers: h11._headers.Headers | None = None
        self._fields: dict[bytes, bytes] | None = None  # made on first use
        self._first = b""  # body bytes that came with the head
        self._done = False
        self._decoder: _Decoder | None = None

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        """(name, value) pairs as received, in order."""
        return [] if self._h11_headers is None else self._h11_headers.raw_items()

    def header(self, name: bytes) -> bytes | None:
        """The value of header *name* (lower case; repeats joined by ``, ``), else None."""
        fields = self._fields
        if fields is None:
            fields = self._fields = {}
            for key, value in self._h11_headers or ():
                fields[key] = fields[key] + b", " + value if key in fields else value
        return fields.get(name)

    @property
    def is_closed(self) -> bool:
        """Whether the body was read to its end or the response closed."""
        return self._conn is None

    async def _start(self, decode: bool, scope: trio.CancelScope) -> None:
        """Read the head (skipping 1xx responses), and the body bytes that came with it."""
        conn = self._conn
        assert conn is not None
        head = await self._read_head(conn, scope)
        if head.http_version[:1] != b"1":
            raise httpx.RemoteProtocolError("not an HTTP/1.x status line")
        self.status_code, self.reason = head.status_code, bytes(head.reason)
        self._h11_headers = head.headers
        if decode:
            self._decoder = _decoder_for(self.header(b"content-encoding"))
        self._first = self._take(conn)  # (an answer whose body came whole ends here)

    async def _read_head(self, conn: Connection, scope: trio.CancelScope) -> h11.Response:
        parser = conn.h11
        interim = 0
        received = False  # whether any byte of the head came
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as exc:
                raise _protocol_error(exc, in_head=True) from None
            if type(event) is h11.Response:
                return event
            if type(event) is h11.InformationalResponse:
                interim += 1
                if interim > _MAX_INTERIM:
                    raise httpx.RemoteProtocolError(
                        f"the server sent over {_MAX_INTERIM} interim (1xx) answers"
                    )
                continue
            if event is not h11.NEED_DATA:
                raise httpx.RemoteProtocolError(f"a malformed response ({type(event).__name__})")
            if received:  # part of the head came: the read timeout starts again
                scope.deadline = trio.current_time() + seconds(self._timeout)
            data = await conn.receive()
            if not data:
                what = "in the middle of its head" if received else "before answering"
                raise httpx.RemoteProtocolError(f"the server closed the connection {what}")
            if not received:  # blank lines before a status line are ignored
                data = data.lstrip(b"\r\n")
                received = bool(data)
            parser.receive_data(data)

    def _take(self, conn: Connection) -> bytes:
        """The body bytes the parser holds now (all of them: at most one read's worth)."""
        parser = conn.h11
        pieces: list[bytes | bytearray] = []
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError as exc:
                raise _protocol_error(exc, in_head=False) from None
            kind = type(event)
            if kind is h11.Data:
                pieces.append(cast(h11.Data, event).data)
            elif kind is h11.EndOfMessage:
                self._finish()
                break
            elif event is h11.NEED_DATA:
                break
            else:  # PAUSED: the answer switched protocols (to a CONNECT); ConnectionClosed
                raise httpx.RemoteProtocolError("the server switched protocols")
        return b"".join(pieces)

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
        while True:
            piece, self._first = self._first, b""
            conn = self._conn
            if not piece:
                if self._done:
                    return b""
                if conn is None:
                    raise httpx.ReadError("the response was closed")
            try:
                if not piece:
                    assert conn is not None
                    conn.h11.receive_data(await self._wait(conn))
                    piece = self._take(conn)
                if self._decoder is not None:
                    piece = self._decoder.feed(piece)
            except BaseException:
                await self.aclose()
                raise
            if piece:
                return piece

    async def _wait(self, conn: Connection) -> bytes:
        with trio.move_on_after(seconds(self._timeout)):
            return await conn.receive()  # (b"" at the end: the parser says what that means)
        raise httpx.ReadTimeout(f"no data within the read timeout ({self._timeout} s)")

    def _finish(self) -> None:
        """The body has ended: the connection goes back to the pool if it may."""
        self._done = True
        conn, self._conn = self._conn, None
        if conn is None:
            return
        parser = conn.h11
        # Bytes beyond the response were not asked for: the connection is out of step.
        if (
            parser.their_state is h11.DONE
            and parser.our_state is h11.DONE
            and not parser.trailing_data[0]
        ):
            parser.start_next_cycle()
            if self._pool._release(self._origin, conn):
                return
        conn.close()  # (at once: this is no checkpoint)

    async def aclose(self) -> None:
        """Close the response; before the end of the body, that closes the connection."""
        self._done = True
        self._first = b""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()


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
