"""agentrio's A2A client against a hostile peer: garbage, huge replies, silence, echoed secrets.

Each peer is a small Starlette app of the test's (uvicorn on 127.0.0.1, in a
thread), which serves a valid card and then misbehaves at the JSON-RPC
endpoint as it is told. Every case must end in an `A2AToolError` (or, for
the card, an `A2AConnectError`) that says what went wrong, in bounded time
and memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import agentrio
import agentrio.a2a
from agentrio.a2a import A2AConnectError, A2AToolError

SECRET = "Bearer sk-very-secret-token"
TASK = {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}}


def event(result: object) -> bytes:
    return b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode() + b"\n\n"


class Peer:
    """A peer that serves a card, then does *rpc* at its endpoint; it notes the calls it gets."""

    def __init__(self, rpc: str, *, card: str = "good", streaming: bool = True) -> None:
        self.rpc = rpc
        self.card = card
        self.streaming = streaming
        self.methods: list[str] = []
        self.headers: list[str] = []

    def make(self, url: str) -> Starlette:
        self.url = url
        routes = [
            Route("/.well-known/agent-card.json", self.card_endpoint),
            Route("/rpc", self.rpc_endpoint, methods=["POST"]),
        ]
        return Starlette(routes=routes)

    async def card_endpoint(self, request: Request) -> Response:
        endpoint = {"url": "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        card: dict[str, Any] = {
            "name": "peer",
            "description": "a peer",
            "capabilities": {"streaming": self.streaming},
            "supportedInterfaces": [endpoint],
        }
        if self.card == "garbage":
            return Response(b"\xff\xfe not json")
        if self.card == "no_jsonrpc":
            endpoint["protocolBinding"] = "GRPC"
        if self.card == "elsewhere":
            endpoint["url"] = "http://127.0.0.2:1/rpc"
        if self.card == "hang":
            await asyncio.sleep(3600)
        if self.card == "wrong_types":
            card["capabilities"] = {"streaming": "yes please"}
        return JSONResponse(card)

    async def rpc_endpoint(self, request: Request) -> Response:
        body = await request.json()
        self.methods.append(body["method"])
        self.headers.append(request.headers.get("authorization", ""))
        if body["method"] == "CancelTask":
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": TASK["task"]})
        return await getattr(self, self.rpc)(request)

    async def garbage(self, request: Request) -> Response:
        return Response(b"<html>Internal oops</html>", media_type="text/html")

    async def wrong_types(self, request: Request) -> Response:
        task = {"task": {"id": 5, "status": {"state": ["TASK_STATE_COMPLETED"]}}}
        return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": task})

    async def not_jsonrpc(self, request: Request) -> Response:
        return JSONResponse({"hello": "world"})

    async def huge(self, request: Request) -> Response:
        async def endless() -> AsyncIterator[bytes]:
            yield b'{"jsonrpc": "2.0", "id": 1, "result": {"message": {"parts": [{"text": "'
            for _ in range(64):  # 4 MiB, 4 times the tool's limit
                yield b"x" * 65536

        return StreamingResponse(endless(), media_type="application/json")

    async def huge_stream(self, request: Request) -> Response:
        async def endless() -> AsyncIterator[bytes]:
            yield event(TASK)
            update = event({"statusUpdate": {"taskId": "t1", "status": {"state": "x"}}})
            for _ in range(4 * 1_000_000 // len(update)):  # valid events, past the limit
                yield update

        return StreamingResponse(endless(), media_type="text/event-stream")

    async def long_line(self, request: Request) -> Response:
        async def endless() -> AsyncIterator[bytes]:
            yield event(TASK)
            yield b"data: "
            for _ in range(64):
                yield b"y" * 65536

        return StreamingResponse(endless(), media_type="text/event-stream")

    async def hang(self, request: Request) -> Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def hang_after_task(self, request: Request) -> Response:
        async def stalls() -> AsyncIterator[bytes]:
            yield event(TASK)
            await asyncio.sleep(3600)

        return StreamingResponse(stalls(), media_type="text/event-stream")

    async def ends_early(self, request: Request) -> Response:
        return StreamingResponse(iter([event(TASK)]), media_type="text/event-stream")

    async def lone_surrogate(self, request: Request) -> Response:
        # (json.dumps writes a lone surrogate as its escape: valid JSON, no valid text.)
        task = {"id": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}
        task["artifacts"] = [{"parts": [{"text": "half a pair: \ud83d!"}]}]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task}})
        return Response(body, media_type="application/json")

    async def no_blank_line(self, request: Request) -> Response:
        done = {"state": "TASK_STATE_COMPLETED"}
        task = {"id": "t1", "status": done, "artifacts": [{"parts": [{"text": "the end"}]}]}
        last = event({"task": task}).rstrip(b"\n")  # the stream ends in the event's data line
        return StreamingResponse(iter([event(TASK), last]), media_type="text/event-stream")

    async def echo_secret_500(self, request: Request) -> Response:
        return Response(f"bad auth {request.headers['authorization']}", status_code=500)

    async def echo_secret_error(self, request: Request) -> Response:
        error = {"code": -32001, "message": f"no: {request.headers['authorization']}"}
        return JSONResponse({"jsonrpc": "2.0", "id": 1, "error": error})

    async def secret_in_answer(self, request: Request) -> Response:
        text = f"your key is {request.headers['authorization']}"
        done = {"state": "TASK_STATE_COMPLETED"}
        task = {"id": "t1", "status": done, "artifacts": [{"parts": [{"text": text}]}]}
        return StreamingResponse(iter([event({"task": task})]), media_type="text/event-stream")


def tool_for(peer: Peer, served: Any, **options: Any) -> agentrio.a2a.A2ATool:
    options.setdefault("read_timeout", 1.0)
    return agentrio.a2a.a2a_tool(
        served.url, name="peer", headers={"Authorization": SECRET}, **options
    )


CASES = [
    ("garbage", {}, "sent a reply that is not A2A's JSON-RPC"),
    ("wrong_types", {"streaming": False}, "not A2A's JSON-RPC: Expected `str`, got `int`"),
    ("not_jsonrpc", {"streaming": False}, "not JSON-RPC 2.0"),
    ("huge", {"streaming": False}, r"sent too much: the body is larger than max_response_bytes"),
    ("huge_stream", {}, "sent too much: the stream is larger than max_response_bytes"),
    ("long_line", {}, "sent too much: a stream line is longer than"),
    ("hang", {}, r"sent nothing for 1.0 s"),
    ("hang_after_task", {}, r"sent nothing for 1.0 s"),
    ("ends_early", {}, "ended its stream before its task ended"),
    ("echo_secret_500", {}, r"answered HTTP 500: bad auth \[redacted\]"),
    ("echo_secret_error", {}, r"refused the call: no: \[redacted\] \(JSON-RPC error -32001"),
]


@pytest.mark.parametrize(("rpc", "peer_options", "message"), CASES, ids=[c[0] for c in CASES])
async def test_a_hostile_peer_is_a_tool_error_in_bounded_time(
    serve_made: Callable[[Any], Any], rpc: str, peer_options: dict[str, Any], message: str
) -> None:
    peer = Peer(rpc, **peer_options)
    served = serve_made(peer.make)
    # (For the long line, a total past the line's limit: the line's is met first.)
    limit = 8_000_000 if rpc == "long_line" else 1_000_000
    tool = tool_for(peer, served, max_response_bytes=limit)
    with trio.fail_after(60):  # (a bound for a broken test, not a timing assert)
        with pytest.raises(A2AToolError, match=message) as caught:
            await tool.call({"message": "hi"})
    assert "sk-very-secret" not in str(caught.value)
    assert peer.headers[0] == SECRET  # (it was sent, and not shown)
    if rpc == "hang_after_task":  # the task the call gave up on is cancelled
        assert peer.methods == ["SendStreamingMessage", "CancelTask"]


async def test_the_whole_call_has_a_deadline(serve_made: Callable[[Any], Any]) -> None:
    # A peer that trickles: each read comes in time, the answer never.
    peer = Peer("hang_after_task")
    served = serve_made(peer.make)
    tool = tool_for(peer, served, read_timeout=30.0, timeout=1.0)
    with trio.fail_after(60), pytest.raises(A2AToolError, match=r"did not answer within 1\.0 s"):
        await tool.call({"message": "hi"})
    assert peer.methods == ["SendStreamingMessage", "CancelTask"]


async def test_a_secret_the_peer_puts_in_its_answer_is_not_shown(
    serve_made: Callable[[Any], Any],
) -> None:
    peer = Peer("secret_in_answer")
    served = serve_made(peer.make)
    assert await tool_for(peer, served).call({"message": "hi"}) == "your key is [redacted]"


async def test_a_lone_surrogate_becomes_a_replacement_character(
    serve_made: Callable[[Any], Any],
) -> None:
    peer = Peer("lone_surrogate", streaming=False)
    served = serve_made(peer.make)
    assert await tool_for(peer, served).call({"message": "hi"}) == "half a pair: \ufffd!"


async def test_a_last_event_without_its_blank_line_counts(
    serve_made: Callable[[Any], Any],
) -> None:
    peer = Peer("no_blank_line")
    served = serve_made(peer.make)
    assert await tool_for(peer, served).call({"message": "hi"}) == "the end"


def test_a_long_answer_is_cut() -> None:
    from agentrio.a2a._client import _cut

    assert _cut("x" * 10, 4) == "xxxx\n[cut: the answer is 10 characters, 4 are shown]"


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ("garbage", "is not A2A's"),
        ("wrong_types", "is not A2A's: Expected `bool`, got `str`"),
        ("no_jsonrpc", "offers no JSON-RPC interface of A2A 1.0$"),
        ("elsewhere", "offers no JSON-RPC interface of A2A 1.0 on its own host"),
        ("hang", "did not come within 1.0 s"),
    ],
)
async def test_a_bad_card_is_a_connect_error(
    serve_made: Callable[[Any], Any], card: str, message: str
) -> None:
    peer = Peer("garbage", card=card)
    served = serve_made(peer.make)
    with trio.fail_after(60), pytest.raises(A2AConnectError, match=message):
        await agentrio.a2a.fetch_card(served.url, timeout=1.0, headers={"Authorization": SECRET})
    # A tool given the URL alone meets it on its first call, as a tool error.
    tool = tool_for(peer, served, timeout=1.0)
    with trio.fail_after(60), pytest.raises(A2AToolError):
        await tool.call({"message": "hi"})


async def test_an_unreachable_agent_is_a_tool_error() -> None:
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tool = agentrio.a2a.a2a_tool(f"http://user:pa55word@127.0.0.1:{port}", name="gone")
    with pytest.raises(A2AToolError, match="could not be reached") as caught:
        await tool.call({"message": "hi"})
    assert "pa55word" not in str(caught.value) and "pa55word" not in repr(tool)
