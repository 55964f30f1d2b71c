"""agentrio's HTTP/1.1 client: a lean keep-alive pool on Trio streams, and an httpx transport.

A model call is one ``POST`` with a JSON body to one origin, answered by a
JSON body or a stream; a process hosting thousands of agents makes thousands
of them a second. On loopback, ``httpx.AsyncClient`` spends about 0.9 ms of
CPU on each, six times what the bytes need (see ``docs/design.md``). This
module does the same work directly:

- :class:`ConnectionPool` keeps connections alive per origin (scheme, host,
  port), checks an idle one is still open before reusing it, and opens TCP
  (and TLS, with the context ``httpx.create_ssl_context()`` makes: certifi's
  roots, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``) with Trio.
- :class:`Response` reads a response's head and body by hand: the status
  line, the header lines, then a body framed by ``Content-Length``, by
  chunked transfer-encoding, or by the end of the connection; ``gzip`` and
  ``deflate`` content codings are undone, a bounded piece at a time.
- :class:`HTTPTransport` puts that pool behind ``httpx.AsyncBaseTransport``,
  for an ``httpx.AsyncClient`` of one's own.

Invariants: a connection goes back to the pool only after its response was
read to its end and neither side asked to close it; anything else (an error,
a cancellation, a response abandoned midway) closes it. Every failure is
raised as the ``httpx.TransportError`` subclass httpx itself would raise
(``ConnectError``, ``ConnectTimeout``, ``ReadError``, ``ReadTimeout``,
``WriteError``, ``RemoteProtocolError``...), and no message holds a header.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
import zlib
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Final, NamedTuple, cast

import httpx
import trio

from .._net import RawSocket

__all__ = [
    "ConnectionPool",
    "HTTPTransport",
    "PoolStatistics",
    "Response",
    "env_proxy",
    "request_head",
]

MAX_HEAD = 64 * 1024  # bytes of a response's status line and headers
_MAX_CHUNK_LINE = 4096  # bytes of a chunk-size line or a trailer line
_RECEIVE = 65536
_DECODED = 256 * 1024  # the most bytes undoing a content coding yields at a time
KEEPALIVE_EXPIRY = 5.0  # seconds an idle connection is kept (as httpx's default)

Origin = tuple[str, str, int]  # scheme, host, port
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")

# How a body ends.
_NONE, _LENGTH, _CHUNKED, _CLOSE = range(4)
# Where a chunked body is: before a size line, inside a chunk's data, before
# the CRLF that ends the data, in the trailer section.
_SIZE, _DATA, _DATA_END, _TRAILERS = range(4)


# -- building requests ------------------------------------------------------------------


def _check_field(text: str, what: str) -> bytes:
    """*text* as header bytes; line breaks and NUL would end the field early."""
    if "\r" in text or "\n" in text or "\0" in text:
        raise ValueError(f"a header {what} holds a line break or NUL")
    return text.encode("latin-1")


def request_head(method: str, url: httpx.URL, headers: Iterable[tuple[str, str]]) -> bytes:
    """The head of a request with a body, up to the ``Content-Length`` value (not included).

    Built once per endpoint: a request is then this, its body's length,
    ``CRLF CRLF`` and the body.

    Raises:
        ValueError: a header name or value holds CR, LF or NUL, or is not
            Latin-1 (the message names neither the header nor its value).
    """
    lines = [
        _check_field(method, "method")
        + b" "
        + url.raw_path
        + b" HTTP/1.1\r\nhost: "
        + _host_header(url).encode("ascii")
    ]
    for name, value in headers:
        try:
            lines.append(_check_field(name, "name") + b": " + _check_field(value, "value"))
        except UnicodeEncodeError:
            raise ValueError("a header holds a character outside Latin-1") from None
    return b"\r\n".join(lines) + b"\r\ncontent-length: "


def _host_header(url: httpx.URL) -> str:
    host = url.raw_host.decode("ascii")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return host if url.port is None else f"{host}:{url.port}"


def origin_of(url: httpx.URL) -> Origin:
    """(scheme, host, port) of *url*, with the scheme's default port filled in."""
    scheme = url.scheme
    port = url.port or (443 if scheme == "https" else 80)
    return scheme, url.host, port


