"""agentrio.agui over real HTTP: uvicorn on 127.0.0.1, read as an AG-UI client reads a run.

Every event the server sends is parsed by ag-ui-protocol's own types (its
``Event`` union, discriminated by ``type``). The model is a FunctionModel in
the runtime's thread; the server and the client are real.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import msgspec
import pydantic
import pytest
import trio
import uvicorn
from ag_ui.core import (
    Event,
    EventType,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)

import agentrio
import agentrio.agui
from agentrio import ChatMessage, ToolCallRequest
from agentrio.events import PhaseEnded
from agentrio.testing import FunctionModel, Reply, open_fake_llm
from agentrio.types import BlockingRuntime

EVENT = pydantic.TypeAdapter(Event)


@agentrio.tool
async def capital(country: str) -> str:
    """The capital of a country."""
    return {"Peru": "Lima"}.get(country, "unknown")


def geo(messages: Sequence[ChatMessage], tools: object) -> Reply:
    if messages[-1].role != "tool":
        return Reply(tool_calls=(ToolCallRequest("capital", {"country": "Peru"}),))
    return Reply(text=f"The capital of Peru is {messages[-1].content}.")


def remembers(messages: Sequence[ChatMessage], tools: object) -> Reply:
    said = [m.content for m in messages if m.role == "user"]
    return Reply(text=" | ".join(said))


def fails(messages: Sequence[ChatMessage], tools: object) -> Reply:
    raise agentrio.errors.ProviderUnavailable("the model is down", provider="fake")


async def hangs(messages: Sequence[ChatMessage], tools: object) -> Reply:
    # Long enough for any test; bounded, so that a run nobody cancels fails its
    # test (ending "done") rather than hanging it.
    await trio.sleep(60)
    return Reply(text="not cancelled")


class Movie(msgspec.Struct):
    title: str
    year: int


GEO = agentrio.AgentSpec("geo", FunctionModel(geo, chunk_size=6), tools=[capital])


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """*app* served by uvicorn in a thread on a socket of 127.0.0.1; its base URL."""
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            thread.join(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


@contextlib.contextmanager
def agui(spec: agentrio.AgentSpec[Any], **options: Any) -> Iterator[tuple[str, BlockingRuntime]]:
    with (
        agentrio.open_runtime_sync(shutdown_timeout=5) as rt,
        served(agentrio.agui.agui_app(rt, spec, **options)) as url,
    ):
        yield url, rt


def run_input(text: str, thread: str = "t1", run: str = "r1", **extra: Any) -> dict[str, Any]:
    body = RunAgentInput(
        thread_id=thread,
        run_id=run,
        messages=[UserMessage(id=f"{run}-u", content=text)],
        state={},
        tools=[],
        context=[],
    ).model_dump(mode="json", by_alias=True)
    body.update(extra)
    return body


def read_run(url: str, body: dict[str, Any]) -> list[Any]:
    """The run's events, each parsed by ag-ui-protocol's Event union."""
    events = []
    with httpx.Client(timeout=30) as client, client.stream("POST", url + "/", json=body) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line:
                assert line.startswith("data: ")
                events.append(EVENT.validate_json(line.removeprefix("data: ")))
    return events


def test_a_run_is_its_ag_ui_events_text_tool_call_and_result() -> None:
    with agui(GEO) as (url, _):
        events = read_run(url, run_input("Capital of Peru?", thread="th", run="run-1"))
    kinds = [e.type for e in events]
    assert kinds == [
        EventType.RUN_STARTED,
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.TOOL_CALL_RESULT,
        EventType.TEXT_MESSAGE_START,
        *[EventType.TEXT_MESSAGE_CONTENT] * 5,
        EventType.TEXT_MESSAGE_END,
        EventType.RUN_FINISHED,
    ]
    assert (events[0].thread_id, events[0].run_id) == ("th", "run-1")
    start = events[1]
    assert isinstance(start, ToolCallStartEvent) and start.tool_call_name == "capital"
    args = events[2]
    assert isinstance(args, ToolCallArgsEvent) and json.loads(args.delta) == {"country": "Peru"}
    result = events[4]
    assert isinstance(result, ToolCallResultEvent)
    assert result.tool_call_id == start.tool_call_id and result.content == "Lima"
    deltas = [e.delta for e in events if isinstance(e, TextMessageContentEvent)]
    assert deltas[:2] == ["The ca", "pital "]  # the model's pieces, as they came
    assert "".join(deltas) == "The capital of Peru is Lima."
    end = events[-1]
    assert isinstance(end, RunFinishedEvent) and (end.thread_id, end.run_id) == ("th", "run-1")
    assert end.result == {
        "stop_reason": "done",
        "final_text": "The capital of Peru is Lima.",
        "output": "The capital of Peru is Lima.",
    }


@contextlib.contextmanager
def fake_llm(replies: list[Reply]) -> Iterator[str]:
    """The project's fake LLM server, in a Trio thread of its own: its base URL."""
    ready: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def serve() -> None:
        with trio.CancelScope() as scope:
            async with open_fake_llm(replies) as server:
                ready.put((server.base_url, trio.lowlevel.current_trio_token(), scope))
                await trio.sleep_forever()

    thread = threading.Thread(target=trio.run, args=(serve,))
    thread.start()
    base_url, token, scope = ready.get(timeout=30)
    try:
        yield base_url
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join()


