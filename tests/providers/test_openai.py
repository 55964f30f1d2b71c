"""The OpenAI chat-completions wire: request bodies, answers and streams, against the
fake server over real sockets, and the parsers fuzzed with any JSON."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import wirefuzz
from hypothesis import given
from hypothesis import strategies as st
from wirefuzz import FUZZ, damaged, damaged_at_random, json_values

from agentrio import (
    BadResponse,
    ChatMessage,
    ModelReply,
    Provider,
    ProviderConfig,
    ToolCallRequest,
    ToolSchema,
    Usage,
)
from agentrio.providers.bounded import TooLarge
from agentrio.providers.openai import OpenAIWire
from agentrio.testing import FakeLLMServer, open_fake_llm

WIRE = OpenAIWire()
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
        ToolCallRequest("lookup", {"key": "b", "depth": 2}, id="x1"),
        ToolCallRequest("lookup", {"key": "c"}, id="x2"),
    ),
    usage=Usage(31, 17),
)


@asynccontextmanager
async def provider(server: FakeLLMServer, **options: Any) -> AsyncIterator[Provider]:
    config = ProviderConfig(
        name="oa", kind="openai", base_url=server.base_url + "/v1", max_retries=0, **options
    )
    async with Provider(config) as p:
        yield p


# -- the request ---------------------------------------------------------------------------


def test_body() -> None:
    body = WIRE.body("gpt-x", CONVERSATION, [LOOKUP], 256, False)
    assert (body["model"], body["max_completion_tokens"], body["stream"]) == ("gpt-x", 256, False)
    # Reasoning models refuse max_tokens: only max_completion_tokens goes.
    assert "stream_options" not in body and "max_tokens" not in body
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is a?"},
        {
            "role": "assistant",
            "content": None,  # no text beside the calls: null, as the API writes it
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"key": "a"}'},
                }
            ],
        },
        {"role": "tool", "content": "a is 1", "tool_call_id": "c1"},
        {"role": "user", "content": "and?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a key up.",
                "parameters": LOOKUP.parameters,
            },
        }
    ]


def test_body_streamed_asks_for_usage_and_omits_empty_tools() -> None:
    body = WIRE.body("m", [ChatMessage("user", "hi")], [], 8, True)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "tools" not in body


def test_headers() -> None:
    assert WIRE.headers("k-123") == {"Authorization": "Bearer k-123"}
    assert WIRE.headers(None) == {}


# -- against the fake server ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_text_tool_calls_and_usage(stream: bool) -> None:
    deltas: list[str] = []
    async with open_fake_llm([REPLY]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "gpt-x", CONVERSATION, [LOOKUP], max_output_tokens=99, on_text=deltas.append
        )
        (seen,) = server.requests
    assert reply == REPLY
    # Text deltas only come with a stream, and add up to the text.
    assert ("".join(deltas), len(deltas) > 1) == ((REPLY.text, True) if stream else ("", False))
    assert (seen.api, seen.model, seen.stream, seen.max_tokens) == ("openai", "gpt-x", stream, 99)
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
    assert call.name == "lookup" and call.arguments == {} and call.id.startswith("call_")


# -- parse -------------------------------------------------------------------------------


def completion(message: object, usage: object = None) -> dict[str, object]:
    out: dict[str, object] = {"choices": [{"index": 0, "message": message}]}
    if usage is not None:
        out["usage"] = usage
    return out


def test_parse_tolerates_what_is_optional() -> None:
    reply = WIRE.parse(completion({"role": "assistant", "content": None}), "oa", None)
    assert reply == ModelReply()  # no text, no calls, no usage: zeros
    usage = {"prompt_tokens": -1, "completion_tokens": True}  # nonsense counts as 0
    assert WIRE.parse(completion({"content": "x"}, usage), "oa", None).usage == Usage()
    call = {"id": 7, "function": {"name": "f", "arguments": "{'a': 1,}"}}
    (parsed,) = WIRE.parse(completion({"tool_calls": [call]}), "oa", None).tool_calls
    assert parsed == ToolCallRequest("f", {"a": 1}, id="")  # repaired; a non-str id dropped


def test_parse_keeps_unreadable_arguments_as_the_calls_error() -> None:
    call = {"id": "c", "function": {"name": "f", "arguments": "{nope"}}
    (parsed,) = WIRE.parse(completion({"tool_calls": [call]}), "oa", None).tool_calls
    assert parsed.arguments == {} and "could not be repaired" in parsed.error


@pytest.mark.parametrize(
    ("data", "what"),
    [
        ([], "body is not a JSON object"),
        ({}, "body.choices"),
        ({"choices": []}, "body.choices is empty"),
        ({"choices": [3]}, "choices[0] is not a JSON object"),
        ({"choices": [{"message": "hi"}]}, "choices[0].message"),
        (completion({"content": ["parts"]}), "content is not a string"),
        (completion({"tool_calls": 5}), "tool_calls is not a list"),
        (completion({"tool_calls": [{"function": "f"}]}), "tool_calls[0].function"),
        (completion({"tool_calls": [{"function": {"name": ""}}]}), "has no name"),
    ],
)
def test_parse_errors_say_what_was_wrong(data: object, what: str) -> None:
    with pytest.raises(BadResponse, match="oa") as info:
        WIRE.parse(data, "oa", None)
    assert what in str(info.value) and info.value.provider == "oa"


def test_parse_finds_calls_in_the_text_only_when_asked() -> None:
    text = 'sure: {"name": "lookup", "arguments": {"key": "q"}}'
    data = completion({"content": text})
    assert WIRE.parse(data, "oa", None).text == text
    reply = WIRE.parse(data, "oa", ["lookup"])
    assert reply.text == "" and reply.tool_calls[0].arguments == {"key": "q"}


# -- the stream parser ------------------------------------------------------------------


def sse(*chunks: object) -> list[str]:
    return [f"data: {json.dumps(c)}" for c in chunks] + ["data: [DONE]"]


def test_stream_assembles_text_calls_and_usage() -> None:
    pieces: list[str] = []
    parser = WIRE.stream_parser("oa", pieces.append, None)
    lines = [
        ": keep-alive comment",
        "event: ignored",
        "",
        *sse(
            {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
            {"choices": [{"delta": {"content": "Hel"}}]},
            {"choices": [{"delta": {"content": "lo"}}]},
            {"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "b", "function": {}}]}}]},
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a"}]}}]},
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]},
            {"choices": [{"delta": {"tool_calls": [{"index": 1, "function": {"name": "g"}}]}}]},
            {
                "choices": [
                    {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"x"'}}]}}
                ]
            },
            {
                "choices": [
                    {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}
                ]
            },
            {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}},
        ),
    ]
    for line in lines:
        parser.feed(line)
    assert pieces == ["Hel", "lo"]
    assert parser.finish() == ModelReply(
        text="Hello",
        tool_calls=(ToolCallRequest("f", {"x": 1}, id="a"), ToolCallRequest("g", {}, id="b")),
        usage=Usage(12, 4),
    )


def test_arguments_streamed_in_many_pieces_take_linear_time() -> None:
    # 10 MB of arguments in 10,000 pieces: adding each piece to the arguments so
    # far (a quadratic copy) took seconds, and blocked the Trio loop. Measured
    # in CPU time, with a bound far above the few hundredths it takes.
    parser = WIRE.stream_parser("oa", None, None, max_reply_chars=64 << 20)
    piece = "x" * 1000
    arguments = ['{"s": "', *[piece] * 10_000, '"}']
    lines = sse(
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}}
            ]
        },
        *(
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}}]}
            for a in arguments
        ),
    )
    start = time.process_time()
    for line in lines:
        parser.feed(line)
    (call,) = parser.finish().tool_calls
    assert time.process_time() - start < 1.0
    assert call == ToolCallRequest("f", {"s": piece * 10_000}, id="a")


def test_a_stream_without_done_was_cut_short() -> None:
    parser = WIRE.stream_parser("oa", None, None)
    parser.feed(sse({"choices": [{"delta": {"content": "partial"}}]})[0])
    with pytest.raises(BadResponse, match=r"before \[DONE\]"):
        parser.finish()


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("data: {not json", "not JSON"),
        ("data: " + "[" * 50_000, "not JSON"),  # too deep for json: still a BadResponse
        ("data: [1, 2]", "not a JSON object"),
        ('data: {"choices": 1}', "choices is not a list"),
        ('data: {"choices": [{"delta": {"tool_calls": {}}}]}', ""),  # empty: nothing to do
        ('data: {"choices": [{"delta": {"tool_calls": 1}}]}', "tool_calls is not a list"),
        ('data: {"choices": [{"delta": {"tool_calls": [1]}}]}', "not a JSON object"),
    ],
)
def test_stream_errors(line: str, what: str) -> None:
    parser = WIRE.stream_parser("oa", None, None)
    if not what:
        parser.feed(line)
        return
    with pytest.raises(BadResponse) as info:
        parser.feed(line)
    assert what in str(info.value)


def _delta(kind: str, i: int) -> str:
    if kind == "text":
        delta: dict[str, object] = {"content": "abcd"}
    elif kind == "arguments":
        delta = {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "[1, "}}]}
    else:  # a new call each time, empty: it counts all the same
        delta = {"tool_calls": [{"index": i}]}
    return sse({"choices": [{"delta": delta}]})[0]


@pytest.mark.parametrize("kind", ["text", "arguments", "new calls"])
def test_an_endless_reply_passes_max_reply_chars(kind: str) -> None:
    parser = WIRE.stream_parser("oa", None, None, max_reply_chars=1000)
    with pytest.raises(TooLarge, match=r"max_reply_chars \(1000 characters\)"):
        for i in range(1000):
            parser.feed(_delta(kind, i))
    assert parser.size <= 1000 + 64


def test_a_reply_of_exactly_max_reply_chars_is_whole() -> None:
    parser = WIRE.stream_parser("oa", None, None, max_reply_chars=1000)
    for i in range(250):
        parser.feed(_delta("text", i))
    parser.feed("data: [DONE]")
    assert parser.finish().text == "abcd" * 250


# -- fuzzing (see wirefuzz.py): a ModelReply or a BadResponse, nothing else ------------


GOOD_CALLS = [
    {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"index": 1, "id": "b", "function": {"name": "lookup", "arguments": '{"key": "k"}'}},
]
GOOD = completion(
    {"role": "assistant", "content": "hi", "tool_calls": GOOD_CALLS},
    {"prompt_tokens": 3, "completion_tokens": 4},
)
GOOD_CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": GOOD_CALLS}}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
]


def accepts(data: object, text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.accepts(WIRE, "oa", data, text_tools)


def streams(lines: list[str], text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.streams(WIRE, "oa", lines, text_tools)


def test_every_field_damaged_in_turn() -> None:
    assert accepts(GOOD) is not None
    for data in damaged(GOOD):
        accepts(data, ["lookup"])


def test_every_stream_field_damaged_in_turn() -> None:
    good = [f"data: {json.dumps(c)}" for c in GOOD_CHUNKS] + ["data: [DONE]"]
    assert streams(good) == accepts(GOOD)
    for i, chunk in enumerate(GOOD_CHUNKS):
        for bad_chunk in damaged(chunk):
            chunks = [*GOOD_CHUNKS[:i], bad_chunk, *GOOD_CHUNKS[i + 1 :]]
            streams([f"data: {json.dumps(c)}" for c in chunks] + ["data: [DONE]"])


@FUZZ
@given(damaged_at_random(GOOD) | json_values, st.sampled_from([None, ["lookup"]]))
def test_parse_fuzz(data: object, text_tools: list[str] | None) -> None:
    accepts(data, text_tools)


_line = st.one_of(
    st.sampled_from(GOOD_CHUNKS).flatmap(damaged_at_random).map(lambda c: "data: " + json.dumps(c)),
    json_values.map(lambda v: "data: " + json.dumps(v)),
    st.text(max_size=30),
    st.sampled_from(["data: [DONE]", "data:", ": ping", "event: x", ""]),
)


@FUZZ
@given(st.lists(_line, max_size=8), st.sampled_from([None, ["lookup"]]))
def test_stream_fuzz(lines: list[str], text_tools: list[str] | None) -> None:
    streams(lines, text_tools)