# -- proxies ------------------------------------------------------------------------------


def env_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment names for *url*, as httpx reads it, or None.

    ``HTTP_PROXY``, ``HTTPS_PROXY`` and ``ALL_PROXY`` (any case) name proxies;
    ``NO_PROXY`` lists hosts reached directly: ``*`` (all), a domain (itself
    and its subdomains; ``.example.com``: subdomains only), an IP address,
    ``localhost``, or a ``scheme://host[:port]`` pattern.
    """
    proxies = urllib.request.getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy:
        return None
    for entry in (e.strip() for e in proxies.get("no", "").split(",")):
        if entry and _bypasses(entry, url):
            return None
    return proxy


def _bypasses(entry: str, url: httpx.URL) -> bool:
    """Whether one NO_PROXY *entry* covers *url* (httpx's and curl's reading)."""
    if entry == "*":
        return True
    if "://" in entry:
        scheme, _, rest = entry.partition("://")
        if scheme not in ("all", url.scheme):
            return False
        host, _, port = rest.partition(":")
        return host == url.host and (not port or port == str(url.port))
    host = url.host.lower()
    entry = entry.lower().strip("[]")
    if entry.startswith("."):
        return host.endswith(entry)
    return host == entry or host.endswith("." + entry)


# -- connections ---------------------------------------------------------------------------


class _TCPConnection:
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
        try:
            await self.raw.send_all(data)
        except OSError as exc:
            raise httpx.WriteError(_why(exc, "sending the request")) from exc

    def is_readable(self) -> bool:
        return self.raw.is_readable()

    def close(self) -> None:
        self.raw.close()

    async def aclose(self) -> None:
        await self.raw.aclose()


class _TLSConnection:
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
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpx.WriteError(_why(exc, "sending the request")) from exc

    def is_readable(self) -> bool:
        return self.stream.transport_stream.socket.is_readable()

    def close(self) -> None:
        # Without a close_notify: a response read to its end does not need one.
        self.stream.transport_stream.socket.close()

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


_Connection = _TCPConnection | _TLSConnection


def _why(exc: BaseException, doing: str) -> str:
    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
    detail = (str(cause) or type(cause).__name__) if cause is not None else "connection lost"
    return f"the connection broke while {doing} ({detail})"


class PoolStatistics(NamedTuple):
    """A snapshot of a :class:`ConnectionPool`."""

    opened: int
    idle: int


class ConnectionPool:
    """Kept-alive HTTP/1.1 connections, per origin, opened with Trio.

    It does not bound how many connections are open at once: its users do
    (a :class:`~agentrio.Provider` sends at most ``max_concurrent`` requests
    at a time). Use it as an async context, or call :meth:`aclose`.

    Args:
        ssl_context: for ``https`` origins (default: ``httpx.create_ssl_context()``,
            which honours ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``).
        max_idle: the most idle connections kept per origin.
        keepalive_expiry: seconds an idle connection is kept.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 32,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
    ) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._opened = 0

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings for ``https`` origins (made on first use)."""
        if self._ssl_context is None:
            context = httpx.create_ssl_context()
            context.set_alpn_protocols(["http/1.1"])
            self._ssl_context = context
        return self._ssl_context

    def statistics(self) -> PoolStatistics:
        """Connections opened so far, and those idle now."""
        idle = sum(len(connections) for connections in self._idle.values())
        return PoolStatistics(opened=self._opened, idle=idle)

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every idle connection (those in use close when their response does)."""
        idle, self._idle = self._idle, {}
        with trio.CancelScope(shield=True):
            for connections in idle.values():
                for conn in connections:
                    await conn.aclose()

    async def request(
        self,
        origin: Origin,
        head: bytes,
        body: bytes | None,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
        method: bytes = b"POST",
        decode: bool = True,
    ) -> Response:
        """Send one request and read its response's head; its body is left to read.

        Args:
            origin: where to send it.
            head: the request's head, ending at ``content-length: `` when
                *body* is given (see :func:`request_head`), else whole
                (through the blank line).
            body: the request's body (None: *head* is the whole request).
            connect_timeout: seconds to connect (TCP and TLS).
            read_timeout: seconds to wait for each piece of the response (and
                to send the request).
            method: the request's method (``HEAD`` answers have no body).
            decode: undo ``gzip`` and ``deflate`` content codings.

        Raises:
            httpx.TransportError: the subclass httpx raises for the same failure.
        """
        conn = await self._checkout(origin, connect_timeout)
        data = head if body is None else b"%b%d\r\n\r\n%b" % (head, len(body), body)
        response = Response(self, origin, conn, read_timeout, method == b"HEAD")
        try:
            # One deadline, moved on each time bytes go out or come in.
            with trio.move_on_after(_seconds(read_timeout)) as scope:
                await conn.send(data)
                await response._start(decode, scope)
                return response
        except BaseException:
            await conn.aclose()
            raise
        await conn.aclose()
        raise httpx.ReadTimeout(f"no answer within the read timeout ({read_timeout} s)")

    async def _checkout(self, origin: Origin, connect_timeout: float | None) -> _Connection:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            # Readable while idle: the server closed it (or sent what it should
            # not have). Either way it cannot carry a request.
            if (
                trio.current_time() - conn.idle_since < self.keepalive_expiry
                and not conn.is_readable()
            ):
                return conn
            await conn.aclose()
        return await self._connect(origin, connect_timeout)

    async def _connect(self, origin: Origin, connect_timeout: float | None) -> _Connection:
        scheme, host, port = origin
        with trio.move_on_after(_seconds(connect_timeout)):
            try:
                tcp = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                raise httpx.ConnectError(f"could not connect to {host}:{port} ({exc})") from exc
            self._opened += 1
            if scheme == "https":
                return _TLSConnection(await self._tls(tcp, host))
            return _TCPConnection(RawSocket.from_stream(tcp))
        raise httpx.ConnectTimeout(
            f"could not connect to {host}:{port} within the connect timeout ({connect_timeout} s)"
        )

    async def _tls(self, tcp: trio.SocketStream, host: str) -> trio.SSLStream[trio.SocketStream]:
        tls = trio.SSLStream(tcp, self.ssl_context, server_hostname=host, https_compatible=True)
        try:
            await tls.do_handshake()
        except BaseException as exc:
            await trio.aclose_forcefully(tcp)
            if isinstance(exc, trio.BrokenResourceError):
                why = exc.__cause__ or exc
                raise httpx.ConnectError(f"the TLS handshake with {host} failed ({why})") from exc
            raise
        return tls

    def _release(self, origin: Origin, conn: _Connection) -> bool:
        """Keep *conn* for the next request to *origin*; False if the pool is full."""
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self.max_idle:
            return False
        conn.idle_since = trio.current_time()
        idle.append(conn)
        return True


