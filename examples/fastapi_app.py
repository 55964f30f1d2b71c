"""A FastAPI app that serves agent runs: JSON, and a streamed run as server-sent events.

FastAPI runs on asyncio; agentrio runs on Trio. ``agentrio.open_runtime_sync()``
puts the runtime in a thread of its own, opened and stopped by the app's
lifespan, and the endpoints await it (``await agent.arun(...)``) without
blocking the event loop. Each request gets an agent of its own, stopped when
the request is done.

- ``POST /run`` with ``{"prompt": "..."}``: the run's result as JSON.
- ``POST /run/stream`` with the same body: the run as server-sent events, one
  per item of the run's own stream (``agent.astream(...)``): ``TextDelta`` for
  each piece of the answer as it comes, ``ToolStarted``, ``ToolEnded``,
  ``TurnEnded``, and ``RunDone`` with the result last. The stream is lossless
  and has backpressure: a client that reads slowly slows its own run, and no
  other; a client that goes away cancels its run.

The model is a scripted one (``agentrio.testing.FunctionModel``): it looks a
capital up with a tool, then answers, streaming its text in pieces of a few
characters as a provider's would come. No network, no key.

Run it with ``python examples/fastapi_app.py``: it starts the app on a free
port of 127.0.0.1, calls both endpoints over HTTP, prints what came back and
stops. ``python examples/fastapi_app.py serve [PORT]`` serves it until Ctrl-C
(``pip install 'agentrio[examples]'`` for FastAPI and uvicorn).
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

import agentrio
from agentrio import ChatMessage, ToolCallRequest, Usage
from agentrio.testing import FunctionModel, Reply
from agentrio.types import BlockingAgent, BlockingRuntime

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima"}


@agentrio.tool
async def capital(country: str) -> str:
    """The capital of a country."""
    return CAPITALS.get(country, "unknown")


def answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
    """Look the capital up, then say it (a scripted model: no network)."""
    usage = Usage(input_tokens=12 * len(messages), output_tokens=8)
    asked = next(m for m in reversed(messages) if m.role == "user").content
    country = next((c for c in CAPITALS if c in asked), None)
    if country is None:
        return Reply(text="I only know France, Japan and Peru.", usage=usage)
    if messages[-1].role != "tool":
        return Reply(tool_calls=(ToolCallRequest("capital", {"country": country}),), usage=usage)
    return Reply(text=f"The capital of {country} is {messages[-1].content}.", usage=usage)


SPEC = agentrio.AgentSpec(
    name="geo",
    model=FunctionModel(answer, chunk_size=6),
    tools=[capital],
    limits=agentrio.Limits(timeout=30),
)


class RunRequest(BaseModel):
    prompt: str


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The runtime's thread starts here and is stopped (gracefully) and joined
    # when the app shuts down; the stop's waiting is done off the event loop.
    async with agentrio.open_runtime_sync(shutdown_timeout=5) as rt:
        app.state.rt = rt
        yield


app = FastAPI(lifespan=lifespan)
_ids = itertools.count(1)


def _runtime(request: Request) -> BlockingRuntime:
    rt: BlockingRuntime = request.app.state.rt
    return rt


@app.post("/run")
async def run(body: RunRequest, request: Request) -> dict[str, object]:
    """Run the prompt on an agent of its own; its result as JSON."""
    agent = await _runtime(request).aspawn_agent(SPEC, name=f"run-{next(_ids)}")
    try:
        result = await agent.arun(body.prompt)
    finally:
        await agent.astop()
    return {"agent": agent.name, "result": msgspec.to_builtins(result)}


@app.post("/run/stream")
async def run_stream(body: RunRequest, request: Request) -> StreamingResponse:
    """Run the prompt on an agent of its own, as server-sent events."""
    agent = await _runtime(request).aspawn_agent(SPEC, name=f"run-{next(_ids)}")
    return StreamingResponse(_sse(agent, body.prompt), media_type="text/event-stream")


def _frame(name: str, data: bytes) -> str:
    return f"event: {name}\ndata: {data.decode()}\n\n"


async def _sse(agent: BlockingAgent, prompt: str) -> AsyncIterator[str]:
    try:
        # The run starts here; each item is sent as it comes. If the client goes
        # away, the block's end cancels the run and waits for it to end.
        async with await agent.astream(prompt) as stream:
            async for item in stream:
                yield _frame(type(item).__name__, msgspec.json.encode(item))
    finally:
        await agent.astop()


# -- running it ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Served:
    """The app served by uvicorn in a thread, on 127.0.0.1:*port*, until closed."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn")

    def __enter__(self) -> Served:
        self.thread.start()
        while not self.server.started:  # uvicorn says so once it listens
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            self.thread.join(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True  # lifespan shutdown: the runtime stops
        self.thread.join()


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of each server-sent event of *text* (data as
    ``json.loads`` gives it: indexed as the server sent it)."""
    found = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((fields["event"], json.loads(fields["data"])))
    return found


def main() -> int:
    with Served(free_port()) as served, httpx.Client(base_url=served.url, timeout=30) as client:
        reply = client.post("/run", json={"prompt": "What is the capital of France?"})
        reply.raise_for_status()
        result = reply.json()["result"]
        print(f"POST /run: {result['stop_reason']}, {result['final_text']!r}")

        names = []
        with client.stream("POST", "/run/stream", json={"prompt": "And of Japan?"}) as stream:
            body = "".join(stream.iter_text())
        for name, data in sse_events(body):
            names.append(name)
            if name == "TextDelta":
                print(f"  TextDelta {data['text']!r}")
            elif name == "RunDone":
                print(f"POST /run/stream: result {data['result']['final_text']!r}")
        print("items: " + " ".join(names))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
        uvicorn.run(app, host="127.0.0.1", port=port)
    else:
        sys.exit(main())
