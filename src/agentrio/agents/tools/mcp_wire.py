"""What crosses an MCP connection: the stdio stream decoded, results rendered."""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from ..._text import scrub, scrub_json
from ...providers.guard import escapes_surrogate, loads

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["render"]

# A line (one message) a stdio server writes may be this long; past it, the
# connection ends (see _StdioDecoder): a line that never ends must not fill
# the memory.
_MAX_LINE_CHARS = 16 * 1024 * 1024


# The text encoding the SDK's stdio reader is given: UTF-8, read by _StdioDecoder.
_STDIO_ENCODING = "agentrio_mcp_stdio"


# Where the _StdioDecoder of a connection reports how the stream broke: set by
# the connection's task before the SDK starts its reader task, which inherits it.
_stream_fault: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "agentrio_mcp_stream_fault", default=None
)


# The line _StdioDecoder puts where the stream broke: not JSON, so the SDK hands
# it on (after every line before it) as an Exception, which ends the connection.
_BROKEN_HERE = "[agentrio: the server's stream broke here]\n"


class _StdioDecoder(codecs.IncrementalDecoder):
    """UTF-8, line by line, for the SDK's stdio reader, which can neither survive nor bound it.

    The SDK decodes a server's stdout strictly (bytes that are not UTF-8 stop
    its reader while the connection stays open: every call then waits out its
    timeout, and a connection being made never comes up), and it joins a
    line's chunks with no limit, in time quadratic in the line's length. This
    decoder gives the reader whole lines only (joined once: linear), and at a
    fault (bytes that are not UTF-8, a line past `_MAX_LINE_CHARS`) reports
    why, gives the lines that ended before it and a `_BROKEN_HERE` line, and
    from then on nothing (the reader reads on, and drops, until the
    connection's end stops the server).
    """

    def __init__(self, errors: str = "strict") -> None:
        super().__init__(errors)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._line: list[str] = []  # the line not yet ended, in pieces
        self._line_chars = 0
        self._report = _stream_fault.get()
        self._broken = False

    def decode(self, input: ReadableBuffer, final: bool = False) -> str:
        if self._broken:
            return ""
        try:
            text = self._utf8.decode(input, final)
        except UnicodeDecodeError as exc:
            good = exc.object[: exc.start].decode("utf-8")
            return self._fault(good, "the server wrote bytes that are not UTF-8")
        if final:  # (the end of the stream: what is held goes, ended or not)
            held = "".join([*self._line, text])
            self.reset()
            return held
        end = text.rfind("\n")
        if end < 0:
            self._line.append(text)
            self._line_chars += len(text)
            if self._line_chars > _MAX_LINE_CHARS:
                why = f"the server wrote a line longer than {_MAX_LINE_CHARS:,} characters"
                return self._fault("", why)
            return ""
        lines = "".join([*self._line, text[: end + 1]])
        rest = text[end + 1 :]
        self._line, self._line_chars = [rest], len(rest)
        return _without_lone_surrogates(lines) if escapes_surrogate(lines) else lines

    def _fault(self, text: str, why: str) -> str:
        """Report *why*; give the lines that ended before the fault, then `_BROKEN_HERE`.

        *text* is what was read after the line held, up to the fault.
        """
        self._broken = True
        if self._report is not None:
            self._report(why)
        held = "".join(self._line) + text
        return held[: held.rfind("\n") + 1] + _BROKEN_HERE

    def reset(self) -> None:
        self._utf8.reset()
        self._line, self._line_chars = [], 0


def _without_lone_surrogates(lines: str) -> str:
    """*lines* (whole lines of JSON) with each JSON escape of a lone surrogate
    (``"\\udcff"``) made U+FFFD, as agentrio's rule is for a server's text.

    Such an escape is valid JSON (``JSON.stringify`` writes one for a string cut in
    the middle of a pair, Python's ``json.dumps`` for ``os.listdir``'s name of a file
    that is not UTF-8), but the SDK refuses the whole message, and the connection
    ended. A line that holds one is read by the stdlib, which takes it, scrubbed and
    written again; a line it cannot read is left for the SDK to refuse.
    """
    out = []
    for line in lines.split("\n"):
        if escapes_surrogate(line):
            with contextlib.suppress(ValueError, RecursionError):
                line = json.dumps(loads(line), ensure_ascii=False, allow_nan=False)
        out.append(line)
    return "\n".join(out)


def _find_codec(name: str) -> codecs.CodecInfo | None:
    if name != _STDIO_ENCODING:
        return None
    utf8 = codecs.lookup("utf-8")
    return codecs.CodecInfo(
        utf8.encode,
        utf8.decode,
        incrementalencoder=utf8.incrementalencoder,
        incrementaldecoder=_StdioDecoder,
        name=_STDIO_ENCODING,
    )


codecs.register(_find_codec)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception that is not a group (Trio's task groups wrap what they raise)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _described(exc: BaseException) -> str:
    leaf = _leaf(exc)
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _base64_size(data: str) -> int:
    """The size in bytes of what the base64 text *data* encodes (without decoding it)."""
    size = len(data) * 3 // 4
    return size - data[-2:].count("=") if data else 0


def _mime(value: str | None) -> str:
    return value if value else "unknown type"


def _part(block: object) -> str:
    """One content block as the model reads it: text as it is, anything else as a note."""
    if isinstance(block, TextContent):
        text: str = block.text
        return text
    if isinstance(block, ImageContent):
        return f"[image: {_mime(block.mime_type)}, {_base64_size(block.data)} bytes, not shown]"
    if isinstance(block, AudioContent):
        return f"[audio: {_mime(block.mime_type)}, {_base64_size(block.data)} bytes, not shown]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {resource.uri} ({_mime(resource.mime_type)}):]\n{resource.text}"
        if isinstance(resource, BlobResourceContents):
            size = _base64_size(resource.blob)
            return (
                f"[resource {resource.uri}: {_mime(resource.mime_type)}, {size} bytes, not shown]"
            )
    if isinstance(block, ResourceLink):
        return f"[resource link {block.uri}: {block.name!r}, {_mime(block.mime_type)}]"
    kind = getattr(block, "type", None)
    return f"[{kind if isinstance(kind, str) else type(block).__name__} content, not shown]"


def render(result: CallToolResult, limit: int) -> str:
    """The text the model sees for *result*: its text blocks joined, its other blocks
    as notes (type, MIME type, size; never their bytes), cut to *limit* characters.

    A result of no content blocks is its structured content as JSON ("" if none).
    A lone surrogate in it (the server's text) is U+FFFD (`agentrio._text.scrub`).
    """
    text = scrub("\n".join(_part(block) for block in result.content))
    if not result.content and result.structured_content is not None:
        try:
            text = msgspec.json.encode(scrub_json(result.structured_content)).decode()
        except (TypeError, msgspec.EncodeError):
            text = "[structured content that is not JSON, not shown]"
    if len(text) > limit:
        text = (
            text[:limit] + f"\n[cut: the result was {len(text):,} characters, "
            f"the first {limit:,} are shown]"
        )
    return text


class _Watched:
    """The read side of a transport, which calls *on_end* when it ends (the server went away)."""

    __slots__ = ("_inner", "_on_end")

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # The SDK's dispatcher reads the sender's context here, when there is one.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
