"""The Ollama native chat wire format (``/api/chat``, NDJSON streaming)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from ..messages import (
    MAX_PART_BYTES,
    ChatMessage,
    ContentPart,
    FinishReason,
    ImagePart,
    ModelReply,
    ModelSettings,
    ToolCallRequest,
    Usage,
)
from .base import OutputSchema, ToolSchema
from .bounded import MAX_REPLY_CHARS
from .overflow import stream_error
from .wire import (
    CALL_CHARS,
    PartRules,
    StreamState,
    TextSink,
    bad,
    base64_text,
    bearer,
    check_settings,
    count,
    finish_reply,
    function_tools,
    need,
    tool_call,
    tool_parts_after,
    user_parts,
)

__all__ = ["PARTS", "OllamaWire"]

_SETTINGS = frozenset(
    ("temperature", "top_p", "stop", "seed", "options", "keep_alive", "extra_headers", "extra_body")
)
_RESERVED = frozenset(("model", "messages", "tools", "stream", "options"))
# A message's "images": base64 data, PNG or JPEG, no URLs; no documents. (The
# images go with the message's text, not among it: their order is lost.)
PARTS = PartRules("ollama", ("image/png", "image/jpeg"), MAX_PART_BYTES, False, (), ())


def _message(msg: ChatMessage) -> dict[str, object]:
    out: dict[str, object] = {"role": msg.role, "content": msg.content}
    if msg.parts and msg.role != "tool":  # (a tool's images: see _tool_parts_message)
        out["images"] = [
            base64_text(p.data)
            for p in user_parts(PARTS, msg)
            if isinstance(p, ImagePart) and p.data is not None
        ]
    if msg.tool_calls:
        out["tool_calls"] = [
            {"function": {"name": c.name, "arguments": c.arguments}} for c in msg.tool_calls
        ]
    if msg.role == "tool" and msg.name:
        out["tool_name"] = msg.name
    return out


def _tool_parts_message(line: str, parts: tuple[ContentPart, ...]) -> dict[str, object]:
    # (the images a tool returned go after its message, as a user's: see tool_parts_after)
    images = [base64_text(p.data) for p in parts if isinstance(p, ImagePart) and p.data]
    return {"role": "user", "content": line, "images": images}


def _calls(message: dict[str, object], provider: str) -> list[ToolCallRequest]:
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise bad(provider, "message.tool_calls is not a list")
    calls = []
    for i, raw in enumerate(raw_calls):
        fn = need(raw, "function", dict, provider, f"message.tool_calls[{i}]")
        calls.append(tool_call(fn.get("name"), fn.get("arguments"), f"call_{i + 1}", provider))
    return calls


def _usage(data: dict[str, object]) -> Usage:
    return Usage(count(data.get("prompt_eval_count")), count(data.get("eval_count")))


def _finish(data: dict[str, object]) -> FinishReason:
    # done_reason: "stop", "length", or "load"/"unload" (no answer to cut).
    return "length" if data.get("done_reason") == "length" else "stop"


def _apply(body: dict[str, object], settings: ModelSettings) -> None:
    check_settings(settings, "ollama", _SETTINGS, _RESERVED)
    options = body["options"]
    assert isinstance(options, dict)
    if settings.options:
        # (num_predict is refused in them: it stays the call's output limit)
        body["options"] = options = {**settings.options, **options}
    for name in ("temperature", "top_p", "seed"):
        value = getattr(settings, name)
        if value is not None:
            options[name] = value
    if settings.stop is not None:
        options["stop"] = list(settings.stop)
    if settings.keep_alive is not None:
        body["keep_alive"] = settings.keep_alive
    if settings.extra_body:
        body.update(settings.extra_body)


class OllamaWire:
    """``POST {base_url}/api/chat``; streams NDJSON ending with ``"done": true``."""

    path = "/api/chat"
    stream_format = "ndjson"
    parts = PARTS

    def headers(self, api_key: str | None) -> dict[str, str]:
        return bearer(api_key)

    def check_settings(self, settings: ModelSettings) -> None:
        check_settings(settings, "ollama", _SETTINGS, _RESERVED)

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
                messages, [_message(m) for m in messages], PARTS, _tool_parts_message
            ),
            "stream": stream,  # Ollama streams unless told not to
            "options": {"num_predict": max_output_tokens},
        }
        if tools:
            body["tools"] = function_tools(tools)
        if settings is not None:
            _apply(body, settings)
        if output is not None:
            body["format"] = output.object_schema  # (structured outputs: a JSON schema)
        return body

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        message = need(data, "message", dict, provider, "body")
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise bad(provider, "message.content is not a string")
        assert isinstance(data, dict)
        calls = _calls(message, provider)
        return finish_reply(text, calls, _usage(data), text_tools, _finish(data))

    def stream_parser(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        *,
        max_reply_chars: int = MAX_REPLY_CHARS,
    ) -> _OllamaStream:
        return _OllamaStream(provider, on_text, text_tools, max_reply_chars)


class _OllamaStream(StreamState):
    def __init__(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        max_chars: int,
    ) -> None:
        super().__init__(provider, on_text, text_tools, max_chars)
        self.calls: list[ToolCallRequest] = []
        self.usage = Usage()
        self.finished: FinishReason = "stop"

    def feed(self, line: str) -> None:
        if not line.strip():
            return
        chunk = self.json_object(line, "a stream line")
        if "error" in chunk:
            raise stream_error(self.provider, chunk["error"])  # (or ContextTooLong)
        message = chunk.get("message")
        if isinstance(message, dict):
            piece = message.get("content")
            if isinstance(piece, str):
                self.emit(piece)
            calls = _calls(message, self.provider)
            if calls:
                # Ollama sends each call whole: its line is the measure of its size.
                self.grow(len(line) + CALL_CHARS * len(calls))
                self.calls.extend(calls)
        if chunk.get("done") is True:
            self.done = True
            self.usage = _usage(chunk)
            self.finished = _finish(chunk)

    def finish(self) -> ModelReply:
        # Calls may arrive over several lines, each numbered from 1: renumber.
        numbered = [
            ToolCallRequest(c.name, c.arguments, id=f"call_{i + 1}", error=c.error)
            for i, c in enumerate(self.calls)
        ]
        return self.reply(numbered, self.usage, '"done": true', self.finished)

    def partial(self) -> tuple[int | None, int | None, str] | None:
        # (The usage comes with the last line: a stream cut short never has it.)
        if not self.began:
            return None
        calls = "".join(c.name + msgspec.json.encode(c.arguments).decode() for c in self.calls)
        return None, None, self.received(calls)
