"""What every wire format provides: building a request and reading its answer."""

from __future__ import annotations

import base64
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

import msgspec

from ..errors import BadResponse, InvalidArgument
from ..messages import (
    ChatMessage,
    ContentPart,
    DocumentPart,
    FinishReason,
    ImagePart,
    ModelReply,
    ModelSettings,
    RawBlock,
    TextPart,
    ThinkingBlock,
    ToolCallRequest,
    Usage,
)
from .base import OUTPUT_TOOL, OutputSchema, ToolSchema
from .bounded import MAX_REPLY_CHARS, TooLarge
from .guard import loads, parse_arguments, tool_calls_in_text

__all__ = [
    "ANTHROPIC_VERSION",
    "CALL_CHARS",
    "QUOTED",
    "PartRules",
    "StreamParser",
    "StreamState",
    "WireFormat",
    "bad",
    "check_part",
    "check_settings",
    "base64_text",
    "check_parts",
    "data_url",
    "finish_reply",
    "function_tools",
    "need",
    "tool_call",
    "tool_choice",
    "tool_parts_after",
    "typed_answer",
    "user_parts",
]

TextSink = Callable[[str], None]
_T = TypeVar("_T")

# The default anthropic-version header (anthropic.API_VERSION): here, where the
# provider reads it without loading the Anthropic wire before a provider uses it.
ANTHROPIC_VERSION = "2023-06-01"

# A tool call counts at least this many characters towards max_reply_chars:
# a stream of empty calls must not grow the reply without bound either.
CALL_CHARS = 64
# The most of a server's text an error message quotes. The provider cuts its
# messages shorter (300 characters) after taking the key out, so a key
# straddling this cut is never shown in part.
QUOTED = 1000


class StreamParser(Protocol):
    """Reads a streamed answer one line at a time."""

    def feed(self, line: str) -> None:
        """Take one line of the stream (SSE or NDJSON), without its newline."""

    def finish(self) -> ModelReply:
        """The whole answer; raises BadResponse if the stream ended early."""

    def partial(self) -> tuple[int | None, int | None, str] | None:
        """What a stream cut short had brought, to charge it: the input and output
        tokens it reported (None: not reported yet), and the text and tool calls
        (names and arguments) received; None if no event of the answer came."""


class WireFormat(Protocol):
    """One API's shapes: where to post, what to send, how to read the answer."""

    path: str
    stream_format: str  # "sse" or "ndjson"

    def headers(self, api_key: str | None) -> dict[str, str]:
        """Auth and version headers."""

    def check_settings(self, settings: ModelSettings) -> None:
        """Raise InvalidArgument naming the first of *settings* this format cannot send."""

    def body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        max_output_tokens: int,
        stream: bool,
        settings: ModelSettings | None = None,
        output: OutputSchema | None = None,
    ) -> dict[str, object]:
        """The JSON request body (*settings* checked as `check_settings` does),
        asking for an answer of *output*'s schema if given (see `typed_answer`)."""

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        """Read a whole (non-streamed) answer.

        *text_tools*: tool names to look for in the text when the model
        answered with no tool calls (None: do not look).
        """

    def stream_parser(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        *,
        max_reply_chars: int = MAX_REPLY_CHARS,
    ) -> StreamParser:
        """A parser for a streamed answer; *on_text* sees each text delta.

        Its ``feed`` raises `TooLarge` once
        the reply's text and tool calls pass *max_reply_chars* characters.
        """


def bad(provider: str, what: str) -> BadResponse:
    """A BadResponse naming the provider and what was wrong."""
    return BadResponse(f"provider {provider!r} sent a bad response: {what}", provider=provider)


def need(data: object, key: str, kind: type[_T], provider: str, where: str) -> _T:
    """``data[key]`` checked to be a *kind*, or a BadResponse saying which field."""
    if not isinstance(data, dict):
        raise bad(provider, f"{where} is not a JSON object")
    value = data.get(key)
    if not isinstance(value, kind):
        raise bad(provider, f"{where}.{key} is missing or not a {kind.__name__}")
    return value


