"""A fake LLM server: the OpenAI, Anthropic and Ollama wire formats over real HTTP.

It answers ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic) and ``POST /api/chat`` (Ollama), streamed or not, on a real
socket, from a script of [`ModelReply`][agentrio.ModelReply] or a function of the
request, and it injects the faults real providers have (rate limits, 5xx,
resets, cut-short streams, broken tool JSON, garbage bodies, slow answers)
at chosen rates, drawn from one seeded random generator.

The server is HTTP/1.1 written on Trio, its bytes read and written by hand
(``_fake_http``): a web framework would hide exactly the wire behaviour the
faults need to control (closing mid-stream, resetting before any response),
and a server that shares its process with thousands of agents must cost
little per request.

Framing: JSON responses carry ``Content-Length``; streamed responses use
chunked transfer-encoding (to an HTTP/1.1 client; to an HTTP/1.0 one, the
end of the connection ends the body), as the real APIs do. That keeps
streaming connections alive for reuse, and a truncated stream then looks
exactly like a provider dying mid-answer: httpx raises
``RemoteProtocolError`` (incomplete chunked read) after the last complete
event, rather than seeing a clean end of body.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Literal, final

import attrs
import msgspec
import trio

from .._net import RawSocket
from ..errors import InvalidArgument
from ..messages import ChatMessage, ModelReply, ToolCallRequest, Usage
from ..providers.base import ToolSchema
from ._fake_cache import PromptCache
from ._fake_http import BadHTTP, HTTPRequest, RequestReader, response_head
from ._fake_overflow import overflow_body, request_tokens
from ._fake_responses import FRAMES, REPLY, parse_request
from ._fake_wire import (
    MAX_BODY,
    ROUTES,
    STREAM_TYPES,
    Answer,
    ApiName,
    BadRequest,
    FakeRequest,
    PausedTurns,
    authorized,
    error_body,
    forced_call,
    json_bytes,
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
    ``random.Random(seed)``, in the order ``reset``, ``rate_limit``,
    ``server_error``, ``garbage``, ``delay``, ``truncate``,
    ``malformed_tool_json``, and in arrival order: the same requests in the
    same order always get the same faults. The first of ``reset``,
    ``rate_limit``, ``server_error`` and ``garbage`` drawn wins; ``delay``
    adds to any outcome; ``truncate`` (streamed answers only) and
    ``malformed_tool_json`` (answers with tool calls only) alter a reply.
    Requests rejected as 400, 401, 404 or 405 draw none.

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

    Raises:
        InvalidArgument: a rate outside 0..1, or negative seconds.
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


def demo_reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema] = ()) -> ModelReply:
    """The demo's scripted model: decides by what the conversation holds so far.

    No tool result yet: it calls ``lookup`` with the last word of the last
    message; one: it calls ``word_count`` on that result; two: it answers
    with both. (The demo's agents hold these two tools; the fake server
    answers with this script when it is given none.)
    """
    results = [m for m in messages if m.role == "tool"]
    prompt = len(messages) * 12
    if not results:
        topic = messages[-1].content.rsplit(" ", 1)[-1]
        call = ToolCallRequest("lookup", {"key": topic})
        return ModelReply(tool_calls=(call,), usage=Usage(prompt, 12))
    if len(results) == 1:
        call = ToolCallRequest("word_count", {"text": results[0].content})
        return ModelReply(tool_calls=(call,), usage=Usage(prompt, 14))
    answer = f"{results[0].content} ({results[1].content} words)"
    return ModelReply(text=answer, usage=Usage(prompt, 20))


def _demo(request: FakeRequest) -> ModelReply:
    return demo_reply(request.messages)


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


_NO_FAULTS = _Plan(frozenset())


@final
class FakeLLMServer:
    """A running fake LLM server; made by [`open_fake_llm`][agentrio.testing.open_fake_llm] or
    [`serve_fake_llm`][agentrio.testing.serve_fake_llm] (not meant to be constructed by you).

    Attributes:
        base_url: ``"http://127.0.0.1:<port>"``.
        host: the address it listens on.
        port: the port it listens on (the real one when 0 was asked for).
        faults: the faults it injects.
        requests: every request that reached the script or handler, in order
            (not those rejected or answered by a fault; none if it was opened
            with ``keep_requests=False``).
        response_headers: None, or a function of a request returning more
            headers, as (name, value) pairs, for its answer from the script
            or handler (whole or streamed): rate-limit headers, say. Set it
            once the server is open.
        context_window: the tokens past which a request is answered as over
            the model's context window (None: never).
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        handler: ReplyHandler,
        faults: Faults,
        api_key: str | None,
        keep_requests: bool = True,
        context_window: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        self.faults = faults
        self.context_window = context_window
        self.requests: list[FakeRequest] = []
        self.response_headers: Callable[[FakeRequest], Iterable[tuple[str, str]]] | None = None
        self._keep_requests = keep_requests
        self._answered = 0  # requests that reached the script or handler
        self._handler = handler
        self._api_key = api_key
        self._rng = random.Random(faults.seed)
        rates = [(kind, faults._rate(kind)) for kind in _FAULT_KINDS]
        self._rates = rates if any(rate for _, rate in rates) else []
        self._connections = 0
        self._http_requests = 0
        self._replies = 0
        self._handler_errors = 0
        self._by_api: dict[str, int] = dict.fromkeys(ROUTES.values(), 0)
        self._faults: dict[str, int] = dict.fromkeys(_FAULT_KINDS, 0)
        self._rejected: dict[int, int] = {}
        self._prompt_cache = PromptCache()  # Anthropic's: see _fake_cache
        self._paused = PausedTurns()

    def __repr__(self) -> str:
        return f"<FakeLLMServer {self.base_url}>"

    def statistics(self) -> FakeServerStatistics:
        """Counts of connections, requests per API, faults per kind, and rejections.

        ``truncate`` and ``malformed_tool_json`` count only when they changed
        an answer.
        """
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

    async def _serve_connection(self, tcp: trio.SocketStream) -> None:
        self._connections += 1
        stream = RawSocket.from_stream(tcp)
        reader = RequestReader(stream, MAX_BODY)
        try:
            while (request := await reader.next()) is not None:
                self._http_requests += 1
                if not await self._route(stream, request) or not request.keep_alive:
                    break
        except (OSError, trio.ClosedResourceError):
            pass  # the client went away
        except BadHTTP as exc:
            await self._bad_http(stream, exc)
        finally:
            stream.close()

    async def _bad_http(self, stream: RawSocket, exc: BadHTTP) -> None:
        # (Only ever raised while a request is read: no response has begun.)
        self._http_requests += 1
        self._rejected[400] = self._rejected.get(400, 0) + 1
        body = json_bytes(error_body(None, 400, f"bad HTTP: {exc}"))
        head = response_head(400, _json_headers(len(body), [(b"connection", b"close")]))
        # If even that fails, nothing more can be said on this connection.
        with contextlib.suppress(OSError):
            await stream.send_all(head + body)

    async def _route(self, stream: RawSocket, request: HTTPRequest) -> bool:
        """Answer *request*; return whether the connection may be reused."""
        path = request.target.decode("latin-1").split("?", 1)[0]
        api = ROUTES.get(path)
        if api is None:
            return await self._reject(stream, request, None, 404, f"no route for {path}")
        if request.method != b"POST":
            allow = [(b"allow", b"POST")]
            return await self._reject(stream, request, api, 405, f"{path} takes POST", allow)
        if request.too_large:
            # Its body was not read: the connection cannot carry another request.
            await self._reject(stream, request, api, 413, "request body too large")
            return False
        if not authorized(api, request.headers, self._api_key):
            return await self._reject(stream, request, api, 401, "invalid or missing API key")
        try:
            fake = parse_request(api, _decode_object(request.body))
        except BadRequest as exc:
            return await self._reject(stream, request, api, 400, str(exc))
        window = self.context_window
        if window is not None and (tokens := request_tokens(fake)) > window:
            self._rejected[400] = self._rejected.get(400, 0) + 1
            body = json_bytes(overflow_body(api, window, tokens))
            await self._send_json(stream, request, 400, body)
            return True
        altered = self._paused.check(fake) if api == "anthropic" else None
        if altered is not None:
            return await self._reject(stream, request, api, 400, altered)
        return await self._answer(stream, request, fake)

    async def _reject(
        self,
        stream: RawSocket,
        request: HTTPRequest,
        api: ApiName | None,
        status: int,
        message: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> bool:
        self._rejected[status] = self._rejected.get(status, 0) + 1
        body = json_bytes(error_body(api, status, message))
        await self._send_json(stream, request, status, body, extra)
        return True

    def _draw(self) -> _Plan:
        # Every fault is drawn for every request, so one fault's rate never
        # shifts which requests get another. (With every rate 0 no draw can
        # matter, now or later: none is made.)
        if not self._rates:
            return _NO_FAULTS
        drawn = [k for k, rate in self._rates if self._rng.random() < rate]
        return _Plan(frozenset(drawn))

    def _count(self, kind: FaultKind) -> None:
        self._faults[kind] += 1

    async def _answer(self, stream: RawSocket, request: HTTPRequest, fake: FakeRequest) -> bool:
        self._by_api[fake.api] += 1
        plan = self._draw()  # before any checkpoint: faults follow arrival order
        if "delay" in plan.drawn:
            self._count("delay")
            await trio.sleep(self.faults.delay_seconds)
        failure = plan.first("reset", "rate_limit", "server_error", "garbage")
        if failure is not None:
            self._count(failure)
            return await self._fail(stream, request, fake.api, failure)
        if self._keep_requests:
            self.requests.append(fake)
        self._answered += 1
        number = self._answered
        reply = await self._reply(stream, request, fake)
        if reply is None:
            return True
        if fake.api == "anthropic":
            reply = self._prompt_cache.apply(fake.body, reply, trio.current_time())
            self._paused.answered(reply)
        if fake.tool_choice is not None:
            reply = forced_call(fake, reply)
        malformed = "malformed_tool_json" in plan.drawn and bool(reply.tool_calls)
        if malformed:
            self._count("malformed_tool_json")
        answer = Answer(reply, fake.model, number, malformed)
        extra = None
        if self.response_headers is not None:
            extra = [(n.lower().encode(), v.encode()) for n, v in self.response_headers(fake)]
        if not fake.stream:
            body = json_bytes(REPLY[fake.api](answer))
            await self._send_json(stream, request, 200, body, extra)
            return True
        truncate = "truncate" in plan.drawn
        if truncate:
            self._count("truncate")
        frames = FRAMES[fake.api](answer)
        await self._send_stream(stream, request, fake.api, frames, truncate, extra)
        return not truncate and not request.http10

    async def _fail(
        self, stream: RawSocket, request: HTTPRequest, api: ApiName, kind: FaultKind
    ) -> bool:
        if kind == "reset":
            # RST, as a crashed proxy or a dropped connection does: the client
            # gets a transport error, no response.
            stream.reset()
            await trio.lowlevel.checkpoint()
            return False
        if kind == "rate_limit":
            seconds = str(math.ceil(self.faults.retry_after)).encode()
            body = json_bytes(error_body(api, 429, "rate limit reached (fake LLM fault)"))
            await self._send_json(stream, request, 429, body, [(b"retry-after", seconds)])
        elif kind == "server_error":
            body = json_bytes(error_body(api, 500, "internal server error (fake LLM fault)"))
            await self._send_json(stream, request, 500, body)
        else:
            await self._send_body(stream, request, 200, b"text/html", _GARBAGE)
        return True

    async def _reply(
        self, stream: RawSocket, request: HTTPRequest, fake: FakeRequest
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
            body = json_bytes(error_body(fake.api, 500, f"fake LLM: {message}"))
            await self._send_json(stream, request, 500, body)
            return None
        self._replies += 1
        return reply

    # -- writing responses --

    async def _send_json(
        self,
        stream: RawSocket,
        request: HTTPRequest,
        status: int,
        body: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        await self._send_body(stream, request, status, b"application/json", body, extra)

    async def _send_body(
        self,
        stream: RawSocket,
        request: HTTPRequest,
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
        if not request.keep_alive or request.too_large:
            headers.append((b"connection", b"close"))
        head = response_head(status, headers)
        await stream.send_all(head if request.method == b"HEAD" else head + body)

    async def _send_stream(
        self,
        stream: RawSocket,
        request: HTTPRequest,
        api: ApiName,
        frames: list[bytes],
        truncate: bool,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        headers = [
            *_HEADERS,
            (b"content-type", STREAM_TYPES[api]),
            (b"cache-control", b"no-cache"),
            *(extra or []),
        ]
        # Truncation keeps fewer than all frames, so the terminator never goes out.
        sent = frames[: len(frames) // 2] if truncate else frames
        if request.http10:  # no chunked encoding: the end of the connection ends the body
            await stream.send_all(response_head(200, [*headers, (b"connection", b"close")]))
            await stream.send_all(b"".join(sent))
            await stream.aclose()
            return
        body = b"".join(b"%x\r\n%b\r\n" % (len(frame), frame) for frame in sent)
        head = response_head(200, [*headers, (b"transfer-encoding", b"chunked")])
        if truncate:
            await stream.send_all(head + body)
            await stream.aclose()  # mid-body: no final chunk, no terminator
        else:
            await stream.send_all(head + body + b"0\r\n\r\n")


_HEADERS = [(b"server", b"agentrio-fake-llm")]


def _json_headers(
    size: int, extra: list[tuple[bytes, bytes]] | None = None
) -> list[tuple[bytes, bytes]]:
    return [
        *_HEADERS,
        (b"content-type", b"application/json"),
        (b"content-length", str(size).encode()),
        *(extra or []),
    ]


def _decode_object(body: bytes) -> dict[str, object]:
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object")
    return value


# -- opening one -----------------------------------------------------------------------


async def _bind(
    replies: Iterable[ModelReply] | ReplyHandler | None,
    faults: Faults,
    port: int,
    api_key: str | None,
    host: str,
    keep_requests: bool,
    context_window: int | None = None,
) -> tuple[FakeLLMServer, list[trio.SocketListener]]:
    """Check the arguments and listen (outside any nursery: errors stay bare)."""
    if not isinstance(faults, Faults):
        raise InvalidArgument(f"faults must be an agentrio.testing.Faults, got {faults!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgument(f"port must be an int from 0 to 65535, got {port!r}")
    if context_window is not None and (
        isinstance(context_window, bool)
        or not isinstance(context_window, int)
        or context_window < 1
    ):
        raise InvalidArgument(f"context_window must be an int >= 1 or None, got {context_window!r}")
    handler = _handler(replies)
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    server = FakeLLMServer(
        host=host,
        port=bound,
        handler=handler,
        faults=faults,
        api_key=api_key,
        keep_requests=keep_requests,
        context_window=context_window,
    )
    return server, listeners


async def serve_fake_llm(
    replies: Iterable[ModelReply] | ReplyHandler | None = None,
    *,
    faults: Faults = Faults(),
    port: int = 0,
    api_key: str | None = None,
    host: str = "127.0.0.1",
    keep_requests: bool = True,
    context_window: int | None = None,
    task_status: trio.TaskStatus[FakeLLMServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a fake LLM server until cancelled (for ``nursery.start`` and the CLI).

    Arguments are those of [`open_fake_llm`][agentrio.testing.open_fake_llm]; ``nursery.start``
    returns the [`FakeLLMServer`][agentrio.testing.FakeLLMServer] once it listens.

    Raises:
        InvalidArgument: a bad argument, named in the message.
        OSError: the address could not be bound.
    """
    server, listeners = await _bind(
        replies, faults, port, api_key, host, keep_requests, context_window
    )
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
    keep_requests: bool = True,
    context_window: int | None = None,
) -> AsyncIterator[FakeLLMServer]:
    """Run a fake LLM server for the duration of the block.

    Leaving the block closes the listener and every connection; no task
    outlives it. An exception the block raises comes out as itself, not in
    an exception group, as it does out of ``open_runtime()``.

    Example:

        replies = [Reply(text="hello", usage=Usage(10, 2))]
        async with open_fake_llm(replies) as server:
            async with httpx.AsyncClient(base_url=server.base_url) as client:
                r = await client.post("/v1/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "hi"}]})

    Args:
        replies: a script (each request, from any API, takes the next reply;
            once it runs out the server answers 500), a function of a
            [`FakeRequest`][agentrio.testing.FakeRequest] returning a ModelReply (plain or async),
            called per request (if it raises, the request gets a 500 naming
            the error), or None for the demo's scripted model (look up,
            count words, answer).
        faults: the faults to inject (default none).
        port: the port to listen on; 0 picks a free one.
        api_key: if set, requests must carry it (OpenAI and Ollama:
            ``Authorization: Bearer <key>``; Anthropic: ``x-api-key`` or
            ``Authorization: Bearer <key>``), else 401.
        host: the address to listen on; keep the loopback default unless the
            server must be reached from another machine or container.
        keep_requests: keep every request in ``server.requests`` (False: keep
            none, so that a long run, such as the demo's, does not hold every
            request it was sent).
        context_window: if set, a request whose messages count more tokens
            than this (by agentrio's default estimate, ``estimate_tokens``) is
            answered 400 with the body the real API sends for a request over
            the model's context window (OpenAI's ``context_length_exceeded``,
            Anthropic's ``prompt is too long: N tokens > M maximum``, Ollama's
            with ``truncate: false``), draws no fault, and does not reach the
            script or handler.

    Raises:
        InvalidArgument: a bad argument, named in the message (on entering
            the block).
        OSError: the address could not be bound.
    """
    server, listeners = await _bind(
        replies, faults, port, api_key, host, keep_requests, context_window
    )
    body_error: BaseException | None = None  # what the block raised
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, server._serve_connection, listeners)
            try:
                yield server
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The block's own exception comes out as itself, as open_runtime's does
        # (``async with open_fake_llm() as server, open_runtime() as rt:`` lets
        # ``except ConfigError`` catch a spawn_agent's); the server's own failure
        # beside it stays a group. (A group the block raised comes back as Trio's
        # copy of it, alone in the nursery's.)
        only = group.exceptions[0] if len(group.exceptions) == 1 else None
        if body_error is None or not (
            only is body_error
            or (isinstance(only, BaseExceptionGroup) and isinstance(body_error, BaseExceptionGroup))
        ):
            raise
    if body_error is not None:  # (raised outside the except: no group as its context)
        raise body_error
