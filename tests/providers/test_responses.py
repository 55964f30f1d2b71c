"""The OpenAI Responses wire (``kind = "openai-responses"``): request bodies, answers
and streams, against the fake server over real sockets and against a server that
answers in the shapes of the official SDK's ``openai.types.responses`` (Response,
ResponseStreamEvent and their items), and the parsers fuzzed with any JSON."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio.testing
import wirefuzz
from hypothesis import given
from hypothesis import strategies as st
from wirefuzz import FUZZ, damaged, damaged_at_random, json_values

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    ConfigError,
    DocumentPart,
    ImagePart,
    InvalidArgument,
    ModelReply,
    ModelSettings,
    Provider,
    ProviderConfig,
    ToolCallRequest,
    Usage,
)
from agentrio.config import parse_config
from agentrio.errors import BadResponse, ContextTooLong
from agentrio.providers.anthropic import AnthropicWire
from agentrio.providers.bounded import TooLarge
from agentrio.providers.responses import INCLUDE, ResponsesWire
from agentrio.testing import FakeLLMServer, open_fake_llm
from agentrio.types import OutputSchema, TextPart, ThinkingBlock, ToolSchema

WIRE = ResponsesWire()
KEY = "sk-responses-SECRET-0123456789"
LOOKUP = ToolSchema(
    "lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}}
)
REASONING = ThinkingBlock(
    id="rs_67ccd3acc8d48190a77525dc6de64b4104becb25c7b7fc33",
    encrypted_content="gAAAAABnzNOx3b1Xk-ENCRYPTED",
    summary=("**Looking up a**\n\nI should call lookup.",),
)
CONVERSATION = [
    ChatMessage("system", "be brief"),
    ChatMessage("user", "what is a?"),
    ChatMessage(
        "assistant",
        "",
        tool_calls=(ToolCallRequest("lookup", {"key": "a"}, id="call_1"),),
        thinking=(REASONING,),
    ),
    ChatMessage("tool", "a is 1", tool_call_id="call_1", name="lookup"),
    ChatMessage("assistant", "a is 1."),
    ChatMessage("user", "and?"),
]
REPLY = ModelReply(
    text="The answer is one, as the lookup said.",
    tool_calls=(
        ToolCallRequest("lookup", {"key": "b", "depth": 2}, id="x1"),
        ToolCallRequest("lookup", {"key": "c"}, id="x2"),
    ),
    usage=Usage(31, 17, cached_input_tokens=8, reasoning_tokens=5),
    thinking=(REASONING,),
)


@asynccontextmanager
async def provider(server: FakeLLMServer, **options: Any) -> AsyncIterator[Provider]:
    config = ProviderConfig(
        name="rs",
        kind="openai-responses",
        base_url=server.base_url + "/v1",
        max_retries=0,
        **options,
    )
    async with Provider(config) as p:
        yield p


# -- the request ---------------------------------------------------------------------------


def test_body() -> None:
    body = WIRE.body("gpt-5-mini", CONVERSATION, [LOOKUP], 256, False)
    assert body["model"] == "gpt-5-mini" and body["instructions"] == "be brief"
    assert (body["max_output_tokens"], body["stream"]) == (256, False)
    # No state on the server; the reasoning comes back encrypted, to be sent again.
    assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])
    assert body["input"] == [
        {"type": "message", "role": "user", "content": "what is a?"},
        {
            "type": "reasoning",
            "id": REASONING.id,
            "summary": [{"type": "summary_text", "text": REASONING.summary[0]}],
            "encrypted_content": REASONING.encrypted_content,
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"key": "a"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a is 1"},
        {"type": "message", "role": "assistant", "content": "a is 1."},
        {"type": "message", "role": "user", "content": "and?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look a key up.",
            "parameters": LOOKUP.parameters,
            "strict": False,  # (the API reads a tool without it as strict)
        }
    ]


def test_a_later_system_turn_stays_in_place_and_empty_tools_are_left_out() -> None:
    messages = [ChatMessage("user", "hi"), ChatMessage("system", "now be formal")]
    body = WIRE.body("m", messages, [], 8, True)
    assert "instructions" not in body and "tools" not in body and body["stream"] is True
    assert body["input"][1] == {"type": "message", "role": "system", "content": "now be formal"}  # type: ignore[index]


async def test_an_output_limit_below_the_apis_least_goes_out_as_16() -> None:
    assert WIRE.body("m", [ChatMessage("user", "q")], [], 3, False)["max_output_tokens"] == 16
    async with open_fake_llm([ModelReply(text="ok")]) as server, provider(server) as p:
        await p.complete("m", [ChatMessage("user", "q")], [], max_output_tokens=1)
        async with httpx.AsyncClient(base_url=server.base_url, trust_env=False) as client:
            refused = await client.post(
                "/v1/responses", json={"model": "m", "input": "q", "max_output_tokens": 1}
            )
    assert server.requests[0].max_tokens == 16
    assert refused.status_code == 400 and "Expected a value >= 16" in refused.text


def test_headers() -> None:
    assert WIRE.headers("k-123") == {"Authorization": "Bearer k-123"}
    assert WIRE.headers(None) == {}


def test_anthropic_leaves_reasoning_items_out() -> None:
    # A conversation that moved from one wire to the other (escalation) sends
    # each its own kind: an OpenAI reasoning item is no Anthropic thinking block.
    anthropic = AnthropicWire().body("claude", CONVERSATION, [LOOKUP], 64, False)
    sent = anthropic["messages"][1]["content"]  # type: ignore[index]
    assert [block["type"] for block in sent] == ["tool_use"]
    anthropic_block = ThinkingBlock("hmm", "sig")
    turn = ChatMessage("assistant", "x", thinking=(anthropic_block,))
    body = WIRE.body("m", [ChatMessage("user", "q"), turn], [], 8, False)
    assert body["input"][1] == {"type": "message", "role": "assistant", "content": "x"}  # type: ignore[index]


# -- against the fake server ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_text_tool_calls_reasoning_and_usage(stream: bool) -> None:
    deltas: list[str] = []
    async with open_fake_llm([REPLY]) as server, provider(server, stream=stream) as p:
        reply = await p.complete(
            "gpt-5", CONVERSATION, [LOOKUP], max_output_tokens=99, on_text=deltas.append
        )
        (seen,) = server.requests
    assert reply == REPLY
    # Text deltas only come with a stream, and add up to the text (never the reasoning).
    assert ("".join(deltas), len(deltas) > 1) == ((REPLY.text, True) if stream else ("", False))
    assert (seen.api, seen.model, seen.stream, seen.max_tokens) == (
        "responses",
        "gpt-5",
        stream,
        99,
    )
    assert seen.tools == ["lookup"]
    # The fake server read the items back into the conversation, reasoning and all.
    assert seen.messages == CONVERSATION


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_only_answer(stream: bool) -> None:
    answer = ModelReply(text="hi there", usage=Usage(3, 2))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        assert await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5) == answer


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_goes_back_with_the_tool_results(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    @agentrio.tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        await trio.lowlevel.checkpoint()
        return f"{key} is 1"

    replies = [
        ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "a"}),), thinking=(REASONING,)),
        ModelReply(text="a is 1"),
    ]
    async with open_fake_llm(replies) as server, provider(server, stream=stream) as p:
        async with agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(AgentSpec("a", p.model("gpt-5"), tools=[lookup]))
            result = await agent.run("what is a?")
            history = [t.message for t in await agent.history()]
        second = server.requests[1].body["input"]
    assert (result.stop_reason, result.final_text) == ("done", "a is 1")
    assert isinstance(second, list)
    # The reasoning item went back whole, before the call it led to (store: false
    # makes the fake server refuse one without its encrypted_content, as the API does).
    reasoning, call, output = second[1:4]
    assert reasoning == {
        "type": "reasoning",
        "id": REASONING.id,
        "summary": [{"type": "summary_text", "text": REASONING.summary[0]}],
        "encrypted_content": REASONING.encrypted_content,
    }
    assert (call["type"], call["name"], output["type"]) == (
        "function_call",
        "lookup",
        "function_call_output",
    )
    assert call["call_id"] == output["call_id"]
    # The history keeps it with the assistant's turn; it is never answer text.
    assert history[1].thinking == (REASONING,) and history[1].content == ""


def test_with_store_false_a_reasoning_item_without_encrypted_content_stays_home() -> None:
    bare = ThinkingBlock(id="rs_1", summary=("s",))
    messages = [ChatMessage("user", "q"), ChatMessage("assistant", "ok", thinking=(bare,))]
    # (the API would answer 400: with store: false it kept nothing to find it by)
    assert [i["type"] for i in WIRE.body("m", messages, [], 8, False)["input"]] == [  # type: ignore[union-attr]
        "message",
        "message",
    ]
    stored = ModelSettings(extra_body={"store": True})
    sent = WIRE.body("m", messages, [], 8, False, stored)["input"]
    assert [i["type"] for i in sent] == ["message", "reasoning", "message"]  # type: ignore[union-attr]


def test_reasoning_that_led_to_nothing_is_not_sent_back() -> None:
    # (the API refuses a reasoning item without its following item)
    cut = ChatMessage("assistant", "", thinking=(REASONING,))
    body = WIRE.body(
        "m", [ChatMessage("user", "q"), cut, ChatMessage("user", "go on")], [], 8, False
    )
    assert [i["role"] for i in body["input"]] == ["user", "user"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("model", "included"),
    [
        ("gpt-5-mini", True),
        ("o3", True),
        ("o4-mini-2025-04-16", True),
        ("gpt-4o-mini", False),
        ("gpt-4.1", False),
        ("gpt-5-chat-latest", False),
        ("openai/gpt-4o", False),
    ],
)
def test_encrypted_reasoning_is_asked_of_the_models_that_reason(model: str, included: bool) -> None:
    body = WIRE.body(model, [ChatMessage("user", "q")], [], 8, False)
    assert ("include" in body) is included
    assert body["store"] is False


async def test_the_fake_server_answers_as_the_api_does_to_what_it_refuses() -> None:
    async with open_fake_llm([ModelReply(text="x"), ModelReply(text="y")]) as server:
        async with httpx.AsyncClient(base_url=server.base_url, trust_env=False) as client:
            include = {"model": "gpt-4o", "input": "hi", "include": list(INCLUDE)}
            refused = await client.post("/v1/responses", json=include)
            bare = {"type": "reasoning", "id": "rs_1", "summary": []}
            lost = {
                "model": "o3",
                "input": [bare, {"role": "user", "content": "q"}],
                "store": False,
            }
            forgotten = await client.post("/v1/responses", json=lost)
        async with provider(server) as p:  # (and the wire asks gpt-4o for no encrypted content)
            reply = await p.complete(
                "gpt-4o-mini", [ChatMessage("user", "q")], [], max_output_tokens=5
            )
    assert refused.status_code == 400 and "Encrypted content is not supported" in refused.text
    assert forgotten.status_code == 400 and "Items are not persisted" in forgotten.text
    assert reply.text == "x"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [("length", "max_output_tokens"), ("content_filter", "content_filter")],
)
async def test_incomplete_answers_end_the_phase_so(
    autojump_clock: trio.testing.MockClock, stream: bool, finish: str, stop_reason: str
) -> None:
    cut = ModelReply(text="In short, the", usage=Usage(20, 16), finish_reason=finish)  # type: ignore[arg-type]
    async with (
        open_fake_llm([cut]) as server,
        provider(server, stream=stream) as p,
        agentrio.open_runtime() as rt,
    ):
        agent = await rt.spawn_agent(AgentSpec("a", p.model("m")))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == (stop_reason, "In short, the")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_refusal(stream: bool) -> None:
    refused = ModelReply(refusal="I can't help with that.", finish_reason="refusal")
    async with open_fake_llm([refused]) as server, provider(server, stream=stream) as p:
        reply = await p.complete("m", CONVERSATION[:2], [], max_output_tokens=5)
    assert (reply.text, reply.refusal, reply.finish_reason) == ("", refused.refusal, "refusal")


# -- structured output ----------------------------------------------------------------------


class _Movie(msgspec.Struct):
    title: str
    year: int


def test_body_asks_for_a_strict_json_schema_in_text_format() -> None:
    output = OutputSchema("Movie", msgspec.json.schema(_Movie))
    body = WIRE.body("m", CONVERSATION[:2], [], 50, False, output=output)
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Movie",
            "schema": output.strict_schema,
            "strict": True,
        }
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_structured_output_over_http(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    answer = ModelReply(text='{"title": "Alien", "year": 1979}')
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        async with agentrio.open_runtime() as rt:
            spec = AgentSpec("a", p.model("m"), output_type=_Movie)
            result = await (await rt.spawn_agent(spec)).run("a film")
        (seen,) = server.requests
    assert result.output == _Movie("Alien", 1979)
    assert seen.output_schema is not None and seen.output_schema["type"] == "object"


# -- images and files --------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF"


async def test_images_and_pdfs_go_as_input_image_and_input_file_parts() -> None:
    parts = (
        TextPart("what is in these?"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/cat.jpg"),
        DocumentPart(data=PDF, name="report.pdf"),
        DocumentPart(url="https://example.com/paper.pdf"),
    )
    messages = [
        ChatMessage("system", "look"),
        ChatMessage("user", "what is in these?", parts=parts),
    ]
    async with open_fake_llm([ModelReply(text="a cat")]) as server, provider(server) as p:
        reply = await p.complete("gpt-5", messages, [], max_output_tokens=50)
    assert reply.text == "a cat"
    sent = server.requests[0]
    assert sent.body["input"][0]["content"] == [  # type: ignore[index]
        {"type": "input_text", "text": "what is in these?"},
        {
            "type": "input_image",
            "detail": "auto",
            "image_url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
        },
        {"type": "input_image", "detail": "auto", "image_url": "https://example.com/cat.jpg"},
        {
            "type": "input_file",
            "filename": "report.pdf",
            "file_data": "data:application/pdf;base64," + base64.b64encode(PDF).decode(),
        },
        {"type": "input_file", "file_url": "https://example.com/paper.pdf"},
    ]
    # The fake server decoded them back: what the handler sees is what was given.
    assert sent.messages[1].parts == parts


async def test_a_part_the_wire_cannot_take_is_refused_before_sending() -> None:
    notes = DocumentPart(data=b"notes", media_type="text/plain")
    messages = [ChatMessage("user", "", parts=(notes,))]
    async with open_fake_llm([ModelReply(text="no")]) as server, provider(server) as p:
        with pytest.raises(InvalidArgument, match="takes documents of the types application/pdf"):
            await p.complete("m", messages, [], max_output_tokens=50)
        assert server.statistics().http_requests == 0


# -- settings ----------------------------------------------------------------------------


def test_settings_map_to_the_responses_fields() -> None:
    settings = ModelSettings(
        temperature=0.2,
        top_p=0.9,
        tool_choice="lookup",
        parallel_tool_calls=False,
        extra_body={"store": True, "text": {"verbosity": "low"}},
    )
    body = WIRE.body("m", CONVERSATION[:2], [LOOKUP], 8, False, settings)
    assert (body["temperature"], body["top_p"], body["parallel_tool_calls"]) == (0.2, 0.9, False)
    assert body["tool_choice"] == {"type": "function", "name": "lookup"}
    assert (body["store"], body["text"]) == (True, {"verbosity": "low"})
    for choice in ("auto", "none", "required"):
        sent = WIRE.body("m", [], [LOOKUP], 8, False, ModelSettings(tool_choice=choice))
        assert sent["tool_choice"] == choice
    # Without tools, no tool settings (the API refuses tool_choice without tools).
    assert "tool_choice" not in WIRE.body("m", [], [], 8, False, settings)


def test_prompt_cache_settings_go_as_the_responses_fields() -> None:
    # OpenAI's prompt_cache_key and prompt_cache_retention are Responses fields
    # as much as chat completions ones: ModelSettings sets them on both wires.
    settings = ModelSettings(prompt_cache_key="researcher", prompt_cache_retention="24h")
    WIRE.check_settings(settings)
    ProviderConfig(name="p", kind="openai-responses", base_url="http://h", settings=settings)
    body = WIRE.body("m", CONVERSATION[:2], [LOOKUP], 8, False, settings)
    assert (body["prompt_cache_key"], body["prompt_cache_retention"]) == ("researcher", "24h")
    plain = WIRE.body("m", CONVERSATION[:2], [LOOKUP], 8, False, ModelSettings())
    assert "prompt_cache_key" not in plain and "prompt_cache_retention" not in plain


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (ModelSettings(stop=("x",)), "stop"),
        (ModelSettings(seed=1), "seed"),
        (ModelSettings(extra_body={"input": []}), "'input'"),
        (ModelSettings(extra_body={"max_output_tokens": 3}), "'max_output_tokens'"),
    ],
)
def test_settings_the_wire_has_no_place_for_are_errors(settings: ModelSettings, named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        WIRE.check_settings(settings)
    with pytest.raises(ConfigError, match=r"openai-responses wire format|agentrio sets it"):
        ProviderConfig(name="p", kind="openai-responses", base_url="http://h", settings=settings)


def test_the_kind_is_named_in_agentrio_toml() -> None:
    config = parse_config(
        {
            "providers": {
                "openai": {
                    "kind": "openai-responses",
                    "base_url": "https://api.openai.com/v1",
                    "api_key_env": "OPENAI_API_KEY",
                }
            }
        }
    )
    assert config.providers["openai"].kind == "openai-responses"
    assert "openai-responses" in repr(Provider(config.providers["openai"], api_key="k"))


# -- what the API sends, field for field (openai.types.responses) ---------------------------


def documented_response(*output: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A ``Response`` object as the API sends it (every field of the SDK's type)."""
    response: dict[str, Any] = {
        "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c7b7fc33",
        "object": "response",
        "created_at": 1741476777,
        "status": "completed",
        "background": False,
        "completed_at": 1741476778,
        "error": None,
        "incomplete_details": None,
        "instructions": "be brief",
        "max_output_tokens": 256,
        "max_tool_calls": None,
        "model": "gpt-5-mini-2025-08-07",
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "safety_identifier": None,
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 2006,
            "input_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 0},
            "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 128},
            "total_tokens": 2306,
        },
        "user": None,
        "metadata": {},
    }
    return {**response, **fields}


