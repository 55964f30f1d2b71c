"""The fake LLM server, driven by plain httpx over real 127.0.0.1 sockets."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import agentrio
from agentrio import ChatMessage, InvalidArgument, ModelReply, ToolCallRequest, Usage
from agentrio.cli import _parser
from agentrio.testing import (
    FakeLLMServer,
    FakeRequest,
    Faults,
    Reply,
    open_fake_llm,
)

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat"}
APIS = list(PATHS)

TEXT = Reply(text="The quick brown fox jumps over the lazy dog.", usage=Usage(11, 9))
CALLS = Reply(
    tool_calls=(
        ToolCallRequest("lookup", {"key": "alpha", "depth": 2}, id="c1"),
        ToolCallRequest("word_count", {"text": "a b c"}, id="c2"),
    ),
    usage=Usage(20, 7),
)


def body(
    api: str, content: str = "hi", *, stream: bool | None = None, **extra: Any
) -> dict[str, Any]:
    """A minimal valid request body for *api*."""
    out: dict[str, Any] = {"model": "fake-1", "messages": [{"role": "user", "content": content}]}
    if api == "anthropic":
        out["max_tokens"] = 256
    if stream is not None:
        out["stream"] = stream
    elif api == "ollama":
        out["stream"] = False  # Ollama streams by default
    return out | extra


@asynccontextmanager
async def client(server: FakeLLMServer, **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    # trust_env=False: no proxy from the environment, only 127.0.0.1.
    async with httpx.AsyncClient(
        base_url=server.base_url, trust_env=False, timeout=kwargs.pop("timeout", 10.0), **kwargs
    ) as c:
        yield c


def sse(text: str) -> list[tuple[str | None, str]]:
    """``(event, data)`` pairs of a server-sent-events body."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
        events.append((event, "\n".join(data)))
    return events


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def streamed_text(api: str, raw: str) -> str:
    """The text of a streamed answer, put back together."""
    if api == "ollama":
        return "".join(line["message"]["content"] for line in ndjson(raw))
    datas = [json.loads(data) for _, data in sse(raw) if data != "[DONE]"]
    if api == "anthropic":
        return "".join(
            d["delta"].get("text", "") for d in datas if d["type"] == "content_block_delta"
        )
    return "".join(d["choices"][0]["delta"].get("content") or "" for d in datas if d["choices"])


async def post_stream(c: httpx.AsyncClient, api: str, payload: dict[str, Any]) -> tuple[str, bool]:
    """The streamed body as far as it came, and whether it ended cleanly."""
    received = b""
    try:
        async with c.stream("POST", PATHS[api], json=payload) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                received += chunk
    except httpx.RemoteProtocolError:
        return received.decode(), False
    return received.decode(), True


# -- OpenAI ----------------------------------------------------------------------------


async def test_openai_text() -> None:
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        r = await c.post(PATHS["openai"], json=body("openai"))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "fake-1"
    assert isinstance(data["id"], str) and isinstance(data["created"], int)
    (choice,) = data["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == TEXT.text
    assert "tool_calls" not in choice["message"]
    assert data["usage"] == {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20}


async def test_openai_tool_calls() -> None:
    async with open_fake_llm([CALLS]) as server, client(server) as c:
        r = await c.post(PATHS["openai"], json=body("openai"))
    (choice,) = r.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [(t["id"], t["type"], t["function"]["name"]) for t in calls] == [
        ("c1", "function", "lookup"),
        ("c2", "function", "word_count"),
    ]
    assert all(isinstance(t["function"]["arguments"], str) for t in calls)
    assert json.loads(calls[0]["function"]["arguments"]) == {"key": "alpha", "depth": 2}
    assert json.loads(calls[1]["function"]["arguments"]) == {"text": "a b c"}


async def test_openai_stream_text() -> None:
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        text, clean = await post_stream(c, "openai", body("openai", stream=True))
    assert clean
    events = sse(text)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20}
    deltas = [ch["choices"][0] for ch in chunks[:-1]]
    pieces = [d["delta"]["content"] for d in deltas if d["delta"].get("content")]
    assert len(pieces) > 1
    assert "".join(pieces) == TEXT.text
    assert deltas[0]["delta"]["role"] == "assistant"
    assert [d["finish_reason"] for d in deltas] == [None] * (len(deltas) - 1) + ["stop"]


def assemble_openai_calls(chunks: list[dict[str, Any]]) -> dict[int, dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for ch in chunks:
        for tc in ch["choices"][0]["delta"].get("tool_calls", []) if ch["choices"] else []:
            call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] += tc.get("id", "")
            call["name"] += tc.get("function", {}).get("name", "")
            call["arguments"] += tc.get("function", {}).get("arguments", "")
    return calls


