"""The OpenAI chat-completions wire format (OpenAI, vLLM, LM Studio, Ollama's /v1)."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from ..messages import ChatMessage, ModelReply, ToolCallRequest, Usage
from ..tools.tool import ToolSchema
from .bounded import MAX_REPLY_CHARS
from .wire import (
    CALL_CHARS,
    PartialCall,
    StreamState,
    TextSink,
    bad,
    bearer,
    count,
    finish_reply,
    function_tools,
    need,
    tool_call,
)

__all__ = ["OpenAIWire"]


def _message(msg: ChatMessage) -> dict[str, object]:
    out: dict[str, object] = {"role": msg.role, "content": msg.content}
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
    if msg.role == "tool":
        out["tool_call_id"] = msg.tool_call_id or ""
    return out


def _list(value: object, provider: str, where: str) -> list[Any]:
    """*value* if it is a list, [] if it is missing or empty, else a BadResponse."""
    if not value:
        return []
    if not isinstance(value, list):
        raise bad(provider, f"{where} is not a list")
    return value


class OpenAIWire:
    """``POST {base_url}/chat/completions``; streams as SSE ending in ``[DONE]``."""

    path = "/chat/completions"
    stream_format = "sse"

    def headers(self, api_key: str | None) -> dict[str, str]:
        return bearer(api_key)

    def body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        max_output_tokens: int,
        stream: bool,
    ) -> dict[str, object]:
        body: dict[str, object] = {
            "model": model,
            "messages": [_message(m) for m in messages],
            "max_tokens": max_output_tokens,
            "stream": stream,
        }
        if tools:
            body["tools"] = function_tools(tools)
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        choices = need(data, "choices", list, provider, "body")
        if not choices:
            raise bad(provider, "body.choices is empty")
        message = need(choices[0], "message", dict, provider, "choices[0]")
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise bad(provider, "choices[0].message.content is not a string")
        calls: list[ToolCallRequest] = []
        for i, raw in enumerate(_list(message.get("tool_calls"), provider, "message.tool_calls")):
            fn = need(raw, "function", dict, provider, f"tool_calls[{i}]")
            calls.append(tool_call(fn.get("name"), fn.get("arguments"), raw.get("id"), provider))
        usage = data.get("usage") if isinstance(data, dict) else None
        u = usage if isinstance(usage, dict) else {}
        reply_usage = Usage(count(u.get("prompt_tokens")), count(u.get("completion_tokens")))
        return finish_reply(text, calls, reply_usage, text_tools)

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

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # comments, event names, keep-alives, blank separators
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        chunk = self.json_object(payload, "a stream chunk")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(
                count(usage.get("prompt_tokens")), count(usage.get("completion_tokens"))
            )
        for choice in _list(chunk.get("choices"), self.provider, "chunk.choices"):
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                self._delta(delta)

    def _delta(self, delta: dict[str, object]) -> None:
        piece = delta.get("content")
        if isinstance(piece, str):
            self.emit(piece)
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
        return self.reply(calls, self.usage or Usage(), "[DONE]")

    def partial(self) -> tuple[int | None, int | None, str] | None:
        if not self.began:
            return None
        received = self.received("".join(call.text() for call in self.calls.values()))
        if self.usage is None:
            return None, None, received
        return self.usage.input_tokens, self.usage.output_tokens, received