def test_a_run_on_a_provider_over_http_streams_its_deltas(tmp_path: Any) -> None:
    replies = [
        Reply(tool_calls=[ToolCallRequest("capital", {"country": "Peru"}, id="call_9")]),
        Reply(text="The capital of Peru is Lima, as the tool says."),
    ]
    with fake_llm(replies) as base_url:
        config = tmp_path / "agentrio.toml"
        config.write_text(
            f'[providers.fake]\nkind = "openai"\nbase_url = "{base_url}/v1"\nstream = true\n'
        )
        spec = agentrio.AgentSpec("geo", "fake:m", tools=[capital])
        with (
            agentrio.open_runtime_sync(config=config) as rt,
            served(agentrio.agui.agui_app(rt, spec)) as url,
        ):
            events = read_run(url, run_input("Capital of Peru?", run="r1"))
    calls = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert [(c.tool_call_id, c.tool_call_name) for c in calls] == [("r1-call_9", "capital")]
    deltas = [e.delta for e in events if isinstance(e, TextMessageContentEvent)]
    assert len(deltas) > 1  # the provider's stream, piece by piece
    assert "".join(deltas) == "The capital of Peru is Lima, as the tool says."
    assert events[-1].type == EventType.RUN_FINISHED


def test_a_thread_keeps_its_agent_and_a_new_one_gets_the_history_as_text() -> None:
    spec = agentrio.AgentSpec("mem", FunctionModel(remembers))
    with agui(spec) as (url, _):
        first = read_run(url, run_input("one", thread="a", run="1"))
        second = read_run(url, run_input("two", thread="a", run="2"))
        other = read_run(url, run_input("three", thread="b", run="3"))
        history = run_input("four", thread="c", run="4")
        history["messages"] = [
            {"id": "x", "role": "user", "content": "hello"},
            {"id": "y", "role": "assistant", "content": "hi there"},
            *history["messages"],
        ]
        seeded = read_run(url, history)
    assert first[-1].result["final_text"] == "one"
    assert second[-1].result["final_text"] == "one | two"  # the thread's agent remembers
    assert other[-1].result["final_text"] == "three"
    assert seeded[-1].result["final_text"] == (
        "Earlier in this conversation:\nuser: hello\nassistant: hi there\n\nfour"
    )


def test_a_typed_run_gives_its_answer_as_state_then_the_output() -> None:
    answer = '{"title": "Alien", "year": 1979}'
    model = FunctionModel(lambda messages, tools: Reply(text=answer), chunk_size=8)
    spec = agentrio.AgentSpec("critic", model, output_type=Movie)
    with agui(spec) as (url, _):
        events = read_run(url, run_input("Alien"))
    states = [e for e in events if isinstance(e, StateSnapshotEvent)]
    assert states and states[-1].snapshot == {"output": {"title": "Alien", "year": 1979}}
    assert events[-1].result["output"] == {"title": "Alien", "year": 1979}


def test_a_run_that_fails_ends_with_run_error() -> None:
    spec = agentrio.AgentSpec("down", FunctionModel(fails))
    with agui(spec) as (url, _):
        events = read_run(url, run_input("hi"))
    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert error.code == "ProviderUnavailable" and "the model is down" in error.message


