"""The answers' parser (``_http11``) against hostile bytes: whatever a server sends, a
status and a body or a typed error comes out, in bounded time and memory; through a
provider, only agentrio's errors. Each example is a real exchange on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial

import h11
import httpx
import outcome
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentrio import ChatMessage, ModelReply, Provider, ProviderConfig
from agentrio.errors import AgentrioError
from agentrio.providers._http11 import MAX_HEAD
from agentrio.providers.transport import ConnectionPool, origin_of, request_head

ANSWER = json.dumps(
    {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
).encode()
EVENTS = [
    b'data: {"choices":[{"index":0,"delta":{"content":"hel"}}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]
GOOD = [
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
    % (len(ANSWER), ANSWER),
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS)
    + b"0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n" + ANSWER,
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 429 Too Many\r\nretry-after: 1\r\ncontent-length: 5\r\n\r\nslow!",
]
# Bytes that matter to the grammar, so that a damage often lands on a boundary.
TOKENS = [b"\r\n", b"\n", b"\r", b":", b" ", b";", b"0", b"f" * 9, b"-1", b"\x00", b"\xff", b","]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A well-formed answer with one to four bytes runs inserted, removed or replaced."""
    data = bytearray(draw(st.sampled_from(GOOD)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=8))
        action = draw(st.sampled_from(["insert", "remove", "replace", "cut"]))
        if action == "insert":
            data[at:at] = junk
        elif action == "remove":
            del data[at : at + draw(st.integers(1, 8))]
        elif action == "replace":
            data[at : at + len(junk)] = junk
        else:
            del data[at:]
    return bytes(data)


answers = damaged() | st.binary(max_size=300) | st.sampled_from(GOOD)
# Where the server splits what it sends: each piece is one send.
cuts = st.lists(st.integers(1, 64), max_size=6)


async def _serve(answer: bytes, sizes: list[int], stream: trio.SocketStream) -> None:
    """Read one request's head, send *answer* in pieces of *sizes*, then close."""
    async with stream:
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some()
            if not data:
                return
            buffer += data
        try:
            for size in sizes:
                await stream.send_all(answer[:size])
                answer = answer[size:]
                await trio.sleep(0)
            await stream.send_all(answer)
        except trio.BrokenResourceError:
            pass  # the client gave up first: that is its right


async def _exchange(
    answer: bytes, sizes: list[int], client: Callable[[str], Awaitable[None]]
) -> None:
    """One request to a server that answers *answer*; *client* does the talking
    (and what it raises is raised here, not in an exception group)."""
    async with trio.open_nursery() as nursery:
        handler = partial(_serve, answer, sizes)
        (listener,) = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
        with trio.fail_after(10):  # bounded time: the server always ends its answer
            result = await outcome.acapture(client, url)
        nursery.cancel_scope.cancel()
    result.unwrap()


async def _fetch(url: str) -> tuple[int, bytes]:
    """POST to *url* on a pool of its own: the status and the whole body."""
    target = httpx.URL(url)
    async with ConnectionPool() as pool:
        got = await pool.request(
            origin_of(target),
            request_head("POST", target, []),
            b"{}",
            connect_timeout=5,
            read_timeout=5,
        )
        parts = []
        while piece := await got.receive():
            parts.append(piece)
        return got.status_code, b"".join(parts)


async def _through_the_pool(answer: bytes, url: str) -> None:
    target = httpx.URL(url)
    async with ConnectionPool() as pool:
        try:
            got = await pool.request(
                origin_of(target),
                request_head("POST", target, []),
                b"{}",
                connect_timeout=5,
                read_timeout=5,
            )
            size = 0
            while piece := await got.receive():
                size += len(piece)
        except (httpx.TransportError, httpx.DecodingError):
            assert pool.statistics().idle == 0  # a connection in doubt is never reused
            return
        assert 100 <= got.status_code <= 999
        # Bounded: no more than came (no coding to undo in these answers).
        assert size <= len(answer)


@FUZZ
@given(answers, cuts)
def test_any_bytes_give_an_answer_or_an_httpx_error(answer: bytes, sizes: list[int]) -> None:
    trio.run(_exchange, answer, sizes, partial(_through_the_pool, answer))


async def _through_a_provider(stream: bool, url: str) -> None:
    config = ProviderConfig(
        name="p", kind="openai", base_url=url + "/v1", max_retries=0, stream=stream
    )
    async with Provider(config) as provider:
        try:
            reply = await provider.complete(
                "m", [ChatMessage("user", "hi")], [], max_output_tokens=8
            )
        except AgentrioError:
            return
        assert isinstance(reply, ModelReply)


