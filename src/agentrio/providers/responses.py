"""The OpenAI Responses wire format (``POST {base_url}/responses``).

The shapes are those of the official SDK's ``openai.types.responses``: the
conversation goes as ``input`` items (messages, ``function_call`` and
``function_call_output`` items, ``reasoning`` items), the answer comes as
``output`` items, and a stream is a sequence of typed SSE events ending in
``response.completed`` (or ``response.incomplete``).

Reasoning is carried between turns without server-side state: each request
says ``store: false`` and asks for ``include: ["reasoning.encrypted_content"]``;
the reasoning items of an answer are kept in its
[`ModelReply.thinking`][agentrio.ModelReply] (a
[`ThinkingBlock`][agentrio.types.ThinkingBlock] with an ``id``) and sent
back, whole, before the turn they came with.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from .._text import scrub
from ..errors import InvalidArgument
from ..messages import (
    MAX_PART_BYTES,
    ChatMessage,
    ContentPart,
    DocumentPart,
    FinishReason,
    ImagePart,
    ModelReply,
    ModelSettings,
    TextPart,
    ThinkingBlock,
    ToolCallRequest,
    Usage,
)
from .base import OutputSchema, ToolSchema
from .bounded import MAX_REPLY_CHARS
from .openai import header_name_ok
from .overflow import context_overflow, stream_error, too_long
from .wire import (
    CALL_CHARS,
    QUOTED,
    PartialCall,
    PartRules,
    StreamState,
    TextSink,
    bad,
    bearer,
    check_parts,
    check_settings,
    count,
    data_url,
    finish_reply,
    need,
    tool_call,
    tool_choice,
    usage_of,
    user_parts,
)

__all__ = ["INCLUDE", "MIN_OUTPUT_TOKENS", "PARTS", "PLAIN_MODELS", "ResponsesWire"]

WIRE = "openai-responses"
# What a request asks for: the reasoning items' encrypted content, which lets
# the next request carry them with store: false (no state on the server)...
INCLUDE = ("reasoning.encrypted_content",)
# ...but for the models that do not reason, which refuse it (400 "Encrypted
# content is not supported with this model."): named by prefix, so that a new
# model, likelier to reason, gets it. (After a "vendor/" prefix: OpenRouter.)
PLAIN_MODELS = ("gpt-3.5", "gpt-4", "chatgpt-", "gpt-5-chat")
# The API refuses a max_output_tokens below this ("Expected a value >= 16"): a
# smaller limit (an agent's near its context window) goes out as this one.
MIN_OUTPUT_TOKENS = 16
_SETTINGS = frozenset(
    (
        "temperature",
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "prompt_cache_key",
        "prompt_cache_retention",
        "extra_headers",
        "extra_body",
    )
)
# (store, include and text stay open to extra_body: store = true keeps the
# responses on the server; text = {verbosity = "low"} is the user's.)
_RESERVED = frozenset(("model", "input", "instructions", "tools", "stream", "max_output_tokens"))
# incomplete_details.reason values; another reason (none at all) reads as "stop".
_INCOMPLETE: dict[object, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}
# Images as input_image parts (a URL, or the data as a data: URL), up to 20 MB
# each as on chat completions; PDFs as input_file parts, as data (file_data)
# or by URL (file_url).
PARTS = PartRules(
    WIRE,
    ("image/png", "image/jpeg", "image/gif", "image/webp"),
    20 * 1024 * 1024,
    True,
    ("application/pdf",),
    ("application/pdf",),
)
assert PARTS.max_image_bytes <= MAX_PART_BYTES


# -- the request ---------------------------------------------------------------------


def _part(part: ContentPart) -> dict[str, object]:
    if isinstance(part, ImagePart):
        url = part.url if part.data is None else data_url(part.media_type, part.data)
        return {"type": "input_image", "detail": "auto", "image_url": url}
    if isinstance(part, DocumentPart):
        if part.data is None:
            return {"type": "input_file", "file_url": part.url}
        name = part.name or "document.pdf"
        return {
            "type": "input_file",
            "filename": name,
            "file_data": data_url(part.media_type, part.data),
        }
    return {"type": "input_text", "text": part.text}


def _reasoning(block: ThinkingBlock) -> dict[str, object]:
    """A reasoning item as it came (ResponseReasoningItemParam), for the next request."""
    item: dict[str, object] = {
        "type": "reasoning",
        "id": block.id,
        "summary": [{"type": "summary_text", "text": text} for text in block.summary],
    }
    if block.encrypted_content:
        item["encrypted_content"] = block.encrypted_content
    if block.thinking:
        item["content"] = [{"type": "reasoning_text", "text": block.thinking}]
    return item


def _assistant(msg: ChatMessage) -> list[dict[str, object]]:
    # Reasoning first, as it came: the API wants a reasoning item followed by
    # the item it led to (the message, or the function calls), and refuses one
    # that nothing follows (a turn cut while the model was still reasoning).
    if not (msg.content or msg.tool_calls):
        return []
    items = [_reasoning(b) for b in msg.thinking if b.id]
    if msg.content:
        items.append({"type": "message", "role": "assistant", "content": msg.content})
    for c in msg.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
            }
        )
    return items


def _item(msg: ChatMessage) -> list[dict[str, object]]:
    if msg.role == "assistant":
        return _assistant(msg)
    if msg.role == "tool":
        output: object = msg.content
        shown = tuple(p for p in msg.parts if not isinstance(p, TextPart))
        if shown:  # (images and documents the tool returned: the output takes them)
            check_parts(PARTS, shown, f"tool {msg.name!r} result part")
            output = [{"type": "input_text", "text": msg.content}, *map(_part, shown)]
        return [
            {
                "type": "function_call_output",
                "call_id": msg.tool_call_id or "",
                "output": output,
            }
        ]
    content: object = msg.content
    if msg.parts:
        content = [_part(p) for p in user_parts(PARTS, msg)]
    return [{"type": "message", "role": msg.role, "content": content}]


def _sealed(item: dict[str, object]) -> bool:
    return bool(item.get("encrypted_content"))


def _input(messages: Sequence[ChatMessage]) -> tuple[str, list[dict[str, object]]]:
    """The ``instructions`` (the system turns the conversation starts with), and
    the rest as input items (a later system turn stays where it is)."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    instructions = "\n\n".join(m.content for m in messages[:lead])
    items: list[dict[str, object]] = []
    for msg in messages[lead:]:
        items.extend(_item(msg))
    return instructions, items


