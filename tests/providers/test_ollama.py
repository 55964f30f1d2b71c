"""The Ollama native wire (/api/chat): request bodies, answers and NDJSON streams,
against the fake server over real sockets, and the parsers fuzzed with any JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

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
from agentrio.providers.bounded import TooLarge
from agentrio.providers.ollama import OllamaWire
from agentrio.testing import FakeLLMServer, open_fake_llm
from agentrio.types import OutputSchema, ToolSchema

WIRE = OllamaWire()
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
    # Ollama has no call ids: the provider numbers the calls.
    tool_calls=(
        ToolCallRequest("lookup", {"key": "b", "depth": 2}, id="call_1"),
        ToolCallRequest("lookup", {"key": "c"}, id="call_2"),
    ),
    usage=Usage(31, 17),
)


@asynccontextmanager
async def provider(server: FakeLLMServer, **options: Any) -> AsyncIterator[Provider]:
    config = ProviderConfig(
        name="ol", kind="ollama", base_url=server.base_url, max_retries=0, **options
    )
    async with Provider(config) as p:
        yield p


# -- the request ---------------------------------------------------------------------------


def test_body() -> None:
    body = WIRE.body("qwen2.5:0.5b", CONVERSATION, [LOOKUP], 256, False)
    assert body["model"] == "qwen2.5:0.5b" and body["stream"] is False
    assert body["options"] == {"num_predict": 256}
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is a?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "lookup", "arguments": {"key": "a"}}}],
        },
        {"role": "tool", "content": "a is 1", "tool_name": "lookup"},
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


def test_body_says_stream_either_way() -> None:
    # Ollama streams unless told not to, so the flag is always sent.
    assert WIRE.body("m", [ChatMessage("user", "hi")], [], 8, True)["stream"] is True
    assert "tools" not in WIRE.body("m", [ChatMessage("user", "hi")], [], 8, False)


def test_headers() -> None:
    assert WIRE.headers("k-123") == {"Authorization": "Bearer k-123"}
    assert WIRE.headers(None) == {}


# -- against the fake server ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_text_tool_calls_and_usage(stream: bool) -> None:
    deltas: list[str] = []
    async with open_fake_llm([REPLY]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "qwen2.5:0.5b", CONVERSATION, [LOOKUP], max_output_tokens=99, on_text=deltas.append
        )
        (seen,) = server.requests
    assert reply == REPLY
    assert ("".join(deltas), len(deltas) > 1) == ((REPLY.text, True) if stream else ("", False))
    assert (seen.api, seen.model, seen.stream, seen.max_tokens) == (
        "ollama",
        "qwen2.5:0.5b",
        stream,
        99,
    )
    assert seen.tools == ["lookup"]
    # The native API carries no call ids: tool turns are matched by tool name.
    assert seen.messages == [
        *CONVERSATION[:2],
        ChatMessage("assistant", "", tool_calls=(ToolCallRequest("lookup", {"key": "a"}),)),
        ChatMessage("tool", "a is 1", name="lookup"),
        CONVERSATION[4],
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_only_answer(stream: bool) -> None:
    answer = ModelReply(text="hi there", usage=Usage(3, 2))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        assert await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5) == answer


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_written_in_the_text_are_calls_by_default(stream: bool) -> None:
    text = 'Calling: {"name": "lookup", "arguments": {"key": "k"}}'
    replies = [ModelReply(text=text)] * 2
    async with open_fake_llm(replies) as server, provider(server, stream=stream) as p:
        reply = await p.complete("m", CONVERSATION[:2], [LOOKUP], max_output_tokens=5)
        # No such tool offered: the text stays text.
        plain = await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5)
    assert reply.text == "" and reply.tool_calls == (
        ToolCallRequest("lookup", {"key": "k"}, id="text_call_1"),
    )
    assert plain.text == text and plain.tool_calls == ()


async def test_calls_written_in_the_text_can_be_turned_off() -> None:
    text = '{"name": "lookup", "arguments": {}}'
    replies = [ModelReply(text=text)]
    async with open_fake_llm(replies) as server, provider(server, tool_calls_in_text=False) as p:
        reply = await p.complete("m", CONVERSATION[:2], [LOOKUP], max_output_tokens=5)
    assert reply.text == text and reply.tool_calls == ()


# -- parse -------------------------------------------------------------------------------


def answer(message: object, **extra: object) -> dict[str, object]:
    return {"model": "m", "message": message, "done": True, **extra}


def test_parse_numbers_calls_and_reads_usage() -> None:
    calls = [{"function": {"name": "f", "arguments": {"a": 1}}}, {"function": {"name": "g"}}]
    data = answer({"content": "x", "tool_calls": calls}, prompt_eval_count=4, eval_count=5)
    assert WIRE.parse(data, "ol", None) == ModelReply(
        text="x",
        tool_calls=(
            ToolCallRequest("f", {"a": 1}, id="call_1"),
            ToolCallRequest("g", {}, id="call_2"),
        ),
        usage=Usage(4, 5),
    )


def test_parse_tolerates_what_is_optional() -> None:
    assert WIRE.parse(answer({"role": "assistant"}), "ol", None) == ModelReply()
    bad_counts = answer({"content": ""}, prompt_eval_count=None, eval_count=-4)
    assert WIRE.parse(bad_counts, "ol", None).usage == Usage()
    broken = answer({"tool_calls": [{"function": {"name": "f", "arguments": "{'a': 'it's'}"}}]})
    (call,) = WIRE.parse(broken, "ol", None).tool_calls
    assert call.arguments == {} and "could not be repaired" in call.error


@pytest.mark.parametrize(
    ("data", "what"),
    [
        ([], "body is not a JSON object"),
        ({"done": True}, "body.message"),
        (answer({"content": 3}), "content is not a string"),
        (answer({"tool_calls": {"function": {}}}), "tool_calls is not a list"),
        (answer({"tool_calls": [{"fn": {}}]}), "tool_calls[0].function"),
        (answer({"tool_calls": [{"function": {"arguments": {}}}]}), "has no name"),
    ],
)
def test_parse_errors_say_what_was_wrong(data: object, what: str) -> None:
    with pytest.raises(BadResponse) as info:
        WIRE.parse(data, "ol", None)
    assert what in str(info.value) and info.value.provider == "ol"


# -- the stream parser ------------------------------------------------------------------


def test_stream_assembles_text_calls_and_usage() -> None:
    pieces: list[str] = []
    parser = WIRE.stream_parser("ol", pieces.append, None)
    call = {"function": {"name": "f", "arguments": {"n": 1}}}
    lines = [
        {"message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"message": {"role": "assistant", "content": "lo"}, "done": False},
        {"message": {"content": "", "tool_calls": [call]}, "done": False},
        {"message": {"content": "", "tool_calls": [call]}, "done": False},
        {"message": {"content": ""}, "done": True, "prompt_eval_count": 8, "eval_count": 3},
    ]
    for line in lines:
        parser.feed(json.dumps(line))
        parser.feed("")  # blank lines between are ignored
    assert pieces == ["Hel", "lo"]
    # Calls on separate lines are numbered across the whole answer.
    assert parser.finish() == ModelReply(
        text="Hello",
        tool_calls=(
            ToolCallRequest("f", {"n": 1}, id="call_1"),
            ToolCallRequest("f", {"n": 1}, id="call_2"),
        ),
        usage=Usage(8, 3),
    )


def test_a_stream_without_done_was_cut_short() -> None:
    parser = WIRE.stream_parser("ol", None, None)
    parser.feed(json.dumps({"message": {"content": "partial"}, "done": False}))
    with pytest.raises(BadResponse, match='before "done": true'):
        parser.finish()


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("{not json", "not JSON"),
        ("[" * 50_000, "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"error": "model not found"}', "model not found"),
        ('{"message": {"tool_calls": 3}}', "tool_calls is not a list"),
    ],
)
def test_stream_errors(line: str, what: str) -> None:
    parser = WIRE.stream_parser("ol", None, None)
    with pytest.raises(BadResponse) as info:
        parser.feed(line)
    assert what in str(info.value)


@pytest.mark.parametrize("kind", ["text", "calls"])
def test_an_endless_reply_passes_max_reply_chars(kind: str) -> None:
    parser = WIRE.stream_parser("ol", None, None, max_reply_chars=1000)
    if kind == "text":
        message: dict[str, object] = {"content": "abcd"}
    else:  # Ollama sends each call whole, on one line
        message = {"content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}
    line = json.dumps({"message": message, "done": False})
    with pytest.raises(TooLarge, match=r"max_reply_chars \(1000 characters\)"):
        for _ in range(1000):
            parser.feed(line)
    assert parser.size <= 1000 + 64 + len(line)


# -- fuzzing (see wirefuzz.py): a ModelReply or a BadResponse, nothing else ------------


GOOD_CALLS = [{"function": {"name": "lookup", "arguments": {"key": "k"}}}]
GOOD = answer(
    {"role": "assistant", "content": "hi", "tool_calls": GOOD_CALLS},
    prompt_eval_count=3,
    eval_count=4,
)
GOOD_LINES: list[object] = [
    {"message": {"role": "assistant", "content": "hi"}, "done": False},
    {"message": {"role": "assistant", "content": "", "tool_calls": GOOD_CALLS}, "done": False},
    {"message": {"content": ""}, "done": True, "prompt_eval_count": 3, "eval_count": 4},
]


def accepts(data: object, text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.accepts(WIRE, "ol", data, text_tools)


def streams(lines: list[str], text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.streams(WIRE, "ol", lines, text_tools)


def test_every_field_damaged_in_turn() -> None:
    assert accepts(GOOD) is not None
    for data in damaged(GOOD):
        accepts(data, ["lookup"])


def test_every_stream_field_damaged_in_turn() -> None:
    assert streams([json.dumps(line) for line in GOOD_LINES]) == accepts(GOOD)
    for i, line in enumerate(GOOD_LINES):
        for bad_line in damaged(line):
            lines = [*GOOD_LINES[:i], bad_line, *GOOD_LINES[i + 1 :]]
            streams([json.dumps(x) for x in lines])


@FUZZ
@given(damaged_at_random(GOOD) | json_values, st.sampled_from([None, ["lookup"]]))
def test_parse_fuzz(data: object, text_tools: list[str] | None) -> None:
    accepts(data, text_tools)


_line = st.one_of(
    st.sampled_from(GOOD_LINES).flatmap(damaged_at_random).map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=30),
    st.just('{"done": true}'),
)


@FUZZ
@given(st.lists(_line, max_size=8), st.sampled_from([None, ["lookup"]]))
def test_stream_fuzz(lines: list[str], text_tools: list[str] | None) -> None:
    streams(lines, text_tools)


# -- fidelity: what the API reference documents ------------------------------------------
# The fixtures below are in the shapes of Ollama's /api/chat reference: the final
# object with done_reason and its counts and durations.


def documented_final(content: str, done_reason: str, **message: object) -> dict[str, object]:
    return {
        "model": "llama3.2",
        "created_at": "2023-12-12T14:13:43.416799Z",
        "message": {"role": "assistant", "content": content, **message},
        "done": True,
        "done_reason": done_reason,
        "total_duration": 5191566416,
        "load_duration": 2154458,
        "prompt_eval_count": 26,
        "prompt_eval_duration": 383809000,
        "eval_count": 298,
        "eval_duration": 4799921000,
    }


@pytest.mark.parametrize(
    ("done_reason", "finish"), [("stop", "stop"), ("length", "length"), ("load", "stop")]
)
def test_parse_reads_the_done_reason(done_reason: str, finish: str) -> None:
    reply = WIRE.parse(documented_final("The sky is", done_reason), "ol", None)
    assert reply == ModelReply(text="The sky is", usage=Usage(26, 298), finish_reason=finish)  # type: ignore[arg-type]


def test_stream_reads_the_done_reason() -> None:
    parser = WIRE.stream_parser("ol", None, None)
    first = {**documented_final("The sky", "stop"), "done": False}
    for key in ("done_reason", "total_duration", "prompt_eval_count", "eval_count"):
        del first[key]
    for line in (json.dumps(first), json.dumps(documented_final(" is", "length"))):
        parser.feed(line)
    assert parser.finish() == ModelReply(
        text="The sky is", usage=Usage(26, 298), finish_reason="length"
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_cut_answer_over_the_wire(stream: bool) -> None:
    cut = ModelReply(text="The sky is", usage=Usage(26, 298), finish_reason="length")
    async with open_fake_llm([cut]) as server, provider(server, stream=stream) as p:
        assert await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5) == cut


# -- request settings ----------------------------------------------------------------------


def test_settings_go_into_options_and_keep_alive() -> None:
    settings = ModelSettings(
        temperature=0.2,
        top_p=0.5,
        stop=["\n\n"],
        seed=3,
        options={"num_ctx": 8192, "top_k": 20, "temperature": 1.0},
        keep_alive="10m",
        extra_body={"format": "json"},
    )
    body = WIRE.body("m", CONVERSATION, [LOOKUP], 64, False, settings)
    assert body["options"] == {
        "num_ctx": 8192,
        "top_k": 20,
        "temperature": 0.2,  # the setting wins over the same option
        "num_predict": 64,
        "top_p": 0.5,
        "seed": 3,
        "stop": ["\n\n"],
    }
    assert (body["keep_alive"], body["format"]) == ("10m", "json")
    alive = WIRE.body("m", CONVERSATION, [], 64, False, ModelSettings(keep_alive=-1))
    assert alive["keep_alive"] == -1 and alive["options"] == {"num_predict": 64}


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (ModelSettings(tool_choice="auto"), "ModelSettings.tool_choice"),
        (ModelSettings(parallel_tool_calls=False), "ModelSettings.parallel_tool_calls"),
        (ModelSettings(cache_control={"type": "ephemeral"}), "ModelSettings.cache_control"),
        (ModelSettings(extra_body={"options": {}}), "extra_body must not set 'options'"),
    ],
)
def test_settings_the_wire_has_no_place_for_are_errors(settings: ModelSettings, named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        WIRE.body("m", CONVERSATION, [LOOKUP], 8, False, settings)


def test_num_predict_is_the_output_limit_not_an_option() -> None:
    with pytest.raises(InvalidArgument, match="num_predict"):
        ModelSettings(options={"num_predict": 10})


async def test_settings_reach_the_server() -> None:
    settings = ModelSettings(options={"num_ctx": 4096}, keep_alive=0)
    async with open_fake_llm() as server, provider(server, settings=settings) as p:
        await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5)
        await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=6, settings=ModelSettings(seed=9)
        )
    first, second = (r.body for r in server.requests)
    assert first["options"] == {"num_ctx": 4096, "num_predict": 5} and first["keep_alive"] == 0
    assert second["options"] == {"num_ctx": 4096, "num_predict": 6, "seed": 9}


# -- typed outputs: format -------------------------------------------------------------


class _Movie(msgspec.Struct):
    title: str
    year: int = 0


MOVIE = OutputSchema("Movie", msgspec.json.schema(_Movie))


def test_body_asks_for_the_format() -> None:
    body = WIRE.body("llama", CONVERSATION[:2], [], 64, False, output=MOVIE)
    assert body["format"] == MOVIE.object_schema
    assert "format" not in WIRE.body("llama", CONVERSATION[:2], [], 64, False)


@pytest.mark.parametrize("stream", [False, True])
async def test_format_over_http(stream: bool) -> None:
    tags = OutputSchema("tags", msgspec.json.schema(list[str]))
    answers = [
        ModelReply(text='{"title": "Alien", "year": 1}'),
        ModelReply(text='{"result": ["x"]}'),
    ]
    async with open_fake_llm(answers) as server, provider(server, stream=stream) as p:
        movie = await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=9, output_schema=MOVIE
        )
        listed = await p.complete(
            "m", CONVERSATION[:2], [], max_output_tokens=9, output_schema=tags
        )
        first, second = server.requests
    assert (first.output_schema, second.output_schema) == (MOVIE.object_schema, tags.object_schema)
    assert (movie.text, listed.text) == ('{"title": "Alien", "year": 1}', '["x"]')


# -- content parts -------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 24


async def test_images_go_as_base64_images() -> None:
    import base64

    from agentrio import ImagePart
    from agentrio.types import TextPart

    parts = (
        TextPart("describe"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(data=JPEG, media_type="image/jpeg"),
    )
    messages = [ChatMessage("user", "describe", parts=parts)]
    async with open_fake_llm([ModelReply(text="two")]) as server, provider(server) as p:
        assert (await p.complete("llava", messages, [], max_output_tokens=50)).text == "two"
    sent = server.requests[0]
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": "describe",
            "images": [base64.b64encode(PNG).decode(), base64.b64encode(JPEG).decode()],
        }
    ]
    assert sent.messages[0].parts == parts


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ("url", "takes images as data only, not by URL: give ImagePart(data=...)"),
        ("gif", "takes images of the types image/png, image/jpeg"),
        ("pdf", "takes no documents"),
    ],
)
async def test_what_ollama_cannot_take_is_refused_before_sending(part: str, expected: str) -> None:
    from agentrio import DocumentPart, ImagePart

    made = {
        "url": lambda: ImagePart(url="https://user:pw@example.com/cat.png?token=SECRET"),
        "gif": lambda: ImagePart(data=b"GIF89a" + bytes(10), media_type="image/gif"),
        "pdf": lambda: DocumentPart(data=b"%PDF-1.4 x"),
    }[part]()
    messages = [ChatMessage("user", "", parts=(made,))]
    async with open_fake_llm([ModelReply(text="no")]) as server, provider(server) as p:
        with pytest.raises(InvalidArgument) as caught:
            await p.complete("llava", messages, [], max_output_tokens=50)
        assert server.statistics().http_requests == 0
    message = str(caught.value)
    assert message.startswith("provider 'ol': user turn part 0 (")
    assert "the ollama wire format " + expected in message
    assert "SECRET" not in message and "pw" not in message
