"""agentrio's own HTTP/1.1 client: framing, keep-alive, failures, TLS, proxies, and the
httpx transport on it; against scripted raw servers and the fake LLM server on 127.0.0.1."""

from __future__ import annotations

import base64
import gzip
import json
import random
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
import trustme

import agentrio
from agentrio import (
    ChatMessage,
    ConfigError,
    Provider,
    ProviderConfig,
)
from agentrio.errors import BadResponse, ProviderUnavailable
from agentrio.providers import transport
from agentrio.providers.transport import (
    ConnectionPool,
    HTTPTransport,
    env_proxy,
    header_lines,
    origin_of,
    request_head,
)
from agentrio.testing import Faults, Reply, open_fake_llm

HI = [ChatMessage("user", "hi")]
ANSWER = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}

Answer = bytes | Callable[[trio.SocketStream], Awaitable[bool]]


def response(body: bytes, *head: bytes, status: bytes = b"200 OK") -> bytes:
    """A whole response with a Content-Length (and *head*'s extra header lines)."""
    lines = [b"HTTP/1.1 " + status, b"content-length: %d" % len(body), *head]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


H200 = b"HTTP/1.1 200 OK\r\n"
CHUNKED = H200 + b"transfer-encoding: chunked\r\n"


def chunked(*pieces: bytes, head: bytes = b"content-type: text/event-stream\r\n") -> bytes:
    body = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces)
    return CHUNKED + head + b"\r\n" + body + b"0\r\n\r\n"


PROTOCOL = httpx.RemoteProtocolError
OK = response(json.dumps(ANSWER).encode(), b"content-type: application/json")


