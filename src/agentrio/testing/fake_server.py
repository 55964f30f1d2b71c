"""A fake LLM server: the OpenAI, Anthropic and Ollama wire formats over real HTTP.

It answers ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic) and ``POST /api/chat`` (Ollama), streamed or not, on a real
socket, from a script of :class:`~agentrio.ModelReply` or a function of the
request, and it injects the faults real providers have (rate limits, 5xx,
resets, cut-short streams, broken tool JSON, garbage bodies, slow answers)
at chosen rates, drawn from one seeded random generator.

The server is HTTP/1.1 written on Trio and h11 (the sans-I/O HTTP library
httpx already depends on): a web framework would hide exactly the wire
behaviour the faults need to control (closing mid-stream, resetting before
any response), and h11 keeps it dependency-free and Trio-native.

Framing: JSON responses carry ``Content-Length``; streamed responses use
chunked transfer-encoding (h11 picks it for an HTTP/1.1 client when no length
is set), as the real APIs do. That keeps streaming connections alive for
reuse by httpx's pool, and a truncated stream then looks exactly like a
provider dying mid-answer: httpx raises ``RemoteProtocolError`` (incomplete
chunked read) after the last complete event, rather than seeing a clean
end of body.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import random
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Literal, final

import attrs
import h11
import msgspec
import trio

from ..errors import InvalidArgument
from ..messages import ModelReply
from ._fake_wire import (
    _FRAMES,
    _MAX_BODY,
    _REPLY,
    _ROUTES,
    _STREAM_TYPES,
    ApiName,
    FakeRequest,
    _Answer,
    _authorized,
    _BadRequest,
    _error_body,
    _json,
    _parse,
)

__all__ = [
    "FakeLLMServer",
    "FakeRequest",
    "FakeServerStatistics",
    "Faults",
    "ReplyHandler",
    "open_fake_llm",
    "serve_fake_llm",
]

FaultKind = Literal[
    "reset",
    "rate_limit",
    "server_error",
    "garbage",
    "delay",
    "truncate",
    "malformed_tool_json",
]
_FAULT_KINDS: tuple[FaultKind, ...] = (
    "reset",
    "rate_limit",
    "server_error",
    "garbage",
    "delay",
    "truncate",
    "malformed_tool_json",
)


_GARBAGE = b"<html><body><h1>502 Bad Gateway</h1>upstream hiccup</body></html>\n"


# -- configuration -------------------------------------------------------------------


def _share(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidArgument(f"Faults.{attribute.name} must be between 0 and 1, got {value!r}")


def _seconds(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgument(f"Faults.{attribute.name} must be seconds >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Faults:
    """Which faults the fake server injects, and how often.

    Each rate is the share of requests (0 to 1) that get the fault. For every
    API request the server draws all seven faults, in a fixed order, from one
    ``random.Random(seed)``: the same requests in the same order always get
    the same faults. Precedence: ``reset``, then ``rate_limit``, then
    ``server_error``, then ``garbage``; ``delay`` adds to any of them;
    ``truncate`` (streams only) and ``malformed_tool_json`` (replies with tool
    calls only) alter a reply. Requests rejected as 404, 400 or 401 draw none.

    Attributes:
        seed: the seed of the random generator.
        rate_limit: answered 429 with a ``Retry-After`` header.
        retry_after: the seconds in that header (rounded up to a whole number).
        server_error: answered 500 with a JSON error body.
        delay: delayed by *delay_seconds* (``trio.sleep``: MockClock-friendly).
        delay_seconds: how long a delay lasts.
        truncate: streamed answers cut off mid-stream: the connection is closed
            before the terminator (``[DONE]``, ``message_stop``, ``"done": true``).
        malformed_tool_json: tool-call arguments sent as broken JSON text
            (single quotes and a trailing comma; for Anthropic and Ollama, whose
            arguments are JSON objects, that text replaces the object).
        garbage: answered 200 with a body that is not JSON.
        reset: the connection is reset (RST) without any response.
    """

    seed: int = 0
    rate_limit: float = attrs.field(default=0.0, validator=_share)
    retry_after: float = attrs.field(default=1.0, validator=_seconds)
    server_error: float = attrs.field(default=0.0, validator=_share)
    delay: float = attrs.field(default=0.0, validator=_share)
    delay_seconds: float = attrs.field(default=1.0, validator=_seconds)
    truncate: float = attrs.field(default=0.0, validator=_share)
    malformed_tool_json: float = attrs.field(default=0.0, validator=_share)
    garbage: float = attrs.field(default=0.0, validator=_share)
    reset: float = attrs.field(default=0.0, validator=_share)

    def _rate(self, kind: FaultKind) -> float:
        rate: float = getattr(self, kind)
        return rate


ReplyHandler = Callable[[FakeRequest], ModelReply | Awaitable[ModelReply]]
"""A function (plain or async) from one request to the reply the server sends."""


@attrs.frozen
class FakeServerStatistics:
    """What a fake server has seen so far.

    Attributes:
        connections: TCP connections accepted.
        http_requests: HTTP requests received, including rejected ones.
        by_api: API requests (auth and body valid) per API.
        faults: faults injected, per kind (``truncate`` and
            ``malformed_tool_json`` only count when they changed an answer).
        replies: requests answered from the script or handler.
        rejected: requests answered 404, 405, 400, 401 or 413, by status.
        handler_errors: requests answered 500 because the script ran out or
            the handler raised or returned something other than a ModelReply.
    """

    connections: int
    http_requests: int
    by_api: dict[str, int]
    faults: dict[str, int]
    replies: int
    rejected: dict[int, int]
    handler_errors: int


# -- the server --------------------------------------------------------------------


class _ScriptExhausted(Exception):
    pass


class _Script:
    """A list of replies shared by every request: each takes the next."""

    def __init__(self, replies: Iterable[ModelReply]) -> None:
        self._replies = list(replies)
        for i, reply in enumerate(self._replies):
            if not isinstance(reply, ModelReply):
                raise InvalidArgument(f"replies[{i}] must be an agentrio.ModelReply, got {reply!r}")
        self._next = 0

    def __call__(self, request: FakeRequest) -> ModelReply:
        if self._next >= len(self._replies):
            raise _ScriptExhausted(
                f"the fake LLM's script is exhausted: all {len(self._replies)} replies were used"
            )
        self._next += 1
        return self._replies[self._next - 1]


def _demo(request: FakeRequest) -> ModelReply:
    from ..demo import _script  # imported late: the demo imports agentrio.testing

    return _script(request.messages, ())


def _handler(replies: Iterable[ModelReply] | ReplyHandler | None) -> ReplyHandler:
    if replies is None:
        return _demo
    if callable(replies):
        return replies
    if isinstance(replies, str | bytes) or not isinstance(replies, Iterable):
        raise InvalidArgument(
            f"replies must be ModelReply objects, a function of a FakeRequest, or None, "
            f"got {replies!r}"
        )
    return _Script(replies)


@attrs.frozen
class _Plan:
    """The faults drawn for one request."""

    drawn: frozenset[FaultKind]

    def first(self, *kinds: FaultKind) -> FaultKind | None:
        return next((k for k in kinds if k in self.drawn), None)


@final
class FakeLLMServer:
    """A running fake LLM server; made by :func:`open_fake_llm` or :func:`serve_fake_llm`.

    Attributes:
        base_url: ``"http://127.0.0.1:<port>"``.
        host: the address it listens on.
        port: the port it listens on (the real one when 0 was asked for).
        faults: the faults it injects.
        requests: every request that reached the script or handler, in order.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        handler: ReplyHandler,
        faults: Faults,
        api_key: str | None,
    ) -> None:
        self.host = host
        self.port = port
        self.base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        self.faults = faults
        self.requests: list[FakeRequest] = []
        self._handler = handler
        self._api_key = api_key
        self._rng = random.Random(faults.seed)
        self._connections = 0
        self._http_requests = 0
        self._replies = 0
        self._handler_errors = 0
        self._by_api: dict[str, int] = dict.fromkeys(_ROUTES.values(), 0)
        self._faults: dict[str, int] = dict.fromkeys(_FAULT_KINDS, 0)
        self._rejected: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"<FakeLLMServer {self.base_url}>"

    def statistics(self) -> FakeServerStatistics:
        """Counts of connections, requests per API, faults per kind, and rejections."""
        return FakeServerStatistics(
            connections=self._connections,
            http_requests=self._http_requests,
            by_api=dict(self._by_api),
            faults=dict(self._faults),
            replies=self._replies,
            rejected=dict(self._rejected),
            handler_errors=self._handler_errors,
        )

    # -- one connection --

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        self._connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while await self._serve_one(stream, conn):
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away
        except h11.RemoteProtocolError as exc:
            await self._bad_http(stream, conn, exc)
        finally:
            await trio.aclose_forcefully(stream)

    async def _bad_http(
        self, stream: trio.SocketStream, conn: h11.Connection, exc: h11.RemoteProtocolError
    ) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        self._rejected[400] = self._rejected.get(400, 0) + 1
        body = _json(_error_body(None, 400, f"bad HTTP: {exc}"))
        # If even that fails, nothing more can be said on this connection.
        with contextlib.suppress(trio.BrokenResourceError, h11.LocalProtocolError):
            await self._send_json(stream, conn, 400, body, close=True)

    async def _serve_one(self, stream: trio.SocketStream, conn: h11.Connection) -> bool:
        """Read and answer one request; return whether the connection may be reused."""
        received = await _receive_request(stream, conn)
        if received is None:
            return False
        request, body = received
        self._http_requests += 1
        if not await self._route(stream, conn, request, body):
            return False
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _route(
        self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        path = request.target.decode("latin-1").split("?", 1)[0]
        api = _ROUTES.get(path)
        if api is None:
            return await self._reject(stream, conn, None, 404, f"no route for {path}")
        if request.method != b"POST":
            allow = [(b"allow", b"POST")]
            return await self._reject(stream, conn, api, 405, f"{path} takes POST", allow)
        if len(body) > _MAX_BODY:
            return await self._reject(stream, conn, api, 413, "request body too large")
        if not _authorized(api, dict(request.headers), self._api_key):
            return await self._reject(stream, conn, api, 401, "invalid or missing API key")
        try:
            fake = _parse(api, _decode_object(body))
        except _BadRequest as exc:
            return await self._reject(stream, conn, api, 400, str(exc))
        return await self._answer(stream, conn, fake)

    async def _reject(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        api: ApiName | None,
        status: int,
        message: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> bool:
        self._rejected[status] = self._rejected.get(status, 0) + 1
        body = _json(_error_body(api, status, message))
        await self._send_json(stream, conn, status, body, extra)
        return True

    def _draw(self) -> _Plan:
        # Every fault is drawn for every request, so one fault's rate never
        # shifts which requests get another.
        drawn = [k for k in _FAULT_KINDS if self._rng.random() < self.faults._rate(k)]
        return _Plan(frozenset(drawn))

    def _count(self, kind: FaultKind) -> None:
        self._faults[kind] += 1

    async def _answer(
        self, stream: trio.SocketStream, conn: h11.Connection, fake: FakeRequest
    ) -> bool:
        self._by_api[fake.api] += 1
        plan = self._draw()  # before any checkpoint: faults follow arrival order
        if "delay" in plan.drawn:
            self._count("delay")
            await trio.sleep(self.faults.delay_seconds)
        failure = plan.first("reset", "rate_limit", "server_error", "garbage")
        if failure is not None:
            self._count(failure)
            return await self._fail(stream, conn, fake.api, failure)
        self.requests.append(fake)
        reply = await self._reply(stream, conn, fake)
        if reply is None:
            return True
        malformed = "malformed_tool_json" in plan.drawn and bool(reply.tool_calls)
        if malformed:
            self._count("malformed_tool_json")
        answer = _Answer(reply, fake.model, len(self.requests), malformed)
        if not fake.stream:
            await self._send_json(stream, conn, 200, _json(_REPLY[fake.api](answer)))
            return True
        truncate = "truncate" in plan.drawn
        if truncate:
            self._count("truncate")
        await self._send_stream(stream, conn, fake.api, _FRAMES[fake.api](answer), truncate)
        return not truncate

    async def _fail(
        self, stream: trio.SocketStream, conn: h11.Connection, api: ApiName, kind: FaultKind
    ) -> bool:
        if kind == "reset":
            # SO_LINGER 0: close() sends RST, as a crashed proxy or a dropped
            # connection does; the client gets a transport error, no response.
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()
            return False
        if kind == "rate_limit":
            seconds = str(math.ceil(self.faults.retry_after)).encode()
            body = _json(_error_body(api, 429, "rate limit reached (fake LLM fault)"))
            await self._send_json(stream, conn, 429, body, [(b"retry-after", seconds)])
        elif kind == "server_error":
            body = _json(_error_body(api, 500, "internal server error (fake LLM fault)"))
            await self._send_json(stream, conn, 500, body)
        else:
            await self._send_body(stream, conn, 200, b"text/html", _GARBAGE)
        return True

    async def _reply(
        self, stream: trio.SocketStream, conn: h11.Connection, fake: FakeRequest
    ) -> ModelReply | None:
        """The handler's reply; on an error, answer 500 and return None."""
        try:
            result = self._handler(fake)
            reply = await result if inspect.isawaitable(result) else result
            if not isinstance(reply, ModelReply):
                raise TypeError(f"the reply handler returned {reply!r}, not a ModelReply")
        except Exception as exc:
            self._handler_errors += 1
            message = str(exc) if isinstance(exc, _ScriptExhausted) else f"{exc!r}"
            body = _json(_error_body(fake.api, 500, f"fake LLM: {message}"))
            await self._send_json(stream, conn, 500, body)
            return None
        self._replies += 1
        return reply

    # -- writing responses --

    async def _send(
        self, stream: trio.SocketStream, conn: h11.Connection, *events: h11.Event
    ) -> None:
        await stream.send_all(b"".join(conn.send(event) or b"" for event in events))

    async def _send_json(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        status: int,
        body: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
        *,
        close: bool = False,
    ) -> None:
        if close:
            extra = [*(extra or []), (b"connection", b"close")]
        await self._send_body(stream, conn, status, b"application/json", body, extra)

    async def _send_body(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        status: int,
        content_type: bytes,
        body: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        headers = [
            *_HEADERS,
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            *(extra or []),
        ]
        response = h11.Response(status_code=status, headers=headers, reason=_reason(status))
        await self._send(stream, conn, response, h11.Data(data=body), h11.EndOfMessage())

    async def _send_stream(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        api: ApiName,
        frames: list[bytes],
        truncate: bool,
    ) -> None:
        headers = [
            *_HEADERS,
            (b"content-type", _STREAM_TYPES[api]),
            (b"cache-control", b"no-cache"),
        ]
        await self._send(stream, conn, h11.Response(status_code=200, headers=headers, reason=b"OK"))
        # Truncation keeps fewer than all frames, so the terminator never goes out.
        for frame in frames[: len(frames) // 2] if truncate else frames:
            await self._send(stream, conn, h11.Data(data=frame))
        if truncate:
            await stream.aclose()  # mid-body: no final chunk, no terminator
        else:
            await self._send(stream, conn, h11.EndOfMessage())


_HEADERS = [(b"server", b"agentrio-fake-llm")]


def _reason(status: int) -> bytes:
    return HTTPStatus(status).phrase.encode()


async def _receive_request(
    stream: trio.SocketStream, conn: h11.Connection
) -> tuple[h11.Request, bytes] | None:
    """The next request and its body, or None when the client closed the connection."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            if len(body) <= _MAX_BODY:
                body += event.data
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _decode_object(body: bytes) -> dict[str, object]:
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise _BadRequest(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _BadRequest("the body must be a JSON object")
    return value


# -- opening one -----------------------------------------------------------------------


async def _bind(
    replies: Iterable[ModelReply] | ReplyHandler | None,
    faults: Faults,
    port: int,
    api_key: str | None,
    host: str,
) -> tuple[FakeLLMServer, list[trio.SocketListener]]:
    """Check the arguments and listen (outside any nursery: errors stay bare)."""
    if not isinstance(faults, Faults):
        raise InvalidArgument(f"faults must be an agentrio.testing.Faults, got {faults!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgument(f"port must be an int from 0 to 65535, got {port!r}")
    handler = _handler(replies)
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    server = FakeLLMServer(host=host, port=bound, handler=handler, faults=faults, api_key=api_key)
    return server, listeners


async def serve_fake_llm(
    replies: Iterable[ModelReply] | ReplyHandler | None = None,
    *,
    faults: Faults = Faults(),
    port: int = 0,
    api_key: str | None = None,
    host: str = "127.0.0.1",
    task_status: trio.TaskStatus[FakeLLMServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a fake LLM server until cancelled (for ``nursery.start`` and the CLI).

    Arguments are those of :func:`open_fake_llm`; ``nursery.start`` returns the
    :class:`FakeLLMServer` once it listens.

    Raises:
        InvalidArgument: a bad argument, named in the message.
        OSError: the address could not be bound.
    """
    server, listeners = await _bind(replies, faults, port, api_key, host)
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, server._serve_connection, listeners)
        task_status.started(server)


@asynccontextmanager
async def open_fake_llm(
    replies: Iterable[ModelReply] | ReplyHandler | None = None,
    *,
    faults: Faults = Faults(),
    port: int = 0,
    api_key: str | None = None,
    host: str = "127.0.0.1",
) -> AsyncIterator[FakeLLMServer]:
    """Run a fake LLM server for the duration of the block.

    Leaving the block closes the listener and every connection; no task
    outlives it.

    Example::

        replies = [Reply(text="hello", usage=Usage(10, 2))]
        async with open_fake_llm(replies) as server:
            async with httpx.AsyncClient(base_url=server.base_url) as client:
                r = await client.post("/v1/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "hi"}]})

    Args:
        replies: a script (each request, from any API, takes the next reply;
            once it runs out the server answers 500), a function of a
            :class:`FakeRequest` returning a ModelReply (plain or async), or
            None for the demo's scripted model (look up, count words, answer).
        faults: the faults to inject (default none).
        port: the port to listen on; 0 picks a free one.
        api_key: if set, requests must carry it (OpenAI and Ollama:
            ``Authorization: Bearer <key>``; Anthropic: ``x-api-key`` or
            ``Authorization: Bearer <key>``), else 401.
        host: the address to listen on; keep the loopback default unless the
            server must be reached from another machine or container.

    Raises:
        InvalidArgument: a bad argument, named in the message.
        OSError: the address could not be bound.
    """
    server, listeners = await _bind(replies, faults, port, api_key, host)
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, server._serve_connection, listeners)
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