def test_a_client_that_goes_away_cancels_its_run() -> None:
    spec = agentrio.AgentSpec("slow", FunctionModel(hangs))
    with agui(spec) as (url, rt), rt.events() as events:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url + "/", json=run_input("wait")) as reply,
        ):
            lines = reply.iter_lines()
            first = next(line for line in lines if line)
            assert EVENT.validate_json(first.removeprefix("data: ")).type == EventType.RUN_STARTED
        # The connection is closed: the server sees it, and the phase ends cancelled.
        ended = next(e for e in events if isinstance(e, PhaseEnded))
    assert ended.path == "slow-agui-1" and ended.stop_reason == "cancelled"


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        (b"\xff\xfe garbage", 400, "not an AG-UI RunAgentInput"),
        (b'{"threadId": "t"}', 400, "not an AG-UI RunAgentInput: runId"),
        (json.dumps(run_input("x", thread="")).encode(), 400, "threadId must be 1 to 200"),
        (
            json.dumps({**run_input("x"), "messages": []}).encode(),
            400,
            "the last of the input's messages must be the user's",
        ),
        (json.dumps(run_input("x" * 5000)).encode(), 413, "over 1000 characters"),
        (b"{" * 300_000, 413, "body is over 100000 bytes"),
    ],
)
def test_bad_input_gets_a_typed_error(body: bytes, status: int, why: str) -> None:
    with agui(GEO, max_body_bytes=100_000, max_prompt_chars=1000) as (url, _):
        reply = httpx.post(url + "/", content=body, timeout=30)
    assert reply.status_code == status
    found = reply.json()
    assert found["error"] == "InvalidArgument" and why in found["message"]


def test_a_client_that_hangs_mid_body_gets_408_in_bounded_time() -> None:
    with agui(GEO, body_timeout=0.5) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"threadId"'
            )
            sock.settimeout(20)
            reply = b""
            while not reply.endswith(b"}"):  # (the head, then the JSON body)
                chunk = sock.recv(65536)
                assert chunk, reply
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 408")
    assert b"did not arrive within 0.5 seconds" in reply


def test_all_threads_running_gets_503() -> None:
    spec = agentrio.AgentSpec("slow", FunctionModel(hangs))
    with (
        agui(spec, max_threads=1) as (url, _),
        httpx.Client(timeout=30) as client,
        client.stream("POST", url + "/", json=run_input("a", thread="a")) as running,
    ):
        lines = running.iter_lines()  # (held: a generator dropped closes the stream)
        next(line for line in lines if line)
        reply = client.post(url + "/", json=run_input("b", thread="b"))
        assert reply.status_code == 503
        assert "all 1 threads are running" in reply.json()["message"]


def test_bad_arguments() -> None:
    with agentrio.open_runtime_sync() as rt:
        with pytest.raises(agentrio.InvalidArgument, match="max_threads"):
            agentrio.agui.agui_app(rt, GEO, max_threads=0)
        with pytest.raises(agentrio.InvalidArgument, match="host must be a BlockingRuntime"):
            agentrio.agui.agui_app(object(), GEO)  # type: ignore[arg-type]
        with pytest.raises(agentrio.InvalidArgument, match="spec must be an AgentSpec"):
            agentrio.agui.agui_app(rt, "geo")  # type: ignore[arg-type]


def test_import_agentrio_imports_neither_ag_ui_nor_starlette() -> None:
    code = (
        "import sys, agentrio; "
        "print(sorted(m for m in ('ag_ui', 'starlette', 'agentrio.agui') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_thread_whose_agent_stopped_starts_again_with_a_new_one() -> None:
    spec = agentrio.AgentSpec("mem", FunctionModel(remembers))
    with agui(spec) as (url, rt):
        first = read_run(url, run_input("one", thread="a", run="1"))
        rt.call(lambda: rt.runtime.lookup("mem-agui-1").cancel())  # (not by the app)
        failed = read_run(url, run_input("two", thread="a", run="2"))
        again = read_run(url, run_input("three", thread="a", run="3"))
    assert first[-1].result["final_text"] == "one"
    assert [e.type for e in failed] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert failed[-1].code == "ActorStopped"
    assert again[-1].result["final_text"] == "three"  # a new agent, a new conversation