def _seconds(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout


# -- responses -----------------------------------------------------------------------------


class Response:
    """A response whose head was read; its body is read with :meth:`receive`.

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
        conn: _Connection,
        read_timeout: float | None,
        head_only: bool,
    ) -> None:
        self._pool = pool
        self._origin = origin
        self._conn: _Connection | None = conn
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
        while True:
            head = await self._read_head(conn, scope)
            self._parse_head(head)
            if self.status_code >= 200:
                break
            if self.status_code == 101:
                raise httpx.RemoteProtocolError("the server switched protocols (101)")
        self._frame()
        if decode:
            self._decoder = _decoder_for(self.header(b"content-encoding"))
        if self._framing == _NONE:
            self._finish()

    async def _read_head(self, conn: _Connection, scope: trio.CancelScope) -> bytes:
        buffer = conn.buffer
        start = 0
        while True:
            if buffer[:1] in (b"\r", b"\n"):  # blank lines before a status line are ignored
                buffer = buffer.lstrip(b"\r\n")
            end = buffer.find(b"\n\r\n", start)
            if end < 0:
                end = buffer.find(b"\n\n", start)
                if end >= 0:
                    conn.buffer = buffer[end + 2 :]
                    return buffer[:end]
            else:
                conn.buffer = buffer[end + 3 :]
                return buffer[:end]
            if len(buffer) > MAX_HEAD:
                raise httpx.RemoteProtocolError(f"the response head is over {MAX_HEAD} bytes")
            start = max(0, len(buffer) - 2)
            if buffer:  # part of the head came: the read timeout starts again
                scope.deadline = trio.current_time() + _seconds(self._timeout)
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
                name, value = headers[-1]
                headers[-1] = (name, value + b" " + line.strip())
                continue
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise httpx.RemoteProtocolError(f"a malformed header line: {line[:100]!r}")
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
        if len(values) > 1 or not all(v.isdigit() for v in values):
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

    async def _wait(self, conn: _Connection) -> bytes:
        with trio.move_on_after(_seconds(self._timeout)):
            data = await conn.receive()
            if data or self._framing == _CLOSE:
                return data
            raise httpx.RemoteProtocolError(
                "the server closed the connection before the end of the body"
                + (" (incomplete chunked read)" if self._framing == _CHUNKED else "")
            )
        raise httpx.ReadTimeout(f"no data within the read timeout ({self._timeout} s)")

    def _take(self, conn: _Connection, data: bytes) -> bytes:
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

    def _dechunk(self, conn: _Connection, data: bytes) -> bytes:
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


# -- the httpx transport -----------------------------------------------------------------


ACCEPT_ENCODING: Final = "gzip, deflate"


class HTTPTransport(httpx.AsyncBaseTransport):
    """An httpx transport on agentrio's lean HTTP/1.1 pool (Trio only).

    For an ``httpx.AsyncClient`` of your own that should use the same
    connection code as a :class:`~agentrio.Provider` making its own::

        client = httpx.AsyncClient(transport=agentrio.HTTPTransport())

    It speaks HTTP/1.1 only, without proxies (httpx ignores the proxy
    environment variables for a client given a transport). Timeouts come from
    the client (``connect``; ``read`` also bounds each write).

    Args:
        verify: an ``ssl.SSLContext``, True (``httpx.create_ssl_context()``:
            certifi's roots, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``) or False
            (no verification).
        max_keepalive_connections: idle connections kept per origin.
        keepalive_expiry: seconds an idle connection is kept.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        max_keepalive_connections: int = 20,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
    ) -> None:
        context = verify if isinstance(verify, ssl.SSLContext) else None
        if verify is False:
            context = httpx.create_ssl_context(verify=False)
        self._pool = ConnectionPool(
            ssl_context=context,
            max_idle=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send *request*; the response's body streams from the connection."""
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the URL's scheme is not http or https: {url.scheme}")
        timeout = request.extensions.get("timeout", {})
        method = request.method.encode("ascii")
        head, body = await _head_and_body(request)
        response = await self._pool.request(
            origin_of(url),
            head,
            body,
            connect_timeout=timeout.get("connect"),
            read_timeout=timeout.get("read"),
            method=method,
            decode=False,  # httpx undoes content codings itself
        )
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_BodyStream(response),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason},
        )

    async def aclose(self) -> None:
        """Close every idle connection."""
        await self._pool.aclose()


async def _head_and_body(request: httpx.Request) -> tuple[bytes, bytes | None]:
    """The request's bytes: its head through the blank line, and its body (None: in the head)."""
    target = request.url.raw_path
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        for field in (name, value):
            if b"\r" in field or b"\n" in field or b"\0" in field:
                raise httpx.LocalProtocolError("a header holds a line break or NUL")
        lines.append(name + b": " + value)
    chunked = any(
        name.lower() == b"transfer-encoding" and b"chunked" in value.lower()
        for name, value in request.headers.raw
    )
    stream = request.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise RuntimeError("an AsyncClient's request has an async body")
    parts = [part async for part in stream]
    if chunked:
        body = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts if p) + b"0\r\n\r\n"
    else:
        body = b"".join(parts)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body, None


class _BodyStream(httpx.AsyncByteStream):
    """A response body for httpx, read from the pool's response."""

    def __init__(self, response: Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            piece = await self._response.receive()
            if not piece:
                return
            yield piece

    async def aclose(self) -> None:
        await self._response.aclose()


if TYPE_CHECKING:  # the pool's responses are what the provider reads
    _: type[httpx.AsyncBaseTransport] = HTTPTransport
