"""The Anthropic messages wire: request bodies, answers and SSE streams, against the
fake server over real sockets, and the parsers fuzzed with any JSON."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest
import wirefuzz
from hypothesis import given
from hypothesis import strategies as st
from wirefuzz import FUZZ, damaged, damaged_at_random, json_values

from agentrio import (
    ChatMessage,
    InvalidArgument,
    ModelReply,
    ModelSettings,
    Provider,
    ProviderConfig,
    ToolCallRequest,
    Usage,
)
from agentrio.errors import BadResponse
from agentrio.providers.anthropic import API_VERSION, AnthropicWire
from agentrio.providers.bounded import TooLarge
from agentrio.testing import FakeLLMServer, Reply, open_fake_llm
from agentrio.types import OutputSchema, RawBlock, ThinkingBlock, ToolSchema

WIRE = AnthropicWire()
# (for the tests of other shapes: the cache breakpoints have tests of their own)
NO_CACHE = ModelSettings(cache="off")
LOOKUP = ToolSchema(
    "lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}}
)
CONVERSATION = [
    ChatMessage("system", "be brief"),
    ChatMessage("user", "what is a?"),
    ChatMessage("assistant", "", tool_calls=(ToolCallRequest("lookup", {"key": "a"}, id="c1"),)),
    ChatMessage("tool", "a is 1", tool_call_id="c1", name="lookup"),
    ChatMessage("user", "and?"),
]
REPLY = ModelReply(
    text="The answer is one, as the lookup said.",
    tool_calls=(
        ToolCallRequest("lookup", {"key": "b", "depth": 2}, id="toolu_1"),
        ToolCallRequest("lookup", {"key": "c"}, id="toolu_2"),
    ),
    usage=Usage(31, 17),
)


@asynccontextmanager
async def provider(server: FakeLLMServer, **options: Any) -> AsyncIterator[Provider]:
    config = ProviderConfig(
        name="an", kind="anthropic", base_url=server.base_url + "/v1", max_retries=0, **options
    )
    async with Provider(config) as p:
        yield p


# -- the request ---------------------------------------------------------------------------


def test_body() -> None:
    messages = [
        ChatMessage("system", "be brief"),
        ChatMessage("system", "and kind"),
        *CONVERSATION[1:],
        ChatMessage("assistant", ""),  # nothing to send: left out
        ChatMessage("user", "last"),
    ]
    body = WIRE.body("claude-x", messages, [LOOKUP], 256, False, NO_CACHE)
    assert (body["model"], body["max_tokens"], body["stream"]) == ("claude-x", 256, False)
    assert body["system"] == "be brief\n\nand kind"
    # Roles alternate: the tool result and the next user turns share one user turn.
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what is a?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "lookup", "input": {"key": "a"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "a is 1"},
                {"type": "text", "text": "and?"},
                {"type": "text", "text": "last"},
            ],
        },
    ]
    assert body["tools"] == [
        {"name": "lookup", "description": "Look a key up.", "input_schema": LOOKUP.parameters}
    ]


def test_body_without_system_or_tools() -> None:
    body = WIRE.body("m", [ChatMessage("user", "hi")], [], 8, True)
    assert "system" not in body and "tools" not in body and body["stream"] is True


def test_headers() -> None:
    assert WIRE.headers("k-123") == {"anthropic-version": API_VERSION, "x-api-key": "k-123"}
    assert WIRE.headers(None) == {"anthropic-version": API_VERSION}


# -- against the fake server ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_text_tool_calls_and_usage(stream: bool) -> None:
    deltas: list[str] = []
    async with open_fake_llm([REPLY]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "claude-x", CONVERSATION, [LOOKUP], max_output_tokens=99, on_text=deltas.append
        )
        (seen,) = server.requests
    assert reply == REPLY
    assert ("".join(deltas), len(deltas) > 1) == ((REPLY.text, True) if stream else ("", False))
    assert (seen.api, seen.model, seen.stream, seen.max_tokens) == (
        "anthropic",
        "claude-x",
        stream,
        99,
    )
    assert seen.tools == ["lookup"]
    assert seen.messages == CONVERSATION


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_only_answer(stream: bool) -> None:
    answer = ModelReply(text="hi there", usage=Usage(3, 2))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        assert await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5) == answer


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_without_ids_get_the_servers(stream: bool) -> None:
    answer = ModelReply(tool_calls=(ToolCallRequest("lookup", {}),), usage=Usage(1, 1))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete("m", CONVERSATION[:2], [LOOKUP], max_output_tokens=5)
    (call,) = reply.tool_calls
    assert (call.name, call.arguments) == ("lookup", {}) and call.id.startswith("toolu_")


# -- parse -------------------------------------------------------------------------------


def message(*content: object, usage: object = None) -> dict[str, object]:
    out: dict[str, object] = {"type": "message", "role": "assistant", "content": list(content)}
    if usage is not None:
        out["usage"] = usage
    return out


def test_parse_joins_text_blocks_and_keeps_the_others() -> None:
    server_use = {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}
    data = message(
        {"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "a"},
        server_use,
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
        {"type": "text", "text": "b"},
        usage={"input_tokens": 5, "output_tokens": 6},
    )
    # (the blocks but the thinking and tool_use ones, in order, to be sent back)
    blocks = [{"type": "text", "text": "a"}, server_use, {"type": "text", "text": "b"}]
    assert WIRE.parse(data, "an", None) == ModelReply(
        text="ab",
        tool_calls=(ToolCallRequest("f", {"x": 1}, id="t1"),),
        usage=Usage(5, 6),
        thinking=(ThinkingBlock("hmm"),),
        blocks=tuple(RawBlock.of(b) for b in blocks),
    )


def test_parse_tolerates_what_is_optional() -> None:
    assert WIRE.parse(message(), "an", None) == ModelReply()
    usage = {"input_tokens": "7", "output_tokens": 2.5}
    assert WIRE.parse(message(usage=usage), "an", None).usage == Usage()
    # Arguments as text (as a broken model may send them) are repaired when safe.
    block: dict[str, object] = {"type": "tool_use", "id": "t", "name": "f", "input": "{'a': 1,}"}
    assert WIRE.parse(message(block), "an", None).tool_calls[0].arguments == {"a": 1}
    (call,) = WIRE.parse(message({**block, "input": ["no"]}), "an", None).tool_calls
    assert call.arguments == {} and "list" in call.error


@pytest.mark.parametrize(
    ("data", "what"),
    [
        ("text", "body is not a JSON object"),
        ({"content": "hi"}, "body.content"),
        (message("hi"), "content[0] is not a JSON object"),
        (message({"text": "no type"}), "content[0].type"),
        (message({"type": "tool_use", "input": {}}), "has no name"),
    ],
)
def test_parse_errors_say_what_was_wrong(data: object, what: str) -> None:
    with pytest.raises(BadResponse) as info:
        WIRE.parse(data, "an", None)
    assert what in str(info.value) and info.value.provider == "an"


def test_parse_finds_calls_in_the_text_only_when_asked() -> None:
    text = 'ok {"name": "lookup", "arguments": {"key": "q"}}'
    data = message({"type": "text", "text": text})
    assert WIRE.parse(data, "an", None).text == text
    assert WIRE.parse(data, "an", ["lookup"]).tool_calls[0].arguments == {"key": "q"}


# -- the stream parser ------------------------------------------------------------------


def sse(*events: dict[str, Any]) -> list[str]:
    lines = []
    for event in events:
        lines += [f"event: {event['type']}", f"data: {json.dumps(event)}", ""]
    return lines


def test_stream_assembles_text_calls_and_usage() -> None:
    pieces: list[str] = []
    parser = WIRE.stream_parser("an", pieces.append, None)
    tool = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    for line in sse(
        {"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}},
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "He"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "y"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": tool},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"x":'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": " 2}"},
        },
        {"type": "content_block_start", "index": 2, "content_block": {**tool, "id": "t2"}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 14}},
        {"type": "message_stop"},
    ):
        parser.feed(line)
    assert pieces == ["He", "y"]
    # Output tokens come from message_delta (message_start has a placeholder);
    # a call with no input deltas has no arguments.
    assert parser.finish() == ModelReply(
        text="Hey",
        tool_calls=(ToolCallRequest("f", {"x": 2}, id="t1"), ToolCallRequest("f", {}, id="t2")),
        usage=Usage(9, 14),
    )


def test_arguments_streamed_in_many_pieces_take_linear_time() -> None:
    # 10 MB of arguments in 10,000 pieces: adding each piece to the arguments so
    # far (a quadratic copy) took seconds, and blocked the Trio loop. Measured
    # in CPU time, with a bound far above the few hundredths it takes.
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=64 << 20)
    piece = "x" * 1000
    tool = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    lines = sse(
        {"type": "content_block_start", "index": 0, "content_block": tool},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": a},
            }
            for a in ['{"s": "', *[piece] * 10_000, '"}']
        ),
        {"type": "message_stop"},
    )
    start = time.process_time()
    for line in lines:
        parser.feed(line)
    (call,) = parser.finish().tool_calls
    assert time.process_time() - start < 1.0
    assert call == ToolCallRequest("f", {"s": piece * 10_000}, id="t1")


def test_a_stream_without_message_stop_was_cut_short() -> None:
    parser = WIRE.stream_parser("an", None, None)
    for line in sse({"type": "message_start", "message": {}}):
        parser.feed(line)
    with pytest.raises(BadResponse, match="before message_stop"):
        parser.finish()


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("data: {not json", "not JSON"),
        ("data: " + "[" * 50_000, "not JSON"),
        ("data: 3", "not a JSON object"),
        ('data: {"type": "error", "error": {"type": "overloaded_error"}}', "overloaded_error"),
        ('data: {"type": "content_block_delta", "index": 0, "delta": 1}', "no delta object"),
    ],
)
def test_stream_errors(line: str, what: str) -> None:
    parser = WIRE.stream_parser("an", None, None)
    with pytest.raises(BadResponse) as info:
        parser.feed(line)
    assert what in str(info.value)


def _event(kind: str, i: int) -> list[str]:
    tool = {"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}
    if kind == "text":
        delta = {"type": "text_delta", "text": "abcd"}
    elif kind == "arguments":
        delta = {"type": "input_json_delta", "partial_json": "[1, "}
    else:  # a new call each time, without arguments
        return sse({"type": "content_block_start", "index": i, "content_block": tool})
    start = {"type": "content_block_start", "index": 0, "content_block": tool}
    return sse(
        *([start] if i == 0 else []), {"type": "content_block_delta", "index": 0, "delta": delta}
    )


@pytest.mark.parametrize("kind", ["text", "arguments", "new calls"])
def test_an_endless_reply_passes_max_reply_chars(kind: str) -> None:
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=1000)
    with pytest.raises(TooLarge, match=r"max_reply_chars \(1000 characters\)"):
        for i in range(1000):
            for line in _event(kind, i):
                parser.feed(line)
    assert parser.size <= 1000 + 64 + 8


# -- fuzzing (see wirefuzz.py): a ModelReply or a BadResponse, nothing else ------------


GOOD = message(
    {"type": "text", "text": "hi"},
    {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"key": "k"}},
    usage={"input_tokens": 3, "output_tokens": 4},
)
GOOD_EVENTS: list[object] = [
    {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"key": "k"}'},
    },
    {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 4}},
]
STOP = 'data: {"type": "message_stop"}'


def accepts(data: object, text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.accepts(WIRE, "an", data, text_tools)


def streams(lines: list[str], text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.streams(WIRE, "an", lines, text_tools)


def test_every_field_damaged_in_turn() -> None:
    assert accepts(GOOD) is not None
    for data in damaged(GOOD):
        accepts(data, ["lookup"])


def test_every_stream_field_damaged_in_turn() -> None:
    good = [f"data: {json.dumps(e)}" for e in GOOD_EVENTS] + [STOP]
    assert streams(good) == accepts(GOOD)
    for i, event in enumerate(GOOD_EVENTS):
        for bad_event in damaged(event):
            events = [*GOOD_EVENTS[:i], bad_event, *GOOD_EVENTS[i + 1 :]]
            streams([f"data: {json.dumps(e)}" for e in events] + [STOP])


@FUZZ
@given(damaged_at_random(GOOD) | json_values, st.sampled_from([None, ["lookup"]]))
def test_parse_fuzz(data: object, text_tools: list[str] | None) -> None:
    accepts(data, text_tools)


_line = st.one_of(
    st.sampled_from(GOOD_EVENTS).flatmap(damaged_at_random).map(lambda e: "data: " + json.dumps(e)),
    json_values.map(lambda v: "data: " + json.dumps(v)),
    st.text(max_size=30),
    st.sampled_from([STOP, "data:", "event: ping", ""]),
)


@FUZZ
@given(st.lists(_line, max_size=8), st.sampled_from([None, ["lookup"]]))
def test_stream_fuzz(lines: list[str], text_tools: list[str] | None) -> None:
    streams(lines, text_tools)


# -- fidelity: what the API reference documents ------------------------------------------
# The fixtures below are in the shapes of Anthropic's Messages reference: a message
# object with its usage (prompt caching's counts), stop reasons, thinking and
# redacted_thinking blocks with signatures, and the streaming events.

CACHED_USAGE: dict[str, object] = {
    "input_tokens": 21,
    "cache_creation_input_tokens": 188086,
    "cache_read_input_tokens": 1024,
    "output_tokens": 393,
    "service_tier": "standard",
}
# input_tokens leaves the cache out: the whole input is 21 + 188,086 + 1,024.
CACHED = Usage(189131, 393, cached_input_tokens=1024, cache_write_tokens=188086)
SIGNATURE = "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL"
THINKING = {
    "type": "thinking",
    "thinking": "Let me analyze this step by step...",
    "signature": SIGNATURE,
}
REDACTED = {
    "type": "redacted_thinking",
    "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
}


def documented_message(
    *content: dict[str, object], stop_reason: str = "end_turn", usage: object = None
) -> dict[str, object]:
    return {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or CACHED_USAGE,
    }


def test_parse_counts_cache_reads_and_writes_as_input() -> None:
    data = documented_message({"type": "text", "text": "Hi!"})
    assert WIRE.parse(data, "an", None) == ModelReply(text="Hi!", usage=CACHED)


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("tool_use", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "refusal"),
        ("pause_turn", "pause_turn"),
    ],
)
def test_parse_reads_the_stop_reason(stop_reason: str, finish: str) -> None:
    data = documented_message({"type": "text", "text": "The"}, stop_reason=stop_reason)
    assert WIRE.parse(data, "an", None).finish_reason == finish


def test_parse_keeps_thinking_blocks_with_their_signatures() -> None:
    tool = {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"key": "a"}}
    data = documented_message(THINKING, REDACTED, tool, stop_reason="tool_use")
    reply = WIRE.parse(data, "an", None)
    assert reply.thinking == (
        ThinkingBlock("Let me analyze this step by step...", SIGNATURE),
        ThinkingBlock(redacted=str(REDACTED["data"])),
    )
    assert reply.tool_calls == (ToolCallRequest("lookup", {"key": "a"}, id="toolu_01"),)


def test_thinking_and_failed_results_go_back_as_the_api_wants_them() -> None:
    thought = (ThinkingBlock("hmm", SIGNATURE), ThinkingBlock(redacted="opaque"))
    call = ToolCallRequest("lookup", {"key": "a"}, id="toolu_01")
    messages = [
        ChatMessage("user", "what is a?"),
        ChatMessage("assistant", "Looking.", tool_calls=(call,), thinking=thought),
        ChatMessage("tool", "no such key", tool_call_id="toolu_01", name="lookup", is_error=True),
    ]
    body = WIRE.body("claude-x", messages, [LOOKUP], 64, False, NO_CACHE)
    assert body["messages"][1:] == [  # type: ignore[index]
        {
            "role": "assistant",
            "content": [
                # the thinking first, as it came, signature and all
                {"type": "thinking", "thinking": "hmm", "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"key": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "no such key",
                    "is_error": True,
                }
            ],
        },
    ]


def documented_stream(*blocks: list[dict[str, Any]], stop_reason: str) -> list[str]:
    start = documented_message(usage={**CACHED_USAGE, "output_tokens": 1})
    start |= {"content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for block in blocks:
        events += block
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 393},
        },
        {"type": "message_stop"},
    ]
    return sse(*events)


def block(index: int, start: dict[str, Any], *deltas: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def test_stream_reads_thinking_cache_usage_and_the_stop_reason() -> None:
    pieces: list[str] = []
    parser = WIRE.stream_parser("an", pieces.append, None)
    lines = documented_stream(
        block(
            0,
            {"type": "thinking", "thinking": ""},
            {"type": "thinking_delta", "thinking": "Let me solve "},
            {"type": "thinking_delta", "thinking": "this."},
            {"type": "signature_delta", "signature": SIGNATURE},
        ),
        block(1, REDACTED),
        block(2, {"type": "text", "text": ""}, {"type": "text_delta", "text": "The answer is"}),
        stop_reason="max_tokens",
    )
    for line in lines:
        parser.feed(line)
    assert pieces == ["The answer is"]  # (thinking is not the answer's text)
    assert parser.finish() == ModelReply(
        text="The answer is",
        usage=CACHED,
        finish_reason="length",
        thinking=(
            ThinkingBlock("Let me solve this.", SIGNATURE),
            ThinkingBlock(redacted=str(REDACTED["data"])),
        ),
    )


def test_stream_takes_the_cumulative_usage_of_message_delta() -> None:
    parser = WIRE.stream_parser("an", None, None)
    lines = documented_stream(stop_reason="pause_turn")
    # Newer servers repeat the input's counts in message_delta, cumulatively.
    delta = json.loads(lines[-5][6:])
    delta["usage"] = {**CACHED_USAGE, "cache_read_input_tokens": 2048}
    lines[-5] = "data: " + json.dumps(delta)
    for line in lines:
        parser.feed(line)
    reply = parser.finish()
    assert reply.finish_reason == "pause_turn"
    assert reply.usage == Usage(190155, 393, cached_input_tokens=2048, cache_write_tokens=188086)


def test_stream_keeps_the_start_counts_a_message_delta_zeroes() -> None:
    parser = WIRE.stream_parser("an", None, None)
    lines = documented_stream(stop_reason="end_turn")
    delta = json.loads(lines[-5][6:])
    delta["usage"] = {"input_tokens": 0, "output_tokens": 393}
    lines[-5] = "data: " + json.dumps(delta)
    for line in lines:
        parser.feed(line)
    assert parser.finish().usage == CACHED


def test_a_cut_stream_reports_the_whole_input_it_was_told_of() -> None:
    parser = WIRE.stream_parser("an", None, None)
    for line in documented_stream(stop_reason="end_turn")[:6]:
        parser.feed(line)
    assert parser.partial() == (189131, None, "")


def test_thinking_counts_towards_max_reply_chars() -> None:
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=10)
    thinking = {"type": "thinking_delta", "thinking": "x" * 11}
    lines = sse(*block(0, {"type": "thinking", "thinking": ""}, thinking))
    with pytest.raises(TooLarge):
        for line in lines:
            parser.feed(line)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply",
    [
        ModelReply(text="cut", usage=Usage(9, 4), finish_reason="length"),
        ModelReply(text="no", usage=Usage(9, 4), finish_reason="refusal"),
        ModelReply(text="wait", usage=Usage(9, 4), finish_reason="pause_turn"),
        ModelReply(
            text="hi",
            tool_calls=(ToolCallRequest("lookup", {"key": "a"}, id="toolu_9"),),
            usage=Usage(900, 40, cached_input_tokens=600, cache_write_tokens=200),
            thinking=(ThinkingBlock("hmm", SIGNATURE), ThinkingBlock(redacted="zz")),
        ),
    ],
)
async def test_stop_reasons_thinking_and_cache_usage_over_the_wire(
    stream: bool, reply: ModelReply
) -> None:
    async with open_fake_llm([reply]) as server, provider(server, stream=stream) as p:
        assert await p.complete("m", CONVERSATION[:2], [LOOKUP], max_output_tokens=5) == reply


# -- request settings ----------------------------------------------------------------------


def test_settings_map_to_the_anthropic_fields() -> None:
    settings = ModelSettings(
        temperature=0.3,
        top_p=0.9,
        stop=["END"],
        tool_choice="required",
        parallel_tool_calls=False,
        extra_body={"thinking": {"type": "enabled", "budget_tokens": 2048}},
    )
    body = WIRE.body("claude-x", CONVERSATION, [LOOKUP], 4096, False, settings)
    assert (body["temperature"], body["top_p"], body["stop_sequences"]) == (0.3, 0.9, ["END"])
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


@pytest.mark.parametrize(
    ("settings", "sent"),
    [
        (ModelSettings(tool_choice="auto"), {"type": "auto"}),
        (ModelSettings(tool_choice="none"), {"type": "none"}),
        (ModelSettings(tool_choice="required"), {"type": "any"}),
        (ModelSettings(tool_choice="lookup"), {"type": "tool", "name": "lookup"}),
        (
            ModelSettings(parallel_tool_calls=False),
            {"type": "auto", "disable_parallel_tool_use": True},
        ),
        (
            ModelSettings(tool_choice="lookup", parallel_tool_calls=False),
            {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True},
        ),
        (ModelSettings(tool_choice="none", parallel_tool_calls=False), {"type": "none"}),
        (ModelSettings(parallel_tool_calls=True), None),
    ],
)
def test_tool_choice(settings: ModelSettings, sent: object) -> None:
    body = WIRE.body("m", CONVERSATION, [LOOKUP], 8, False, settings)
    assert body.get("tool_choice") == sent
    assert "tool_choice" not in WIRE.body("m", CONVERSATION, [], 8, False, settings)


def test_cache_control_marks_the_system_prompt_and_the_last_tool() -> None:
    mark = {"type": "ephemeral", "ttl": "1h"}
    other = ToolSchema("other", "Other.", {"type": "object"})
    settings = ModelSettings(cache_control=mark)
    body = WIRE.body("m", CONVERSATION, [LOOKUP, other], 8, False, settings)
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": mark}]
    tools = body["tools"]
    assert isinstance(tools, list)
    assert "cache_control" not in tools[0] and tools[1]["cache_control"] == mark
    # Without a system prompt or tools, nothing to mark.
    bare = WIRE.body("m", [ChatMessage("user", "hi")], [], 8, False, settings)
    assert "system" not in bare and "tools" not in bare


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (ModelSettings(seed=1), "ModelSettings.seed"),
        (ModelSettings(options={"num_ctx": 8192}), "ModelSettings.options"),
        (ModelSettings(keep_alive=0), "ModelSettings.keep_alive"),
        (ModelSettings(extra_body={"system": "x"}), "extra_body must not set 'system'"),
    ],
)
def test_settings_the_wire_has_no_place_for_are_errors(settings: ModelSettings, named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        WIRE.body("m", CONVERSATION, [], 8, False, settings)


def test_the_version_header_is_configurable() -> None:
    assert AnthropicWire("2024-01-01").headers("k")["anthropic-version"] == "2024-01-01"


# -- typed outputs: a forced final_result tool -----------------------------------------


class _Movie(msgspec.Struct):
    title: str
    year: int = 0


MOVIE = OutputSchema("Movie", msgspec.json.schema(_Movie))


def test_body_forces_the_output_tool() -> None:
    body = WIRE.body("claude-x", CONVERSATION[:2], [], 64, False, NO_CACHE, output=MOVIE)
    assert body["tools"] == [
        {
            "name": "final_result",
            "description": "Give your final answer (Movie) as this tool's input.",
            "input_schema": MOVIE.object_schema,
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "final_result"}
    # Beside other tools: any tool, the answer or one the answer needs.
    both = WIRE.body("claude-x", CONVERSATION[:2], [LOOKUP], 64, False, NO_CACHE, output=MOVIE)
    assert [t["name"] for t in both["tools"]] == ["lookup", "final_result"]  # type: ignore[attr-defined]
    assert both["tool_choice"] == {"type": "any"}
    # A tool_choice of the settings is sent instead (with no other tool too).
    auto = ModelSettings(tool_choice="auto")
    kept = WIRE.body("claude-x", CONVERSATION[:2], [LOOKUP], 64, False, auto, output=MOVIE)
    assert kept["tool_choice"] == {"type": "auto"}
    alone = WIRE.body("claude-x", CONVERSATION[:2], [], 64, False, auto, output=MOVIE)
    assert alone["tool_choice"] == {"type": "auto"}
    # parallel_tool_calls=False still forces the answer.
    one_at_a_time = ModelSettings(parallel_tool_calls=False)
    serial = WIRE.body(
        "claude-x", CONVERSATION[:2], [LOOKUP], 64, False, one_at_a_time, output=MOVIE
    )
    assert serial["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


@pytest.mark.parametrize("stream", [False, True])
async def test_the_forced_tools_input_is_the_answer(stream: bool) -> None:
    answer = ModelReply(text='{"title": "Alien", "year": 1979}', usage=Usage(5, 9))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=50, output_schema=MOVIE
        )
        (seen,) = server.requests
    assert (seen.tool_choice, seen.output_schema) == ("final_result", MOVIE.object_schema)
    assert (reply.text, reply.tool_calls) == ('{"title":"Alien","year":1979}', ())


@pytest.mark.parametrize("stream", [False, True])
async def test_a_wrapped_answer_is_unwrapped(stream: bool) -> None:
    tags = OutputSchema("tags", msgspec.json.schema(list[str]))
    answer = ModelReply(text='{"result": ["a", "b"]}')
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=50, output_schema=tags
        )
    assert (reply.text, reply.tool_calls) == ('["a","b"]', ())


@pytest.mark.parametrize("stream", [False, True])
async def test_the_answer_wins_over_other_calls_of_its_reply(stream: bool) -> None:
    answer = ModelReply(
        tool_calls=(
            ToolCallRequest("lookup", {"key": "z"}),
            ToolCallRequest("final_result", {"title": "Alien"}),
        )
    )
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "m", CONVERSATION[:2], [LOOKUP], max_output_tokens=50, output_schema=MOVIE
        )
        (seen,) = server.requests
    assert seen.tool_choice == "required"
    assert (reply.text, reply.tool_calls) == ('{"title":"Alien"}', ())


@pytest.mark.parametrize("stream", [False, True])
async def test_other_tool_calls_go_through(stream: bool) -> None:
    answer = ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "z"}, id="t1"),))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "m", CONVERSATION[:2], [LOOKUP], max_output_tokens=50, output_schema=MOVIE
        )
    assert (reply.text, [c.name for c in reply.tool_calls]) == ("", ["lookup"])


# -- content parts -------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF"


async def test_images_and_documents_go_as_image_and_document_blocks() -> None:
    import base64

    from agentrio import DocumentPart, ImagePart
    from agentrio.types import TextPart

    parts = (
        TextPart("compare"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/cat.webp", media_type="image/webp"),
        DocumentPart(data=PDF, name="report.pdf"),
        DocumentPart(url="https://example.com/paper.pdf"),
        DocumentPart(data="naïve notes".encode(), media_type="text/plain"),
    )
    messages = [
        ChatMessage("system", "look"),
        ChatMessage("user", "compare", parts=parts),
    ]
    async with open_fake_llm([ModelReply(text="same")]) as server, provider(server) as p:
        reply = await p.complete("claude-x", messages, [], max_output_tokens=50, settings=NO_CACHE)
    assert reply.text == "same"
    sent = server.requests[0]
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "compare"},
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": base64.b64encode(PNG).decode(),
                    },
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.webp"}},
                {
                    "type": "document",
                    "source": {
                        "type": "base64",
                        "media_type": "application/pdf",
                        "data": base64.b64encode(PDF).decode(),
                    },
                    "title": "report.pdf",
                },
                {
                    "type": "document",
                    "source": {"type": "url", "url": "https://example.com/paper.pdf"},
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "naïve notes"},
                },
            ],
        }
    ]
    # (the fake server takes an image URL without its media type: it is not sent)
    got = sent.messages[1].parts
    assert got[:2] == parts[:2] and got[3:] == parts[3:]
    assert got[2] == ImagePart(url="https://example.com/cat.webp")


async def test_an_image_over_5_mb_is_refused_before_sending() -> None:
    from agentrio import ImagePart

    big = ImagePart(data=PNG[:8] + bytes(5 * 1024 * 1024), media_type="image/png")
    messages = [ChatMessage("user", "", parts=(big,))]
    async with open_fake_llm([ModelReply(text="no")]) as server, provider(server) as p:
        with pytest.raises(InvalidArgument, match=r"takes images of at most 5242880 bytes"):
            await p.complete("claude-x", messages, [], max_output_tokens=50)
        assert server.statistics().http_requests == 0


def test_a_text_document_by_url_is_refused() -> None:
    from agentrio import DocumentPart

    doc = DocumentPart(url="https://example.com/notes.txt", media_type="text/plain")
    with pytest.raises(
        InvalidArgument, match="takes documents by URL of the types application/pdf"
    ):
        AnthropicWire().body("claude-x", [ChatMessage("user", "", parts=(doc,))], [], 10, False)


# -- a call that offers no tools, after tool turns -----------------------------------------


def test_tool_blocks_go_as_text_in_a_call_that_offers_no_tools() -> None:
    failed = ChatMessage("tool", "no such key", tool_call_id="c2", name="lookup", is_error=True)
    calls = (ToolCallRequest("lookup", {"key": "b"}, id="c2"),)
    history = [*CONVERSATION, ChatMessage("assistant", "then b", tool_calls=calls), failed]
    body = WIRE.body("claude", history, [], 64, False, NO_CACHE)
    assert "tools" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what is a?"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": '[tool call lookup: {"key":"a"}]'}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[tool result lookup]: a is 1"},
                {"type": "text", "text": "and?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "then b"},
                {"type": "text", "text": '[tool call lookup: {"key":"b"}]'},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "[tool error lookup]: no such key"}]},
    ]
    # With tools offered (or the output tool of a typed answer), the blocks stay.
    kept = json.dumps(WIRE.body("claude", history, [LOOKUP], 64, False)["messages"])
    assert '"tool_use"' in kept and '"tool_result"' in kept
    output = OutputSchema("Answer", {"type": "object"})
    typed = WIRE.body("claude", history, [], 64, False, output=output)
    assert '"tool_use"' in json.dumps(typed["messages"])


async def test_the_fake_server_refuses_tool_blocks_without_tools_as_the_api_does() -> None:
    async with open_fake_llm([Reply(text="ok")]) as server:
        config = ProviderConfig(
            name="an", kind="anthropic", base_url=server.base_url + "/v1", max_retries=0
        )
        async with Provider(config) as p:
            body = WIRE.body("claude", CONVERSATION, [LOOKUP], 64, False)
            del body["tools"]
            async with httpx.AsyncClient() as client:
                answer = await client.post(server.base_url + "/v1/messages", json=body)
            assert answer.status_code == 400
            assert "must define tools" in answer.json()["error"]["message"]
            # What agentrio sends instead is taken.
            assert (await p.complete("claude", CONVERSATION, [], max_output_tokens=64)).text == "ok"
