"""examples/fastapi_app.py over real HTTP: uvicorn on loopback, called with httpx.

Skipped when FastAPI or uvicorn is not installed (they are in the ``examples`` and
``dev`` extras).
"""

from __future__ import annotations

import asyncio
import importlib.util
import types
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fastapi_app.py"


@pytest.fixture
def example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("example_fastapi_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_returns_the_result_as_json(example: types.ModuleType) -> None:
    with (
        example.Served(example.free_port()) as served,
        httpx.Client(base_url=served.url, timeout=30) as client,
    ):
        reply = client.post("/run", json={"prompt": "What is the capital of Peru?"})
        assert reply.status_code == 200
        body = reply.json()
        assert body["agent"].startswith("run-")
        result = body["result"]
        assert result["final_text"] == "The capital of Peru is Lima."
        assert result["stop_reason"] == "done"
        assert [(c["name"], c["content"]) for c in result["tool_calls"]] == [("capital", "Lima")]
        rt = example.app.state.rt
        assert rt.thread.is_alive()
    # The app's shutdown stopped the runtime and joined its thread.
    assert rt.closed and not rt.thread.is_alive()
    assert not served.thread.is_alive()


def test_run_stream_sends_the_runs_items_as_they_come_then_its_result(
    example: types.ModuleType,
) -> None:
    with (
        example.Served(example.free_port()) as served,
        httpx.Client(base_url=served.url, timeout=30) as client,
        client.stream("POST", "/run/stream", json={"prompt": "Capital of Japan?"}) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = list(stream.iter_lines())
    # The wire format: "event: NAME", "data: JSON", a blank line; nothing else.
    blocks = "\n".join(lines).strip().split("\n\n")
    for block in blocks:
        event, data = block.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
    events = example.sse_events("\n".join(lines))
    assert [name for name, _ in events] == [
        "TurnEnded",
        "ToolStarted",
        "ToolEnded",
        *["TextDelta"] * 5,
        "TurnEnded",
        "RunDone",
    ]
    agent = events[0][1]["path"]
    assert all(data["path"] == agent for name, data in events)
    assert events[1][1]["tool"] == "capital"
    text = "".join(data["text"] for name, data in events if name == "TextDelta")
    assert text == "The capital of Japan is Tokyo."
    result = events[-1][1]["result"]
    assert result["stop_reason"] == "done" and result["final_text"] == text


def test_concurrent_requests_each_get_their_own_agent(example: types.ModuleType) -> None:
    countries = ["France", "Japan", "Peru"] * 4

    async def ask_all(url: str) -> list[dict[str, object]]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            replies = await asyncio.gather(
                *(client.post("/run", json={"prompt": f"Capital of {c}?"}) for c in countries)
            )
        return [r.json() for r in replies]

    with example.Served(example.free_port()) as served:
        bodies = asyncio.run(ask_all(served.url))
    capitals = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima"}
    for country, body in zip(countries, bodies, strict=True):
        result = body["result"]
        assert isinstance(result, dict)
        assert result["final_text"] == f"The capital of {country} is {capitals[country]}."
    assert len({body["agent"] for body in bodies}) == len(countries)


def test_a_client_that_goes_away_cancels_its_run(example: types.ModuleType) -> None:
    import threading

    import trio

    import agentrio
    from agentrio.events import ActorExited
    from agentrio.testing import FunctionModel, Reply

    cancelled = threading.Event()

    @agentrio.tool
    async def wait() -> str:
        """Wait until cancelled."""
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    def model(messages: object, tools: object) -> Reply:
        return Reply(tool_calls=(agentrio.ToolCallRequest("wait", {}),))

    example.SPEC = agentrio.AgentSpec("slow", FunctionModel(model), tools=[wait])
    with (
        example.Served(example.free_port()) as served,
        httpx.Client(base_url=served.url, timeout=30) as client,
        example.app.state.rt.events() as events,
    ):
        with client.stream("POST", "/run/stream", json={"prompt": "go"}) as stream:
            for line in stream.iter_lines():
                if line == "event: ToolStarted":
                    break  # the run waits in its tool: the client leaves
        # The response's generator was ended: its block cancelled the run, and its
        # finally stopped the agent.
        assert cancelled.wait(30)
        guard = threading.Timer(30, events.close)  # (a safety net, not a measure)
        guard.start()
        exited = any(isinstance(e, ActorExited) and e.path == "run-1" for e in events)
        guard.cancel()
        assert exited
