"""Reading an answer within limits: a body, a stream's lines, a stream's size.

A server that never stops sending (an endless body, a line with no end, a
stream of valid pieces without end) must cost a bounded amount of memory: each
reader here raises `TooLarge` as soon as a limit is passed, and the
provider turns that into a [`BadResponse`][agentrio.errors.BadResponse] naming the limit and
drops the connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_REPLY_CHARS",
    "MAX_RESPONSE_BYTES",
    "Body",
    "HttpxBody",
    "LineSplitter",
    "TooLarge",
    "abandon",
    "read_body",
    "sse_data",
]

# The defaults, chosen well above what a real answer needs: a 128k-token
# streamed answer is about 28 MB of OpenAI SSE (~220 bytes a token) and half a
# million characters; its longest line (an Ollama line carrying a whole tool
# call) is at most that long.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
MAX_REPLY_CHARS = 1024 * 1024


class TooLarge(Exception):
    """An answer passed one of the limits; the message names it."""


class LineSplitter:
    """Splits a stream of bytes into lines, each at most *max_line* bytes, in all at
    most *max_total* bytes.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (as SSE defines them; NDJSON
    uses ``\\n``), split across chunks or not. Splitting the bytes before
    decoding is safe: no byte of a multi-byte UTF-8 character is a CR or LF,
    so a character split across chunks is whole again in its line.
    """

    __slots__ = ("_buffer", "_cr", "_size", "max_line", "max_total")

    def __init__(self, max_line: int, max_total: int) -> None:
        self.max_line = max_line
        self.max_total = max_total
        self._buffer = bytearray()  # the line begun and not ended yet
        self._cr = False  # the last chunk ended with CR: an LF starting the next belongs to it
        self._size = 0

    def split(self, chunk: bytes) -> list[str]:
        """The lines that *chunk* ends (without their line ends).

        Raises:
            TooLarge: a line longer than ``max_line``, or more than ``max_total`` in all.
            UnicodeDecodeError: a line that is not UTF-8 (the provider's BadResponse).
        """
        self._size += len(chunk)
        if self._size > self.max_total:
            raise TooLarge(f"the stream is larger than max_response_bytes ({self.max_total} bytes)")
        if self._cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = chunk.rfind(b"\n")
        if end < 0:
            self._buffer += chunk
            self._check(len(self._buffer))
            return []
        rest = chunk[end + 1 :]
        self._check(len(rest))
        if self._buffer:
            self._buffer += chunk[:end]
            whole = bytes(self._buffer)
        else:
            whole = chunk[:end]
        self._buffer = bytearray(rest)
        if len(whole) > self.max_line:  # else no line in it can be too long
            for line in whole.split(b"\n"):
                self._check(len(line))
        # One decode for all the lines ended here (none ends inside a character).
        return whole.decode("utf-8").split("\n")

    def close(self) -> list[str]:
        """The last line, if the stream ended without a line end after it.

        Raises:
            UnicodeDecodeError: it is not UTF-8.
        """
        line, self._buffer = self._buffer, bytearray()
        return [line.decode("utf-8")] if line else []

    def _check(self, size: int) -> None:
        if size > self.max_line:
            raise TooLarge(f"a stream line is longer than max_line_bytes ({self.max_line} bytes)")


def sse_data(lines: list[str], data: list[str]) -> list[str]:
    """The data of the SSE events that *lines* end, each as one ``data:`` line.

    An event's ``data:`` lines are joined with ``\\n`` (as SSE defines: a
    JSON value may span several), and the event is passed on at the blank
    line that ends it; other fields (``event:``, ``id:``, comments) are
    dropped. *data* holds the ``data:`` lines of the event begun and not
    ended yet, from one call to the next; at the end of the stream, pass
    ``[""]`` to pass on an event the stream did not end.
    """
    out: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line)
        elif not line:
            if len(data) == 1:
                out.append(data[0])
            elif data:
                # One leading space of each value is not part of it.
                values = (d[6:] if d.startswith("data: ") else d[5:] for d in data)
                out.append("data:" + "\n".join(values))
            data.clear()
        elif line == "data":  # a field without a colon: an empty value
            data.append("data:")
    return out


class Body(Protocol):
    """A response's body, read a piece at a time."""

    async def receive(self) -> bytes:
        """The next piece (decoded as its Content-Encoding says); b"" at the end."""

    async def aclose(self) -> None:
        """Stop reading; before the end, that drops the connection."""


class HttpxBody:
    """The body of an ``httpx.Response`` sent with ``stream=True``, as a `Body`."""

    __slots__ = ("_chunks", "_done", "response")

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.aiter_bytes()
        self._done = False

    async def receive(self) -> bytes:
        if self._done:
            return b""
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            self._done = True
            return b""

    async def aclose(self) -> None:
        if self._done:
            await self.response.aclose()
        else:
            self._done = True
            await abandon(self.response, self._chunks)


async def read_body(response: Body | httpx.Response, limit: int, *, cut: bool = False) -> bytes:
    """The body of *response* (decoded as its Content-Encoding says), at most *limit* bytes.

    Args:
        response: a body not read yet (an ``httpx.Response`` sent with
            ``stream=True``, or agentrio's own transport's response).
        limit: the most bytes to keep.
        cut: past *limit*, return the first *limit* bytes instead of raising
            (for error bodies, which are only shown in part).

    Raises:
        TooLarge: the body is longer than *limit* (and *cut* is not set); the
            response is closed, which drops its connection.
    """
    body: Body = response if hasattr(response, "receive") else HttpxBody(response)
    parts: list[bytes] = []
    size = 0
    while chunk := await body.receive():
        size += len(chunk)
        if size > limit:
            await body.aclose()
            if cut:
                parts.append(chunk[: len(chunk) - (size - limit)])
                break
            raise TooLarge(f"the body is larger than max_response_bytes ({limit} bytes)")
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def abandon(response: httpx.Response, chunks: AsyncIterator[bytes]) -> None:
    """Close *response* in the middle of its body, and run *chunks* (its iterator) out.

    Closing a response before its end closes its connection. Leaving the
    iterator suspended would leave httpx's chain of async generators for the
    GC to finalize, with a ResourceWarning; once the response is closed, the
    next read fails (or ends) through all of them.
    """
    await response.aclose()
    with contextlib.suppress(Exception):
        async for _ in chunks:
            pass
