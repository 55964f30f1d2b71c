"""The bounded readers: lines split as SSE and NDJSON end them, limits that name
themselves; and a provider against a raw server that never stops sending."""

from __future__ import annotations

import json
import random
import re
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from agentrio import ChatMessage, Provider, ProviderConfig
from agentrio.errors import BadResponse
from agentrio.providers.bounded import (
    MAX_LINE_BYTES,
    MAX_REPLY_CHARS,
    MAX_RESPONSE_BYTES,
    LineSplitter,
    TooLarge,
    read_body,
)

BIG = 1 << 30


def split_all(chunks: list[bytes], max_line: int = BIG, max_total: int = BIG) -> list[str]:
    lines = LineSplitter(max_line, max_total)
    out: list[str] = []
    for chunk in chunks:
        out += lines.split(chunk)
    return out + lines.close()


def test_the_defaults() -> None:
    assert (MAX_RESPONSE_BYTES, MAX_LINE_BYTES, MAX_REPLY_CHARS) == (64 << 20, 1 << 20, 1 << 20)


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"a\nb\n"], ["a", "b"]),
        ([b"a\r\nb\r\n"], ["a", "b"]),
        ([b"a\rb\r"], ["a", "b"]),
        ([b"a\r", b"\nb"], ["a", "b"]),  # CRLF split across chunks: one line end
        ([b"a\r", b"\r\nb"], ["a", "", "b"]),  # CR, then CRLF: two
        ([b"a\r\r\nb\n\n"], ["a", "", "b", ""]),
        ([b"da", b"ta: x", b"\n"], ["data: x"]),
        ([b"no end"], ["no end"]),  # the last line, without a line end, still counts
        ([b"", b"x", b"", b"\n"], ["x"]),
        ([b"\n"], [""]),
        ([], []),
    ],
)
def test_lines_end_at_lf_crlf_or_cr(chunks: list[bytes], lines: list[str]) -> None:
    assert split_all(chunks) == lines


def test_a_character_split_across_chunks_is_whole_in_its_line() -> None:
    data = "data: é€😀\n".encode()
    for cut in range(1, len(data)):
        assert split_all([data[:cut], data[cut:]]) == ["data: é€😀"]


def test_only_cr_and_lf_end_lines() -> None:
    # Unlike str.splitlines (and httpx's aiter_lines, which uses it), U+2028,
    # form feeds and the like are text: JSON may hold them raw in a string.
    text = 'data: {"t": "a\u2028b\x0cc\x85d"}\n'
    assert split_all([text.encode()]) == [text[:-1]]