async def test_openai_stream_tool_calls() -> None:
    async with open_fake_llm([CALLS]) as server, client(server) as c:
        text, clean = await post_stream(c, "openai", body("openai", stream=True))
    assert clean
    events = sse(text)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    argument_deltas = [
        tc
        for ch in chunks
        if ch["choices"]
        for tc in ch["choices"][0]["delta"].get("tool_calls", [])
        if tc["function"].get("arguments")
    ]
    assert len(argument_deltas) > 2  # arguments arrive split across chunks
    calls = assemble_openai_calls(chunks)
    assert calls[0]["id"] == "c1" and calls[0]["name"] == "lookup"
    assert json.loads(calls[0]["arguments"]) == {"key": "alpha", "depth": 2}
    assert calls[1]["name"] == "word_count"
    assert json.loads(calls[1]["arguments"]) == {"text": "a b c"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


# -- Anthropic -------------------------------------------------------------------------


async def test_anthropic_text_and_tools() -> None:
    both = Reply(text="Let me look.", tool_calls=CALLS.tool_calls, usage=Usage(5, 6))
    async with open_fake_llm([TEXT, both]) as server, client(server) as c:
        r1 = await c.post(PATHS["anthropic"], json=body("anthropic"))
        r2 = await c.post(PATHS["anthropic"], json=body("anthropic"))
    first = r1.json()
    assert first["type"] == "message" and first["role"] == "assistant"
    assert first["model"] == "fake-1"
    assert first["content"] == [{"type": "text", "text": TEXT.text}]
    assert first["stop_reason"] == "end_turn"
    assert first["usage"] == {"input_tokens": 11, "output_tokens": 9}
    second = r2.json()
    assert second["stop_reason"] == "tool_use"
    assert second["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"key": "alpha", "depth": 2}},
        {"type": "tool_use", "id": "c2", "name": "word_count", "input": {"text": "a b c"}},
    ]


async def test_anthropic_stream() -> None:
    both = Reply(text="Let me look it up.", tool_calls=CALLS.tool_calls[:1], usage=Usage(5, 6))
    async with open_fake_llm([both]) as server, client(server) as c:
        text, clean = await post_stream(c, "anthropic", body("anthropic", stream=True))
    assert clean
    events = sse(text)
    datas = [json.loads(data) for _, data in events]
    assert all(name == data["type"] for (name, _), data in zip(events, datas, strict=True))
    kinds = [d["type"] for d in datas if d["type"] != "ping"]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert datas[0]["message"]["usage"]["input_tokens"] == 5
    blocks: dict[int, dict[str, Any]] = {}
    for d in datas:
        if d["type"] == "content_block_start":
            blocks[d["index"]] = {**d["content_block"], "acc": ""}
        elif d["type"] == "content_block_delta":
            delta = d["delta"]
            piece = delta["text"] if delta["type"] == "text_delta" else delta["partial_json"]
            blocks[d["index"]]["acc"] += piece
    assert blocks[0]["type"] == "text" and blocks[0]["acc"] == both.text
    assert blocks[1]["type"] == "tool_use" and blocks[1]["id"] == "c1"
    assert json.loads(blocks[1]["acc"]) == {"key": "alpha", "depth": 2}
    deltas = [d for d in datas if d["type"] == "content_block_delta"]
    assert len(deltas) > 2
    assert kinds.count("content_block_stop") == 2
    end = datas[-2]
    assert end["delta"]["stop_reason"] == "tool_use"
    assert end["usage"]["output_tokens"] == 6


# -- Ollama ----------------------------------------------------------------------------


async def test_ollama_non_stream_tool_calls() -> None:
    async with open_fake_llm([CALLS, TEXT]) as server, client(server) as c:
        r1 = await c.post(PATHS["ollama"], json=body("ollama", stream=False))
        r2 = await c.post(PATHS["ollama"], json=body("ollama", stream=False))
    first = r1.json()
    assert first["done"] is True and first["done_reason"] == "stop"
    assert first["model"] == "fake-1" and isinstance(first["created_at"], str)
    assert first["message"]["role"] == "assistant"
    assert first["message"]["tool_calls"] == [
        {"function": {"name": "lookup", "arguments": {"key": "alpha", "depth": 2}}},
        {"function": {"name": "word_count", "arguments": {"text": "a b c"}}},
    ]
    assert (first["prompt_eval_count"], first["eval_count"]) == (20, 7)
    second = r2.json()
    assert second["message"]["content"] == TEXT.text
    assert "tool_calls" not in second["message"]


async def test_ollama_streams_by_default() -> None:
    payload = body("ollama")
    del payload["stream"]
    async with open_fake_llm([TEXT, CALLS]) as server, client(server) as c:
        text, clean = await post_stream(c, "ollama", payload)
        tools_text, tools_clean = await post_stream(c, "ollama", payload)
    assert clean and tools_clean
    lines = ndjson(text)
    assert len(lines) > 2
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert "".join(line["message"]["content"] for line in lines) == TEXT.text
    assert (lines[-1]["prompt_eval_count"], lines[-1]["eval_count"]) == (11, 9)
    calls = [c for line in ndjson(tools_text) for c in line["message"].get("tool_calls", [])]
    assert [c["function"]["arguments"] for c in calls] == [
        {"key": "alpha", "depth": 2},
        {"text": "a b c"},
    ]


# -- what the handler sees ----------------------------------------------------------


async def test_openai_request_is_normalised() -> None:
    payload = {
        "model": "gpt-fake",
        "max_completion_tokens": 99,
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "look "}, {"type": "text", "text": "up a"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"key": "a"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "1"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "lookup", "description": "d", "parameters": {}},
            }
        ],
    }
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        await c.post(PATHS["openai"], json=payload)
    (request,) = server.requests
    assert isinstance(request, FakeRequest)
    assert (request.api, request.model, request.stream, request.max_tokens) == (
        "openai",
        "gpt-fake",
        False,
        99,
    )
    assert request.tools == ["lookup"]
    assert request.body == payload
    assert request.messages == [
        ChatMessage("system", "be brief"),
        ChatMessage("user", "look up a"),
        ChatMessage("assistant", "", (ToolCallRequest("lookup", {"key": "a"}, "t1"),)),
        ChatMessage("tool", "1", tool_call_id="t1", name="lookup"),
    ]


