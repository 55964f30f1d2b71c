"""The fake LLM server's HTTP/1.1: reading requests and writing responses, by hand.

The fake server answers tens of thousands of requests a second in the same
process as the agents it serves (``agentrio demo``), so the bytes are read
and written here directly, in one pass each, rather than through h11's
event machinery (which took more CPU than everything else the server does).
What it accepts is what HTTP/1.1 clients send: a request line, header lines,
and a body framed by ``Content-Length`` or chunked transfer-encoding
(``Expect: 100-continue`` is answered); anything else is a
`BadHTTP`, answered 400 before the connection is closed. A body
larger than the server takes is not read: the request is marked
``too_large`` (answered 413, then the connection is closed).
"""

from __future__ import annotations

import re
from http import HTTPStatus

from .._net import RawSocket

__all__ = ["BadHTTP", "HTTPRequest", "RequestReader", "response_head"]

MAX_HEAD = 64 * 1024  # bytes of a request line and its headers
_RECEIVE = 65536
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class BadHTTP(Exception):
    """The bytes received are not an HTTP/1.1 request; the message says why."""


class _TooLarge(Exception):
    pass


class HTTPRequest:
    """One request: its line, its headers (lower-case names), its body."""

    __slots__ = ("body", "headers", "http10", "keep_alive", "method", "target", "too_large")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: dict[bytes, bytes],
        body: bytes,
        *,
        http10: bool,
        keep_alive: bool,
        too_large: bool = False,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.http10 = http10  # an HTTP/1.0 client: no chunked answers
        self.keep_alive = keep_alive  # the client will send another request
        self.too_large = too_large  # its body was larger than the server takes, and not read


class RequestReader:
    """Reads the requests a client sends on one connection, one after another.

    Args:
        stream: the connection.
        max_body: the largest body taken (past it, `BodyTooLarge`).
    """

    def __init__(self, stream: RawSocket, max_body: int) -> None:
        self.stream = stream
        self.max_body = max_body
        self._buffer = b""

    async def next(self) -> HTTPRequest | None:
        """The next request; None if the client closed the connection between requests.

        Raises:
            BadHTTP: the bytes are not an HTTP/1.1 request.
        """
        head = await self._head()
        if head is None:
            return None
        method, target, version, headers = _parse_head(head)
        http10 = version == b"HTTP/1.0"
        connection = headers.get(b"connection", b"").lower()
        keep_alive = b"keep-alive" in connection if http10 else b"close" not in connection
        try:
            body = await self._body(headers)
        except _TooLarge:
            return HTTPRequest(
                method, target, headers, b"", http10=http10, keep_alive=False, too_large=True
            )
        return HTTPRequest(method, target, headers, body, http10=http10, keep_alive=keep_alive)

    async def _receive(self) -> bytes:
        return await self.stream.receive(_RECEIVE)

    async def _head(self) -> bytes | None:
        buffer, start = self._buffer, 0
        while True:
            if buffer[:1] in (b"\r", b"\n"):  # blank lines between requests are ignored
                buffer = buffer.lstrip(b"\r\n")
            # The head ends at a blank line: CRLF CRLF, or LF LF from a lax client.
            end = buffer.find(b"\r\n\r\n", start)
            lax = buffer.find(b"\n\n", start, None if end < 0 else end)
            if lax >= 0:
                self._buffer = buffer[lax + 2 :]
                return buffer[:lax]
            if end >= 0:
                self._buffer = buffer[end + 4 :]
                return buffer[:end]
            if len(buffer) > MAX_HEAD:
                raise BadHTTP(f"the request head is larger than {MAX_HEAD} bytes")
            start = max(0, len(buffer) - 3)
            data = await self._receive()
            if not data:
                if buffer:
                    raise BadHTTP("the connection closed in the middle of a request head")
                return None
            buffer += data

    async def _body(self, headers: dict[bytes, bytes]) -> bytes:
        coding = headers.get(b"transfer-encoding")
        length = headers.get(b"content-length")
        if coding is not None:
            if length is not None:
                raise BadHTTP("both Transfer-Encoding and Content-Length")
            if coding.lower() != b"chunked":
                raise BadHTTP(f"unsupported Transfer-Encoding: {coding[:40]!r}")
            await self._continue(headers)
            return await self._chunked()
        if length is None:
            return b""
        values = {v.strip() for v in length.split(b",")}
        if len(values) != 1 or not all(v.isdigit() for v in values):
            raise BadHTTP(f"a bad Content-Length: {length[:40]!r}")
        size = int(values.pop())
        if size > self.max_body:
            raise _TooLarge
        await self._continue(headers)
        return await self._exactly(size)

    async def _continue(self, headers: dict[bytes, bytes]) -> None:
        """Answer ``Expect: 100-continue`` (curl sends it before a large body)."""
        if headers.get(b"expect", b"").lower() == b"100-continue" and not self._buffer:
            await self.stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _exactly(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            data = await self._receive()
            if not data:
                raise BadHTTP("the connection closed in the middle of a request body")
            buffer += data
        self._buffer = buffer[size:]
        return buffer[:size]

    async def _line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > 4096:
                raise BadHTTP("a chunk-size line is too long")
            data = await self._receive()
            if not data:
                raise BadHTTP("the connection closed in the middle of a chunked body")
            self._buffer += data
        line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
        return line.rstrip(b"\r")

    async def _chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            text = (await self._line()).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(text):
                raise BadHTTP(f"a bad chunk size: {text[:40]!r}")
            size = int(text, 16)
            if size == 0:
                while await self._line():  # trailer lines, up to the blank line
                    pass
                return b"".join(parts)
            total += size
            if total > self.max_body:
                raise _TooLarge
            parts.append(await self._exactly(size))
            if await self._line():
                raise BadHTTP("a chunk's data is longer than its size")


def _parse_head(head: bytes) -> tuple[bytes, bytes, bytes, dict[bytes, bytes]]:
    lines = head.split(b"\n")
    request_line = lines[0].rstrip(b"\r")
    parts = request_line.split(b" ")
    if (
        len(parts) != 3
        or not _TOKEN.fullmatch(parts[0])
        or not _TARGET.fullmatch(parts[1])
        or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0")
    ):
        raise BadHTTP(f"not an HTTP/1.1 request line: {request_line[:100]!r}")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name:
            raise BadHTTP(f"a malformed header line: {line[:100]!r}")
        key, value = name.lower(), value.strip(b" \t\r")
        headers[key] = headers[key] + b", " + value if key in headers else value
    if not all(map(_TOKEN.fullmatch, headers)):  # (once per name: whitespace, control bytes)
        raise BadHTTP("a malformed header name")
    return parts[0], parts[1], parts[2], headers


_REASONS: dict[int, bytes] = {}


def response_head(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A response's status line and header lines, through the blank line."""
    reason = _REASONS.get(status)
    if reason is None:
        reason = _REASONS[status] = HTTPStatus(status).phrase.encode()
    lines = [b"HTTP/1.1 %d %b" % (status, reason)]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"