def _tools(tools: Sequence[ToolSchema]) -> list[dict[str, object]]:
    # strict: false said out loud: the Responses API reads a function tool
    # without it as strict, and refuses a schema not written in strict form.
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
            "strict": False,
        }
        for t in tools
    ]


def _apply(body: dict[str, object], settings: ModelSettings, tools: Sequence[ToolSchema]) -> None:
    check_settings(settings, WIRE, _SETTINGS, _RESERVED)
    for name in ("temperature", "top_p", "prompt_cache_key", "prompt_cache_retention"):
        value = getattr(settings, name)
        if value is not None:
            body[name] = value
    if tools:  # (as on chat completions: tool settings go only with tools)
        if settings.tool_choice is not None:
            choice = tool_choice(settings.tool_choice, tools)
            body["tool_choice"] = (
                choice
                if choice in ("auto", "none", "required")
                else {"type": "function", "name": choice}
            )
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.extra_body:
        body.update(settings.extra_body)


def _text_format(output: OutputSchema) -> dict[str, object]:
    """Structured outputs (``text.format``): the answer's schema, strict when it has
    a strict form."""
    strict = output.strict_schema
    return {
        "format": {
            "type": "json_schema",
            "name": output.name,
            "schema": output.object_schema if strict is None else strict,
            "strict": strict is not None,
        }
    }


# -- the answer ----------------------------------------------------------------------


def _usage(usage: dict[str, Any]) -> Usage:
    """``usage``: ``input_tokens_details.cached_tokens`` (and ``cache_write_tokens``)
    and ``output_tokens_details.reasoning_tokens`` are parts of the totals."""
    given, made = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    given = given if isinstance(given, dict) else {}
    return usage_of(
        usage.get("input_tokens"),
        usage.get("output_tokens"),
        cached=given.get("cached_tokens"),
        written=given.get("cache_write_tokens"),
        reasoning=made.get("reasoning_tokens") if isinstance(made, dict) else 0,
    )


def _finish(response: dict[str, Any], refusal: str) -> FinishReason:
    finish: FinishReason = "stop"
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        finish = _INCOMPLETE.get(reason, "stop") if isinstance(reason, str) else "stop"
    return "refusal" if refusal and finish == "stop" else finish


