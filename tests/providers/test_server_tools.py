"""Anthropic's server tools and citations, and tools that return images and documents.

Server tools are offered through ``ModelSettings.server_tools`` (the Anthropic
wire only); their blocks come back in answers in the shapes of
anthropic-sdk-python's types (``ServerToolUseBlock``, ``WebSearchToolResultBlock``,
``CodeExecutionToolResultBlock``, ``TextBlock`` with ``citations``) and are kept on
the assistant turn, to be sent back as they came (a ``pause_turn`` continuation).
A tool may return content parts: a ``tool_result`` of blocks on Anthropic, a user
message after the tool messages on OpenAI and Ollama.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
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
from agentrio.errors import BadResponse, ProviderError
from agentrio.providers.anthropic import AnthropicWire
from agentrio.providers.bounded import TooLarge
from agentrio.providers.tokens import message_text
from agentrio.testing import FakeLLMServer, Reply, open_fake_llm
from agentrio.types import RawBlock, TextPart, ToolSchema

WIRE = AnthropicWire()
LOOKUP = ToolSchema(
    "lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}}
)
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
CODE = {"type": "code_execution_20250825", "name": "code_execution"}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(32)
PDF = b"%PDF-1.7 a report"

# The blocks of a web search answer, field for field as the API sends them.
SEARCH_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "name": "web_search",
    "input": {"query": "claude shannon birth date"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://en.wikipedia.org/wiki/Claude_Shannon",
            "title": "Claude Shannon - Wikipedia",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y",
            "page_age": "April 30, 2025",
        }
    ],
}
CITED = {
    "type": "text",
    "text": "Claude Shannon was born on April 30, 1916, in Petoskey, Michigan",
    "citations": [
        {
            "type": "web_search_result_location",
            "url": "https://en.wikipedia.org/wiki/Claude_Shannon",
            "title": "Claude Shannon - Wikipedia",
            "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
            "cited_text": "Claude Elwood Shannon (April 30, 1916 - February 24, 2001) was an ...",
        }
    ],
}
LEAD = {"type": "text", "text": "I'll search for when Claude Shannon was born."}
SEARCH_ANSWER = [LEAD, SEARCH_USE, SEARCH_RESULT, CITED]


def raw(*blocks: dict[str, Any]) -> tuple[RawBlock, ...]:
    return tuple(RawBlock.of(b) for b in blocks)


def message(*content: object, stop_reason: str = "end_turn") -> dict[str, object]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 6039,
            "output_tokens": 931,
            "server_tool_use": {"web_search_requests": 1},
        },
    }


def sse(*events: dict[str, Any]) -> list[str]:
    lines = []
    for event in events:
        lines += [f"event: {event['type']}", f"data: {json.dumps(event)}", ""]
    return lines


def block(index: int, start: dict[str, Any], *deltas: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def streamed(*blocks: dict[str, Any]) -> list[str]:
    return sse(
        {"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}},
        *blocks,
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    )


@asynccontextmanager
async def provider(
    server: FakeLLMServer, kind: str = "anthropic", **options: Any
) -> AsyncIterator[Provider]:
    base = server.base_url + ("" if kind == "ollama" else "/v1")
    config = ProviderConfig(name="p", kind=kind, base_url=base, max_retries=0, **options)  # type: ignore[arg-type]
    async with Provider(config) as p:
        yield p


# -- offering server tools -------------------------------------------------------------------


def test_server_tools_are_offered_beside_the_agents_tools() -> None:
    settings = ModelSettings(
        server_tools=[WEB_SEARCH, CODE],
        tool_choice="web_search",
        cache_control={"type": "ephemeral"},
    )
    body = WIRE.body("m", [ChatMessage("user", "hi")], [LOOKUP], 100, False, settings)
    assert body["tools"] == [
        {"name": "lookup", "description": "Look a key up.", "input_schema": LOOKUP.parameters},
        WEB_SEARCH,
        {**CODE, "cache_control": {"type": "ephemeral"}},  # (the last tool ends the prefix)
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "web_search"}
    # Alone, without tools of the agent's.
    body = WIRE.body(
        "m",
        [ChatMessage("user", "hi")],
        [],
        100,
        False,
        ModelSettings(server_tools=[WEB_SEARCH], cache="off"),
    )
    assert body["tools"] == [WEB_SEARCH]
    assert "tools" not in WIRE.body("m", [ChatMessage("user", "hi")], [], 100, False)


def test_a_server_tool_may_not_take_the_name_of_an_agents_tool() -> None:
    settings = ModelSettings(server_tools=[{"type": "web_search_20250305", "name": "lookup"}])
    with pytest.raises(InvalidArgument, match="'lookup' is also the name of one of the agent"):
        WIRE.body("m", [ChatMessage("user", "hi")], [LOOKUP], 100, False, settings)


@pytest.mark.parametrize(
    ("server_tools", "message"),
    [
        ("web_search", r"server_tools must be a list of tables"),
        ([["web_search"]], r"server_tools\[0\] must be a table"),
        ([{"name": "web_search"}], r"server_tools\[0\].type must be a versioned tool type"),
        ([{"type": "web_search", "name": "w"}], r"server_tools\[0\].type must be a versioned"),
        ([{"type": "web_search_20250305"}], r"server_tools\[0\].name must be 1 to 64"),
        ([WEB_SEARCH, WEB_SEARCH], r"server_tools\[1\].name must be a name no other has"),
        ([{**WEB_SEARCH, "x": object()}], r"server_tools\[0\] must hold JSON values only"),
        ([{**WEB_SEARCH, "x": "y" * 70_000}], r"server_tools\[0\] is \d+ bytes as JSON"),
    ],
)
def test_server_tools_are_checked_when_made(server_tools: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match="ModelSettings." + message):
        ModelSettings(server_tools=server_tools)  # type: ignore[arg-type]


def test_server_tools_come_from_a_config_file_and_layer_as_settings_do() -> None:
    def provider_table(kind: str) -> dict[str, object]:
        table = {"kind": kind, "base_url": "http://127.0.0.1:1/v1", "settings": {}}
        table["settings"] = {"server_tools": [WEB_SEARCH]}
        return {"providers": {"p": table}}

    settings = agentrio.parse_config(provider_table("anthropic")).providers["p"].settings
    assert settings is not None and settings.server_tools == (WEB_SEARCH,)
    assert ModelSettings(temperature=0.5).over(settings).server_tools == (WEB_SEARCH,)
    with pytest.raises(agentrio.ConfigError, match="server_tools is not a setting of the openai"):
        agentrio.parse_config(provider_table("openai"))


@pytest.mark.parametrize("kind", ["openai", "ollama"])
async def test_the_other_wires_refuse_server_tools_before_any_request(kind: str) -> None:
    settings = ModelSettings(server_tools=[WEB_SEARCH])
    async with open_fake_llm([ModelReply(text="no")]) as server, provider(server, kind) as p:
        async with agentrio.open_runtime() as rt:
            with pytest.raises(
                InvalidArgument, match=f"server_tools is not a setting of the {kind}"
            ):
                await rt.spawn_agent(AgentSpec("a", p.model("m"), settings=settings))
        assert server.statistics().http_requests == 0


async def test_server_tools_reach_the_server() -> None:
    settings = ModelSettings(server_tools=[WEB_SEARCH], cache="off")  # (exact bodies)
    async with open_fake_llm([ModelReply(text="ok")]) as server, provider(server) as p:
        await p.complete(
            "m", [ChatMessage("user", "hi")], [LOOKUP], max_output_tokens=9, settings=settings
        )
    assert server.requests[0].tools == ["lookup", "web_search"]
    assert server.requests[0].body["tools"][1] == WEB_SEARCH  # type: ignore[index]


# -- the answer: blocks kept, text apart -----------------------------------------------------


def test_a_web_search_answer_keeps_its_blocks_and_gives_its_text() -> None:
    reply = WIRE.parse(message(*SEARCH_ANSWER), "an", None)
    assert reply.text == LEAD["text"] + CITED["text"]
    assert reply.blocks == raw(*SEARCH_ANSWER)
    assert [json.loads(b.json) for b in reply.blocks] == SEARCH_ANSWER  # as sent, field for field
    assert reply.usage == Usage(6039, 931)
    assert reply.tool_calls == ()


def test_an_answer_of_plain_text_keeps_no_blocks() -> None:
    reply = WIRE.parse(
        message({"type": "text", "text": "a"}, {**LEAD, "citations": None}), "an", None
    )
    assert reply == ModelReply(text="a" + LEAD["text"], usage=Usage(6039, 931))


def test_code_execution_and_unknown_blocks_are_kept_as_they_came() -> None:
    use = {
        "type": "server_tool_use",
        "id": "srvtoolu_2",
        "name": "code_execution",
        "input": {"code": "print(2 + 2)"},
    }
    result = {
        "type": "code_execution_tool_result",
        "tool_use_id": "srvtoolu_2",
        "content": {
            "type": "code_execution_result",
            "stdout": "4\n",
            "stderr": "",
            "return_code": 0,
            "content": [],
        },
    }
    unknown = {"type": "container_upload", "file_id": "file_1"}
    reply = WIRE.parse(message(use, result, unknown, {"type": "text", "text": "4"}), "an", None)
    assert reply.text == "4"
    assert reply.blocks == raw(use, result, unknown, {"type": "text", "text": "4"})


def test_a_streamed_web_search_answer_is_the_same() -> None:
    pieces: list[str] = []
    parser = WIRE.stream_parser("an", pieces.append, None)
    citation = CITED["citations"][0]  # type: ignore[index]
    lines = streamed(
        *block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": LEAD["text"]}),
        *block(
            1,
            {**SEARCH_USE, "input": {}},
            {"type": "input_json_delta", "partial_json": '{"query": "claude '},
            {"type": "input_json_delta", "partial_json": 'shannon birth date"}'},
        ),
        *block(2, SEARCH_RESULT),
        *block(
            3,
            {"type": "text", "text": "", "citations": []},
            {"type": "citations_delta", "citation": citation},
            {"type": "text_delta", "text": CITED["text"][:10]},
            {"type": "text_delta", "text": CITED["text"][10:]},
        ),
    )
    for line in lines:
        parser.feed(line)
    reply = parser.finish()
    assert pieces == [LEAD["text"], CITED["text"][:10], CITED["text"][10:]]
    assert reply.text == LEAD["text"] + CITED["text"]
    assert [json.loads(b.json) for b in reply.blocks] == SEARCH_ANSWER


@pytest.mark.parametrize("stream", [False, True])
async def test_the_fake_server_answers_with_server_blocks(stream: bool) -> None:
    answer = Reply(text="unused", blocks=raw(*SEARCH_ANSWER), usage=Usage(50, 9))
    async with open_fake_llm([answer]) as server, provider(server, stream=stream) as p:
        reply = await p.complete("m", [ChatMessage("user", "when?")], [], max_output_tokens=90)
    assert reply.blocks == raw(*SEARCH_ANSWER)
    assert reply.text == LEAD["text"] + CITED["text"]


# -- sent back: a pause_turn continuation ----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_paused_turn_goes_on_with_its_server_blocks_sent_back(stream: bool) -> None:
    paused = Reply(blocks=raw(LEAD, SEARCH_USE), finish_reason="pause_turn", usage=Usage(9, 9))
    done = Reply(blocks=raw(SEARCH_RESULT, CITED), usage=Usage(9, 9))
    later = Reply(text="Yes.", usage=Usage(9, 9))
    settings = ModelSettings(server_tools=[WEB_SEARCH], cache="off")  # (exact bodies)
    async with (
        open_fake_llm([paused, done, later]) as server,
        provider(server, stream=stream) as p,
        agentrio.open_runtime() as rt,
    ):
        agent = await rt.spawn_agent(AgentSpec("a", p.model("m"), settings=settings))
        result = await agent.run("When was Claude Shannon born?")
        again = await agent.run("Sure?")
    assert (result.stop_reason, result.final_text) == ("done", CITED["text"])
    assert again.final_text == "Yes."
    # The paused turn went back last, block for block, for the server to go on from.
    assert server.requests[1].body["messages"][-1] == {  # type: ignore[index]
        "role": "assistant",
        "content": [LEAD, SEARCH_USE],
    }
    assert server.requests[1].messages[-1].blocks == raw(LEAD, SEARCH_USE)
    # Later calls send the whole turn back: the search, its results, the citations.
    sent = server.requests[2].body["messages"]
    assert sent[1] == {"role": "assistant", "content": SEARCH_ANSWER}  # type: ignore[index]


async def test_the_fake_server_refuses_a_result_without_its_call() -> None:
    turns = [
        ChatMessage("user", "when?"),
        ChatMessage("assistant", "", blocks=raw(SEARCH_RESULT, CITED)),
        ChatMessage("user", "sure?"),
    ]
    async with open_fake_llm([ModelReply(text="no")]) as server, provider(server) as p:
        with pytest.raises(ProviderError, match="answers no server_tool_use before it"):
            await p.complete("m", turns, [], max_output_tokens=9)
    assert server.statistics().http_requests == 1


async def test_the_fake_server_refuses_a_paused_turn_sent_back_altered() -> None:
    paused = Reply(blocks=raw(LEAD, SEARCH_USE), finish_reason="pause_turn")
    altered = {**SEARCH_USE, "input": {"query": "something else"}}
    async with open_fake_llm([paused, ModelReply(text="no")]) as server, provider(server) as p:
        turns = [ChatMessage("user", "when?")]
        reply = await p.complete("m", turns, [], max_output_tokens=9)
        assert reply.finish_reason == "pause_turn"
        turns.append(ChatMessage("assistant", reply.text, blocks=raw(LEAD, altered)))
        with pytest.raises(ProviderError, match="did not come back as it was sent"):
            await p.complete("m", turns, [], max_output_tokens=9)
    assert server.statistics().rejected == {400: 1}


def test_kept_blocks_count_towards_the_input_estimate() -> None:
    turn = ChatMessage("assistant", "short", blocks=raw(*SEARCH_ANSWER))
    assert message_text(turn) == "".join(b.json for b in turn.blocks)


# -- hostile answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ({**SEARCH_USE, "input": "q"}, r"content\[0\].input \(server_tool_use\) is not an object"),
        ({**SEARCH_USE, "id": 7}, r"content\[0\] \(server_tool_use\) has no id or name"),
        ({"type": "web_search_tool_result", "content": []}, r"web_search_tool_result\) has no"),
        ({**CITED, "citations": "x"}, r"content\[0\].citations is not a list of objects"),
        ({**CITED, "citations": ["x"]}, r"content\[0\].citations is not a list of objects"),
        ({**CITED, "text": None}, r"content\[0\].text is not a string"),
    ],
)
def test_malformed_server_blocks_are_bad_responses(content: dict[str, Any], what: str) -> None:
    with pytest.raises(BadResponse, match=what):
        WIRE.parse(message(content), "an", None)


@pytest.mark.parametrize(
    ("events", "what"),
    [
        (
            block(
                0, {**SEARCH_USE, "input": {}}, {"type": "input_json_delta", "partial_json": "{"}
            ),
            r"content\[0\]: its streamed input is not JSON",
        ),
        (
            block(0, {"type": "text", "text": ""}, {"type": "citations_delta", "citation": 3}),
            "a citations_delta has no citation object",
        ),
        (
            block(
                0, {**SEARCH_USE, "input": {}}, {"type": "input_json_delta", "partial_json": "[]"}
            ),
            r"content\[0\].input \(server_tool_use\) is not an object",
        ),
    ],
)
def test_malformed_streamed_blocks_are_bad_responses(
    events: list[dict[str, Any]], what: str
) -> None:
    parser = WIRE.stream_parser("an", None, None)
    with pytest.raises(BadResponse, match=what):
        for line in streamed(*events):
            parser.feed(line)
        parser.finish()


def test_unknown_streamed_blocks_are_kept_but_bounded() -> None:
    unknown = {"type": "future_block", "data": "x" * 50}
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=1000)
    for line in streamed(*block(0, unknown)):
        parser.feed(line)
    assert parser.finish().blocks == raw(unknown)
    # One large block, or many small ones, pass max_reply_chars.
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=1000)
    with pytest.raises(TooLarge):
        for line in streamed(*block(0, {**unknown, "data": "x" * 2000})):
            parser.feed(line)
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=1000)
    with pytest.raises(TooLarge):
        for i in range(100):
            for line in sse(*block(i, {"type": "future_block"})):
                parser.feed(line)
    # Citations count too.
    parser = WIRE.stream_parser("an", None, None, max_reply_chars=1000)
    citation = {"type": "char_location", "cited_text": "y" * 2000}
    with pytest.raises(TooLarge):
        for line in sse(
            *block(
                0, {"type": "text", "text": ""}, {"type": "citations_delta", "citation": citation}
            )
        ):
            parser.feed(line)


# -- tools that return images and documents --------------------------------------------------


@agentrio.tool
async def chart(name: str) -> list[object]:
    """Draw a chart."""
    await trio.lowlevel.checkpoint()
    return [f"the {name} chart", ImagePart(data=PNG, media_type="image/png")]


@agentrio.tool
async def report() -> DocumentPart:
    """Fetch the report."""
    await trio.lowlevel.checkpoint()
    return DocumentPart(data=PDF, name="report.pdf")


@agentrio.tool
async def word(key: str) -> str:
    """Look a word up."""
    await trio.lowlevel.checkpoint()
    return f"{key} means 1"


CALLS = Reply(
    tool_calls=(
        ToolCallRequest("chart", {"name": "sales"}, id="c1"),
        ToolCallRequest("word", {"key": "a"}, id="c2"),
    )
)


async def run_tools(
    server: FakeLLMServer, kind: str, *tools: agentrio.Tool
) -> agentrio.PhaseResult:
    async with provider(server, kind) as p, agentrio.open_runtime() as rt:
        settings = ModelSettings(cache="off") if kind == "anthropic" else None  # (exact bodies)
        spec = AgentSpec("a", p.model("m"), tools=list(tools), settings=settings)
        agent = await rt.spawn_agent(spec)
        return await agent.run("show me")


async def test_a_tool_returns_an_image_to_anthropic() -> None:
    import base64

    async with open_fake_llm([CALLS, Reply(text="done")]) as server:
        result = await run_tools(server, "anthropic", chart, word)
    assert result.final_text == "done"
    assert result.tool_calls[0].parts == (
        TextPart("the sales chart"),
        ImagePart(data=PNG, media_type="image/png"),
    )
    assert result.tool_calls[0].content == "the sales chart"
    results = server.requests[1].body["messages"][-1]["content"]  # type: ignore[index]
    assert results == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": [
                {"type": "text", "text": "the sales chart"},
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": base64.b64encode(PNG).decode(),
                    },
                },
            ],
        },
        {"type": "tool_result", "tool_use_id": "c2", "content": "a means 1"},
    ]
    tool_turn = server.requests[1].messages[-2]
    assert (tool_turn.role, tool_turn.name) == ("tool", "chart")
    assert tool_turn.parts == result.tool_calls[0].parts


@pytest.mark.parametrize("kind", ["openai", "ollama"])
async def test_a_tool_returns_an_image_to_openai_and_ollama(kind: str) -> None:
    async with open_fake_llm([CALLS, Reply(text="done")]) as server:
        result = await run_tools(server, kind, chart, word)
    assert result.final_text == "done"
    # The tool messages (text only), then the image in a user message after them.
    sent = server.requests[1].messages
    assert [m.role for m in sent[-3:]] == ["tool", "tool", "user"]
    assert sent[-3].content == "the sales chart"
    assert sent[-1].parts[-1] == ImagePart(data=PNG, media_type="image/png")
    assert "the images and documents tool chart returned" in sent[-1].content


async def test_a_document_from_a_tool_goes_where_the_wire_takes_it() -> None:
    calls = Reply(tool_calls=(ToolCallRequest("report", {}, id="r1"),))
    async with open_fake_llm([calls, Reply(text="read")]) as server:
        result = await run_tools(server, "openai", report)
    assert result.final_text == "read"
    user = server.requests[1].body["messages"][-1]  # type: ignore[index]
    assert user["role"] == "user" and user["content"][1]["type"] == "file"
    # Ollama takes no documents: the phase ends with the error, naming the tool.
    async with open_fake_llm([calls, Reply(text="read")]) as server:
        result = await run_tools(server, "ollama", report)
    assert (result.stop_reason, result.error_type) == ("error", "InvalidArgument")
    assert "tool 'report' result part 0" in result.error
    assert "takes no documents" in result.error
    assert server.statistics().http_requests == 1


async def test_a_list_of_parts_with_other_things_is_a_failed_result() -> None:
    @agentrio.tool
    async def mixed() -> list[object]:
        """Mixed."""
        await trio.lowlevel.checkpoint()
        return [{"a": 1}, ImagePart(data=PNG, media_type="image/png")]

    calls = Reply(tool_calls=(ToolCallRequest("mixed", {}, id="m1"),))
    async with open_fake_llm([calls, Reply(text="ok")]) as server:
        result = await run_tools(server, "anthropic", mixed)
    (call,) = result.tool_calls
    assert call.status == "failed" and call.parts == ()
    assert "a result of parts holds TextPart, ImagePart, DocumentPart and str only" in call.content


async def test_plain_results_carry_no_parts() -> None:
    calls = Reply(tool_calls=(ToolCallRequest("word", {"key": "b"}, id="w1"),))
    async with open_fake_llm([calls, Reply(text="ok")]) as server:
        result = await run_tools(server, "anthropic", word)
    assert result.tool_calls[0].parts == ()
    assert server.requests[1].body["messages"][-1]["content"][0]["content"] == "b means 1"  # type: ignore[index]


async def test_a_tool_returns_an_image_to_the_responses_wire() -> None:
    # The Responses API's function_call_output takes input_* parts: the image goes there.
    async with open_fake_llm([CALLS, Reply(text="done")]) as server:
        result = await run_tools(server, "openai-responses", chart, word)
    assert result.final_text == "done"
    items = server.requests[1].body["input"]  # type: ignore[index]
    outputs = [i for i in items if i["type"] == "function_call_output"]  # type: ignore[index]
    assert outputs[0]["output"][0] == {"type": "input_text", "text": "the sales chart"}
    assert outputs[0]["output"][1]["type"] == "input_image"
    assert isinstance(outputs[1]["output"], str)
    sent = server.requests[1].messages
    tool = next(m for m in sent if m.role == "tool" and m.tool_call_id == "c1")
    assert tool.parts[-1] == ImagePart(data=PNG, media_type="image/png")