def tool_call(
    name: object, raw_arguments: object, call_id: object, provider: str
) -> ToolCallRequest:
    """A ToolCallRequest from wire fields; bad arguments are kept as the call's error."""
    if not isinstance(name, str) or not name:
        raise bad(provider, "a tool call has no name")
    arguments, why = parse_arguments(raw_arguments)
    return ToolCallRequest(
        name, arguments, id=call_id if isinstance(call_id, str) else "", error=why
    )


def count(value: object) -> int:
    """A token count or index from the wire (missing or malformed counts as 0:
    never negative, NaN or infinite)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def finish_reply(
    text: str,
    calls: Sequence[ToolCallRequest],
    usage: Usage,
    text_tools: Collection[str] | None,
    finish: FinishReason = "stop",
    *,
    refusal: str = "",
    thinking: tuple[ThinkingBlock, ...] = (),
    blocks: tuple[RawBlock, ...] = (),
) -> ModelReply:
    """The reply, with tool calls written as text turned into calls when asked for."""
    found = tool_calls_in_text(text, text_tools) if not calls and text_tools else ()
    if found:
        text, calls = "", found
    if finish == "stop" and not refusal and not thinking and not blocks:  # (the common case)
        return ModelReply(text=text, tool_calls=tuple(calls), usage=usage)
    return ModelReply(
        text=text,
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=finish,
        refusal=refusal,
        thinking=thinking,
        blocks=blocks,
    )


def usage_of(
    input_tokens: object,
    output_tokens: object,
    cached: object = 0,
    written: object = 0,
    reasoning: object = 0,
    written_1h: object = 0,
) -> Usage:
    """A Usage from wire counts, the details no larger than the totals they are part of."""
    tokens_in, tokens_out = count(input_tokens), count(output_tokens)
    read, wrote, thought = count(cached), count(written), count(reasoning)
    if not (read or wrote or thought):  # (the common case)
        return Usage(tokens_in, tokens_out)
    read = min(read, tokens_in)
    wrote = min(wrote, tokens_in - read)
    return Usage(
        tokens_in,
        tokens_out,
        cached_input_tokens=read,
        cache_write_tokens=wrote,
        reasoning_tokens=min(thought, tokens_out),
        cache_write_1h_tokens=min(count(written_1h), wrote),
    )


def check_settings(
    settings: ModelSettings, wire: str, supported: Collection[str], reserved: Collection[str]
) -> None:
    """Raise InvalidArgument for a setting the *wire* format has no place for, or an
    ``extra_body`` field that would replace one agentrio sets (*reserved*)."""
    for name in settings.fields_set():
        if name not in supported:
            raise InvalidArgument(
                f"ModelSettings.{name} is not a setting of the {wire} wire format "
                f"(its settings: {', '.join(sorted(supported))})"
            )
    extra = settings.extra_body
    if extra:
        for key in extra:
            if key in reserved:
                raise InvalidArgument(
                    f"ModelSettings.extra_body must not set {key!r}: agentrio sets it for "
                    f"each call of the {wire} wire format"
                )


def tool_choice(choice: str, tools: Sequence[ToolSchema]) -> str:
    """*choice* checked: ``"auto"``, ``"none"``, ``"required"`` or an offered tool's name."""
    if choice in ("auto", "none", "required") or any(t.name == choice for t in tools):
        return choice
    raise InvalidArgument(
        f"ModelSettings.tool_choice names tool {choice!r}, which this call does not offer "
        f'(offered: {sorted(t.name for t in tools)}); expected "auto", "none", '
        f'"required" or one of those'
    )