def _failed(response: dict[str, Any], provider: str) -> None:
    """Raise BadResponse quoting the error of a response that ``failed`` or was
    ``cancelled`` (the provider takes any key out of the quote and cuts it)."""
    status = response.get("status")
    if status in ("failed", "cancelled"):
        error = repr(response.get("error"))[:QUOTED]
        overflow = context_overflow(error)
        if overflow is not None:
            raise too_long(provider, f"the response {status}: {error}", overflow, None)
        raise bad(provider, f"the response {status}: {error}")


def _thinking_block(item: dict[str, Any]) -> ThinkingBlock:
    summary = item.get("summary")
    content = item.get("content")
    texts = [
        str(part.get("text", ""))
        for part in (content if isinstance(content, list) else ())
        if isinstance(part, dict) and part.get("type") == "reasoning_text"
    ]
    encrypted = item.get("encrypted_content")
    return ThinkingBlock(
        "".join(texts),
        id=str(item.get("id") or ""),
        encrypted_content=encrypted if isinstance(encrypted, str) else "",
        summary=tuple(
            str(part.get("text", ""))
            for part in (summary if isinstance(summary, list) else ())
            if isinstance(part, dict)
        ),
    )


def _size(block: ThinkingBlock) -> int:
    return (
        len(block.id)
        + len(block.encrypted_content)
        + len(block.thinking)
        + sum(len(text) for text in block.summary)
    )


