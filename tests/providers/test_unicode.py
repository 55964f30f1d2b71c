"""Answers that are not valid text: a body that is not UTF-8 is a BadResponse (its bytes
never quoted); a JSON escape of a lone surrogate ("\\ud800") becomes U+FFFD in the
reply's text, its tool calls' arguments and a quoted error, on each wire, streamed or
not, through agentrio's own HTTP client or an httpx one.

The bodies are written byte by byte by a raw server on 127.0.0.1: the fake LLM server
encodes what it sends, and cannot send what these tests need."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio

from agentrio import ChatMessage, ModelReply, Provider, ProviderConfig
from agentrio.errors import BadResponse
from agentrio.providers.provider import Kind

BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}
KINDS: list[Kind] = ["openai", "anthropic", "ollama"]

# -- the answers, each with a piece of text *TEXT* goes into -------------------------

WHOLE = {
    "openai": b'{"choices":[{"message":{"role":"assistant","content":"TEXT"},'
    b'"finish_reason":"stop"}]}',
    "anthropic": b'{"type":"message","role":"assistant","content":[{"type":"text",'
    b'"text":"TEXT"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}',
    "ollama": b'{"message":{"role":"assistant","content":"TEXT"},"done":true}',
}
STREAM = {
    "openai": b'data: {"choices":[{"delta":{"content":"TEXT"}}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    "anthropic": b'event: message_start\ndata: {"type":"message_start","message":'
    b'{"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"TEXT"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
    b'"end_turn"},"usage":{"output_tokens":1}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    "ollama": b'{"message":{"role":"assistant","content":"TEXT"},"done":false}\n'
    b'{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}\n',
}
# A tool call whose arguments hold the escape of a lone surrogate, in each shape.
CALL_WHOLE = {
    "openai": b'{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":'
    b'[{"id":"c1","type":"function","function":{"name":"read","arguments":'
    b'"{\\"path\\": \\"report-\\\\udcff.txt\\"}"}}]},"finish_reason":"tool_calls"}]}',
    "anthropic": b'{"type":"message","role":"assistant","content":[{"type":"tool_use",'
    b'"id":"c1","name":"read","input":{"path":"report-\\udcff.txt"}}],'
    b'"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}',
    "ollama": b'{"message":{"role":"assistant","content":"","tool_calls":[{"function":'
    b'{"name":"read","arguments":{"path":"report-\\udcff.txt"}}}]},"done":true}',
}
CALL_STREAM = {
    "openai": b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1",'
    b'"function":{"name":"read","arguments":"{\\"path\\": \\"report-"}}]}}]}\n\n'
    b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
    b'"\\\\udcff.txt\\"}"}}]}}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n',
    "anthropic": b'event: message_start\ndata: {"type":"message_start","message":'
    b'{"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"tool_use","id":"c1","name":"read","input":{}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"input_json_delta","partial_json":"{\\"path\\": \\"report-"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"input_json_delta","partial_json":"\\\\udcff.txt\\"}"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
    b'"tool_use"},"usage":{"output_tokens":1}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    "ollama": b'{"message":{"role":"assistant","content":"","tool_calls":[{"function":'
    b'{"name":"read","arguments":{"path":"report-\\udcff.txt"}}}]},"done":false}\n'
    b'{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}\n',
}


def _with(answer: bytes, text: bytes) -> bytes:
    return answer.replace(b"TEXT", text)


@asynccontextmanager
async def raw_answer(body: bytes, stream: bool) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering each request 200 with *body*; its URL."""

    async def handle(conn: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await conn.receive_some()
        head, _, rest = received.partition(b"\r\n\r\n")
        (length,) = (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += await conn.receive_some()
        kind = b"text/event-stream" if stream else b"application/json"
        await conn.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (kind, len(body), body)
        )
        await conn.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


async def ask(kind: Kind, body: bytes, *, stream: bool, client: bool) -> ModelReply:
    """The reply of a provider of *kind* to which the server answers *body*, or its error
    (raised out of the server's nursery as it is, not in an exception group)."""
    async with raw_answer(body, stream) as url:
        config = ProviderConfig(
            name="p", kind=kind, base_url=url + BASE[kind], stream=stream, max_retries=0
        )
        async with (
            httpx.AsyncClient() as http,
            Provider(config, client=http if client else None) as p,
        ):
            try:
                reply = await p.model("m").complete(
                    [ChatMessage("user", "hi")], [], max_output_tokens=16
                )
            except Exception as exc:
                failed = exc
            else:
                return reply
    raise failed


@pytest.mark.parametrize("client", [False, True])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_body_that_is_not_utf8_is_a_bad_response(
    kind: Kind, stream: bool, client: bool
) -> None:
    body = _with((STREAM if stream else WHOLE)[kind], b"secret caf\xe9 \xff\xfe")
    with pytest.raises(BadResponse) as caught:
        await ask(kind, body, stream=stream, client=client)
    message = str(caught.value)
    assert "not UTF-8" in message
    assert "secret" not in message and "caf" not in message  # (its bytes never quoted)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_an_escaped_lone_surrogate_in_the_text_is_replaced(kind: Kind, stream: bool) -> None:
    body = _with((STREAM if stream else WHOLE)[kind], b"caf\\ud800 \\ud83d\\ude00 \\udfff")
    reply = await ask(kind, body, stream=stream, client=False)
    assert reply.text == "caf\ufffd \U0001f600 \ufffd"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_an_escaped_lone_surrogate_in_tool_arguments_is_replaced(
    kind: Kind, stream: bool
) -> None:
    body = (CALL_STREAM if stream else CALL_WHOLE)[kind]
    reply = await ask(kind, body, stream=stream, client=False)
    ((call),) = reply.tool_calls
    assert (call.name, call.arguments, call.error) == ("read", {"path": "report-\ufffd.txt"}, "")


async def test_an_error_event_with_an_escaped_lone_surrogate_is_quoted_as_valid_text() -> None:
    body = (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"busy \\udcff"}}\n\n'
    )
    with pytest.raises(BadResponse) as caught:
        await ask("anthropic", body, stream=True, client=False)
    message = str(caught.value)
    assert "busy \ufffd" in message
    message.encode("utf-8")


async def test_a_body_that_is_not_json_stays_a_bad_response_with_a_surrogate_escape() -> None:
    with pytest.raises(BadResponse, match="the body is not JSON"):
        await ask("openai", b'{"choices": "\\ud800', stream=False, client=False)
