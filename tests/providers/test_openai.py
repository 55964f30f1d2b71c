"""The OpenAI chat-completions wire: request bodies, answers and streams, against the
fake server over real sockets, and the parsers fuzzed with any JSON."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
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
from agentrio.providers.bounded import TooLarge
from agentrio.providers.openai import OpenAIWire
from agentrio.testing import FakeLLMServer, open_fake_llm
from agentrio.types import OutputSchema, ToolSchema

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


# -- fidelity: what the API reference documents ------------------------------------------
# The fixtures below are in the shapes of OpenAI's chat-completions reference: a
# chat.completion object, chat.completion.chunk objects and their usage objects.


def documented_completion(
    message: dict[str, object], finish_reason: str, usage: dict[str, object] | None = None
) -> dict[str, object]:
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "o3-mini-2025-01-31",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage or DOCUMENTED_USAGE,
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035",
    }


DOCUMENTED_USAGE: dict[str, object] = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 128,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}
DOCUMENTED_DETAILS = Usage(2006, 300, cached_input_tokens=1920, reasoning_tokens=128)


def assistant(content: str | None, refusal: str | None = None) -> dict[str, object]:
    return {"role": "assistant", "content": content, "refusal": refusal, "annotations": []}


def test_max_tokens_field_is_switchable() -> None:
    old = OpenAIWire("max_tokens").body("m", CONVERSATION, [], 64, False)
    assert old["max_tokens"] == 64 and "max_completion_tokens" not in old
    with pytest.raises(InvalidArgument, match="max_tokens_field"):
        OpenAIWire("max_output_tokens")


@pytest.mark.parametrize(("field", "sent"), [(None, "max_completion_tokens"), ("max_tokens",) * 2])
async def test_the_max_tokens_field_goes_out(field: str | None, sent: str) -> None:
    options = {} if field is None else {"max_tokens_field": field}
    async with open_fake_llm() as server, provider(server, **options) as p:
        await p.complete("m", CONVERSATION[:2], [], max_output_tokens=77)
        (seen,) = server.requests
    assert (
        seen.body[sent] == 77 and len({"max_tokens", "max_completion_tokens"} & set(seen.body)) == 1
    )


def test_parse_reads_cached_and_reasoning_tokens() -> None:
    data = documented_completion(assistant("Hi."), "stop")
    assert WIRE.parse(data, "oa", None) == ModelReply(text="Hi.", usage=DOCUMENTED_DETAILS)


def test_usage_details_never_exceed_their_totals() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 50},
        "completion_tokens_details": {"reasoning_tokens": 9, "audio_tokens": "x"},
    }
    parsed = WIRE.parse(documented_completion(assistant("x"), "stop", usage), "oa", None).usage
    assert parsed == Usage(10, 5, cached_input_tokens=10, reasoning_tokens=5)
    # Servers that send no details (vLLM, LM Studio, Ollama's /v1): zeros.
    plain = {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": None}
    assert WIRE.parse(documented_completion(assistant("x"), "stop", plain), "oa", None).usage == (
        Usage(10, 5)
    )


@pytest.mark.parametrize(
    ("finish_reason", "finish"),
    [
        ("stop", "stop"),
        ("tool_calls", "stop"),
        ("function_call", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("something_new", "stop"),
    ],
)
def test_parse_reads_the_finish_reason(finish_reason: str, finish: str) -> None:
    data = documented_completion(assistant("The answer is"), finish_reason)
    assert WIRE.parse(data, "oa", None).finish_reason == finish


def test_parse_reads_a_refusal() -> None:
    refusal = "I'm sorry, I can't assist with that request."
    reply = WIRE.parse(documented_completion(assistant(None, refusal), "stop"), "oa", None)
    assert reply == ModelReply(refusal=refusal, finish_reason="refusal", usage=DOCUMENTED_DETAILS)
    with pytest.raises(BadResponse, match="refusal is not a string"):
        WIRE.parse(documented_completion(assistant(None, 5), "stop"), "oa", None)  # type: ignore[arg-type]


def chunk(delta: dict[str, object], finish_reason: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "o3-mini-2025-01-31",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(usage: dict[str, object]) -> dict[str, object]:
    return {**chunk({}), "choices": [], "usage": usage}


def test_stream_reads_the_finish_reason_and_the_usage_details() -> None:
    parser = WIRE.stream_parser("oa", None, None)
    for line in sse(
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"content": "The answer"}),
        chunk({"content": " is"}),
        chunk({}, "length"),
        usage_chunk(DOCUMENTED_USAGE),
    ):
        parser.feed(line)
    assert parser.finish() == ModelReply(
        text="The answer is", usage=DOCUMENTED_DETAILS, finish_reason="length"
    )


def test_stream_reads_a_refusal() -> None:
    parser = WIRE.stream_parser("oa", None, None)
    for line in sse(
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "I'm sorry, "}),
        chunk({"refusal": "I can't."}),
        chunk({}, "stop"),
    ):
        parser.feed(line)
    assert parser.finish() == ModelReply(refusal="I'm sorry, I can't.", finish_reason="refusal")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply",
    [
        ModelReply(text="cut", usage=Usage(9, 4), finish_reason="length"),
        ModelReply(text="filtered", usage=Usage(9, 4), finish_reason="content_filter"),
        ModelReply(refusal="No.", usage=Usage(9, 4), finish_reason="refusal"),
        ModelReply(text="hi", usage=Usage(90, 40, cached_input_tokens=64, reasoning_tokens=30)),
    ],
)
async def test_finish_reasons_refusals_and_details_over_the_wire(
    stream: bool, reply: ModelReply
) -> None:
    async with open_fake_llm([reply]) as server, provider(server, stream=stream) as p:
        assert await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5) == reply


# -- request settings ----------------------------------------------------------------------


def test_settings_map_to_the_openai_fields() -> None:
    settings = ModelSettings(
        temperature=0.3,
        top_p=0.9,
        stop=["END", "STOP"],
        seed=42,
        tool_choice="required",
        parallel_tool_calls=False,
        extra_body={"reasoning_effort": "low", "temperature": 0.5},
    )
    body = WIRE.body("m", CONVERSATION, [LOOKUP], 8, False, settings)
    assert {k: body[k] for k in ("top_p", "stop", "seed", "tool_choice")} == {
        "top_p": 0.9,
        "stop": ["END", "STOP"],
        "seed": 42,
        "tool_choice": "required",
    }
    assert body["parallel_tool_calls"] is False and body["reasoning_effort"] == "low"
    assert body["temperature"] == 0.5  # extra_body wins
    assert WIRE.body("m", CONVERSATION, [], 8, False) == WIRE.body(
        "m", CONVERSATION, [], 8, False, ModelSettings()
    )


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("lookup", {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_tool_choice(choice: str, sent: object) -> None:
    body = WIRE.body("m", CONVERSATION, [LOOKUP], 8, False, ModelSettings(tool_choice=choice))
    assert body["tool_choice"] == sent


def test_tool_settings_go_only_with_tools() -> None:
    # (The API refuses tool_choice in a call without tools: an agent's last
    # answer, made without tools, leaves them out.)
    settings = ModelSettings(tool_choice="lookup", parallel_tool_calls=True)
    body = WIRE.body("m", CONVERSATION, [], 8, False, settings)
    assert "tool_choice" not in body and "parallel_tool_calls" not in body
    other = ToolSchema("other", "", {"type": "object"})
    with pytest.raises(InvalidArgument, match=r"tool_choice names tool 'lookup'.*'other'"):
        WIRE.body("m", CONVERSATION, [other], 8, False, settings)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (ModelSettings(options={"num_ctx": 8192}), "ModelSettings.options"),
        (ModelSettings(keep_alive="5m"), "ModelSettings.keep_alive"),
        (ModelSettings(cache_control={"type": "ephemeral"}), "ModelSettings.cache_control"),
        (ModelSettings(extra_body={"model": "other"}), "extra_body must not set 'model'"),
        (ModelSettings(extra_body={"max_tokens": 1}), "extra_body must not set 'max_tokens'"),
    ],
)
def test_settings_the_wire_has_no_place_for_are_errors(settings: ModelSettings, named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        WIRE.body("m", CONVERSATION, [], 8, False, settings)
    with pytest.raises(InvalidArgument, match=named):
        WIRE.check_settings(settings)


# -- typed outputs: structured outputs ------------------------------------------------


class _Movie(msgspec.Struct):
    title: str
    year: int = 0


MOVIE = OutputSchema("Movie", msgspec.json.schema(_Movie))


def test_body_asks_for_a_strict_json_schema() -> None:
    body = WIRE.body("gpt-x", CONVERSATION[:2], [], 64, False, output=MOVIE)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Movie",
            "strict": True,
            "schema": {
                "title": "_Movie",
                "type": "object",
                "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
                # every property required, none more allowed; no "default"
                "required": ["title", "year"],
                "additionalProperties": False,
            },
        },
    }
    assert "response_format" not in WIRE.body("gpt-x", CONVERSATION[:2], [], 64, False)


@pytest.mark.parametrize("stream", [False, True])
async def test_structured_output_over_http(stream: bool) -> None:
    answer = ModelReply(text='{"title": "Alien", "year": 1979}', usage=Usage(5, 9))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=50, output_schema=MOVIE
        )
        (seen,) = server.requests
    assert reply.text == '{"title": "Alien", "year": 1979}'  # (not wrapped: as it came)
    assert seen.output_schema == MOVIE.strict_schema


@pytest.mark.parametrize("stream", [False, True])
async def test_a_schema_without_a_strict_form_is_sent_wrapped_not_strict(stream: bool) -> None:
    counts = OutputSchema("counts", msgspec.json.schema(dict[str, int]))
    answer = ModelReply(text='{"result": {"a": 1}}')
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=50, output_schema=counts
        )
        (seen,) = server.requests
    form = seen.body["response_format"]
    assert isinstance(form, dict) and form["json_schema"]["strict"] is False
    assert seen.output_schema == counts.object_schema
    assert reply.text == '{"a":1}'  # unwrapped from "result"


# -- content parts -------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF"


def _with_parts(*parts: object) -> list[ChatMessage]:
    from agentrio.types import TextPart

    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return [ChatMessage("system", "look"), ChatMessage("user", text, parts=tuple(parts))]  # type: ignore[arg-type]


async def test_images_and_a_pdf_go_as_image_url_and_file_parts() -> None:
    import base64

    from agentrio import DocumentPart, ImagePart
    from agentrio.types import TextPart

    parts = (
        TextPart("what is in these?"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/cat.jpg"),
        DocumentPart(data=PDF, name="report.pdf"),
    )
    async with open_fake_llm([ModelReply(text="a cat")]) as server, provider(server) as p:
        reply = await p.complete("gpt-x", _with_parts(*parts), [], max_output_tokens=50)
    assert reply.text == "a cat"
    sent = server.requests[0]
    assert sent.body["messages"][1]["content"] == [  # type: ignore[index]
        {"type": "text", "text": "what is in these?"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": "data:application/pdf;base64," + base64.b64encode(PDF).decode(),
            },
        },
    ]
    # The fake server decoded them back: what the handler sees is what was given.
    assert sent.messages[1].parts == parts
    assert sent.messages[1].content == "what is in these?"


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ("document_url", "takes no documents by URL"),
        ("text_document", "takes documents of the types application/pdf"),
        ("huge_image", "takes images of at most 20971520 bytes; this one is 20971529 bytes"),
    ],
)
async def test_a_part_openai_cannot_take_is_refused_before_sending(
    part: str, expected: str
) -> None:
    from agentrio import DocumentPart, ImagePart

    made = {
        "document_url": lambda: DocumentPart(url="https://example.com/a.pdf?sig=SECRET"),
        "text_document": lambda: DocumentPart(data=b"notes", media_type="text/plain"),
        "huge_image": lambda: ImagePart(
            data=PNG[:8] + bytes(20 * 1024 * 1024 + 1), media_type="image/png"
        ),
    }[part]()
    async with open_fake_llm([ModelReply(text="no")]) as server, provider(server) as p:
        with pytest.raises(InvalidArgument) as caught:
            await p.complete("gpt-x", _with_parts(made), [], max_output_tokens=50)
        assert server.statistics().http_requests == 0  # nothing reached the server
        assert p.statistics().requests == 0
    message = str(caught.value)
    assert message.startswith("provider 'oa': user turn part 0 (")
    assert expected in message
    assert "SECRET" not in message and "\\x00" not in message and len(message) < 400


def test_parts_only_in_user_turns() -> None:
    from agentrio import ImagePart

    image = ImagePart(data=PNG, media_type="image/png")
    with pytest.raises(InvalidArgument, match="'assistant' turn holds content parts"):
        WIRE.body("gpt-x", [ChatMessage("assistant", "", parts=(image,))], [], 10, False)


# -- an error object ending a stream ---------------------------------------------------------

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
)
KEY = "sk-oa-STREAM-ERROR-5e1f0c"
RATE_LIMITED = {
    "error": {
        "message": f"Rate limit reached for key {KEY}; try again in 20ms.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


Event = dict[str, object] | str  # a chunk, or "[DONE]"


def _streaming_server(*answers: list[Event]) -> Callable[[trio.SocketStream], Any]:
    """A server sending each connection the next of *answers*, as SSE events then an end."""
    left = list(answers)

    async def serve(conn: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await conn.receive_some()
        await conn.send_all(STREAM_HEAD)
        for event in left.pop(0):
            data = event if isinstance(event, str) else json.dumps(event)
            frame = b"data: " + data.encode() + b"\n\n"
            await conn.send_all(b"%x\r\n%s\r\n" % (len(frame), frame))
        await conn.send_all(b"0\r\n\r\n")
        await conn.aclose()

    return serve


@asynccontextmanager
async def streaming(*answers: list[Event], retries: int) -> AsyncIterator[Provider]:
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, _streaming_server(*answers), 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}/v1"
        config = ProviderConfig(
            name="oa", kind="openai", base_url=url, stream=True, max_retries=retries
        )
        async with Provider(config, api_key=KEY) as p:
            yield p
        nursery.cancel_scope.cancel()


async def test_an_error_object_ending_a_stream_is_quoted_redacted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    begun: list[Event] = [chunk({"content": "The answer"}), chunk({"content": " is"})]
    async with streaming([*begun, RATE_LIMITED], retries=0) as p:
        with pytest.raises(BadResponse) as info:
            await p.complete("m", CONVERSATION, [], max_output_tokens=8)
    shown = str(info.value)
    assert "the stream reported an error" in shown and "before [DONE]" not in shown
    assert "rate_limit_exceeded" in shown and "Rate limit reached for key [redacted]" in shown
    assert KEY not in repr(info.value)


async def test_an_error_object_ending_a_stream_is_retried_as_anthropic_s_error_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    done: list[Event] = [chunk({"content": "ok"}, "stop"), "[DONE]"]
    async with streaming([chunk({"content": "o"}), RATE_LIMITED], done, retries=1) as p:
        reply = await p.complete("m", CONVERSATION, [], max_output_tokens=8)
        stats = p.statistics()
    assert reply.text == "ok"
    assert (stats.requests, stats.retries, stats.failures) == (2, 1, 1)
