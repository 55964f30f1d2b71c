"""The Anthropic messages wire format."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..messages import ChatMessage, ModelReply, ToolCallRequest, Usage
from ..tools.tool import ToolSchema
from .bounded import MAX_REPLY_CHARS
from .wire import (
    CALL_CHARS,
    QUOTED,
    PartialCall,
    StreamState,
    TextSink,
    bad,
    count,
    finish_reply,
    need,
    tool_call,
)

__all__ = ["AnthropicWire"]

API_VERSION = "2023-06-01"


def _blocks(msg: ChatMessage) -> list[dict[str, object]]:
    if msg.role == "tool":
        return [
            {"type": "tool_result", "tool_use_id": msg.tool_call_id or "", "content": msg.content}
        ]
    blocks: list[dict[str, object]] = []
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    for c in msg.tool_calls:
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return blocks


def _messages(messages: Sequence[ChatMessage]) -> tuple[str, list[dict[str, object]]]:
    """The system prompt, and the turns with roles alternating as the API requires."""
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    turns: list[dict[str, object]] = []
    for msg in messages:
        if msg.role == "system":
            continue
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = _blocks(msg)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]["content"]
            assert isinstance(previous, list)
            previous.extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


class AnthropicWire:
    """``POST {base_url}/messages``; streams as SSE events ending in ``message_stop``."""

    path = "/messages"
    stream_format = "sse"

    def headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSchema],
        max_output_tokens: int,
        stream: bool,
    ) -> dict[str, object]:
        system, turns = _messages(messages)
        body: dict[str, object] = {
            "model": model,
            "max_tokens": max_output_tokens,
            "messages": turns,
            "stream": stream,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        return body

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        content = need(data, "content", list, provider, "body")
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        for i, block in enumerate(content):
            kind = need(block, "type", str, provider, f"content[{i}]")
            if kind == "text":
                text.append(str(block.get("text", "")))
            elif kind == "tool_use":
                calls.append(
                    tool_call(block.get("name"), block.get("input"), block.get("id"), provider)
                )
        usage = data.get("usage") if isinstance(data, dict) else None
        u = usage if isinstance(usage, dict) else {}
        reply_usage = Usage(count(u.get("input_tokens")), count(u.get("output_tokens")))
        return finish_reply("".join(text), calls, reply_usage, text_tools)

    def stream_parser(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        *,
        max_reply_chars: int = MAX_REPLY_CHARS,
    ) -> _AnthropicStream:
        return _AnthropicStream(provider, on_text, text_tools, max_reply_chars)


class _AnthropicStream(StreamState):
    def __init__(
        self,
        provider: str,
        on_text: TextSink | None,
        text_tools: Collection[str] | None,
        max_chars: int,
    ) -> None:
        super().__init__(provider, on_text, text_tools, max_chars)
        self.calls: dict[int, PartialCall] = {}  # by block index
        # None until reported: input in message_start, output in message_delta.
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # "event:" lines repeat the type that the data carries
        event = self.json_object(line[5:], "a stream event")
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self.input_tokens = count(usage.get("input_tokens"))
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                call = PartialCall(str(block.get("id", "")), str(block.get("name", "")))
                self.grow(CALL_CHARS + len(call.id) + len(call.name[0]))
                self.calls[count(event.get("index"))] = call
        elif kind == "content_block_delta":
            self._delta(count(event.get("index")), event.get("delta"))
        elif kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.output_tokens = count(usage.get("output_tokens"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = repr(event.get("error"))[:QUOTED]
            raise bad(self.provider, f"the stream reported an error: {error}")

    def _delta(self, index: int, delta: object) -> None:
        if not isinstance(delta, dict):
            raise bad(self.provider, "a content_block_delta has no delta object")
        if delta.get("type") == "text_delta":
            self.emit(str(delta.get("text", "")))
        elif delta.get("type") == "input_json_delta" and index in self.calls:
            fragment = str(delta.get("partial_json", ""))
            self.grow(len(fragment))
            self.calls[index].arguments.append(fragment)

    def finish(self) -> ModelReply:
        # (a call streamed without arguments has "": the guard reads it as {})
        calls = [call.request(self.provider) for _, call in sorted(self.calls.items())]
        usage = Usage(self.input_tokens or 0, self.output_tokens or 0)
        return self.reply(calls, usage, "message_stop")

    def partial(self) -> tuple[int | None, int | None, str] | None:
        if not self.began:
            return None
        calls = "".join(call.text() for call in self.calls.values())
        return self.input_tokens, self.output_tokens, self.received(calls)