def bearer(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer`` for *api_key*, or no header without one."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def function_tools(tools: Sequence[ToolSchema]) -> list[dict[str, object]]:
    """Tool definitions in the OpenAI shape (``{"type": "function", ...}``), which Ollama shares."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


class PartialCall:
    """A tool call as a stream brings it, in pieces, joined once at the end.

    (``+=`` on each piece would copy what came before every time: a reply
    streamed in many small pieces would cost time quadratic in its length.)
    """

    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str = "", name: str = "") -> None:
        self.id = call_id
        self.name = [name]
        self.arguments: list[str] = []

    def request(self, provider: str) -> ToolCallRequest:
        """The call, once the stream has brought all of it."""
        return tool_call("".join(self.name), "".join(self.arguments), self.id, provider)

    def text(self) -> str:
        """Its name and arguments so far, for estimating what a cut stream brought."""
        return "".join(self.name) + "".join(self.arguments)


class StreamState:
    """What every stream parser keeps: the text so far, its size, and whether the end was seen.

    Args:
        provider: the provider's name, for error messages.
        on_text: sees each piece of text.
        text_tools: tool names to look for in the text (None: do not look).
        max_chars: the most characters of text and tool calls the reply may
            accumulate (see `grow`).
    """

    def __init__(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        max_chars: int = MAX_REPLY_CHARS,
    ) -> None:
        self.provider = provider
        self.on_text = on_text
        self.text_tools = text_tools
        self.text: list[str] = []
        self.done = False
        self.began = False  # an event of the answer was read
        self.size = 0
        self.max_chars = max_chars

    def grow(self, chars: int) -> None:
        """Count *chars* more characters of the reply (text, tool-call ids, names, arguments).

        Raises:
            TooLarge: the reply is now longer than ``max_chars``.
        """
        self.size += chars
        if self.size > self.max_chars:
            raise TooLarge(
                f"the reply is longer than max_reply_chars ({self.max_chars} characters)"
            )

    def json_object(self, text: str, what: str) -> dict[str, Any]:
        """*text* read as a JSON object, or BadResponse naming *what* (``"a stream chunk"``).

        Its strings hold no lone surrogate (see `guard.loads`): a stream's text,
        tool calls and error messages are valid Unicode from here on.
        """
        try:
            value = loads(text)
        except (ValueError, RecursionError):
            raise bad(self.provider, f"{what} is not JSON: {text[:QUOTED]!r}") from None
        if not isinstance(value, dict):
            raise bad(self.provider, f"{what} is not a JSON object")
        self.began = True
        return value

    def emit(self, piece: str) -> None:
        """Add a piece of text, and pass it on to whoever watches the stream."""
        if piece:
            self.grow(len(piece))
            self.text.append(piece)
            if self.on_text is not None:
                self.on_text(piece)

    def received(self, calls: str) -> str:
        """The text received so far, then *calls* (tool-call names and arguments)."""
        return "".join(self.text) + calls

    def reply(
        self,
        calls: Sequence[ToolCallRequest],
        usage: Usage,
        end: str,
        finish: FinishReason = "stop",
        *,
        refusal: str = "",
        thinking: tuple[ThinkingBlock, ...] = (),
        blocks: tuple[RawBlock, ...] = (),
    ) -> ModelReply:
        """The whole answer, or BadResponse if the stream never reached *end*."""
        if not self.done:
            raise bad(self.provider, f"the stream ended before {end}")
        text = "".join(self.text)
        return finish_reply(
            text,
            calls,
            usage,
            self.text_tools,
            finish,
            refusal=refusal,
            thinking=thinking,
            blocks=blocks,
        )


def typed_answer(reply: ModelReply, output: OutputSchema) -> ModelReply:
    """*reply* to a call that asked for an answer of *output*'s schema, with the answer
    as its text: the JSON of the forced tool's input (Anthropic's), or of its text
    unwrapped from ``{"result": ...}`` when the schema is wrapped.

    A reply that called the output tool is the answer: the other calls it
    made are dropped (the phase ends on an answer). An answer that cannot be
    read is left as it is: the agent refuses it, and tells the model why.
    """
    for call in reply.tool_calls:
        if call.name == OUTPUT_TOOL:
            if call.error:  # (unreadable arguments: an empty answer, refused as such)
                return msgspec.structs.replace(reply, text="", tool_calls=())
            value: object = call.arguments
            break
    else:
        if reply.tool_calls or not output.wrapped:
            return reply
        try:
            value = msgspec.json.decode(reply.text)
        except (msgspec.DecodeError, RecursionError):
            return reply
    if output.wrapped and isinstance(value, dict) and len(value) == 1 and "result" in value:
        # (only the wrapper itself, one key: a bare dict answer with a "result"
        # key among others is the answer as it is)
        value = value["result"]
    return msgspec.structs.replace(reply, text=msgspec.json.encode(value).decode(), tool_calls=())


# -- content parts -------------------------------------------------------------------


class PartRules(NamedTuple):
    """What content parts a wire format takes (see `check_part`)."""

    wire: str
    image_types: tuple[str, ...]
    max_image_bytes: int
    image_urls: bool
    document_types: tuple[str, ...]  # as data
    document_url_types: tuple[str, ...]


def check_part(rules: PartRules, part: ContentPart, where: str) -> None:
    """Raise InvalidArgument if the wire format of *rules* cannot take *part*, naming
    *where* it is (``"part 2"``), the part (without its bytes) and what was expected."""
    if isinstance(part, ImagePart):
        why = _image_refused(rules, part)
    elif isinstance(part, DocumentPart):
        why = _document_refused(rules, part)
    else:
        return
    if why:
        raise InvalidArgument(f"{where} ({part!r}): the {rules.wire} wire format {why}")


def _image_refused(rules: PartRules, part: ImagePart) -> str:
    types = ", ".join(rules.image_types)
    if part.data is None:
        if not rules.image_urls:
            return "takes images as data only, not by URL: give ImagePart(data=...)"
        if part.media_type and part.media_type not in rules.image_types:
            return f"takes images of the types {types}"
        return ""
    if part.media_type not in rules.image_types:
        return f"takes images of the types {types}"
    if len(part.data) > rules.max_image_bytes:
        return (
            f"takes images of at most {rules.max_image_bytes} bytes; "
            f"this one is {len(part.data)} bytes"
        )
    return ""


def _document_refused(rules: PartRules, part: DocumentPart) -> str:
    if not rules.document_types and not rules.document_url_types:
        return "takes no documents"
    if part.data is None:
        if part.media_type not in rules.document_url_types:
            if not rules.document_url_types:
                return "takes no documents by URL: give DocumentPart(data=...)"
            return f"takes documents by URL of the types {', '.join(rules.document_url_types)}"
        return ""
    if part.media_type not in rules.document_types:
        return f"takes documents of the types {', '.join(rules.document_types)}"
    return ""


def check_parts(rules: PartRules, parts: Sequence[ContentPart], where: str = "part") -> None:
    """`check_part` for each of *parts* (``"part 0"``, ``"part 1"``...)."""
    for i, part in enumerate(parts):
        check_part(rules, part, f"{where} {i}")


def user_parts(rules: PartRules, msg: ChatMessage) -> tuple[ContentPart, ...]:
    """*msg*'s parts, each checked; only a user turn may hold any."""
    if msg.role != "user":
        raise InvalidArgument(
            f"{msg.role!r} turn holds content parts: only user turns may (ChatMessage.parts)"
        )
    check_parts(rules, msg.parts, "user turn part")
    return msg.parts


