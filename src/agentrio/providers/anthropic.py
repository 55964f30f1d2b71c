"""The Anthropic messages wire format."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import msgspec

from ..messages import (
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
from ._anthropic_blocks import (
    READ,
    PartialBlock,
    kept_blocks,
    sent_blocks,
    server_tool_definitions,
    streamed_blocks,
    tool_result_content,
)
from .base import OUTPUT_TOOL, OutputSchema, ToolSchema
from .bounded import MAX_REPLY_CHARS
from .overflow import stream_error
from .wire import (
    ANTHROPIC_VERSION,
    CALL_CHARS,
    PartialCall,
    PartRules,
    StreamState,
    TextSink,
    bad,
    base64_text,
    check_settings,
    count,
    finish_reply,
    need,
    tool_call,
    tool_choice,
    usage_of,
    user_parts,
)

__all__ = ["API_VERSION", "MAX_CACHE_MARKS", "PARTS", "AnthropicWire"]

API_VERSION = ANTHROPIC_VERSION  # the default anthropic-version header
_SETTINGS = frozenset(
    (
        "temperature",
        "top_p",
        "stop",
        "tool_choice",
        "parallel_tool_calls",
        "cache",
        "cache_control",
        "extra_headers",
        "extra_body",
        "server_tools",
    )
)
_RESERVED = frozenset(("model", "messages", "system", "tools", "stream", "max_tokens"))
# stop_reason values other than these (end_turn, tool_use, stop_sequence) read as "stop".
_FINISH: dict[object, FinishReason] = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
}
_CHOICES = {"auto": "auto", "none": "none", "required": "any"}
_INPUT_COUNTS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
MAX_CACHE_MARKS = 4  # the API refuses a request with more cache_control blocks
# The marker of each ModelSettings.cache TTL (None, the default, is "5m").
_CACHE_MARKS: dict[str | None, dict[str, object]] = {
    None: {"type": "ephemeral"},
    "5m": {"type": "ephemeral"},
    "1h": {"type": "ephemeral", "ttl": "1h"},
}
_UNMARKABLE = ("thinking", "redacted_thinking")  # (the API refuses cache_control there)
# image blocks (base64 or URL sources) up to the API's 5 MB an image; document
# blocks for PDFs (base64 or URL) and text files (a text source).
PARTS = PartRules(
    "anthropic",
    ("image/png", "image/jpeg", "image/gif", "image/webp"),
    5 * 1024 * 1024,
    True,
    ("application/pdf", "text/plain"),
    ("application/pdf",),
)


def _source(part: ImagePart | DocumentPart) -> dict[str, object]:
    if part.data is None:
        return {"type": "url", "url": part.url}
    if part.media_type == "text/plain":
        return {"type": "text", "media_type": "text/plain", "data": part.data.decode("utf-8")}
    return {"type": "base64", "media_type": part.media_type, "data": base64_text(part.data)}


def _part(part: ContentPart) -> dict[str, object]:
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _source(part)}
    if isinstance(part, DocumentPart):
        block: dict[str, object] = {"type": "document", "source": _source(part)}
        if part.name:
            block["title"] = part.name
        return block
    return {"type": "text", "text": part.text}


def _thinking(block: ThinkingBlock) -> dict[str, object]:
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}


def _blocks(msg: ChatMessage) -> list[dict[str, object]]:
    if msg.role == "tool":
        result: dict[str, object] = {
            "type": "tool_result",
            "tool_use_id": msg.tool_call_id or "",
            "content": tool_result_content(msg, PARTS, _part),
        }
        if msg.is_error:
            result["is_error"] = True
        return [result]
    # Thinking comes first, as it came: with tools, the API wants the last
    # assistant turn's thinking back, signatures and all. A block with an id is
    # an OpenAI reasoning item, and one without a signature another API's
    # reasoning (an OpenAI-compatible server's, in a history that escalated
    # here): this API would refuse both, so they are left out.
    blocks = (
        [_thinking(b) for b in msg.thinking if not b.id and (b.signature or b.redacted)]
        if msg.thinking
        else []
    )
    if msg.blocks:  # (server-tool blocks and cited text, sent back as they came)
        blocks.extend(sent_blocks(msg))
    elif msg.parts:  # (the text is in its parts, in its place among them)
        blocks.extend(_part(p) for p in user_parts(PARTS, msg) if not _empty(p))
    elif msg.content:
        blocks.append({"type": "text", "text": msg.content})
    for c in msg.tool_calls:
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return blocks


def _empty(part: ContentPart) -> bool:
    # (the API refuses an empty text block)
    return isinstance(part, TextPart) and not part.text


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


def _holds_tool_blocks(turns: list[dict[str, Any]]) -> bool:
    return any(
        block["type"] in ("tool_use", "tool_result") for turn in turns for block in turn["content"]
    )


def _tool_blocks_as_text(turns: list[dict[str, Any]]) -> None:
    """Turn *turns*' ``tool_use`` and ``tool_result`` blocks into text blocks, in place.

    The API refuses those blocks in a call that offers no tools ("Requests
    which include tool_use or tool_result blocks must define tools"): a
    final-answer call, a phase run with no tools after one that used some,
    a summary. The model still reads what was called and what came back.
    """
    names: dict[object, object] = {}  # tool_use id -> tool name
    for turn in turns:
        content = turn["content"]
        for i, block in enumerate(content):
            if block["type"] == "tool_use":
                names[block["id"]] = block["name"]
                arguments = msgspec.json.encode(block["input"]).decode()
                text = f"[tool call {block['name']}: {arguments}]"
            elif block["type"] == "tool_result":
                what = "tool error" if block.get("is_error") else "tool result"
                name = names.get(block["tool_use_id"], "?")
                text = f"[{what} {name}]: {block['content']}"
            else:
                continue
            content[i] = {"type": "text", "text": text}


def _usage(usage: dict[str, Any], output: object = None) -> Usage:
    """``usage``: its ``input_tokens`` leave out the cache reads and writes, which
    Usage.input_tokens counts (with them apart as details); ``cache_creation``
    splits the writes by TTL, ``output_tokens_details`` gives the thinking."""
    read = count(usage.get("cache_read_input_tokens"))
    by_ttl = usage.get("cache_creation")
    by_ttl = by_ttl if isinstance(by_ttl, dict) else {}
    wrote_1h = count(by_ttl.get("ephemeral_1h_input_tokens"))
    wrote = count(usage.get("cache_creation_input_tokens")) or (
        count(by_ttl.get("ephemeral_5m_input_tokens")) + wrote_1h
    )
    details = usage.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, dict) else 0
    total = count(usage.get("input_tokens")) + read + wrote
    out = usage.get("output_tokens") if output is None else output
    return usage_of(total, out, read, wrote, thinking, wrote_1h)


def _cache_mark(settings: ModelSettings | None) -> dict[str, object] | None:
    """The marker of the call's cache breakpoints (None: ``cache="off"``)."""
    if settings is None:
        return _CACHE_MARKS[None]
    if settings.cache == "off":
        return None
    return settings.cache_control or _CACHE_MARKS[settings.cache]


def _mark_cache(
    body: dict[str, object],
    tools: list[dict[str, object]],
    turns: list[dict[str, Any]],
    mark: dict[str, object],
) -> None:
    """Put the cache breakpoints: the last tool and the system prompt (a prefix
    every call of the agent shares), then the rolling pair (see ``_rolling``).

    Never more than ``MAX_CACHE_MARKS``: two fixed, two rolling.
    """
    marks = 0
    if tools:
        tools[-1] = {**tools[-1], "cache_control": dict(mark)}
        marks += 1
    system = body.get("system")
    if isinstance(system, str):
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(mark)}]
        marks += 1
    for block in _rolling(turns)[: MAX_CACHE_MARKS - marks]:
        block["cache_control"] = dict(mark)