@pytest.mark.parametrize("seed", range(20))
def test_any_chunking_gives_the_same_lines(seed: int) -> None:
    rng = random.Random(seed)
    pieces = ["data: x", "é", "\r\n", "\n", "\r", "", "event: y", "{}", "€"]
    text = "".join(rng.choice(pieces) for _ in range(200))
    data = text.encode()
    cuts = sorted(rng.sample(range(1, len(data)), min(20, len(data) - 1)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    expected = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if expected[-1] == "":
        expected.pop()
    assert split_all(chunks) == expected


def test_a_line_longer_than_the_limit() -> None:
    assert split_all([b"x" * 10 + b"\n"], max_line=10) == ["x" * 10]
    with pytest.raises(TooLarge, match=r"max_line_bytes \(10 bytes\)"):
        split_all([b"x" * 11 + b"\nshort\n"], max_line=10)


def test_a_line_without_end_fails_as_soon_as_it_passes_the_limit() -> None:
    lines = LineSplitter(100, BIG)
    for _ in range(10):
        assert lines.split(b"y" * 10) == []
    with pytest.raises(TooLarge, match="max_line_bytes"):
        lines.split(b"y")


def test_a_stream_larger_than_the_limit() -> None:
    lines = LineSplitter(BIG, 100)
    assert lines.split(b"a\n" * 50) == ["a"] * 50
    with pytest.raises(TooLarge, match=r"max_response_bytes \(100 bytes\)"):
        lines.split(b"\n")


def _response(chunks: list[bytes]) -> httpx.Response:
    async def stream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return httpx.Response(200, content=stream())


async def test_read_body_within_and_past_the_limit() -> None:
    assert await read_body(_response([b"ab", b"cd"]), 4) == b"abcd"
    response = _response([b"ab", b"cd", b"e", b"never read"])
    with pytest.raises(TooLarge, match=r"max_response_bytes \(4 bytes\)"):
        await read_body(response, 4)
    assert response.is_closed


async def test_read_body_cut_keeps_the_start() -> None:
    response = _response([b"ab", b"cdef", b"gh"])
    assert await read_body(response, 3, cut=True) == b"abc"
    assert response.is_closed


# -- a server that never stops sending ------------------------------------------------------

# Past this the server gives up and closes (so that, without the limits, a test
# fails instead of running forever); far beyond every limit set below.
SAFETY = 32 << 20
LIMITS: dict[str, Any] = {
    "max_response_bytes": 1 << 20,
    "max_line_bytes": 64 << 10,
    "max_reply_chars": 64 << 10,
}
PATHS = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}


class Endless:
    """A raw HTTP/1.1 server on 127.0.0.1: it answers 200 with *head* (header lines),
    then *first*, then *piece* over and over, until the client hangs up."""

    def __init__(self, head: bytes, first: bytes, piece: bytes) -> None:
        self.head, self.first, self.piece = head, first, piece * max(1, (16 << 10) // len(piece))
        self.connections = 0
        self.sent = 0
        self.hung_up = trio.Event()
        self.base_url = ""

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some()
            head, _, body = data.partition(b"\r\n\r\n")
            found = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
            while len(body) < (int(found.group(1)) if found else 0):
                body += await stream.receive_some()
            try:
                await stream.send_all(b"HTTP/1.1 200 OK\r\n" + self.head + b"\r\n" + self.first)
                while self.sent < SAFETY:
                    await stream.send_all(self.piece)
                    self.sent += len(self.piece)
            except trio.BrokenResourceError:
                self.hung_up.set()


@asynccontextmanager
async def endless(head: bytes, first: bytes, piece: bytes) -> AsyncIterator[Endless]:
    server = Endless(head, first, piece)
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        server.base_url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        yield server
        nursery.cancel_scope.cancel()


SSE = b"content-type: text/event-stream\r\n"
NDJSON = b"content-type: application/x-ndjson\r\n"
TEXT = "x" * 1000
OPENAI_DELTA = {"choices": [{"delta": {"content": TEXT}}]}
ANTHROPIC_DELTA = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "text_delta", "text": TEXT},
}
OLLAMA_DELTA = {"message": {"role": "assistant", "content": TEXT}, "done": False}


def _sse(event: object) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


CASES = {
    # name: (kind, stream, head, first, piece, the limit named)
    "endless body": (
        "openai",
        False,
        b"content-type: application/json\r\n",
        b'{"a": "',
        b"x",
        "max_response_bytes",
    ),
    "endless line": ("openai", True, SSE, b'data: {"choices": "', b"x", "max_line_bytes"),
    "endless keep-alives": ("openai", True, SSE, b"", b": keep-alive\r\n", "max_response_bytes"),
    "endless openai deltas": ("openai", True, SSE, b"", _sse(OPENAI_DELTA), "max_reply_chars"),
    "endless anthropic deltas": (
        "anthropic",
        True,
        SSE,
        b"",
        b"event: content_block_delta\n" + _sse(ANTHROPIC_DELTA),
        "max_reply_chars",
    ),
    "endless ollama lines": (
        "ollama",
        True,
        NDJSON,
        b"",
        json.dumps(OLLAMA_DELTA).encode() + b"\n",
        "max_reply_chars",
    ),
    "endless ollama line": ("ollama", True, NDJSON, b'{"message": "', b"x", "max_line_bytes"),
}


@pytest.mark.parametrize("case", CASES)
async def test_a_server_that_never_stops_sending(
    autojump_clock: trio.testing.MockClock, case: str
) -> None:
    kind, stream, head, first, piece, limit = CASES[case]
    async with endless(head, first, piece) as server:
        config = ProviderConfig(
            name="p",
            kind=kind,
            base_url=server.base_url + PATHS[kind],
            stream=stream,
            max_retries=3,
            **LIMITS,
        )
        async with Provider(config) as provider:
            tracemalloc.start()
            try:
                with pytest.raises(BadResponse) as info:
                    await provider.complete(
                        "m", [ChatMessage("user", "hi")], [], max_output_tokens=8
                    )
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert f"{limit} ({LIMITS[limit]} " in str(info.value)
            with trio.fail_after(1):  # (virtual time: only if the connection stayed open)
                await server.hung_up.wait()
            stats = provider.statistics()
    assert type(info.value) is BadResponse and info.value.provider == "p"
    assert "connection was dropped" in str(info.value)
    # Not retried (it would only send without end again), but counted as a failure.
    assert server.connections == 1 and (stats.requests, stats.failures) == (1, 1)
    # Memory stayed within a few times the limits, far below what was sent.
    assert peak < 4 << 20, peak
    assert server.sent < SAFETY