class _Read:
    """What the output items of a whole answer hold."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: list[ToolCallRequest] = []
        self.thinking: list[ThinkingBlock] = []

    def item(self, item: object, where: str) -> None:
        kind = need(item, "type", str, self.provider, where)
        assert isinstance(item, dict)
        if kind == "message":
            content = item.get("content")
            for part in content if isinstance(content, list) else ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text":
                    self.text.append(str(part.get("text", "")))
                elif part.get("type") == "refusal":
                    self.refusal.append(str(part.get("refusal", "")))
        elif kind == "function_call":
            call = tool_call(
                item.get("name"), item.get("arguments"), item.get("call_id"), self.provider
            )
            self.calls.append(call)
        elif kind == "reasoning":
            self.thinking.append(_thinking_block(item))


class ResponsesWire:
    """``POST {base_url}/responses``; streams as SSE events ending in
    ``response.completed`` (or ``response.incomplete``).

    Every request says ``store: false`` and, for a model whose name does not
    start with one of `PLAIN_MODELS` (the models that do not reason, which
    refuse it), asks for ``include: ["reasoning.encrypted_content"]``
    (``extra_body`` may say otherwise for both). With ``store: false``, a
    reasoning item without its encrypted content is not sent back. Function
    tools go with ``strict: false``; ``max_output_tokens`` is at least
    `MIN_OUTPUT_TOKENS` (16), the API's least.

    Args:
        auth_header: the header that carries the key: ``"Authorization"``
            (the default, as ``Bearer KEY``) or another header's name, which
            carries the key as it is (Azure OpenAI's ``"api-key"``).

    Raises:
        InvalidArgument: an *auth_header* that is not a header's name.
    """

    path = "/responses"
    stream_format = "sse"
    parts = PARTS

    def __init__(self, *, auth_header: str = "Authorization") -> None:
        if not header_name_ok(auth_header):
            raise InvalidArgument(f"auth_header must be a header's name, got {auth_header!r}")
        self.auth_header = auth_header

    def headers(self, api_key: str | None) -> dict[str, str]:
        if api_key and self.auth_header.lower() != "authorization":
            return {self.auth_header: api_key}
        return bearer(api_key)

    def check_settings(self, settings: ModelSettings) -> None:
        check_settings(settings, WIRE, _SETTINGS, _RESERVED)

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
        instructions, items = _input(messages)
        body: dict[str, object] = {"model": model}
        if instructions:
            body["instructions"] = instructions
        body |= {
            "input": items,
            "max_output_tokens": max(max_output_tokens, MIN_OUTPUT_TOKENS),
            "stream": stream,
            "store": False,
        }
        if not model.rpartition("/")[2].startswith(PLAIN_MODELS):
            body["include"] = list(INCLUDE)
        if tools:
            body["tools"] = _tools(tools)
        if settings is not None:
            _apply(body, settings, tools)
        if output is not None:
            body["text"] = _text_format(output)
        if body.get("store") is False:
            # Nothing on the server to find a reasoning item by: one without its
            # encrypted content (from a call that did not ask for it) would be a 400.
            body["input"] = [i for i in items if i["type"] != "reasoning" or _sealed(i)]
        return body

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        output = need(data, "output", list, provider, "body")
        assert isinstance(data, dict)
        _failed(data, provider)
        read = _Read(provider)
        for i, item in enumerate(output):
            read.item(item, f"output[{i}]")
        usage = data.get("usage")
        reply_usage = _usage(usage) if isinstance(usage, dict) else Usage()
        refusal = scrub("".join(read.refusal))
        return finish_reply(
            scrub("".join(read.text)),
            read.calls,
            reply_usage,
            text_tools,
            _finish(data, refusal),
            refusal=refusal,
            thinking=tuple(read.thinking),
        )

    def stream_parser(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        *,
        max_reply_chars: int = MAX_REPLY_CHARS,
    ) -> _ResponsesStream:
        return _ResponsesStream(provider, on_text, text_tools, max_reply_chars)


class _ResponsesStream(StreamState):
    def __init__(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        max_chars: int,
    ) -> None:
        super().__init__(provider, on_text, text_tools, max_chars)
        self.calls: dict[int, PartialCall] = {}  # by output_index
        self.thinking: dict[int, ThinkingBlock] = {}  # by output_index, once done
        self.refusal: list[str] = []
        self.response: dict[str, Any] = {}  # the final response object (no output read)
        self.usage: Usage | None = None

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # "event:" lines repeat the type that the data carries
        event = self.json_object(line[5:], "a stream event")
        kind = event.get("type")
        if kind == "response.output_text.delta":
            self.emit(scrub(str(event.get("delta", ""))))
        elif kind == "response.function_call_arguments.delta":
            call = self.calls.get(count(event.get("output_index")))
            if call is not None:
                piece = str(event.get("delta", ""))
                self.grow(len(piece))
                call.arguments.append(piece)
        elif kind == "response.refusal.delta":
            piece = str(event.get("delta", ""))
            self.grow(len(piece))
            self.refusal.append(piece)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._item(count(event.get("output_index")), event.get("item"), kind.endswith("done"))
        elif kind == "response.function_call_arguments.done":
            self._arguments(count(event.get("output_index")), event.get("arguments"))
        elif kind in ("response.completed", "response.incomplete"):
            self._end(event.get("response"))
        elif kind in ("response.failed", "error"):
            self._error(kind, event)

    def _item(self, index: int, item: object, done: bool) -> None:
        if not isinstance(item, dict):
            raise bad(self.provider, "an output item event has no item object")
        kind = item.get("type")
        if kind == "function_call":
            call = self.calls.get(index)
            if call is None:
                call = self.calls[index] = PartialCall()
                self.grow(CALL_CHARS)
            call_id, name = str(item.get("call_id") or ""), str(item.get("name") or "")
            self.grow(max(0, len(call_id) - len(call.id)) + max(0, len(name) - len(call.name[-1])))
            call.id = call_id or call.id
            call.name = [name or "".join(call.name)]
            if done:
                self._arguments(index, item.get("arguments"))
        elif kind == "reasoning" and done:
            # (encrypted_content is whole only in the done event)
            block = _thinking_block(item)
            self.grow(_size(block))
            self.thinking[index] = block

    def _arguments(self, index: int, arguments: object) -> None:
        """The whole arguments of a call, which win over the pieces streamed."""
        call = self.calls.get(index)
        if call is None or not isinstance(arguments, str):
            return
        self.grow(max(0, len(arguments) - sum(map(len, call.arguments))))
        call.arguments = [arguments]

    def _end(self, response: object) -> None:
        if not isinstance(response, dict):
            raise bad(self.provider, "the final event has no response object")
        self.response = response
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        self.done = True

    def _error(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "error":
            error = {k: event.get(k) for k in ("code", "message", "param") if event.get(k)}
            raise stream_error(self.provider, error)  # (or ContextTooLong)
        response = event.get("response")
        _failed(response if isinstance(response, dict) else {"status": "failed"}, self.provider)
        raise bad(self.provider, "the stream reported response.failed")

    def finish(self) -> ModelReply:
        calls = [call.request(self.provider) for _, call in sorted(self.calls.items())]
        thinking = tuple(block for _, block in sorted(self.thinking.items()))
        refusal = scrub("".join(self.refusal))
        finish = _finish(self.response, refusal)
        end = "response.completed"
        return self.reply(
            calls, self.usage or Usage(), end, finish, refusal=refusal, thinking=thinking
        )

    def partial(self) -> tuple[int | None, int | None, str] | None:
        if not self.began:
            return None
        received = self.received("".join(call.text() for call in self.calls.values()))
        if self.usage is None:
            return None, None, received
        return self.usage.input_tokens, self.usage.output_tokens, received
