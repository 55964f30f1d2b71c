"""agentrio's HTTP/1.1 client: a lean keep-alive pool on Trio streams, and an httpx transport.

A model call is one ``POST`` with a JSON body to one origin, answered by a
JSON body or a stream; a process hosting thousands of agents makes thousands
of them a second. On loopback, ``httpx.AsyncClient`` spends about 1 ms of
CPU on each, ten times what this module does (see ``docs/design.md``):

- `ConnectionPool` keeps connections alive per origin (scheme, host,
  port), checks an idle one is still open before reusing it, and opens TCP
  (and TLS, with the context ``httpx.create_ssl_context()`` makes: certifi's
  roots, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``) with Trio.
- [`Response`][agentrio.types.Response] (``_http11``) reads an answer's head and body by hand.
- `HTTPTransport` puts that pool behind ``httpx.AsyncBaseTransport``,
  for an ``httpx.AsyncClient`` of one's own.
- `env_proxy` tells whether the environment names a proxy for a URL,
  as httpx reads it (agentrio's pool does not speak to proxies).

Invariants: a connection goes back to the pool only after its response was
read to its end and neither side asked to close it; anything else (an error,
a cancellation, a response abandoned midway) closes it. Every failure is
raised as the ``httpx.TransportError`` subclass httpx itself would raise
(``ConnectError``, ``ConnectTimeout``, ``ReadError``, ``ReadTimeout``,
``WriteError``, ``RemoteProtocolError``...), and no message holds a header.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Final, NamedTuple

import httpx
import trio

from .._net import RawSocket
from ._http11 import Connection, Response, TCPConnection, TLSConnection, seconds

__all__ = [
    "ConnectionPool",
    "HTTPTransport",
    "PoolStatistics",
    "Response",
    "env_proxy",
    "header_lines",
    "request_head",
]

KEEPALIVE_EXPIRY = 5.0  # seconds an idle connection is kept (as httpx's default)

Origin = tuple[str, str, int]  # scheme, host, port


# -- building requests ------------------------------------------------------------------


def _check_field(text: str, what: str) -> bytes:
    """*text* as header bytes; line breaks and NUL would end the field early."""
    if "\r" in text or "\n" in text or "\0" in text:
        raise ValueError(f"a header {what} holds a line break or NUL")
    return text.encode("latin-1")


def request_head(method: str, url: httpx.URL, headers: Iterable[tuple[str, str]]) -> bytes:
    """The head of a request: its line, ``Host`` and *headers*, each line ending in CRLF.

    Built once per endpoint: a request is then this, any header lines of its
    own (`header_lines`), its ``Content-Length``, a blank line and its
    body (see `ConnectionPool.request`).

    Raises:
        ValueError: a header name or value holds CR, LF or NUL, or is not
            Latin-1 (the message names neither the header nor its value).
    """
    line = _check_field(method, "method") + b" " + url.raw_path + b" HTTP/1.1\r\n"
    return line + b"host: " + _host_header(url).encode("ascii") + b"\r\n" + header_lines(headers)


def header_lines(headers: Iterable[tuple[str, str]]) -> bytes:
    """*headers* as header lines, each ending in CRLF.

    Raises:
        ValueError: as `request_head`.
    """
    lines = []
    for name, value in headers:
        try:
            lines.append(_check_field(name, "name") + b": " + _check_field(value, "value"))
        except UnicodeEncodeError:
            raise ValueError("a header holds a character outside Latin-1") from None
    return b"".join(line + b"\r\n" for line in lines)


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


# -- connections --------------------------------------------------------------------------


class PoolStatistics(NamedTuple):
    """A snapshot of a `ConnectionPool`."""

    opened: int
    idle: int


class ConnectionPool:
    """Kept-alive HTTP/1.1 connections, per origin, opened with Trio.

    It does not bound how many connections are open at once: its users do
    (a [`Provider`][agentrio.Provider] sends at most ``max_concurrent`` requests
    at a time). Use it as an async context, or call `aclose`.

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
        self._idle: dict[Origin, list[Connection]] = {}
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._opened = 0
        self._closed = False  # closed: connections are not kept any more

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
        """Close every idle connection; those in use close when their response ends."""
        self._closed = True
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
        extra: bytes = b"",
    ) -> Response:
        """Send one request and read its response's head; its body is left to read.

        Args:
            origin: where to send it.
            head: the request's head (see `request_head`); when *body*
                is None, the whole request.
            body: the request's body, sent after *extra*, its
                ``Content-Length`` and a blank line (None: *head* is the
                whole request).
            connect_timeout: seconds to connect (TCP and TLS).
            read_timeout: seconds to wait for each piece of the response (and
                to send the request).
            method: the request's method (``HEAD`` answers have no body).
            decode: undo ``gzip`` and ``deflate`` content codings.
            extra: header lines of this request's own (`header_lines`).

        Raises:
            httpx.TransportError: the subclass httpx raises for the same failure.
        """
        conn = await self._checkout(origin, connect_timeout)
        if body is None:
            data = head
        else:
            data = b"%b%bcontent-length: %d\r\n\r\n%b" % (head, extra, len(body), body)
        response = Response(self, origin, conn, read_timeout, method == b"HEAD")
        try:
            # One deadline, moved on each time bytes go out or come in.
            with trio.move_on_after(seconds(read_timeout)) as scope:
                await conn.send(data)
                await response._start(decode, scope)
                return response
        except BaseException:
            await conn.aclose()
            raise
        await conn.aclose()
        raise httpx.ReadTimeout(f"no answer within the read timeout ({read_timeout} s)")

    async def _checkout(self, origin: Origin, connect_timeout: float | None) -> Connection:
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

    async def _connect(self, origin: Origin, connect_timeout: float | None) -> Connection:
        scheme, host, port = origin
        with trio.move_on_after(seconds(connect_timeout)):
            try:
                tcp = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                raise httpx.ConnectError(f"could not connect to {host}:{port} ({exc})") from exc
            self._opened += 1
            if scheme == "https":
                return TLSConnection(await self._tls(tcp, host))
            return TCPConnection(RawSocket.from_stream(tcp))
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

    def _release(self, origin: Origin, conn: Connection) -> bool:
        """Keep *conn* for the next request to *origin*; False if the pool is full or closed."""
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self.max_idle or self._closed:
            return False
        conn.idle_since = trio.current_time()
        idle.append(conn)
        return True


# -- the httpx transport -----------------------------------------------------------------


ACCEPT_ENCODING: Final = "gzip, deflate"


class HTTPTransport(httpx.AsyncBaseTransport):
    """An httpx transport on agentrio's lean HTTP/1.1 pool (Trio only).

    For an ``httpx.AsyncClient`` of your own that should use the same
    connection code as a [`Provider`][agentrio.Provider] making its own:

        from agentrio.providers.transport import HTTPTransport

        client = httpx.AsyncClient(transport=HTTPTransport())

    It is not re-exported from ``agentrio`` (importing it loads httpx). It
    speaks HTTP/1.1 only, without proxies (httpx ignores the proxy
    environment variables for a client given a transport). Timeouts come from
    the client (``connect``; ``read`` also bounds each write). Failures are
    the ``httpx.TransportError`` subclasses httpx raises; the request's body
    is read whole before it is sent (sent with chunked encoding when httpx
    set no ``Content-Length``); the answer's body streams from the
    connection, and content codings are left to httpx.

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
