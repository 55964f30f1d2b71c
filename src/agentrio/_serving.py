"""What agentrio's protocol servers share: a run per request, and a bounded request body.

`agentrio.mcp_server` turns each call into one phase of a new agent, reads
its stream, and stops the agent when the call is done (`agentrio.agui` keeps
an agent per thread instead, and shares the rest). `open_run` does that on
either side of the host:
with a [`Runtime`][agentrio.Runtime], in Trio (the MCP server over stdio runs
in the runtime's own thread), or with a
[`BlockingRuntime`][agentrio.types.BlockingRuntime], from asyncio (a Starlette
app under uvicorn). Either way, leaving the block before the run's end
(a cancelled request, a client gone) cancels the run and waits for it.

`BoundedBody` is ASGI middleware: it reads a POST's body before the app
sees it, within a size and a time, so that a peer that sends too much, or
sends slowly and never finishes, gets an HTTP error in bounded time and
memory rather than holding the app.

The names here are public because two modules of agentrio use them; the
module is private (no user imports it).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .agents.loop.spec import AgentSpec
from .agents.loop.stream import RunItem
from .errors import InvalidArgument
from .host import BlockingRuntime
from .runtime import Runtime

if TYPE_CHECKING:
    from .messages import ContentPart

__all__ = ["BoundedBody", "Runs", "open_run", "refuse", "to_json"]

# The seconds an agent made for a request may take to stop, once its run has
# ended (it has nothing left to do: this bounds a bug, not a wait).
STOP_TIMEOUT = 10.0

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Runs:
    """Where a server's runs happen: a runtime (Trio) or a host (asyncio), and their names.

    Each run is a phase of an agent of its own, named ``<spec name>-<kind>-<n>``
    (*kind*: ``"agui"``, ``"mcp"``), spawned under the runtime's root.
    """

    __slots__ = ("kind", "numbers", "runtime")

    def __init__(self, runtime: Runtime | BlockingRuntime, kind: str) -> None:
        if not isinstance(runtime, Runtime | BlockingRuntime):
            raise InvalidArgument(
                "expected a Runtime (from open_runtime()) or a BlockingRuntime (from "
                f"open_runtime_sync()), got {type(runtime).__name__}"
            )
        self.runtime = runtime
        self.kind = kind
        self.numbers = itertools.count(1)

    def name(self, spec: AgentSpec[Any]) -> str:
        return f"{spec.name}-{self.kind}-{next(self.numbers)}"


@contextlib.asynccontextmanager
async def open_run(
    runs: Runs,
    spec: AgentSpec[Any],
    user_message: str | list[ContentPart | str],
    **options: Any,
) -> AsyncIterator[AsyncIterator[RunItem[Any]]]:
    """A new agent from *spec*, one phase of *user_message* streamed, then the agent stopped.

    Yields the run's items (a `RunStream` or a `BlockingRunStream`); leaving
    early cancels the run. *options* are ``AgentRef.run()``'s.
    """
    name = runs.name(spec)
    if isinstance(runs.runtime, BlockingRuntime):
        async with _hosted_run(runs.runtime, spec, name, user_message, options) as items:
            yield items
        return
    runtime = runs.runtime
    agent = await runtime.spawn_agent(spec, name=name)
    try:
        async with agent.stream(user_message, **options) as stream:
            yield stream
    finally:
        with trio.move_on_after(STOP_TIMEOUT, shield=True) as late:
            await agent.stop()
        if late.cancelled_caught:
            agent.cancel()


@contextlib.asynccontextmanager
async def _hosted_run(
    host: BlockingRuntime,
    spec: AgentSpec[Any],
    name: str,
    user_message: str | list[ContentPart | str],
    options: dict[str, Any],
) -> AsyncIterator[AsyncIterator[RunItem[Any]]]:
    # (asyncio, maybe under anyio's cancel scopes, which cancel every await in a
    # cancelled scope: the agent's stop is shielded, or a cancelled request
    # would leave its agent behind.)
    import anyio

    agent = await host.aspawn_agent(spec, name=name)
    try:
        stream = await agent.astream(user_message, **options)
        async with stream:
            yield stream
    finally:
        with anyio.move_on_after(STOP_TIMEOUT, shield=True):
            await agent.astop()


def to_json(value: object) -> object:
    """*value* (a phase's output) as JSON's builtins; a Pydantic model by its ``model_dump``."""

    def hook(obj: Any) -> object:
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            return dump(mode="json")
        raise NotImplementedError(f"{type(obj).__name__} is not JSON")

    return msgspec.to_builtins(value, enc_hook=hook)


# -- the request's body --------------------------------------------------------------


class BoundedBody:
    """ASGI middleware: a POST's body read whole, within *max_bytes* and *timeout*, first.

    Past *max_bytes* the peer gets 413, past *timeout* seconds 408, each with
    a JSON body naming the error (``{"error": "InvalidArgument", "message":
    ...}``); the app is not called. Otherwise the app gets the body as one
    message, then the real ``receive`` (which tells of a disconnect).
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        import anyio

        body, gone = b"", False
        timeout = self.timeout if math.isfinite(self.timeout) else None
        with anyio.move_on_after(timeout) as late:
            body, gone = await self._read(receive)
        if late.cancelled_caught:
            why = f"the request's body did not arrive within {self.timeout:g} seconds"
            await refuse(send, 408, why)
        elif len(body) > self.max_bytes:
            await refuse(send, 413, f"the request's body is over {self.max_bytes} bytes")
        elif not gone:  # (a peer gone mid-body has nobody to answer)
            await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> tuple[bytes, bool]:
        """The body, or its first *max_bytes* + 1 bytes (enough to refuse it); and
        whether the peer went away before its end."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"", True
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes or not message.get("more_body", False):
                return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def refuse(send: Send, status: int, message: str, error: str = "InvalidArgument") -> None:
    """Answer with *status* and a JSON body: the error's type and message."""
    body = json.dumps({"error": error, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