async def test_anthropic_request_is_normalised() -> None:
    payload = {
        "model": "claude-fake",
        "max_tokens": 50,
        "system": "be brief",
        "stream": True,
        "tools": [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "look up a"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "sure"},
                    {"type": "tool_use", "id": "tu1", "name": "lookup", "input": {"key": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu1",
                        "content": [{"type": "text", "text": "1"}],
                    },
                    {"type": "text", "text": "and?"},
                ],
            },
        ],
    }
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        await post_stream(c, "anthropic", payload)
    (request,) = server.requests
    assert (request.api, request.stream, request.max_tokens, request.tools) == (
        "anthropic",
        True,
        50,
        ["lookup"],
    )
    assert request.messages == [
        ChatMessage("system", "be brief"),
        ChatMessage("user", "look up a"),
        ChatMessage("assistant", "sure", (ToolCallRequest("lookup", {"key": "a"}, "tu1"),)),
        ChatMessage("tool", "1", tool_call_id="tu1", name="lookup"),
        ChatMessage("user", "and?"),
    ]


async def test_ollama_request_is_normalised() -> None:
    payload = {
        "model": "llama-fake",
        "stream": False,
        "options": {"num_predict": 12},
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        "messages": [
            {"role": "user", "content": "look up a"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "lookup", "arguments": {"key": "a"}}}],
            },
            {"role": "tool", "content": "1", "tool_name": "lookup"},
        ],
    }
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        await c.post(PATHS["ollama"], json=payload)
    (request,) = server.requests
    assert (request.api, request.stream, request.max_tokens, request.tools) == (
        "ollama",
        False,
        12,
        ["lookup"],
    )
    assert request.messages == [
        ChatMessage("user", "look up a"),
        ChatMessage("assistant", "", (ToolCallRequest("lookup", {"key": "a"}),)),
        ChatMessage("tool", "1", name="lookup"),
    ]


async def test_handlers_sync_and_async() -> None:
    def echo(request: FakeRequest) -> ModelReply:
        return Reply(text=f"{request.api}: {request.messages[-1].content}")

    async def slow_echo(request: FakeRequest) -> ModelReply:
        await trio.lowlevel.checkpoint()
        return echo(request)

    for handler in (echo, slow_echo):
        async with open_fake_llm(handler) as server, client(server) as c:
            r = await c.post(PATHS["anthropic"], json=body("anthropic", "ping"))
            assert r.json()["content"][0]["text"] == "anthropic: ping"