class Raw:
    """A scripted HTTP server: each request, on whichever connection, gets the next
    answer (bytes to send; or a function of the stream returning whether the
    connection stays open). It records each request and counts connections."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self.hung_up = 0  # connections the client closed
        self.url = ""

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = b""
        async with stream:
            try:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = await stream.receive_some()
                        if not data:
                            self.hung_up += 1
                            return
                        buffer += data
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    size = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            size = int(line.split(b":")[1])
                    while len(buffer) < size:
                        buffer += await stream.receive_some()
                    self.requests.append(head + b"\r\n\r\n" + buffer[:size])
                    buffer = buffer[size:]
                    answer = self.answers.pop(0)
                    if isinstance(answer, bytes):
                        await stream.send_all(answer)
                    elif not await answer(stream):
                        return
            except trio.BrokenResourceError:
                self.hung_up += 1


@asynccontextmanager
async def raw_server(*answers: Answer) -> AsyncIterator[Raw]:
    server = Raw(*answers)
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        server.url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        yield server
        nursery.cancel_scope.cancel()


async def fetch(
    pool: ConnectionPool, url: str, *, timeout: float = 10, body: bytes = b"{}"
) -> tuple[int, bytes]:
    """POST *body* to *url* through *pool*; the status and the whole body."""
    target = httpx.URL(url)
    head = request_head("POST", target, [("content-type", "application/json")])
    answer = await pool.request(
        origin_of(target), head, body, connect_timeout=timeout, read_timeout=timeout
    )
    parts = []
    while piece := await answer.receive():
        parts.append(piece)
    assert answer.is_closed
    return answer.status_code, b"".join(parts)


def config(url: str, **options: object) -> ProviderConfig:
    settings: dict[str, object] = {"max_retries": 0, **options}
    return ProviderConfig(name="p", kind="openai", base_url=url + "/v1", **settings)  # type: ignore[arg-type]


# -- framing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (response(b"abc"), b"abc"),
        (response(b""), b""),
        (chunked(b"ab", b"c"), b"abc"),
        (
            CHUNKED + b"\r\n3;ext=1\r\nabc\r\n0\r\nx-t: 1\r\n\r\n",
            b"abc",
        ),
        (H200 + b"content-length: 3, 3\r\n\r\nabc", b"abc"),
        (b"HTTP/1.1 200 OK\ncontent-length: 3\n\n\n\r\n", b"\n\r\n"),  # LF, then CRLF in the body
        (b"HTTP/1.1 200 OK\ncontent-length: 2\n\nab", b"ab"),  # bare LF line ends
        (b"HTTP/1.1 100 Continue\r\n\r\n" + response(b"ok"), b"ok"),  # interim answers skipped
        (response(b"folded", b"x-a: 1\r\n  2"), b"folded"),  # obsolete line folding
        (response(b"x", status=b"200"), b"x"),  # no reason phrase
    ],
)
async def test_bodies_framed_each_way(answer: bytes, body: bytes) -> None:
    async with raw_server(answer, OK) as server, ConnectionPool() as pool:
        assert await fetch(pool, server.url) == (200, body)
        assert (await fetch(pool, server.url))[0] == 200
    assert server.connections == 1  # the connection was reused after each


async def test_a_body_to_the_end_of_the_connection() -> None:
    async def close_delimited(stream: trio.SocketStream) -> bool:
        await stream.send_all(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nto the end")
        return False  # (then closes)

    async with raw_server(close_delimited, OK) as server, ConnectionPool() as pool:
        assert await fetch(pool, server.url) == (200, b"to the end")
        assert (await fetch(pool, server.url))[0] == 200
        assert pool.statistics().opened == 2  # not reused: its end was the body's end
    assert server.connections == 2


@pytest.mark.parametrize("seed", range(8))
async def test_any_split_of_the_bytes_reads_the_same(seed: int) -> None:
    rng = random.Random(seed)
    events = [
        b"data: " + json.dumps({"n": i, "t": "\u00e9" * i}).encode() + b"\n\n" for i in range(30)
    ]
    whole = chunked(*events)

    async def trickle(stream: trio.SocketStream) -> bool:
        data = whole
        while data:
            cut = rng.randint(1, 40)
            await stream.send_all(data[:cut])
            data = data[cut:]
            await trio.sleep(0)
        return True

    async with raw_server(trickle) as server, ConnectionPool() as pool:
        assert await fetch(pool, server.url) == (200, b"".join(events))
        assert pool.statistics().idle == 1


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_content_codings_are_undone(coding: str) -> None:
    data = json.dumps(ANSWER).encode() * 50
    packed = gzip.compress(data) if coding == "gzip" else zlib.compress(data)
    answer = response(packed, b"content-encoding: " + coding.encode())
    async with raw_server(answer) as server, ConnectionPool() as pool:
        assert await fetch(pool, server.url) == (200, data)


async def test_a_small_compressed_body_is_undone_a_bounded_piece_at_a_time() -> None:
    data = b"x" * (8 << 20)  # 8 MiB from about 8 KiB
    answer = response(gzip.compress(data), b"content-encoding: gzip")
    async with raw_server(answer) as server, ConnectionPool() as pool:
        target = httpx.URL(server.url)
        head = request_head("POST", target, [])
        got = await pool.request(origin_of(target), head, b"", connect_timeout=5, read_timeout=5)
        sizes = []
        while piece := await got.receive():
            sizes.append(len(piece))
    assert sum(sizes) == len(data) and max(sizes) <= 256 * 1024


# -- the request -----------------------------------------------------------------------------


async def test_what_the_provider_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRIO_TEST_KEY", "sk-1")
    async with raw_server(OK) as server:
        host = server.url.removeprefix("http://")
        url = f"http://user:pw@{host}/v1?api-version=2"
        c = ProviderConfig(name="p", kind="openai", base_url=url, api_key_env="AGENTRIO_TEST_KEY")
        async with Provider(c) as p:
            assert (await p.complete("m", HI, [], max_output_tokens=8)).text == "hello"
    (sent,) = server.requests
    head, _, body = sent.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?api-version=2 HTTP/1.1"
    fields = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    assert fields[b"host"] == host.encode()
    assert fields[b"content-type"] == b"application/json"
    assert int(fields[b"content-length"]) == len(body)
    # As httpx does: credentials in the URL become Basic auth.
    assert fields[b"authorization"] == b"Basic " + base64.b64encode(b"user:pw")
    assert fields[b"user-agent"] == b"agentrio/" + agentrio.__version__.encode()
    assert json.loads(body)["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("key", ["sk-1\r\nx-evil: 1", "sk-1\n", "sk-\u2603"])
def test_a_key_that_cannot_be_a_header_is_a_config_error(key: str) -> None:
    with pytest.raises(ConfigError, match="API key") as info:
        Provider(config("http://127.0.0.1:9"), api_key=key)
    assert key not in str(info.value)


def test_request_head_refuses_line_breaks() -> None:
    url = httpx.URL("http://h:8/p?q=1")
    head = request_head("POST", url, [("a", "b")])
    assert head == b"POST /p?q=1 HTTP/1.1\r\nhost: h:8\r\na: b\r\n"
    assert header_lines([("x", "1"), ("y", "2")]) == b"x: 1\r\ny: 2\r\n"
    for name, value in (("a\r\nb", "c"), ("a", "b\nc"), ("a", "b\0")):
        with pytest.raises(ValueError, match="line break or NUL"):
            request_head("POST", url, [(name, value)])
    with pytest.raises(ValueError, match="outside Latin-1"):
        header_lines([("a", "\u2603")])


async def test_a_request_with_header_lines_of_its_own() -> None:
    async with raw_server(OK) as server, ConnectionPool() as pool:
        target = httpx.URL(server.url + "/x")
        head = request_head("POST", target, [("a", "1")])
        extra = header_lines([("b", "2")])
        got = await pool.request(
            origin_of(target), head, b"{}", connect_timeout=5, read_timeout=5, extra=extra
        )
        await got.aclose()
    assert server.requests[0].endswith(b"a: 1\r\nb: 2\r\ncontent-length: 2\r\n\r\n{}")


# -- keep-alive ------------------------------------------------------------------------------


async def test_the_provider_keeps_connections_alive() -> None:
    async with open_fake_llm([Reply(text="hi")] * 6) as server:
        async with Provider(config(server.base_url)) as p:
            for _ in range(3):
                await p.complete("m", HI, [], max_output_tokens=8)
            streamed = Provider(config(server.base_url, stream=True))
            async with streamed:
                for _ in range(3):
                    await streamed.complete("m", HI, [], max_output_tokens=8)
        assert server.statistics().connections == 2  # one per provider


async def test_a_connection_the_server_closes_is_not_reused() -> None:
    async with (
        raw_server(response(b"1", b"connection: close"), OK) as server,
        ConnectionPool() as pool,
    ):
        assert await fetch(pool, server.url) == (200, b"1")
        assert pool.statistics().idle == 0
        assert (await fetch(pool, server.url))[0] == 200
    assert server.connections == 2


async def test_an_idle_connection_closed_by_the_server_is_replaced() -> None:
    async def answer_then_close(stream: trio.SocketStream) -> bool:
        await stream.send_all(response(b"1"))  # (no "connection: close": it just goes)
        return False

    async with raw_server(answer_then_close, OK) as server, ConnectionPool() as pool:
        assert await fetch(pool, server.url) == (200, b"1")
        assert pool.statistics().idle == 1
        await trio.testing.wait_all_tasks_blocked()
        # Reusing it would fail: it is seen closed and a new one is opened.
        assert (await fetch(pool, server.url))[0] == 200
    assert server.connections == 2


async def test_idle_connections_expire(autojump_clock: trio.testing.MockClock) -> None:
    async with raw_server(OK, OK, OK) as server, ConnectionPool(keepalive_expiry=5) as pool:
        await fetch(pool, server.url)
        await trio.sleep(4)
        await fetch(pool, server.url)
        assert pool.statistics().opened == 1
        await trio.sleep(6)
        await fetch(pool, server.url)
        assert pool.statistics().opened == 2


async def test_the_pool_keeps_at_most_max_idle() -> None:
    async with raw_server(*[OK] * 4) as server, ConnectionPool(max_idle=2) as pool:
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(fetch, pool, server.url)
        assert pool.statistics() == (4, 2)


# -- what closes a connection ------------------------------------------------------------------


async def wait_for_hang_up(stream: trio.SocketStream) -> bool:
    """Answer nothing; return once the client closed the connection."""
    assert await stream.receive_some() == b""
    return False


async def test_a_cancelled_request_closes_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with raw_server(wait_for_hang_up, OK) as server, ConnectionPool() as pool:
        with trio.move_on_after(1):
            await fetch(pool, server.url)
        assert pool.statistics().idle == 0
        assert (await fetch(pool, server.url))[0] == 200
    assert server.connections == 2


async def test_a_body_abandoned_midway_closes_its_connection() -> None:
    async def part(stream: trio.SocketStream) -> bool:
        await stream.send_all(chunked(b"a" * 100, b"b" * 100)[:-20])
        return await wait_for_hang_up(stream)

    async with raw_server(part, OK) as server, ConnectionPool() as pool:
        target = httpx.URL(server.url)
        head = request_head("POST", target, [])
        got = await pool.request(origin_of(target), head, b"", connect_timeout=5, read_timeout=5)
        assert await got.receive()
        await got.aclose()
        assert pool.statistics().idle == 0
        assert (await fetch(pool, server.url))[0] == 200
    assert server.connections == 2


async def test_the_read_timeout_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def half(stream: trio.SocketStream) -> bool:
        await stream.send_all(H200 + b"content-length: 10\r\n\r\nabc")
        await trio.sleep(100)
        return True

    async with raw_server(half, OK) as server, ConnectionPool() as pool:
        with pytest.raises(httpx.ReadTimeout):
            await fetch(pool, server.url, timeout=3)
        assert trio.current_time() == pytest.approx(3)
        assert pool.statistics().idle == 0


async def test_the_read_timeout_counts_from_the_last_byte(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(stream: trio.SocketStream) -> bool:
        for piece in (H200 + b"", b"content-length: 2\r\n\r\n", b"a", b"b"):
            await trio.sleep(2)
            await stream.send_all(piece)
        return True

    async with raw_server(slow) as server, ConnectionPool() as pool:
        assert await fetch(pool, server.url, timeout=3) == (200, b"ab")
    assert trio.current_time() == pytest.approx(8)


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (b"garbage\r\n\r\n", PROTOCOL, "status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", PROTOCOL, "status line"),
        (H200 + b"no colon\r\n\r\n", PROTOCOL, "header line"),
        (
            H200 + b"content-length: x\r\n\r\n",
            httpx.RemoteProtocolError,
            "Content-Length",
        ),
        (
            H200 + b"content-length: 1, 2\r\n\r\n",
            httpx.RemoteProtocolError,
            "Content-Length",
        ),
        (
            H200 + b"transfer-encoding: gzip\r\n\r\n",
            httpx.RemoteProtocolError,
            "Transfer",
        ),
        (
            CHUNKED + b"\r\nzz\r\n",
            httpx.RemoteProtocolError,
            "chunk size",
        ),
        (
            CHUNKED + b"\r\n1\r\nabc\r\n",
            httpx.RemoteProtocolError,
            "longer than its size",
        ),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", PROTOCOL, "switched"),
        (response(b"x", b"content-encoding: br"), httpx.DecodingError, "Content-Encoding"),
    ],
)
async def test_malformed_answers_raise_what_httpx_raises(
    answer: bytes, error: type[Exception], match: str
) -> None:
    async with raw_server(answer, OK) as server, ConnectionPool() as pool:
        with pytest.raises(error, match=match):
            await fetch(pool, server.url)
        assert pool.statistics().idle == 0
        assert (await fetch(pool, server.url))[0] == 200  # on a new connection
    assert server.connections == 2


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"", "before answering"),
        (H200 + b"", "middle of its head"),
        (H200 + b"content-length: 10\r\n\r\nabc", "before the end of the body"),
        (
            CHUNKED + b"\r\n3\r\nabc\r\n",
            "incomplete chunked",
        ),
    ],
)
async def test_a_connection_closed_early_is_a_remote_protocol_error(
    answer: bytes, match: str
) -> None:
    async def then_close(stream: trio.SocketStream) -> bool:
        await stream.send_all(answer)
        return False

    async with raw_server(then_close) as server, ConnectionPool() as pool:
        with pytest.raises(httpx.RemoteProtocolError, match=match):
            await fetch(pool, server.url)


async def test_a_head_without_end_is_bounded() -> None:
    answer = H200 + b"" + b"x-a: b\r\n" * 20_000
    async with raw_server(answer) as server, ConnectionPool() as pool:
        with pytest.raises(httpx.RemoteProtocolError, match="head is over 65536 bytes"):
            await fetch(pool, server.url)


async def test_interim_answers_without_end_are_refused() -> None:
    # (a server must not keep a call waiting with 1xx answers for ever)
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" * 11 + response(b"ok")
    async with raw_server(answer) as server, ConnectionPool() as pool:
        with pytest.raises(httpx.RemoteProtocolError, match="over 10 interim"):
            await fetch(pool, server.url)


async def test_nobody_listening_is_a_connect_error() -> None:
    async with raw_server() as server:
        url = server.url
    async with ConnectionPool() as pool:
        with pytest.raises(httpx.ConnectError, match="could not connect"):
            await fetch(pool, url)


async def test_the_connect_timeout(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unanswered(host: str, port: int) -> trio.SocketStream:
        await trio.sleep_forever()
        raise AssertionError

    monkeypatch.setattr(transport.trio, "open_tcp_stream", unanswered)
    async with ConnectionPool() as pool:
        with pytest.raises(httpx.ConnectTimeout, match="within the connect timeout"):
            await fetch(pool, "http://127.0.0.1:9", timeout=7)
    assert trio.current_time() == pytest.approx(7)


async def test_a_reset_is_a_read_error() -> None:
    body = json.dumps({"model": "m", "messages": []}).encode()
    faults = Faults(reset=1.0)
    async with open_fake_llm([Reply(text="x")], faults=faults) as server, ConnectionPool() as pool:
        with pytest.raises(httpx.ReadError, match="reset"):
            await fetch(pool, server.base_url + "/v1/chat/completions", body=body)


# -- through the provider ----------------------------------------------------------------------


async def test_transport_errors_reach_the_caller_as_provider_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with raw_server(b"garbage\r\n\r\n") as server, Provider(config(server.url)) as p:
        with pytest.raises(ProviderUnavailable, match="RemoteProtocolError") as info:
            await p.complete("m", HI, [], max_output_tokens=8)
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


# (httpx leaves its chain of body generators suspended after a decoding error,
# for the GC to finalize: a warning, which this project's tests make errors)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("own_client", [False, True])
async def test_a_broken_content_coding_is_a_bad_response(own_client: bool) -> None:
    answer = response(b"not gzip", b"content-encoding: gzip")
    async with raw_server(answer) as server, httpx.AsyncClient(trust_env=False) as client:
        provider = Provider(config(server.url), client=client if own_client else None)
        async with provider:
            with pytest.raises(BadResponse, match="content coding could not be undone"):
                await provider.complete("m", HI, [], max_output_tokens=8)


async def test_an_event_whose_data_spans_lines() -> None:
    # SSE: the data lines of one event are one value, joined by newlines.
    events = [
        b'data: {"choices": [{"delta":\ndata:  {"content": "hel"}}]}\n\n',
        b'event: x\ndata: {"choices": [{"delta": {"content": "lo"}}]}\nid: 1\n\n',
        b": a comment\n\n",
        b'data: {"choices": [],\ndata: "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n',
        b"data: [DONE]\n\n",
    ]
    texts: list[str] = []
    async with raw_server(chunked(*events)) as server:
        p = Provider(config(server.url, stream=True))
        async with p:
            reply = await p.complete("m", HI, [], max_output_tokens=8, on_text=texts.append)
    assert texts == ["hel", "lo"] and reply.text == "hello"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 2)


async def test_requests_are_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="agentrio.http")
    failing = response(b"{}", status=b"500 Internal Server Error")
    async with raw_server(OK, failing) as server:
        p = Provider(config(server.url + "/x?key=SECRET"))
        async with p:
            await p.complete("m", HI, [], max_output_tokens=8)
            with pytest.raises(ProviderUnavailable):
                await p.complete("m", HI, [], max_output_tokens=8)
    lines = [r.getMessage() for r in caplog.records if r.name == "agentrio.http"]
    assert len(lines) == 2
    assert lines[0].startswith("HTTP Request: POST ") and '"HTTP/1.1 200 OK" (' in lines[0]
    assert " bytes sent, head in " in lines[0] and lines[0].endswith(" ms)")
    assert "key=[redacted]" in lines[0] and "SECRET" not in caplog.text
    assert '"HTTP/1.1 500 Internal Server Error" (' in lines[1]


# -- a client of one's own -------------------------------------------------------------------


async def test_a_provider_uses_a_client_given_to_it() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        async with Provider(config("http://127.0.0.1:9"), client=client) as p:
            reply = await p.complete("m", HI, [], max_output_tokens=8)
        assert not client.is_closed
    assert reply.text == "hello" and len(seen) == 1
    assert json.loads(seen[0].content)["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("stream", [False, True])
async def test_the_httpx_transport_under_a_provider(stream: bool) -> None:
    async with open_fake_llm([Reply(text="hi there")] * 3) as server:
        async with (
            httpx.AsyncClient(transport=HTTPTransport()) as client,
            Provider(config(server.base_url, stream=stream), client=client) as p,
        ):
            for _ in range(3):
                assert (await p.complete("m", HI, [], max_output_tokens=8)).text == "hi there"
        assert server.statistics().connections == 1


async def test_the_httpx_transport_on_its_own() -> None:
    async def upload() -> AsyncIterator[bytes]:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        for i in range(0, len(body), 7):
            yield body[i : i + 7].encode()

    async with open_fake_llm([Reply(text="one"), Reply(text="two")]) as server:
        transport = HTTPTransport()
        async with httpx.AsyncClient(transport=transport, base_url=server.base_url) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "one"
            assert r.http_version == "HTTP/1.1" and r.reason_phrase == "OK"
            chunked_upload = await client.post("/v1/chat/completions", content=upload())
            assert chunked_upload.json()["choices"][0]["message"]["content"] == "two"
            missing = await client.get("/nothing")
            assert missing.status_code == 404 and "no route" in missing.text
            head = await client.head("/v1/chat/completions")
            assert head.status_code == 405 and head.content == b""
            async with client.stream("POST", "/v1/chat/completions", json=body) as streamed:
                assert streamed.status_code == 500  # (the script is used up)
        with pytest.raises(httpx.UnsupportedProtocol):
            await transport.handle_async_request(httpx.Request("GET", "ftp://h/"))
    assert server.statistics().connections == 1


async def test_the_httpx_transport_maps_errors_and_attaches_the_request() -> None:
    async with (
        raw_server(b"garbage\r\n\r\n") as server,
        httpx.AsyncClient(transport=HTTPTransport()) as client,
    ):
        with pytest.raises(httpx.RemoteProtocolError) as info:
            await client.post(server.url)
    assert str(info.value.request.url).startswith(server.url)


# -- TLS ---------------------------------------------------------------------------------------


@asynccontextmanager
async def tls_server(ca: trustme.CA, *answers: Answer) -> AsyncIterator[Raw]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    server = Raw(*answers)

    async def handle(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, context, server_side=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError:
            server.hung_up += 1
            return
        await server.handle(tls)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        server.url = f"https://127.0.0.1:{listener.socket.getsockname()[1]}"
        yield server
        nursery.cancel_scope.cancel()


async def test_tls_with_ssl_cert_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    async with tls_server(ca, OK, OK) as server, Provider(config(server.url)) as p:
        for _ in range(2):
            assert (await p.complete("m", HI, [], max_output_tokens=8)).text == "hello"
    assert server.connections == 1


async def test_tls_with_an_untrusted_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with tls_server(trustme.CA(), OK) as server, Provider(config(server.url)) as p:
        with pytest.raises(ProviderUnavailable, match="CERTIFICATE_VERIFY_FAILED") as info:
            await p.complete("m", HI, [], max_output_tokens=8)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


async def test_tls_through_the_httpx_transport() -> None:
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with (
        tls_server(ca, OK) as server,
        httpx.AsyncClient(transport=HTTPTransport(verify=context)) as client,
    ):
        r = await client.post(server.url, json={})
    assert r.json() == ANSWER


# -- proxies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "url", "proxy"),
    [
        ({}, "http://h/v1", None),
        ({"HTTP_PROXY": "http://p:1"}, "http://h/v1", "http://p:1"),
        ({"HTTP_PROXY": "http://p:1"}, "https://h/v1", None),
        ({"HTTPS_PROXY": "http://p:1"}, "https://h/v1", "http://p:1"),
        ({"ALL_PROXY": "http://p:1"}, "https://h/v1", "http://p:1"),
        ({"all_proxy": "http://p:1"}, "http://h/v1", "http://p:1"),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "*"}, "http://h/v1", None),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "a.com, h"}, "http://h/v1", None),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "example.com"}, "http://api.example.com/", None),
        (
            {"ALL_PROXY": "http://p:1", "NO_PROXY": "example.com"},
            "http://badexample.com/",
            "http://p:1",
        ),
        (
            {"ALL_PROXY": "http://p:1", "NO_PROXY": ".example.com"},
            "http://example.com/",
            "http://p:1",
        ),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1"}, "http://127.0.0.1:8/", None),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "http://h:8"}, "http://h:8/", None),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "https://h"}, "http://h/", "http://p:1"),
    ],
)
def test_env_proxy_reads_the_environment_as_httpx_does(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str, proxy: str | None
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert env_proxy(httpx.URL(url)) == proxy


async def test_a_proxy_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # The "proxy" answers itself: what matters is that the request reached it,
    # in the absolute form a proxy is sent.
    async with raw_server(OK) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with Provider(config("http://model.invalid")) as p:
            assert (await p.complete("m", HI, [], max_output_tokens=8)).text == "hello"
    assert proxy.requests[0].startswith(b"POST http://model.invalid/v1/chat/completions HTTP/1.1")


async def test_a_connection_freed_after_the_pool_closed_is_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool_closed, hung_up = trio.Event(), trio.Event()

    async def rest_later(stream: trio.SocketStream) -> bool:
        await stream.send_all(H200 + b"content-length: 2\r\n\r\na")
        await pool_closed.wait()
        await stream.send_all(b"b")
        await wait_for_hang_up(stream)
        hung_up.set()
        return False

    async with raw_server(rest_later) as server:
        pool = ConnectionPool()
        target = httpx.URL(server.url)
        head = request_head("POST", target, [])
        got = await pool.request(origin_of(target), head, b"", connect_timeout=5, read_timeout=5)
        await pool.aclose()
        pool_closed.set()
        assert await got.receive() == b"a" and await got.receive() == b"b"
        assert await got.receive() == b""
        assert pool.statistics().idle == 0
        with trio.fail_after(1):  # (virtual time: only if the connection stayed open)
            await hung_up.wait()