REASONING_ITEM = {
    "id": REASONING.id,
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": REASONING.summary[0]}],
    "encrypted_content": REASONING.encrypted_content,
    "status": None,
}
MESSAGE_ITEM = {
    "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c7b7fc33",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "a is 1.", "annotations": [], "logprobs": []}],
}
CALL_ITEM = {
    "id": "fc_67ccd3acc8d48190a77525dc6de64b4104becb25c7b7fc34",
    "type": "function_call",
    "status": "completed",
    "call_id": "call_12345xyz",
    "name": "lookup",
    "arguments": '{"key":"b"}',
}
DOCUMENTED_USAGE = Usage(2006, 300, cached_input_tokens=1920, reasoning_tokens=128)


def test_parse_reads_every_kind_of_output_item() -> None:
    reply = WIRE.parse(documented_response(REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM), "rs", None)
    assert reply == ModelReply(
        text="a is 1.",
        tool_calls=(ToolCallRequest("lookup", {"key": "b"}, id="call_12345xyz"),),
        usage=DOCUMENTED_USAGE,
        thinking=(REASONING,),
    )


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
def test_parse_reads_incomplete_details(reason: str, finish: str) -> None:
    data = documented_response(
        MESSAGE_ITEM, status="incomplete", incomplete_details={"reason": reason}
    )
    assert WIRE.parse(data, "rs", None).finish_reason == finish