@FUZZ
@given(answers, cuts, st.booleans())
def test_a_provider_raises_only_agentrio_errors(
    answer: bytes, sizes: list[int], stream: bool
) -> None:
    trio.run(_exchange, answer, sizes, partial(_through_a_provider, stream))


# -- h11 as the oracle ---------------------------------------------------------------------------


def h11_reads(answer: bytes) -> tuple[int, bytes] | None:
    """What h11 reads from *answer*, followed by the end of the connection: the
    status and body of a whole HTTP/1.x answer to a POST, else None."""
    parser = h11.Connection(h11.CLIENT)
    request = h11.Request(method="POST", target="/", headers=[("host", "x")])
    parser.send(request)
    parser.send(h11.EndOfMessage())
    parser.receive_data(answer)
    parser.receive_data(b"")
    status, body = 0, b""
    try:
        while True:
            event = parser.next_event()
            if isinstance(event, h11.Response):
                if event.http_version[:1] != b"1":
                    return None  # (h11 reads any HTTP/d.d; agentrio wants 1.x)
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, body
            elif not isinstance(event, h11.InformationalResponse):
                return None
    except h11.RemoteProtocolError:
        return None


@FUZZ
@given(answers, cuts)
@example(b"HTTP/1.1 200 \x01OK\r\ncontent-length: 2\r\n\r\n{}", [])  # (in the reason: read)
@example(  # (h11 reads a control character in a value; the pool refuses it)
    b"HTTP/1.1 200 OK\r\ncontent-type:\x01 application/json\r\ncontent-length: 2\r\n\r\n{}",
    [],
)
def test_what_h11_reads_the_pool_reads_the_same(answer: bytes, sizes: list[int]) -> None:
    # The parser on the hot path is agentrio's own (h11 costs too much there: see
    # docs/design.md); h11 is the reference it is held to.
    expected = h11_reads(answer)
    if expected is None:
        return
    got: list[tuple[int, bytes]] = []

    async def client(url: str) -> None:
        got.append(await _fetch(url))

    fields = answer.partition(b"\r\n\r\n")[0].partition(b"\r\n")[2]  # (not the status line)
    if any((b < 0x20 and b not in (9, 10, 13)) or b == 0x7F for b in fields):
        # The one place the pool is stricter: h11 lets control characters other
        # than NUL and whitespace through in a header value; the pool refuses them.
        with pytest.raises(httpx.RemoteProtocolError):
            trio.run(_exchange, answer, sizes, client)
        return
    trio.run(_exchange, answer, sizes, client)
    assert got == [expected]


# -- what h11 refuses that the hand parser let through ----------------------------------------


async def _fetch_one(answer: bytes) -> tuple[int, bytes]:
    result: list[tuple[int, bytes]] = []

    async def client(url: str) -> None:
        result.append(await _fetch(url))

    await _exchange(answer, [], client)
    return result[0]


@pytest.mark.parametrize(
    ("head", "match"),
    [
        (b"x-a: 1\x002\r\n", "header line"),  # a NUL inside a value
        (b"x-a: 1\x0b2\r\n", "header line"),  # a control character
        (b"x a: 1\r\n", "header line"),  # a name that is not a token
        (b"x(a): 1\r\n", "header line"),
        (b"x-a: 1\r2\r\n", "header line"),  # a bare CR
        (b"x-a: 1\r\n \x002\r\n", "header line"),  # in a folded line
        (b"content-length: " + b"0" * 20 + b"2\r\n", "Content-Length"),  # over 20 digits
    ],
)
async def test_a_head_h11_refuses_is_a_remote_protocol_error(head: bytes, match: str) -> None:
    if b"content-length" not in head:
        head += b"content-length: 2\r\n"
    answer = b"HTTP/1.1 200 OK\r\n" + head + b"\r\nok"
    with pytest.raises(httpx.RemoteProtocolError, match=match):
        await _fetch_one(answer)


async def test_a_head_up_to_the_limit_is_read() -> None:
    filler = b"x-f: " + b"a" * 1000 + b"\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n" + filler * (MAX_HEAD // 1100)
    assert await _fetch_one(head + b"\r\nok") == (200, b"ok")


async def test_a_chunk_size_line_without_end_is_bounded() -> None:
    answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1" + b"0" * (2 * MAX_HEAD)
    with pytest.raises(httpx.RemoteProtocolError, match="chunk"):
        await _fetch_one(answer)