def tool_parts_after(
    messages: Sequence[ChatMessage],
    sent: list[dict[str, object]],
    rules: PartRules,
    user_message: Callable[[str, tuple[ContentPart, ...]], dict[str, object]],
) -> list[dict[str, object]]:
    """*sent* (the request's *messages*, each as sent) with the images and documents
    tools returned, for a wire whose tool messages take text only: after each run
    of tool messages, one user message (made by *user_message* from a line that
    says whose they are and the parts) per tool turn that returned any.

    Raises:
        InvalidArgument: the wire takes no such part (naming the tool).
    """
    if not any(m.parts for m in messages if m.role == "tool"):
        return sent  # (the common case)
    out: list[dict[str, object]] = []
    held: list[dict[str, object]] = []  # for the tool messages just sent
    for msg, item in zip(messages, sent, strict=True):
        if held and msg.role != "tool":
            out.extend(held)
            held = []
        out.append(item)
        shown = tuple(p for p in msg.parts if not isinstance(p, TextPart))
        if msg.role == "tool" and shown:
            check_parts(rules, shown, f"tool {msg.name!r} result part")
            line = f"[the images and documents tool {msg.name} returned (call {msg.tool_call_id})]"
            held.append(user_message(line, shown))
    out.extend(held)
    return out


def base64_text(data: bytes) -> str:
    """*data* in base64, as text."""
    return base64.b64encode(data).decode("ascii")


def data_url(media_type: str, data: bytes) -> str:
    """A ``data:`` URL holding *data* (``data:image/png;base64,...``)."""
    return f"data:{media_type};base64,{base64_text(data)}"
