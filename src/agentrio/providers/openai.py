"""The OpenAI chat-completions wire format (OpenAI, and the servers compatible with it:
Azure OpenAI, Gemini's OpenAI endpoint, OpenRouter, vLLM, LM Studio, llama.cpp's server,
DeepSeek, Ollama's /v1).

What the compatible servers add is read here too: the reasoning some send apart
from the answer (``reasoning_content``: DeepSeek, vLLM, LM Studio, llama.cpp;
``reasoning``: OpenRouter, newer vLLM), kept as thinking and never as text, and
DeepSeek's ``prompt_cache_hit_tokens``. A reply whose server reported no usage
carries `UNREPORTED`, which the provider replaces with an estimate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

import msgspec

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
    ThinkingBlock,
    ToolCallRequest,
    Usage,
)
from .base import OutputSchema, ToolSchema
from .bounded import MAX_REPLY_CHARS
from .overflow import stream_error
from .tokens import arguments_text, estimate_tokens, message_tokens
from .wire import (
    CALL_CHARS,
    PartialCall,
    PartRules,
    StreamState,
    TextSink,
    bad,
    bearer,
    check_settings,
    count,
    data_url,
    finish_reply,
    function_tools,
    need,
    tool_call,
    tool_choice,
    tool_parts_after,
    usage_of,
    user_parts,
)

__all__ = [
    "MAX_TOKENS_FIELDS",
    "PARTS",
    "UNREPORTED",
    "OpenAIWire",
    "estimated_usage",
    "header_name_ok",
]

# The request field of the output limit: reasoning models refuse max_tokens;
# servers that predate max_completion_tokens know only max_tokens.
MAX_TOKENS_FIELDS = ("max_completion_tokens", "max_tokens")
_SETTINGS = frozenset(
    (
        "temperature",
        "top_p",
        "stop",
        "seed",
        "tool_choice",
        "parallel_tool_calls",
        "prompt_cache_key",
        "prompt_cache_retention",
        "extra_headers",
        "extra_body",
    )
)
_RESERVED = frozenset(
    ("model", "messages", "tools", "stream", "stream_options", *MAX_TOKENS_FIELDS)
)
# finish_reason values other than these ("stop", "tool_calls", "function_call",
# none at all) read as "stop": the model ended its turn.
_FINISH: dict[object, FinishReason] = {"length": "length", "content_filter": "content_filter"}
# Images as image_url parts (a URL, or the data as a data: URL), up to OpenAI's
# 20 MB an image; PDFs as file parts with file_data (chat completions take no
# document URL, and no text file: send its text as text).
PARTS = PartRules(
    "openai",
    ("image/png", "image/jpeg", "image/gif", "image/webp"),
    20 * 1024 * 1024,
    True,
    ("application/pdf",),
    (),
)
assert PARTS.max_image_bytes <= MAX_PART_BYTES
# The usage of a reply whose server reported none (a local server; a stream
# from a server that ignores stream_options): the provider charges an estimate
# instead (`estimated_usage`). Told apart by identity, never by value: a
# server that reported zeros reported something.
UNREPORTED = Usage()
# Where compatible servers send the reasoning they keep apart from the answer,
# in the order looked at: DeepSeek, vLLM, LM Studio and llama.cpp's
# "reasoning_content"; OpenRouter's and newer vLLM's "reasoning". A message or
# delta holding both (vLLM, while it renames the field) holds the same text
# twice: only the first is taken.
_REASONING = ("reasoning_content", "reasoning")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)


def _part(part: ContentPart) -> dict[str, object]:
    if isinstance(part, ImagePart):
        url = part.url if part.data is None else data_url(part.media_type, part.data)
        return {"type": "image_url", "image_url": {"url": url}}
    if isinstance(part, DocumentPart):
        assert part.data is not None  # (checked: no document URLs)
        name = part.name or "document.pdf"
        return {
            "type": "file",
            "file": {"filename": name, "file_data": data_url(part.media_type, part.data)},
        }
    return {"type": "text", "text": part.text}


def _message(msg: ChatMessage, send_reasoning: bool = False) -> dict[str, object]:
    out: dict[str, object] = {"role": msg.role, "content": msg.content}
    if msg.parts and msg.role != "tool":  # (a tool's parts: see _tool_parts)
        out["content"] = [_part(p) for p in user_parts(PARTS, msg)]
    if msg.tool_calls:
        out["content"] = msg.content or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in msg.tool_calls
        ]
        if send_reasoning:
            # DeepSeek's thinking mode refuses a history whose tool-calling turns
            # lack their reasoning ("" when there was none); no other turn's goes.
            out["reasoning_content"] = "".join(b.thinking for b in msg.thinking if not b.redacted)
    if msg.role == "tool":
        out["tool_call_id"] = msg.tool_call_id or ""
    return out


def _tool_parts_message(line: str, parts: tuple[ContentPart, ...]) -> dict[str, object]:
    # (a tool message takes text only: what a tool returned besides goes after it)
    content = [{"type": "text", "text": line}, *(_part(p) for p in parts)]
    return {"role": "user", "content": content}


def _list(value: object, provider: str, where: str) -> list[Any]:
    """*value* if it is a list, [] if it is missing or empty, else a BadResponse."""
    if not value:
        return []
    if not isinstance(value, list):
        raise bad(provider, f"{where} is not a list")
    return value


def _usage(usage: dict[str, Any], reasoning: str = "") -> Usage:
    """``usage``, with ``prompt_tokens_details.cached_tokens`` (or DeepSeek's
    ``prompt_cache_hit_tokens``) and ``completion_tokens_details.reasoning_tokens``
    (both part of the totals), and the cache writes some compatible servers
    report (OpenRouter's ``prompt_tokens_details.cache_write_tokens``). A reply
    whose *reasoning* came with no count of it (vLLM, LM Studio, llama.cpp) has
    its reasoning tokens estimated from it."""
    prompt = _details(usage, "prompt_tokens_details")
    completion = _details(usage, "completion_tokens_details")
    cached = prompt.get("cached_tokens", 0)
    if not count(cached):
        cached = usage.get("prompt_cache_hit_tokens")
    thought = completion.get("reasoning_tokens", 0)
    if reasoning and not count(thought):
        thought = estimate_tokens(reasoning)
    return usage_of(
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        cached=cached,
        written=prompt.get("cache_write_tokens"),
        reasoning=thought,
    )


def _details(usage: dict[str, Any], name: str) -> dict[str, Any]:
    details = usage.get(name)
    return details if isinstance(details, dict) else {}


def _reasoning(fields: dict[str, Any]) -> str:
    """The reasoning a message or a delta holds apart from its answer ("" if none)."""
    for key in _REASONING:
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _thinking(reasoning: str) -> tuple[ThinkingBlock, ...]:
    """The reasoning as the reply's thinking: kept, never shown as its text."""
    return (ThinkingBlock(reasoning),) if reasoning else ()


def estimated_usage(
    reply: ModelReply, messages: Sequence[ChatMessage], max_output_tokens: int
) -> ModelReply:
    """*reply*, whose server reported no usage (`UNREPORTED`), charged an estimate:
    the input as agentrio's estimator counts *messages* (their images and
    documents too), the output as it counts what arrived (text, refusal,
    reasoning, tool calls' names and arguments), at most *max_output_tokens*;
    the reasoning's share is its reasoning tokens. Token budgets then bound a
    server that reports nothing."""
    tokens_in = sum(message_tokens(estimate_tokens, m) for m in messages)
    thought = "".join(b.thinking for b in reply.thinking)
    said = reply.text + reply.refusal
    said += "".join(c.name + arguments_text(c.arguments) for c in reply.tool_calls)
    reasoning = estimate_tokens(thought) if thought else 0
    tokens_out = min((estimate_tokens(said) if said else 0) + reasoning, max_output_tokens)
    usage = usage_of(tokens_in, tokens_out, reasoning=reasoning)
    return msgspec.structs.replace(reply, usage=usage)


def header_name_ok(name: object) -> bool:
    """Is *name* a str an HTTP header can be named (``api-key``, ``Authorization``)?"""
    return isinstance(name, str) and _HEADER_NAME.fullmatch(name) is not None


def _finish(reason: object, refusal: str) -> FinishReason:
    finish = _FINISH.get(reason, "stop") if isinstance(reason, str) else "stop"
    return "refusal" if refusal and finish == "stop" else finish


def _apply(body: dict[str, object], settings: ModelSettings, tools: Sequence[ToolSchema]) -> None:
    check_settings(settings, "openai", _SETTINGS, _RESERVED)
    for name in ("temperature", "top_p", "seed", "prompt_cache_key", "prompt_cache_retention"):
        value = getattr(settings, name)
        if value is not None:
            body[name] = value
    if settings.stop is not None:
        body["stop"] = list(settings.stop)
    if tools:  # (OpenAI refuses tool_choice in a call without tools)
        if settings.tool_choice is not None:
            choice = tool_choice(settings.tool_choice, tools)
            body["tool_choice"] = (
                choice
                if choice in ("auto", "none", "required")
                else {"type": "function", "function": {"name": choice}}
            )
        if settings.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.extra_body:
        body.update(settings.extra_body)


def _response_format(output: OutputSchema) -> dict[str, object]:
    """Structured outputs: the answer's schema, strict when it has a strict form."""
    strict = output.strict_schema
    schema: dict[str, object] = {
        "name": output.name,
        "schema": output.object_schema if strict is None else strict,
        "strict": strict is not None,
    }
    return {"type": "json_schema", "json_schema": schema}


class OpenAIWire:
    """``POST {base_url}/chat/completions``; streams as SSE ending in ``[DONE]``.

    Args:
        max_tokens_field: the body field of the output limit:
            ``"max_completion_tokens"`` (OpenAI's, which reasoning models
            require) or ``"max_tokens"`` (for servers that know only that one).
        auth_header: the header that carries the key: ``"Authorization"``
            (as ``Bearer KEY``) or another header's name, which carries the
            key as it is (Azure OpenAI's ``"api-key"``).
        stream_usage: ask a streamed answer for its usage
            (``stream_options.include_usage``); False for a server that
            refuses the field (its usage is then estimated).
        send_reasoning: send an assistant turn's reasoning back, as
            ``reasoning_content``, with the turn's tool calls (DeepSeek's
            thinking mode requires it); other turns' never go.

    Raises:
        InvalidArgument: a *max_tokens_field* or *auth_header* that cannot be.
    """

    path = "/chat/completions"
    stream_format = "sse"
    parts = PARTS

    def __init__(
        self,
        max_tokens_field: str = "max_completion_tokens",
        *,
        auth_header: str = "Authorization",
        stream_usage: bool = True,
        send_reasoning: bool = False,
    ) -> None:
        if max_tokens_field not in MAX_TOKENS_FIELDS:
            raise InvalidArgument(
                f"max_tokens_field must be one of {MAX_TOKENS_FIELDS}, got {max_tokens_field!r}"
            )
        if not header_name_ok(auth_header):
            raise InvalidArgument(f"auth_header must be a header's name, got {auth_header!r}")
        self.max_tokens_field = max_tokens_field
        self.auth_header = auth_header
        self.stream_usage = stream_usage
        self.send_reasoning = send_reasoning

    def headers(self, api_key: str | None) -> dict[str, str]:
        if api_key and self.auth_header.lower() != "authorization":
            return {self.auth_header: api_key}
        return bearer(api_key)

    def check_settings(self, settings: ModelSettings) -> None:
        check_settings(settings, "openai", _SETTINGS, _RESERVED)

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
        body: dict[str, object] = {
            "model": model,
            "messages": tool_parts_after(
                messages,
                [_message(m, self.send_reasoning) for m in messages],
                PARTS,
                _tool_parts_message,
            ),
            self.max_tokens_field: max_output_tokens,
            "stream": stream,
        }
        if tools:
            body["tools"] = function_tools(tools)
        if stream and self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if settings is not None:
            _apply(body, settings, tools)
        if output is not None:
            body["response_format"] = _response_format(output)
        return body

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        choices = need(data, "choices", list, provider, "body")
        if not choices:
            raise bad(provider, "body.choices is empty")
        message = need(choices[0], "message", dict, provider, "choices[0]")
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise bad(provider, "choices[0].message.content is not a string")
        refusal = message.get("refusal") or ""
        if not isinstance(refusal, str):
            raise bad(provider, "choices[0].message.refusal is not a string")
        calls: list[ToolCallRequest] = []
        for i, raw in enumerate(_list(message.get("tool_calls"), provider, "message.tool_calls")):
            fn = need(raw, "function", dict, provider, f"tool_calls[{i}]")
            calls.append(tool_call(fn.get("name"), fn.get("arguments"), raw.get("id"), provider))
        reasoning = _reasoning(message)
        usage = data.get("usage") if isinstance(data, dict) else None
        reply_usage = _usage(usage, reasoning) if isinstance(usage, dict) else UNREPORTED
        finish = _finish(choices[0].get("finish_reason"), refusal)
        return finish_reply(
            text,
            calls,
            reply_usage,
            text_tools,
            finish,
            refusal=refusal,
            thinking=_thinking(reasoning),
        )

    def stream_parser(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        *,
        max_reply_chars: int = MAX_REPLY_CHARS,
    ) -> _OpenAIStream:
        return _OpenAIStream(provider, on_text, text_tools, max_reply_chars)


class _OpenAIStream(StreamState):
    def __init__(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        max_chars: int,
    ) -> None:
        super().__init__(provider, on_text, text_tools, max_chars)
        self.calls: dict[int, PartialCall] = {}  # by index
        self.usage: Usage | None = None  # (sent in the last chunk before [DONE])
        self.reported: dict[str, Any] = {}  # the usage as sent, read again at the end
        self.reason: object = None  # the choice's finish_reason, once sent
        self.refusal: list[str] = []
        self.reasoning: list[str] = []  # sent apart from the answer: never text

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # comments, event names, keep-alives, blank separators
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        chunk = self.json_object(payload, "a stream chunk")
        error = chunk.get("error")
        if error:
            # How OpenAI ends a stream that fails mid-answer (openai-python
            # raises on it): its reason quoted, as Anthropic's error event is.
            raise stream_error(self.provider, error)  # (or ContextTooLong)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
            self.reported = usage
        for choice in _list(chunk.get("choices"), self.provider, "chunk.choices"):
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta)
            finish = choice.get("finish_reason")
            if finish is not None:
                self.reason = finish

    def _delta(self, delta: dict[str, object]) -> None:
        piece = delta.get("content")
        if isinstance(piece, str):
            self.emit(piece)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self.grow(len(refusal))
            self.refusal.append(refusal)
        thought = _reasoning(delta)
        if thought:  # (no TextDelta: it is not the answer)
            self.grow(len(thought))
            self.reasoning.append(thought)
        for raw in _list(delta.get("tool_calls"), self.provider, "delta.tool_calls"):
            if not isinstance(raw, dict):
                raise bad(self.provider, "a tool-call delta is not a JSON object")
            index = count(raw.get("index"))
            call = self.calls.get(index)
            if call is None:
                self.grow(CALL_CHARS)
                call = self.calls[index] = PartialCall()
            call_id = raw.get("id")
            if isinstance(call_id, str):
                self.grow(len(call_id))
                call.id = call_id
            fn = raw.get("function")
            if isinstance(fn, dict):
                name, arguments = fn.get("name"), fn.get("arguments")
                if isinstance(name, str):
                    self.grow(len(name))
                    call.name.append(name)
                if isinstance(arguments, str):
                    self.grow(len(arguments))
                    call.arguments.append(arguments)

    def finish(self) -> ModelReply:
        calls = [call.request(self.provider) for _, call in sorted(self.calls.items())]
        refusal = "".join(self.refusal)
        finish = _finish(self.reason, refusal)
        reasoning = "".join(self.reasoning)
        usage = self.usage or UNREPORTED
        if reasoning and self.usage is not None and not self.usage.reasoning_tokens:
            usage = _usage(self.reported, reasoning)
        return self.reply(
            calls, usage, "[DONE]", finish, refusal=refusal, thinking=_thinking(reasoning)
        )

    def partial(self) -> tuple[int | None, int | None, str] | None:
        if not self.began:
            return None
        calls = "".join(call.text() for call in self.calls.values())
        received = self.received("".join(self.reasoning) + calls)
        if self.usage is None:
            return None, None, received
        return self.usage.input_tokens, self.usage.output_tokens, received
