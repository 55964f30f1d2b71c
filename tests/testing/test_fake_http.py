"""The fake LLM server's own HTTP/1.1, byte by byte: what a client may send, and what it gets."""

from __future__ import annotations

import json
import re

import pytest
import trio

from agentrio.testing import FakeLLMServer, Reply, open_fake_llm
from agentrio.testing import fake_server as fake_server_module

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
STREAM_BODY = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
).encode()


def post(body: bytes = BODY, *head: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    lines = [b"POST /v1/chat/completions " + version, b"host: x", *head]
    if not any(line.lower().startswith(b"transfer-encoding") for line in head):
        lines.append(b"content-length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def exchange(server: FakeLLMServer, data: bytes) -> bytes:
    """Send *data*; everything the server sends until it closes the connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        await stream.send_all(data)
        received = b""
        while chunk := await stream.receive_some():
            received += chunk
    return received


def statuses(received: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.1 (\d{3}) ", received)


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with open_fake_llm([Reply(text="one"), Reply(text="two")]) as server:
        received = await exchange(server, post() + b"\r\n" + post(BODY, b"connection: close"))
    assert statuses(received) == [b"200", b"200"]
    assert received.index(b'"one"') < received.index(b'"two"')
    assert received.count(b"connection: close") == 1
    assert server.statistics().connections == 1


async def test_a_chunked_request_body() -> None:
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in (BODY[:10], BODY[10:])) + b"0\r\n\r\n"
    request = post(chunked, b"transfer-encoding: chunked", b"connection: close")
    async with open_fake_llm([Reply(text="ok")]) as server:
        received = await exchange(server, request)
    assert statuses(received) == [b"200"] and b'"ok"' in received
    assert server.requests[0].body["model"] == "m"


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    async with open_fake_llm([Reply(text="ok")]) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            head = post(BODY, b"expect: 100-continue", b"connection: close")[: -len(BODY)]
            await stream.send_all(head)
            assert await stream.receive_some() == b"HTTP/1.1 100 Continue\r\n\r\n"
            await stream.send_all(BODY)
            received = b""
            while chunk := await stream.receive_some():
                received += chunk
    assert statuses(received) == [b"200"]


async def test_an_http_10_client_gets_a_stream_that_ends_with_the_connection() -> None:
    async with open_fake_llm([Reply(text="streamed")]) as server:
        received = await exchange(server, post(STREAM_BODY, version=b"HTTP/1.0"))
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in head
    assert b"transfer-encoding" not in head
    assert body.startswith(b"data: ") and body.endswith(b"data: [DONE]\n\n")


async def test_head_requests_get_no_body() -> None:
    request = b"HEAD /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    async with open_fake_llm() as server:
        received = await exchange(server, request)
    assert statuses(received) == [b"405"] and received.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"garbage\r\n\r\n",
        b"POST /v1/chat/completions HTTP/2.0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nno colon here\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nbad name: 1\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: x\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n"
        b"content-length: 3\r\n\r\n",
    ],
)
async def test_bad_http_is_answered_400_and_the_connection_closed(request_bytes: bytes) -> None:
    async with open_fake_llm() as server:
        received = await exchange(server, request_bytes)
        stats = server.statistics()
    assert statuses(received) == [b"400"] and b"connection: close" in received
    assert b"bad HTTP" in received
    assert stats.rejected == {400: 1} and stats.http_requests == 1


async def test_a_body_too_large_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_server_module, "MAX_BODY", 100)
    async with open_fake_llm() as server:
        received = await exchange(server, post(b"x" * 101))
        stats = server.statistics()
    assert statuses(received) == [b"413"] and b"connection: close" in received
    assert stats.rejected == {413: 1}


async def test_requests_are_not_kept_when_asked() -> None:
    async with open_fake_llm([Reply(text="a"), Reply(text="b")], keep_requests=False) as server:
        received = await exchange(server, post() + post(BODY, b"connection: close"))
        stats = server.statistics()
    assert server.requests == [] and stats.replies == 2
    # The answers are numbered all the same.
    assert b'"chatcmpl-000001"' in received and b'"chatcmpl-000002"' in received


async def test_a_head_with_bare_line_feeds() -> None:
    body = BODY + b"\r\n\r\n"  # (JSON may be followed by blank lines)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\nconnection: close\ncontent-length: %d\n\n" % len(body)
    )
    async with open_fake_llm([Reply(text="ok")]) as server:
        received = await exchange(server, request + body)
    assert statuses(received) == [b"200"]
