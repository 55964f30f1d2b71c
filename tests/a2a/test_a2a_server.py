"""agentrio.a2a.a2a_app: an agent served as an A2A agent, called by the SDK's own client.

The server runs in uvicorn (asyncio, a thread of its own) over a runtime of
``open_runtime_sync``; the SDK's client (asyncio) calls it over real HTTP on
127.0.0.1, from ``asyncio.run`` in the test's thread.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import msgspec
import pytest
import trio
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import (
    AgentSkill,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format

import agentrio
import agentrio.a2a
from agentrio.testing import FunctionModel, Reply


def shout(messages: Any, tools: Any) -> Reply:
    return Reply(text=messages[-1].content.upper())


@pytest.fixture
def rt() -> Iterator[agentrio.types.BlockingRuntime]:
    with agentrio.open_runtime_sync(shutdown_timeout=5) as rt:
        yield rt
    assert not rt.thread.is_alive()


def request(text: str, context_id: str | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    if context_id is not None:
        message.context_id = context_id
    return SendMessageRequest(message=message)


async def events_of(url: str, req: SendMessageRequest, *, streaming: bool) -> list[StreamResponse]:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = await create_client(card, client_config=config)
        return [event async for event in client.send_message(req)]


def test_the_card_comes_from_the_spec(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    @agentrio.tool
    def lookup(key: str) -> str:
        """Find a value by its key."""
        return key

    spec = agentrio.AgentSpec("clerk", FunctionModel(shout), tools=[lookup])
    served = serve(agentrio.a2a.a2a_app(rt, spec, description="Looks things up."))

    async def main() -> Any:
        async with httpx.AsyncClient(timeout=30) as http:
            return await A2ACardResolver(http, served.url).get_agent_card()

    card = asyncio.run(main())
    assert card.name == "clerk"
    assert card.description == "Looks things up."
    assert card.capabilities.streaming
    assert [(s.id, s.description) for s in card.skills] == [("lookup", "Find a value by its key.")]
    (interface,) = card.supported_interfaces
    assert (interface.url, interface.protocol_binding) == (served.url + "/", "JSONRPC")
    # Given skills replace the tools'.
    skill = AgentSkill(id="s", name="S", description="does s", tags=["x"])
    card = agentrio.a2a.agent_card(spec, skills=[skill], url="http://h/rpc", streaming=False)
    assert [s.id for s in card.skills] == ["s"] and not card.capabilities.streaming
    assert card.supported_interfaces[0].url == "http://h/rpc"


def test_send_runs_a_phase_and_the_task_holds_its_answer(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    spec = agentrio.AgentSpec("shouter", FunctionModel(shout, chunk_size=3))
    served = serve(agentrio.a2a.a2a_app(rt, spec))
    (event,) = asyncio.run(events_of(served.url, request("hello there"), streaming=False))
    task = event.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (artifact,) = task.artifacts
    # The deltas were replaced by the whole text: one part.
    assert [p.text for p in artifact.parts] == ["HELLO THERE"]
    assert artifact.name == "answer"
    assert rt.usage().requests == 1


def test_stream_sends_deltas_then_the_answer_then_completed(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    spec = agentrio.AgentSpec("shouter", FunctionModel(shout, chunk_size=4))
    served = serve(agentrio.a2a.a2a_app(rt, spec))
    events = asyncio.run(events_of(served.url, request("one token at a time"), streaming=True))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    deltas = [u for u in updates if not u.last_chunk]
    assert ["".join(p.text for p in u.artifact.parts) for u in deltas] == [
        "ONE ",
        "TOKE",
        "N AT",
        " A T",
        "IME",
    ]
    assert [u.append for u in deltas] == [False, True, True, True, True]
    final = updates[-1]
    assert final.last_chunk and not final.append
    assert get_artifact_text(final.artifact) == "ONE TOKEN AT A TIME"
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]


def test_a_context_is_one_conversation(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    def count(messages: Any, tools: Any) -> Reply:
        return Reply(text=f"{sum(m.role == 'user' for m in messages)} turns")

    spec = agentrio.AgentSpec("counter", FunctionModel(count))
    served = serve(agentrio.a2a.a2a_app(rt, spec, max_contexts=1))

    async def main() -> list[str]:
        texts = []
        for context in ["a", "a", "b", "a"]:
            (event,) = await events_of(served.url, request("hi", context), streaming=False)
            texts.append(get_artifact_text(event.task.artifacts[0]))
        return texts

    # "b" pushed "a" out (max_contexts=1): "a" came back to a new conversation.
    assert asyncio.run(main()) == ["1 turns", "2 turns", "1 turns", "1 turns"]


def test_a_failed_phase_fails_the_task_and_says_why(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    def broken(messages: Any, tools: Any) -> Reply:
        raise RuntimeError("the model broke")

    served = serve(agentrio.a2a.a2a_app(rt, agentrio.AgentSpec("b", FunctionModel(broken))))
    (event,) = asyncio.run(events_of(served.url, request("hi"), streaming=False))
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    said = get_message_text(event.task.status.message)
    assert said.startswith("the phase ended error") and "the model broke" in said


def test_the_runtimes_budget_is_in_force(serve: Callable[[Any], Any]) -> None:
    budget = agentrio.Budget(max_requests=1)
    with agentrio.open_runtime_sync(budget=budget) as rt:
        spec = agentrio.AgentSpec("shouter", FunctionModel(shout))
        served = serve(agentrio.a2a.a2a_app(rt, spec))
        first = asyncio.run(events_of(served.url, request("one"), streaming=False))
        second = asyncio.run(events_of(served.url, request("two"), streaming=False))
        served.__exit__()
    assert first[0].task.status.state == TaskState.TASK_STATE_COMPLETED
    assert second[0].task.status.state == TaskState.TASK_STATE_FAILED
    assert "budget_exhausted" in get_message_text(second[0].task.status.message)


def test_cancel_cancels_the_phase(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    started = threading.Event()
    ended: list[str] = []

    async def waits(messages: Any, tools: Any) -> Reply:
        if started.is_set():  # the next phase answers
            return Reply(text="awake")
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            ended.append("cancelled")
        raise AssertionError("unreachable")

    spec = agentrio.AgentSpec("waiter", FunctionModel(waits))
    served = serve(agentrio.a2a.a2a_app(rt, spec))

    async def main() -> tuple[Any, Any]:
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, served.url).get_agent_card()
            client = await create_client(card, ClientConfig(streaming=True, httpx_client=http))
            stream = client.send_message(request("wait"))
            first = await anext(stream)
            await asyncio.to_thread(started.wait, 30)
            task_id = first.task.id
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            async for _ in stream:  # (the stream ends, with the task)
                pass
            stored = await client.get_task(GetTaskRequest(id=task_id))
            return canceled, stored

    canceled, stored = asyncio.run(main())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert stored.status.state == TaskState.TASK_STATE_CANCELED
    assert ended == ["cancelled"]  # the phase itself was cancelled, in the runtime
    # The agent is still there, and usable.
    (event,) = asyncio.run(events_of(served.url, request("again"), streaming=False))
    assert get_artifact_text(event.task.artifacts[0]) == "awake"


def test_a_body_past_the_limit_gets_413(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    spec = agentrio.AgentSpec("shouter", FunctionModel(shout))
    served = serve(agentrio.a2a.a2a_app(rt, spec, max_request_bytes=1000))
    with httpx.Client(timeout=30) as http:
        big = http.post(served.url + "/", content=b"x" * 5000)
        assert big.status_code == 413

        def chunks() -> Iterator[bytes]:
            for _ in range(10):
                yield b"y" * 500

        chunked = http.post(served.url + "/", content=chunks())
        assert chunked.status_code == 413
        garbage = http.post(served.url + "/", content=b"{not json", headers={"A2A-Version": "1.0"})
        assert garbage.status_code == 200 and garbage.json()["error"]["code"] == -32700


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rt": None}, "rt must be a BlockingRuntime"),
        ({"spec": "x"}, "spec must be an AgentSpec"),
        ({"rpc_path": "rpc"}, "rpc_path must be"),
        ({"max_contexts": 0}, "max_contexts"),
        ({"timeout": -1}, "timeout"),
    ],
)
def test_bad_arguments(
    rt: agentrio.types.BlockingRuntime, kwargs: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {
        "rt": rt,
        "spec": agentrio.AgentSpec("s", FunctionModel(shout)),
        **kwargs,
    }
    with pytest.raises(agentrio.InvalidArgument, match=message):
        agentrio.a2a.a2a_app(**arguments)


def test_import_agentrio_does_not_import_the_sdk() -> None:
    code = (
        "import sys, agentrio, agentrio.a2a; "
        "print(sorted(m for m in ('a2a', 'starlette', 'agentrio.a2a._server') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_specs_permissions_are_in_force(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    ran: list[str] = []

    @agentrio.tool
    def wipe(path: str) -> str:
        """Delete a folder."""
        ran.append(path)
        return "wiped"

    def model(messages: Any, tools: Any) -> Reply:
        if messages[-1].role == "tool":
            return Reply(text=f"the tool said: {messages[-1].content}")
        return Reply(tool_calls=[agentrio.ToolCallRequest("wipe", {"path": "/"})])

    policy = agentrio.PermissionPolicy(rules=[agentrio.deny_rule("wipe")])
    spec = agentrio.AgentSpec("janitor", FunctionModel(model), tools=[wipe], permissions=policy)
    served = serve(agentrio.a2a.a2a_app(rt, spec))
    (event,) = asyncio.run(events_of(served.url, request("clean up"), streaming=False))
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(event.task.artifacts[0]).startswith("the tool said:")
    assert ran == []  # denied: an A2A caller gets no more than the spec allows


class Verdict(msgspec.Struct):
    score: int
    why: str


def test_a_typed_answer_comes_with_a_data_part(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    def model(messages: Any, tools: Any) -> Reply:
        return Reply(text='{"score": 7, "why": "good"}')

    spec = agentrio.AgentSpec("critic", FunctionModel(model), output_type=Verdict)
    served = serve(agentrio.a2a.a2a_app(rt, spec))
    (event,) = asyncio.run(events_of(served.url, request("judge"), streaming=False))
    text, data = event.task.artifacts[0].parts
    assert text.text == '{"score": 7, "why": "good"}'
    assert json_format.MessageToDict(data.data) == {"score": 7, "why": "good"}


def test_mounted_in_fastapi_the_card_points_under_the_mount(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    from fastapi import FastAPI

    api = FastAPI()
    spec = agentrio.AgentSpec("shouter", FunctionModel(shout))
    api.mount("/agents/shouter", agentrio.a2a.a2a_app(rt, spec))
    served = serve(api)
    url = served.url + "/agents/shouter"

    async def main() -> Any:
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
        return card, await events_of(url, request("mounted"), streaming=True)

    card, events = asyncio.run(main())
    assert card.supported_interfaces[0].url == url + "/"
    assert get_artifact_text(events[-2].artifact_update.artifact) == "MOUNTED"


def test_at_most_max_tasks_are_kept(
    rt: agentrio.types.BlockingRuntime, serve: Callable[[Any], Any]
) -> None:
    spec = agentrio.AgentSpec("shouter", FunctionModel(shout))
    served = serve(agentrio.a2a.a2a_app(rt, spec, max_tasks=2))

    async def main() -> list[bool]:
        ids = []
        for word in ["one", "two", "three"]:
            (event,) = await events_of(served.url, request(word), streaming=False)
            ids.append(event.task.id)
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(served.url, ClientConfig(httpx_client=http))
            kept = []
            for task_id in ids:
                try:
                    await client.get_task(GetTaskRequest(id=task_id))
                except TaskNotFoundError:
                    kept.append(False)
                else:
                    kept.append(True)
            return kept

    assert asyncio.run(main()) == [False, True, True]