def test_parse_reads_a_refusal_part() -> None:
    refusal = {**MESSAGE_ITEM, "content": [{"type": "refusal", "refusal": "I can't."}]}
    reply = WIRE.parse(documented_response(refusal), "rs", None)
    assert (reply.text, reply.refusal, reply.finish_reason) == ("", "I can't.", "refusal")


def test_a_failed_response_is_a_bad_response_quoting_its_error() -> None:
    error = {"code": "server_error", "message": "The model failed."}
    with pytest.raises(BadResponse, match=r"the response failed: .*The model failed"):
        WIRE.parse(documented_response(status="failed", error=error, output=[]), "rs", None)


def documented_stream(
    *items: dict[str, Any], end: str = "response.completed", **fields: Any
) -> list[str]:
    """The events the API streams for *items* (every field of the SDK's event types)."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **event: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **event})

    start = documented_response(status="in_progress", usage=None, output=[], completed_at=None)
    add("response.created", response=start)
    add("response.in_progress", response=start)
    for index, item in enumerate(items):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            add(
                "response.output_item.added",
                output_index=index,
                item={**item, "summary": [], "encrypted_content": None},
            )
            add(
                "response.reasoning_summary_part.added",
                **where,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
            add(
                "response.reasoning_summary_text.delta",
                **where,
                summary_index=0,
                delta=item["summary"][0]["text"],
            )
            add(
                "response.reasoning_summary_text.done",
                **where,
                summary_index=0,
                text=item["summary"][0]["text"],
            )
        elif item["type"] == "message":
            add(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = item["content"][0]
            add("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
            for piece in (part["text"][:3], part["text"][3:]):
                add(
                    "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
                )
            add(
                "response.output_text.done",
                **where,
                content_index=0,
                text=part["text"],
                logprobs=[],
            )
            add("response.content_part.done", **where, content_index=0, part=part)
        else:
            add(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            args = item["arguments"]
            for piece in (args[:4], args[4:]):
                add("response.function_call_arguments.delta", **where, delta=piece)
            add("response.function_call_arguments.done", **where, name=item["name"], arguments=args)
        add("response.output_item.done", output_index=index, item=item)
    add(end, response=documented_response(*items, **fields))
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def lines(stream: list[str]) -> list[str]:
    return [line for event in stream for line in event.splitlines() if line]


def test_stream_reads_every_kind_of_output_item() -> None:
    deltas: list[str] = []
    parser = WIRE.stream_parser("rs", deltas.append, None)
    for line in lines(documented_stream(REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM)):
        parser.feed(line)
    reply = parser.finish()
    assert reply == WIRE.parse(
        documented_response(REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM), "rs", None
    )
    assert deltas == ["a i", "s 1."]  # the text, never the reasoning summary


def test_stream_reads_response_incomplete() -> None:
    stream = documented_stream(
        MESSAGE_ITEM,
        end="response.incomplete",
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
    )
    parser = WIRE.stream_parser("rs", None, None)
    for line in lines(stream):
        parser.feed(line)
    assert parser.finish().finish_reason == "length"


def test_a_stream_without_its_end_was_cut_short() -> None:
    parser = WIRE.stream_parser("rs", None, None)
    for line in lines(documented_stream(MESSAGE_ITEM))[:-1]:
        parser.feed(line)
    with pytest.raises(BadResponse, match=r"before response\.completed"):
        parser.finish()
    assert parser.partial() == (None, None, "a is 1.")


@pytest.mark.parametrize(
    ("event", "what"),
    [
        (
            {
                "type": "error",
                "code": "server_error",
                "message": "boom",
                "param": None,
                "sequence_number": 3,
            },
            "the stream reported an error: {'code': 'server_error', 'message': 'boom'}",
        ),
        (
            {
                "type": "response.failed",
                "sequence_number": 9,
                "response": documented_response(
                    status="failed",
                    output=[],
                    error={"code": "rate_limit_exceeded", "message": "slow down"},
                ),
            },
            "the response failed: {'code': 'rate_limit_exceeded', 'message': 'slow down'}",
        ),
        ({"type": "response.output_item.added", "output_index": 0, "item": 3}, "no item object"),
        ({"type": "response.completed", "response": None}, "no response object"),
    ],
)
def test_stream_errors(event: dict[str, Any], what: str) -> None:
    parser = WIRE.stream_parser("rs", None, None)
    with pytest.raises(BadResponse) as info:
        parser.feed("data: " + json.dumps(event))
    assert what in str(info.value)


def test_an_error_events_quote_is_bounded() -> None:
    parser = WIRE.stream_parser("rs", None, None)
    with pytest.raises(BadResponse) as info:
        parser.feed("data: " + json.dumps({"type": "error", "message": "x" * 100_000}))
    assert len(str(info.value)) < 1200


@pytest.mark.parametrize("kind", ["text", "arguments", "new calls", "reasoning"])
def test_an_endless_reply_passes_max_reply_chars(kind: str) -> None:
    parser = WIRE.stream_parser("rs", None, None, max_reply_chars=1000)
    call = {"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": ""}
    with pytest.raises(TooLarge, match=r"max_reply_chars \(1000 characters\)"):
        for i in range(1000):
            if kind == "text":
                event: dict[str, Any] = {"type": "response.output_text.delta", "delta": "abcd"}
            elif kind == "arguments":
                if i == 0:
                    parser.feed(
                        "data: "
                        + json.dumps(
                            {"type": "response.output_item.added", "output_index": 0, "item": call}
                        )
                    )
                event = {
                    "type": "response.function_call_arguments.delta",
                    "output_index": 0,
                    "delta": "[1, ",
                }
            elif kind == "new calls":
                event = {"type": "response.output_item.added", "output_index": i, "item": call}
            else:
                event = {
                    "type": "response.output_item.done",
                    "output_index": i,
                    "item": {**REASONING_ITEM, "id": f"rs_{i}"},
                }
            parser.feed("data: " + json.dumps(event))
    assert parser.size <= 1000 + 200


# -- over HTTP, as the real API answers, with the key echoed -----------------------------


def _serving(*answers: dict[str, Any] | list[str]) -> tuple[Provider, list[httpx.Request]]:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = answers[len(sent) - 1]
        if isinstance(answer, list):
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, text="".join(answer)
            )
        return httpx.Response(200, json=answer)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    config = ProviderConfig(
        name="rs",
        kind="openai-responses",
        base_url="https://api.openai.test/v1",
        stream=isinstance(answers[0], list),
        max_retries=0,
    )
    return Provider(config, client=client, api_key=KEY), sent


@pytest.mark.parametrize("stream", [False, True])
async def test_documented_answers_over_http(stream: bool) -> None:
    items = (REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM)
    answer = documented_stream(*items) if stream else documented_response(*items)
    p, sent = _serving(answer)
    async with p:
        reply = await p.complete("gpt-5-mini", CONVERSATION, [LOOKUP], max_output_tokens=256)
    assert reply.usage == DOCUMENTED_USAGE and reply.thinking == (REASONING,)
    (request,) = sent
    assert request.url == "https://api.openai.test/v1/responses"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert json.loads(request.content)["stream"] is stream


@pytest.mark.parametrize("stream", [False, True])
async def test_an_error_quoting_the_key_is_redacted(stream: bool) -> None:
    error = {"code": "invalid_prompt", "message": f"bad request with key {KEY}"}
    if stream:
        failed = {"type": "error", "sequence_number": 0, **error, "param": None}
        answer: dict[str, Any] | list[str] = [f"event: error\ndata: {json.dumps(failed)}\n\n"]
    else:
        answer = documented_response(status="failed", error=error, output=[])
    p, _ = _serving(answer)
    async with p:
        with pytest.raises(BadResponse) as info:
            await p.complete("m", CONVERSATION[:2], [], max_output_tokens=8)
    assert "invalid_prompt" in str(info.value) and "[redacted]" in str(info.value)
    assert KEY not in str(info.value)


# -- fuzzed -------------------------------------------------------------------------------

GOOD = documented_response(REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM)
GOOD_EVENTS = [json.loads(e.split("data: ", 1)[1]) for e in documented_stream(CALL_ITEM)]


def accepts(data: object, text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.accepts(WIRE, "rs", data, text_tools)


def streams(lines: list[str], text_tools: list[str] | None = None) -> ModelReply | None:
    return wirefuzz.streams(WIRE, "rs", lines, text_tools)


def test_every_field_damaged_in_turn() -> None:
    assert accepts(GOOD) is not None
    for data in damaged(GOOD):
        accepts(data, ["lookup"])


def test_every_stream_field_damaged_in_turn() -> None:
    good = [f"data: {json.dumps(e)}" for e in GOOD_EVENTS]
    assert streams(good) is not None
    for i, event in enumerate(GOOD_EVENTS[2:], 2):  # (created/in_progress are not read)
        for bad_event in damaged(event):
            events = [*GOOD_EVENTS[:i], bad_event, *GOOD_EVENTS[i + 1 :]]
            streams([f"data: {json.dumps(e)}" for e in events])


@FUZZ
@given(damaged_at_random(GOOD) | json_values, st.sampled_from([None, ["lookup"]]))
def test_parse_fuzz(data: object, text_tools: list[str] | None) -> None:
    accepts(data, text_tools)


_line = st.one_of(
    st.sampled_from(GOOD_EVENTS).flatmap(damaged_at_random).map(lambda e: "data: " + json.dumps(e)),
    json_values.map(lambda v: "data: " + json.dumps(v)),
    st.text(max_size=30),
    st.sampled_from(["data:", ": ping", "event: x", ""]),
)


@FUZZ
@given(st.lists(_line, max_size=8), st.sampled_from([None, ["lookup"]]))
def test_stream_fuzz(lines: list[str], text_tools: list[str] | None) -> None:
    streams(lines, text_tools)


async def test_opentelemetry_names_openai_as_its_provider() -> None:
    from agentrio.agents.observation.parts import provider_name

    config = ProviderConfig(name="rs", kind="openai-responses", base_url="http://127.0.0.1:9")
    async with Provider(config) as p:
        assert provider_name(p.model("gpt-5")) == "openai"  # (gen_ai.provider.name)


# -- the demo on the Responses wire ------------------------------------------------------


async def test_the_demo_runs_on_the_responses_wire(autojump_clock: trio.testing.MockClock) -> None:
    from agentrio.demo import run_demo

    async with open_fake_llm() as server:
        report = await run_demo(6, base_url=f"{server.base_url}/v1", kind="openai-responses")
        stats = server.statistics()
    assert report.stop_reasons == {"done": 6} and report.path == "http"
    # Three calls an agent (two tools, then the answer), all on /v1/responses.
    assert stats.by_api["responses"] == 18 and stats.by_api["openai"] == 0


# -- against the official SDK's types, when it is installed --------------------------------


def test_shapes_validate_against_the_official_sdk() -> None:
    """What the wire sends, and what the fake server and the fixtures here answer,
    validated by ``openai.types.responses`` (not a dependency: skipped without it)."""
    pytest.importorskip("openai")
    from openai.types.responses import Response, ResponseStreamEvent
    from openai.types.responses.response_create_params import (
        ResponseCreateParamsNonStreaming,
        ResponseCreateParamsStreaming,
    )
    from pydantic import TypeAdapter

    from agentrio.testing._fake_responses import FRAMES
    from agentrio.testing._fake_responses import REPLY as WHOLE
    from agentrio.testing._fake_wire import Answer

    events = TypeAdapter(ResponseStreamEvent)
    cut = ModelReply(text="x", finish_reason="length")
    for reply in (REPLY, cut, ModelReply(refusal="no", finish_reason="refusal")):
        answer = Answer(reply, "m", 1)
        Response.model_validate(json.loads(json.dumps(WHOLE["responses"](answer))))
        for frame in FRAMES["responses"](answer):
            events.validate_python(json.loads(frame.split(b"data: ", 1)[1]))
    Response.model_validate(GOOD)
    for event in documented_stream(REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM):
        events.validate_python(json.loads(event.split("data: ", 1)[1]))
    parts = (TextPart("q"), ImagePart(data=PNG, media_type="image/png"), DocumentPart(data=PDF))
    messages = [*CONVERSATION, ChatMessage("user", "q", parts=parts)]
    settings = ModelSettings(tool_choice="lookup", temperature=0.1)
    output = OutputSchema("Movie", msgspec.json.schema(_Movie))
    for stream, params in (
        (False, ResponseCreateParamsNonStreaming),
        (True, ResponseCreateParamsStreaming),
    ):
        body = WIRE.body("gpt-5", messages, [LOOKUP], 100, stream, settings, output)
        TypeAdapter(params).validate_python(json.loads(json.dumps(body)))


_OVER = {
    "code": "context_length_exceeded",
    "message": "Your input exceeds the context window of this model.",
}


@pytest.mark.parametrize(
    "event",
    [
        {"type": "error", **_OVER},
        {"type": "response.failed", "response": {"status": "failed", "error": _OVER}},
    ],
    ids=["error", "response.failed"],
)
def test_an_overflow_reported_in_the_stream_is_context_too_long(event: dict[str, Any]) -> None:
    parser = WIRE.stream_parser("rs", None, None)
    with pytest.raises(ContextTooLong, match="context window"):
        parser.feed("data: " + json.dumps(event))