async def test_default_is_the_demo_model() -> None:
    """None runs the demo's script: look up, count the words, answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Tell me about topic-7"}]
    async with open_fake_llm() as server, client(server) as c:
        for expected in ("lookup", "word_count"):
            r = await c.post(PATHS["openai"], json={"model": "m", "messages": messages})
            message = r.json()["choices"][0]["message"]
            (call,) = message["tool_calls"]
            assert call["function"]["name"] == expected
            messages.append(message)
            result = "the value of topic-7 is 49" if expected == "lookup" else "6"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        r = await c.post(PATHS["openai"], json={"model": "m", "messages": messages})
    assert r.json()["choices"][0]["message"]["content"] == "the value of topic-7 is 49 (6 words)"


async def test_script_exhausted() -> None:
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        assert (await c.post(PATHS["openai"], json=body("openai"))).status_code == 200
        r = await c.post(PATHS["openai"], json=body("openai"))
        r_anthropic = await c.post(PATHS["anthropic"], json=body("anthropic"))
    assert r.status_code == 500
    assert "exhausted" in r.json()["error"]["message"]
    assert r_anthropic.json()["error"]["type"] == "api_error"
    assert server.statistics().handler_errors == 2


async def test_handler_errors_answer_500() -> None:
    def broken(request: FakeRequest) -> ModelReply:
        raise RuntimeError("oops")

    async with open_fake_llm(broken) as server, client(server) as c:
        r = await c.post(PATHS["ollama"], json=body("ollama"))
    assert r.status_code == 500
    assert "oops" in r.json()["error"]


# -- faults ----------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_rate_limit(api: str) -> None:
    faults = Faults(rate_limit=1.0, retry_after=2.5)
    async with open_fake_llm([TEXT], faults=faults) as server, client(server) as c:
        r = await c.post(PATHS[api], json=body(api))
    assert r.status_code == 429
    assert r.headers["retry-after"] == "3"
    assert "error" in r.json()
    assert server.requests == []
    assert server.statistics().faults["rate_limit"] == 1


@pytest.mark.parametrize("api", APIS)
async def test_server_error(api: str) -> None:
    faults = Faults(server_error=1.0)
    async with open_fake_llm([TEXT], faults=faults) as server, client(server) as c:
        r = await c.post(PATHS[api], json=body(api))
    assert r.status_code == 500
    assert "error" in r.json()


async def test_garbage() -> None:
    async with open_fake_llm([TEXT], faults=Faults(garbage=1.0)) as server, client(server) as c:
        r = await c.post(PATHS["openai"], json=body("openai"))
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.text)


@pytest.mark.parametrize("stream", [False, True])
async def test_reset(stream: bool) -> None:
    async with open_fake_llm([TEXT], faults=Faults(reset=1.0)) as server, client(server) as c:
        with pytest.raises(httpx.TransportError):
            await c.post(PATHS["openai"], json=body("openai", stream=stream))
    assert server.statistics().faults["reset"] == 1


TERMINATORS = {"openai": "data: [DONE]", "anthropic": "message_stop", "ollama": '"done":true'}


@pytest.mark.parametrize("api", APIS)
async def test_truncate_cuts_streams(api: str) -> None:
    faults = Faults(truncate=1.0)
    async with open_fake_llm([TEXT, TEXT], faults=faults) as server, client(server) as c:
        text, clean = await post_stream(c, api, body(api, stream=True))
        # Only streams are cut: the same fault leaves a JSON answer whole.
        whole = await c.post(PATHS[api], json=body(api, stream=False))
    assert not clean
    assert TERMINATORS[api] not in text
    assert whole.status_code == 200 and whole.json()
    assert server.statistics().faults["truncate"] == 1


def broken(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return True
    return False


async def test_malformed_tool_json() -> None:
    faults = Faults(malformed_tool_json=1.0)
    async with open_fake_llm([CALLS] * 4 + [TEXT], faults=faults) as server, client(server) as c:
        openai = (await c.post(PATHS["openai"], json=body("openai"))).json()
        anthropic = (await c.post(PATHS["anthropic"], json=body("anthropic"))).json()
        ollama = (await c.post(PATHS["ollama"], json=body("ollama"))).json()
        text, _ = await post_stream(c, "openai", body("openai", stream=True))
        plain = (await c.post(PATHS["openai"], json=body("openai"))).json()
    calls = len(CALLS.tool_calls)
    assert calls == 2
    assert len(openai["choices"][0]["message"]["tool_calls"]) == calls
    for call in openai["choices"][0]["message"]["tool_calls"]:
        assert broken(call["function"]["arguments"])
    assert len([b for b in anthropic["content"] if b.get("type") == "tool_use"]) == calls
    for block in anthropic["content"]:
        assert isinstance(block["input"], str) and broken(block["input"])
    assert len(ollama["message"]["tool_calls"]) == calls
    for call in ollama["message"]["tool_calls"]:
        assert isinstance(call["function"]["arguments"], str)
        assert broken(call["function"]["arguments"])
    chunks = [json.loads(data) for _, data in sse(text)[:-1]]
    streamed = assemble_openai_calls(chunks)
    assert len(streamed) == calls
    assert all(broken(call["arguments"]) for call in streamed.values())
    assert plain["choices"][0]["message"]["content"] == TEXT.text  # no calls: nothing to break
    assert server.statistics().faults["malformed_tool_json"] == 4


async def test_delay(autojump_clock: trio.testing.MockClock) -> None:
    faults = Faults(delay=1.0, delay_seconds=30.0, rate_limit=1.0)
    # No client timeout: the delay's deadline is the only one for the clock to jump to.
    async with open_fake_llm([TEXT], faults=faults) as server, client(server, timeout=None) as c:
        start = trio.current_time()
        r = await c.post(PATHS["openai"], json=body("openai"))
        elapsed = trio.current_time() - start
    assert elapsed >= 30.0
    assert r.status_code == 429  # a delay adds to the other faults
    assert server.statistics().faults == {
        "reset": 0,
        "rate_limit": 1,
        "server_error": 0,
        "garbage": 0,
        "delay": 1,
        "truncate": 0,
        "malformed_tool_json": 0,
    }


async def test_precedence() -> None:
    everything = Faults(reset=1.0, rate_limit=1.0, server_error=1.0, garbage=1.0)
    async with open_fake_llm([TEXT], faults=everything) as server, client(server) as c:
        with pytest.raises(httpx.TransportError):
            await c.post(PATHS["openai"], json=body("openai"))
    no_reset = Faults(rate_limit=1.0, server_error=1.0, garbage=1.0)
    async with open_fake_llm([TEXT], faults=no_reset) as server, client(server) as c:
        assert (await c.post(PATHS["openai"], json=body("openai"))).status_code == 429
    errors = Faults(server_error=1.0, garbage=1.0)
    async with open_fake_llm([TEXT], faults=errors) as server, client(server) as c:
        assert (await c.post(PATHS["openai"], json=body("openai"))).status_code == 500


async def outcomes(faults: Faults, n: int = 40) -> list[str]:
    out = []
    async with open_fake_llm(lambda r: TEXT, faults=faults) as server, client(server) as c:
        for i in range(n):
            api = APIS[i % 3]
            try:
                r = await c.post(PATHS[api], json=body(api))
            except httpx.TransportError:
                out.append("reset")
                continue
            out.append("garbage" if r.status_code == 200 and broken(r.text) else str(r.status_code))
    return out


async def test_faults_are_deterministic_for_a_seed() -> None:
    faults = Faults(seed=7, reset=0.1, rate_limit=0.2, server_error=0.2, garbage=0.2)
    first = await outcomes(faults)
    assert first == await outcomes(faults)
    assert {"reset", "429", "500", "garbage", "200"} <= set(first)
    assert first != await outcomes(
        Faults(seed=8, reset=0.1, rate_limit=0.2, server_error=0.2, garbage=0.2)
    )


def test_faults_are_validated() -> None:
    with pytest.raises(InvalidArgument, match="rate_limit"):
        Faults(rate_limit=1.5)
    with pytest.raises(InvalidArgument, match="delay_seconds"):
        Faults(delay_seconds=-1)


async def test_bad_arguments() -> None:
    with pytest.raises(InvalidArgument, match="replies"):
        async with open_fake_llm("not replies"):  # type: ignore[arg-type]
            pass  # pragma: no cover
    with pytest.raises(InvalidArgument, match=r"replies\[1\]"):
        async with open_fake_llm([TEXT, "nope"]):  # type: ignore[list-item]
            pass  # pragma: no cover


# -- HTTP ------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_api_key(api: str) -> None:
    good = {"x-api-key": "sk-test"} if api == "anthropic" else {"authorization": "Bearer sk-test"}
    async with open_fake_llm(lambda r: TEXT, api_key="sk-test") as server, client(server) as c:
        missing = await c.post(PATHS[api], json=body(api))
        wrong = await c.post(
            PATHS[api], json=body(api), headers={**good, **dict.fromkeys(good, "x")}
        )
        ok = await c.post(PATHS[api], json=body(api), headers=good)
    assert (missing.status_code, wrong.status_code, ok.status_code) == (401, 401, 200)
    assert "error" in missing.json()
    if api == "anthropic":
        assert missing.json()["error"]["type"] == "authentication_error"
    assert server.statistics().rejected == {401: 2}


async def test_anthropic_also_takes_a_bearer_token() -> None:
    # The official Anthropic client sends Authorization: Bearer; the real API takes both.
    async with open_fake_llm(lambda r: TEXT, api_key="sk-test") as server, client(server) as c:
        bearer = await c.post(
            PATHS["anthropic"], json=body("anthropic"), headers={"authorization": "Bearer sk-test"}
        )
        wrong = await c.post(
            PATHS["anthropic"], json=body("anthropic"), headers={"authorization": "Bearer x"}
        )
        # OpenAI and Ollama still want the Bearer token, not x-api-key.
        other = await c.post(PATHS["openai"], json=body("openai"), headers={"x-api-key": "sk-test"})
    assert (bearer.status_code, wrong.status_code, other.status_code) == (200, 401, 401)
    assert server.statistics().rejected == {401: 2}


async def test_not_found_and_bad_requests() -> None:
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        assert (await c.post("/v1/nothing", json={})).status_code == 404
        wrong_method = await c.get(PATHS["openai"])
        bad_json = await c.post(
            PATHS["openai"], content=b"{not json", headers={"content-type": "application/json"}
        )
        not_object = await c.post(PATHS["ollama"], json=[1, 2])
        missing = await c.post(PATHS["anthropic"], json={"model": "m", "messages": []})
        # The connection survives all of that and still answers.
        ok = await c.post(PATHS["openai"], json=body("openai"))
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]["message"]
    assert not_object.status_code == 400 and "error" in not_object.json()
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
    assert ok.status_code == 200
    stats = server.statistics()
    assert stats.rejected == {404: 1, 405: 1, 400: 3}
    assert stats.connections == 1 and stats.http_requests == 6
    assert stats.by_api == {"openai": 1, "anthropic": 0, "ollama": 0, "responses": 0}


async def test_hundred_concurrent_requests() -> None:
    def echo(request: FakeRequest) -> ModelReply:
        return Reply(text=request.messages[-1].content, usage=Usage(1, 1))

    results: dict[int, str] = {}
    async with open_fake_llm(echo) as server, client(server) as c:

        async def one(i: int) -> None:
            api = APIS[i % 3]
            if i % 2:
                text, clean = await post_stream(c, api, body(api, f"n{i}", stream=True))
                assert clean
                results[i] = streamed_text(api, text)
            else:
                results[i] = (await c.post(PATHS[api], json=body(api, f"n{i}", stream=False))).text

        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(one, i)
        stats = server.statistics()
    assert all(f"n{i}" in results[i] for i in range(100))
    assert len(server.requests) == 100 and stats.replies == 100
    assert stats.by_api == {"openai": 34, "anthropic": 33, "ollama": 33, "responses": 0}


async def test_keep_alive_reuses_one_connection() -> None:
    async with open_fake_llm(lambda r: TEXT) as server, client(server) as c:
        for api in APIS:
            await c.post(PATHS[api], json=body(api))
            await post_stream(c, api, body(api, stream=True))
    assert server.statistics().connections == 1


async def test_binds_loopback_and_closes_everything(task_tracker: Any) -> None:
    first = len(task_tracker.spawned)
    async with open_fake_llm([TEXT]) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}" and server.port > 0
        async with client(server) as c:
            await c.post(PATHS["openai"], json=body("openai"))
            # Leave an idle keep-alive connection open while the server closes.
            async with client(server) as idle:
                await idle.post(PATHS["openai"], json=body("openai"))
                ours = task_tracker.spawned[first:]
                assert ours
    assert task_tracker.alive(ours) == []
    async with httpx.AsyncClient(trust_env=False, timeout=5) as c:
        with pytest.raises(httpx.ConnectError):
            await c.post(f"{server.base_url}{PATHS['openai']}", json=body("openai"))


# -- the command line -----------------------------------------------------------------


def test_cli_options() -> None:
    args = _parser().parse_args(
        ["fake-llm", "--port", "0", "--seed", "3", "--rate-limit", "0.5", "--malformed", "1"]
    )
    assert (args.port, args.seed, args.rate_limit, args.malformed, args.host) == (
        0,
        3,
        0.5,
        1.0,
        "127.0.0.1",
    )
    with pytest.raises(SystemExit):
        _parser().parse_args(["fake-llm", "--truncate", "2"])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child is POSIX")
async def test_cli_serves_until_interrupted() -> None:
    command = [sys.executable, "-m", "agentrio.cli", "fake-llm", "--port", "0", "--seed", "1"]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(4096)
                assert chunk, "the server exited before printing its address"
                line += chunk
        match = re.fullmatch(
            r"agentrio fake LLM server on (http://127\.0\.0\.1:(\d+)) "
            r"\(OpenAI /v1/chat/completions, OpenAI Responses /v1/responses, "
            r"Anthropic /v1/messages, Ollama /api/chat\)\n",
            line.decode(),
        )
        assert match is not None, line
        assert int(match[2]) > 0
        async with httpx.AsyncClient(base_url=match[1], trust_env=False, timeout=10) as c:
            r = await c.post(PATHS["ollama"], json=body("ollama", "Tell me about topic-3"))
        (call,) = r.json()["message"]["tool_calls"]
        assert call["function"] == {"name": "lookup", "arguments": {"key": "topic-3"}}
        process.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


# -- structured outputs and forced tools -----------------------------------------------

OBJECT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}


def schema_format(schema: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "A", "schema": schema, "strict": strict}}


async def test_requests_for_an_answer_of_a_schema_are_read() -> None:
    an_tool = {"name": "final_result", "input_schema": OBJECT}
    async with open_fake_llm([TEXT, TEXT, TEXT, TEXT]) as server, client(server) as c:
        oa = await c.post(
            PATHS["openai"], json=body("openai", response_format=schema_format(OBJECT))
        )
        ol = await c.post(PATHS["ollama"], json=body("ollama", format=OBJECT))
        ol_json = await c.post(PATHS["ollama"], json=body("ollama", format="json"))
        an = await c.post(
            PATHS["anthropic"],
            json=body(
                "anthropic",
                tools=[an_tool],
                tool_choice={"type": "tool", "name": "final_result"},
            ),
        )
    assert [r.status_code for r in (oa, ol, ol_json, an)] == [200] * 4
    seen = [(r.api, r.output_schema, r.tool_choice) for r in server.requests]
    assert seen == [
        ("openai", OBJECT, None),
        ("ollama", OBJECT, None),
        ("ollama", None, None),
        ("anthropic", OBJECT, "final_result"),
    ]


@pytest.mark.parametrize(
    ("api", "extra", "why"),
    [
        ("openai", {"response_format": {"type": "json_schema"}}, "needs 'json_schema'"),
        ("openai", {"response_format": {"type": "xml"}}, "response_format"),
        (
            "openai",
            {"response_format": schema_format({"type": "array", "items": {}})},
            "root must be an object",
        ),
        (
            "openai",
            {"response_format": schema_format({**OBJECT, "additionalProperties": True})},
            "'additionalProperties' must be false",
        ),
        (
            "openai",
            {"response_format": schema_format({**OBJECT, "required": []})},
            "'required' must list every property",
        ),
        (
            "openai",
            {
                "response_format": schema_format(
                    {**OBJECT, "properties": {"a": {"type": "object", "properties": {}}}}
                )
            },
            "schema.properties.a: 'additionalProperties' must be false",
        ),
        ("openai", {"tool_choice": "required"}, "only allowed when tools"),
        ("anthropic", {"tool_choice": {"type": "tool", "name": "x"}}, "needs tools"),
        (
            "anthropic",
            {"tools": [{"name": "a"}], "tool_choice": {"type": "tool", "name": "b"}},
            "names tool 'b'",
        ),
        ("ollama", {"format": "yaml"}, "format"),
    ],
)
async def test_bad_requests_for_a_schema_or_a_tool_are_400(
    api: str, extra: dict[str, Any], why: str
) -> None:
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        r = await c.post(PATHS[api], json=body(api, **extra))
    error = r.json()["error"]
    assert r.status_code == 400 and why in (error if api == "ollama" else error["message"])
    assert server.statistics().rejected == {400: 1}


async def test_a_non_strict_schema_is_taken_as_it_is() -> None:
    loose = {"type": "object", "additionalProperties": {"type": "integer"}}
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        r = await c.post(
            PATHS["openai"], json=body("openai", response_format=schema_format(loose, False))
        )
    assert r.status_code == 200 and server.requests[0].output_schema == loose


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_reply_to_a_forced_tool_goes_out_as_its_call(stream: bool) -> None:
    answers = [Reply(text='{"a": 1}'), Reply(text="not an object")]
    tools = [{"name": "lookup"}, {"name": "final_result"}]
    forced = body("anthropic", stream=stream, tools=tools, tool_choice={"type": "any"})
    async with open_fake_llm(answers) as server, client(server) as c:
        if stream:
            first, _ = await post_stream(c, "anthropic", forced)
            raw, _ = await post_stream(c, "anthropic", forced)
            second = streamed_text("anthropic", raw)
        else:
            first = json.dumps((await c.post(PATHS["anthropic"], json=forced)).json())
            second = json.dumps((await c.post(PATHS["anthropic"], json=forced)).json())
    assert server.requests[0].tool_choice == "required"
    assert "final_result" in first and '"a"' in first
    assert "not an object" in second  # (a text that is no object goes out as text)


async def test_a_text_answer_to_a_forced_wrapper_tool_goes_out_wrapped() -> None:
    # A typed answer that is no object (list[str]) is asked of Anthropic as a tool
    # whose input is {"result": ...}: a server that obeys the forced tool sends it so.
    wrapper = {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"type": "string"}}},
        "required": ["result"],
        "additionalProperties": False,
    }
    tools = [{"name": "final_result", "input_schema": wrapper}]
    forced = body("anthropic", tools=tools, tool_choice={"type": "tool", "name": "final_result"})
    async with open_fake_llm([Reply(text='["a", "b"]')]) as server, client(server) as c:
        answer = (await c.post(PATHS["anthropic"], json=forced)).json()
    (block,) = answer["content"]
    assert block["type"] == "tool_use" and block["name"] == "final_result"
    assert block["input"] == {"result": ["a", "b"]}


# -- content parts: decoded for the handler, refused when malformed -----------------------

_PNG64 = "iVBORw0KGgoAAAAA"  # base64 of a PNG signature and four zero bytes


def _user(api: str, content: Any, **extra: Any) -> dict[str, Any]:
    message = {"role": "user", "content": content, **extra}
    payload: dict[str, Any] = {"model": "m", "messages": [message]}
    if api == "anthropic":
        payload["max_tokens"] = 10
    return payload


MALFORMED = [
    # (api, the user message's content, extra message fields, what the 400 says)
    ("openai", [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}], {}, "url"),
    (
        "openai",
        [{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AA=="}}],
        {},
        "data:",
    ),
    (
        "openai",
        [{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}],
        {},
        "base64",
    ),
    ("openai", [{"type": "image_url"}], {}, "needs image_url"),
    ("openai", [{"type": "file", "file": {"file_id": "f1"}}], {}, "file_data"),
    ("openai", [{"type": "video", "text": ""}], {}, "type"),
    (
        "anthropic",
        [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/bmp", "data": "AA=="},
            }
        ],
        {},
        "media_type",
    ),
    (
        "anthropic",
        [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/jpeg", "data": _PNG64},
            }
        ],
        {},
        "look like image/png",
    ),
    (
        "anthropic",
        [{"type": "document", "source": {"type": "url", "url": "ftp://x/a.pdf"}}],
        {},
        "url",
    ),
    ("anthropic", [{"type": "image"}], {}, "needs a source"),
    ("ollama", "look", {"images": ["not base64!"]}, "base64"),
    ("ollama", "look", {"images": ["R0lGODlhAAAA"]}, "not a PNG or JPEG"),
]


@pytest.mark.parametrize(("api", "content", "extra", "says"), MALFORMED)
async def test_malformed_parts_are_answered_400(
    api: str, content: Any, extra: dict[str, Any], says: str
) -> None:
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        answer = await c.post(PATHS[api], json=_user(api, content, **extra))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]  # (Ollama's is the message itself)
    assert says in (error if api == "ollama" else error["message"])
    assert server.requests == [] and server.statistics().rejected == {400: 1}


@pytest.mark.parametrize("api", APIS)
async def test_a_handler_sees_the_parts(api: str) -> None:
    from agentrio import ImagePart
    from agentrio.types import TextPart

    content: Any = {
        "openai": [
            {"type": "text", "text": "what?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _PNG64}},
        ],
        "anthropic": [
            {"type": "text", "text": "what?"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": _PNG64},
            },
        ],
        "ollama": "what?",
    }[api]
    extra = {"images": [_PNG64]} if api == "ollama" else {}
    async with open_fake_llm([TEXT]) as server, client(server) as c:
        answer = await c.post(PATHS[api], json=_user(api, content, **extra))
    assert answer.status_code == 200
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x00"
    (message,) = server.requests[0].messages
    assert message.content == "what?"
    assert message.parts == (TextPart("what?"), ImagePart(data=png, media_type="image/png"))


async def test_the_block_s_own_exception_comes_out_as_itself() -> None:
    # As open_runtime's: `async with open_fake_llm() as server, open_runtime() as rt:`
    # lets `except ConfigError` catch what spawn_agent raised (#23).
    with pytest.raises(agentrio.ConfigError, match="unknown provider"):
        async with open_fake_llm([Reply(text="hi")]), agentrio.open_runtime() as rt:
            await rt.spawn_agent(agentrio.AgentSpec("a", "nope:model"))
    with pytest.raises(KeyError):
        async with open_fake_llm([Reply(text="hi")]):
            raise KeyError("mine")
    group = ExceptionGroup("mine", [KeyError("a"), ValueError("b")])
    with pytest.RaisesGroup(KeyError, ValueError):
        async with open_fake_llm([Reply(text="hi")]):
            raise group