def _rolling(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks that end the last turn and the latest user turn before it.

    The first is written to the cache by this call and read by the next; the
    second is where the previous call put its first, so this call reads what
    that one wrote however many blocks were added since (the API looks back
    only 20 blocks from a breakpoint).
    """
    if not turns:
        return []
    ends = [_last_markable(turns[-1])]
    earlier = next((t for t in reversed(turns[:-1]) if t["role"] == "user"), None)
    if earlier is not None:
        ends.append(_last_markable(earlier))
    return [block for block in ends if block is not None]


def _last_markable(turn: dict[str, Any]) -> dict[str, Any] | None:
    for block in reversed(turn["content"]):
        if block["type"] not in _UNMARKABLE and block.get("text") != "":
            return block  # type: ignore[no-any-return]
    return None


def _apply(
    body: dict[str, object], settings: ModelSettings, tools: list[dict[str, object]]
) -> None:
    check_settings(settings, "anthropic", _SETTINGS, _RESERVED)
    if settings.server_tools:
        tools.extend(server_tool_definitions(settings.server_tools, tools))
    for name in ("temperature", "top_p"):
        value = getattr(settings, name)
        if value is not None:
            body[name] = value
    if settings.stop is not None:
        body["stop_sequences"] = list(settings.stop)
    if tools:
        choice = _tool_choice(settings, tools)
        if choice is not None:
            body["tool_choice"] = choice
    if settings.extra_body:
        body.update(settings.extra_body)


def _tool_choice(
    settings: ModelSettings, tools: list[dict[str, object]]
) -> dict[str, object] | None:
    """``tool_choice`` for *settings* (``required`` is ``any``; a name is ``tool``)."""
    choice: dict[str, object] | None = None
    if settings.tool_choice is not None:
        offered = [ToolSchema(str(t["name"]), "", {}) for t in tools]
        name = tool_choice(settings.tool_choice, offered)
        kind = _CHOICES.get(name)
        choice = {"type": kind} if kind is not None else {"type": "tool", "name": name}
    if settings.parallel_tool_calls is False:
        if choice is None:
            choice = {"type": "auto"}
        if choice["type"] != "none":  # (the API allows the flag on the others only)
            choice["disable_parallel_tool_use"] = True
    return choice


def _thinking_block(block: dict[str, Any]) -> ThinkingBlock:
    if block.get("type") == "redacted_thinking":
        return ThinkingBlock(redacted=str(block.get("data", "")))
    return ThinkingBlock(str(block.get("thinking", "")), str(block.get("signature", "")))


def _output_tool(
    body: dict[str, object],
    definitions: list[dict[str, object]],
    output: OutputSchema,
    settings: ModelSettings | None,
) -> None:
    """No structured outputs: the answer is the input of a tool the model must call.

    Alone, the output tool is forced by name; beside other tools, ``any``
    forces a call of one of them (the answer, or a tool the answer needs).
    A ``tool_choice`` of the settings is sent instead (an answer given as
    text is read all the same).
    """
    definitions.append(
        {
            "name": OUTPUT_TOOL,
            "description": f"Give your final answer ({output.name}) as this tool's input.",
            "input_schema": output.object_schema,
        }
    )
    if settings is not None and settings.tool_choice is not None:
        body["tool_choice"] = _tool_choice(settings, definitions)
        return
    only = len(definitions) == 1
    forced: dict[str, object] = {"type": "tool", "name": OUTPUT_TOOL} if only else {"type": "any"}
    if settings is not None and settings.parallel_tool_calls is False:
        forced["disable_parallel_tool_use"] = True
    body["tool_choice"] = forced


class AnthropicWire:
    """``POST {base_url}/messages``; streams as SSE events ending in ``message_stop``.

    Args:
        version: the ``anthropic-version`` header.
    """

    path = "/messages"
    stream_format = "sse"
    parts = PARTS
    # The API refuses tool_use and tool_result blocks in a call without tools.
    needs_tools_for_tool_turns = True

    def __init__(self, version: str = API_VERSION) -> None:
        self.version = version

    def headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def check_settings(self, settings: ModelSettings) -> None:
        check_settings(settings, "anthropic", _SETTINGS, _RESERVED)

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
        system, turns = _messages(messages)
        body: dict[str, object] = {
            "model": model,
            "max_tokens": max_output_tokens,
            "messages": turns,
            "stream": stream,
        }
        if system:
            body["system"] = system
        definitions: list[dict[str, object]] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in tools
        ]
        if settings is not None:
            _apply(body, settings, definitions)
        if output is not None:
            _output_tool(body, definitions, output, settings)
        if not definitions and _holds_tool_blocks(turns):
            # (No tool schemas to offer with tool_choice "none", as an agent
            # does when it has them: see ProviderModel.needs_tools_for_tool_turns.)
            _tool_blocks_as_text(turns)
        mark = _cache_mark(settings)
        if mark is not None:  # (last: on the blocks as they go out)
            _mark_cache(body, definitions, turns, mark)
        if definitions:
            body["tools"] = definitions
        return body

    def parse(self, data: object, provider: str, text_tools: Collection[str] | None) -> ModelReply:
        content = need(data, "content", list, provider, "body")
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        thinking: list[ThinkingBlock] = []
        others: list[tuple[int, dict[str, Any]]] = []  # (see kept_blocks)
        for i, block in enumerate(content):
            kind = need(block, "type", str, provider, f"content[{i}]")
            if kind not in READ:
                others.append((i, block))
            if kind == "text":
                text.append(str(block.get("text", "")))
            elif kind == "tool_use":
                calls.append(
                    tool_call(block.get("name"), block.get("input"), block.get("id"), provider)
                )
            elif kind in ("thinking", "redacted_thinking"):
                thinking.append(_thinking_block(block))
        assert isinstance(data, dict)
        usage = data.get("usage")
        reply_usage = _usage(usage) if isinstance(usage, dict) else Usage()
        finish = _FINISH.get(data.get("stop_reason"), "stop")
        blocks = kept_blocks(others, provider) if others else ()
        return finish_reply(
            "".join(text),
            calls,
            reply_usage,
            text_tools,
            finish,
            thinking=tuple(thinking),
            blocks=blocks,
        )

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
        self.thinking: dict[int, _PartialThinking] = {}  # by block index
        self.kept: dict[int, PartialBlock] = {}  # the other blocks, by index (kept_blocks)
        self.special = False  # one of them is more than plain text: keep them
        # None until reported: input in message_start, output in message_delta.
        self.usage: dict[str, Any] | None = None
        self.output_tokens: int | None = None
        self.output_details: object = None  # (thinking tokens, in message_delta)
        self.stop_reason: object = None

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # "event:" lines repeat the type that the data carries
        event = self.json_object(line[5:], "a stream event")
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self.usage = usage
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict):
                self._start(count(event.get("index")), block)
        elif kind == "content_block_delta":
            self._delta(count(event.get("index")), event.get("delta"))
        elif kind == "message_delta":
            self._message_delta(event)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise stream_error(self.provider, event.get("error"))  # (or ContextTooLong)

    def _start(self, index: int, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "tool_use":
            call = PartialCall(str(block.get("id", "")), str(block.get("name", "")))
            self.grow(CALL_CHARS + len(call.id) + len(call.name[0]))
            self.calls[index] = call
        elif kind in ("thinking", "redacted_thinking"):
            first = _thinking_block(block)
            self.grow(len(first.thinking) + len(first.signature) + len(first.redacted))
            self.thinking[index] = _PartialThinking(first)
        elif isinstance(kind, str):
            self.grow(len(msgspec.json.encode(block)))
            self.kept[index] = PartialBlock(block)
            self.special = self.special or kind != "text" or bool(block.get("citations"))

    def _delta(self, index: int, delta: object) -> None:
        if not isinstance(delta, dict):
            raise bad(self.provider, "a content_block_delta has no delta object")
        kind = delta.get("type")
        if kind == "text_delta":
            piece = str(delta.get("text", ""))
            self.emit(piece)
            if index in self.kept:
                self.kept[index].text.append(piece)
        elif kind == "input_json_delta" and index in self.calls:
            fragment = str(delta.get("partial_json", ""))
            self.grow(len(fragment))
            self.calls[index].arguments.append(fragment)
        elif kind == "input_json_delta" and index in self.kept:
            fragment = str(delta.get("partial_json", ""))
            self.grow(len(fragment))
            self.kept[index].input.append(fragment)
        elif kind == "citations_delta" and index in self.kept:
            citation = delta.get("citation")
            if not isinstance(citation, dict):
                raise bad(self.provider, "a citations_delta has no citation object")
            self.grow(len(msgspec.json.encode(citation)))
            self.kept[index].citations.append(citation)
            self.special = True
        elif kind in ("thinking_delta", "signature_delta") and index in self.thinking:
            key = "thinking" if kind == "thinking_delta" else "signature"
            fragment = str(delta.get(key, ""))
            self.grow(len(fragment))
            self.thinking[index].add(key, fragment)

    def _message_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason") is not None:
            self.stop_reason = delta["stop_reason"]
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.output_tokens = count(usage.get("output_tokens"))
            if "output_tokens_details" in usage:
                self.output_details = usage["output_tokens_details"]
            # The counts here are cumulative, the input's too when sent: the
            # larger of each (a server that sends 0 here does not unsay the start).
            if any(k in usage for k in _INPUT_COUNTS):
                known = self.usage or {}
                merged: dict[str, Any] = {
                    k: max(count(known.get(k)), count(usage.get(k))) for k in _INPUT_COUNTS
                }
                merged["cache_creation"] = usage.get("cache_creation", known.get("cache_creation"))
                self.usage = merged

    def _input_tokens(self) -> int | None:
        return None if self.usage is None else _usage(self.usage, 0).input_tokens

    def finish(self) -> ModelReply:
        # (a call streamed without arguments has "": the guard reads it as {})
        calls = [call.request(self.provider) for _, call in sorted(self.calls.items())]
        reported = {**(self.usage or {}), "output_tokens_details": self.output_details}
        usage = _usage(reported, self.output_tokens or 0)
        thinking = tuple(part.block() for _, part in sorted(self.thinking.items()))
        finish = _FINISH.get(self.stop_reason, "stop")
        blocks = streamed_blocks(self.kept, self.provider) if self.special else ()
        return self.reply(calls, usage, "message_stop", finish, thinking=thinking, blocks=blocks)

    def partial(self) -> tuple[int | None, int | None, str] | None:
        if not self.began:
            return None
        calls = "".join(call.text() for call in self.calls.values())
        return self._input_tokens(), self.output_tokens, self.received(calls)


class _PartialThinking:
    """A thinking block as a stream brings it: its text, then its signature."""

    __slots__ = ("redacted", "signature", "thinking")

    def __init__(self, first: ThinkingBlock) -> None:
        self.thinking = [first.thinking]
        self.signature = [first.signature]
        self.redacted = first.redacted

    def add(self, key: str, fragment: str) -> None:
        (self.thinking if key == "thinking" else self.signature).append(fragment)

    def block(self) -> ThinkingBlock:
        return ThinkingBlock("".join(self.thinking), "".join(self.signature), self.redacted)
