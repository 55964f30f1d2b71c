"""agentrio.a2a.a2a_tool: a remote A2A agent as a tool, against the SDK's own server.

The remote agent is an ``AgentExecutor`` of the SDK's, served by the SDK's
routes in uvicorn (asyncio, a thread of its own); agentrio's client calls it
from Trio over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

import agentrio
import agentrio.a2a
from agentrio import ModelReply, ProviderConfig, ToolCallRequest
from agentrio.a2a import A2AToolError
from agentrio.testing import FakeRequest, Reply, ScriptedModel, open_fake_llm


class Remote(AgentExecutor):
    """A remote agent that does what its message says: echo, fail, ask, wait or answer."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.waiting = threading.Event()
        self.seen: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        self.seen.append(text)
        task_id, context_id = context.task_id or "", context.context_id or ""
        if text == "message":  # an answer with no task
            reply = Message(
                role=Role.ROLE_AGENT, message_id="m", parts=[Part(text="just a message")]
            )
            await event_queue.enqueue_event(reply)
            return
        status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
        await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, status=status))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        verb, _, rest = text.partition(" ")
        if verb == "echo":
            for i, piece in enumerate([rest[:3], rest[3:6], rest[6:]]):
                await updater.add_artifact([Part(text=piece)], artifact_id="a", append=i > 0)
            await updater.complete()
        elif verb == "fail":
            await updater.failed(updater.new_agent_message([Part(text="it went wrong")]))
        elif verb == "ask":
            await updater.requires_input(updater.new_agent_message([Part(text="which one?")]))
        elif verb == "wait":
            self.waiting.set()
            await asyncio.sleep(3600)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.append(context.task_id or "")
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


def sdk_app(remote: Remote, *, streaming: bool) -> Callable[[str], Starlette]:
    def make(url: str) -> Starlette:
        card = AgentCard(
            name="Remote Echo",
            description="Echoes what it is told.",
            version="1.0.0",
            capabilities=AgentCapabilities(streaming=streaming),
            default_input_modes=["text"],
            default_output_modes=["text"],
            skills=[AgentSkill(id="echo", name="echo", description="says it back", tags=["x"])],
            supported_interfaces=[
                AgentInterface(url=url + "/rpc", protocol_binding="JSONRPC", protocol_version="1.0")
            ],
        )
        handler = DefaultRequestHandler(
            agent_executor=remote, task_store=InMemoryTaskStore(), agent_card=card
        )
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/rpc")]
        return Starlette(routes=routes)

    return make


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_call_gets_the_remote_agents_answer(
    serve_made: Callable[[Any], Any], streaming: bool
) -> None:
    remote = Remote()
    served = serve_made(sdk_app(remote, streaming=streaming))
    card = await agentrio.a2a.fetch_card(served.url)
    assert (card.name, card.endpoint, card.streaming) == (
        "Remote Echo",
        served.url + "/rpc",
        streaming,
    )
    tool = agentrio.a2a.a2a_tool(card=card)
    assert tool.name == "Remote_Echo"
    assert tool.description == "Echoes what it is told. Skills: echo: says it back."
    assert list(tool.schema.parameters["properties"]) == ["message"]
    assert await tool.call({"message": "echo hello world"}) == "hello world"
    assert await tool.call({"message": "message"}) == "just a message"
    # Given a URL alone, the tool reads the card on its first call.
    by_url = agentrio.a2a.a2a_tool(served.url, name="echo")
    assert by_url.card is None
    assert await by_url.call({"message": "echo again"}) == "again"
    assert by_url.card == card


async def test_a_task_that_does_not_complete_is_a_tool_error(
    serve_made: Callable[[Any], Any],
) -> None:
    served = serve_made(sdk_app(Remote(), streaming=True))
    tool = agentrio.a2a.a2a_tool(served.url, name="remote")
    with pytest.raises(A2AToolError, match="task ended failed: it went wrong"):
        await tool.call({"message": "fail"})
    with pytest.raises(A2AToolError, match="asks for input, which a tool call cannot give: which"):
        await tool.call({"message": "ask"})


async def test_an_agent_calls_the_remote_agent_as_a_tool(
    serve_made: Callable[[Any], Any],
) -> None:
    served = serve_made(sdk_app(Remote(), streaming=True))
    tool = agentrio.a2a.a2a_tool(served.url, name="remote")
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCallRequest("remote", {"message": "echo from afar"}, id="c1")]),
            Reply(text="the remote said it"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(agentrio.AgentSpec("boss", model, tools=[tool]))
        result = await agent.run("ask the remote")
    assert result.stop_reason == "done"
    (call,) = result.tool_calls
    assert (call.status, call.content) == ("ok", "from afar")


async def test_the_callers_deadline_ends_the_call_and_cancels_the_remote_task(
    serve_made: Callable[[Any], Any],
) -> None:
    remote = Remote()
    served = serve_made(sdk_app(remote, streaming=True))
    tool = agentrio.a2a.a2a_tool(served.url, name="remote")
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCallRequest("remote", {"message": "wait"}, id="c1")]),
            Reply(text="never"),
        ]
    )
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(agentrio.AgentSpec("boss", model, tools=[tool]))
        with trio.fail_after(60):  # (a bound for a broken test, not a timing assert)
            result = await agent.run("ask the remote", timeout=1.0)
    assert result.stop_reason == "timeout"
    assert remote.waiting.is_set()
    # The task the call gave up on was cancelled on the remote side.
    assert len(remote.cancelled) == 1


async def test_a_cancelled_call_cancels_the_remote_task(serve_made: Callable[[Any], Any]) -> None:
    remote = Remote()
    served = serve_made(sdk_app(remote, streaming=True))
    tool = agentrio.a2a.a2a_tool(served.url, name="remote")
    with trio.move_on_after(60) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tool.call, {"message": "wait"})
            # The call has read its task's id (before it, there is no task to cancel).
            while not any(call.task_id for call in tool._link.streaming):
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert len(remote.cancelled) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs url= or card="),
        ({"url": "ftp://x"}, "url must be an http"),
        ({"url": "http://x"}, "needs name= or card="),
        ({"url": "http://x", "name": "bad name"}, "tool name must match"),
        ({"url": "http://x", "name": "t", "timeout": -1}, "timeout"),
        ({"url": "http://x", "name": "t", "max_response_bytes": 0}, "max_response_bytes"),
        ({"url": "http://x", "name": "t", "headers": {"A": 1}}, "the entry 'A' does not"),
        ({"url": "http://x", "name": "t", "card": "c"}, "card must be an A2ACard"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(agentrio.InvalidArgument, match=message):
        agentrio.a2a.a2a_tool(**kwargs)


def test_agentrio_a2a_is_the_public_home_of_its_names() -> None:
    import pickle
    import traceback

    for name in agentrio.a2a.__all__:
        value = getattr(agentrio.a2a, name)
        assert value.__module__ == "agentrio.a2a", name
        assert pickle.loads(pickle.dumps(value)) is value
    (line,) = traceback.format_exception_only(A2AToolError("no agent"))
    assert line == "agentrio.a2a.A2AToolError: no agent\n"
    skill = agentrio.a2a.A2ASkill("i", "n", "d")
    card = agentrio.a2a.A2ACard("n", "d", "http://h/", True, (skill,))
    assert pickle.loads(pickle.dumps(card)) == card


async def test_both_ways_over_the_fake_llm_server(serve: Callable[[Any], Any]) -> None:
    # Both agents' models are the fake LLM server (its Ollama API): the boss's
    # tool call goes over A2A to an agent served by a2a_app, and back.
    def reply(request: FakeRequest) -> ModelReply:
        if "remote" not in request.tools:  # the served agent
            return ModelReply(text=f"Lima, I say to {request.messages[-1].content!r}")
        if request.messages[-1].role == "tool":
            return ModelReply(text=f"It said: {request.messages[-1].content}")
        return ModelReply(tool_calls=[ToolCallRequest("remote", {"message": "Peru?"})])

    async with open_fake_llm(reply) as llm:
        local = ProviderConfig(name="local", kind="ollama", base_url=llm.base_url)
        config = agentrio.Config(providers={"local": local})
        served_rt = await trio.to_thread.run_sync(
            functools.partial(agentrio.open_runtime_sync, config=config)
        )
        try:
            spec = agentrio.AgentSpec("researcher", "local:small")
            served = await trio.to_thread.run_sync(serve, agentrio.a2a.a2a_app(served_rt, spec))
            tool = agentrio.a2a.a2a_tool(served.url, name="remote")
            async with agentrio.open_runtime(config=config) as rt:
                boss = await rt.spawn_agent(agentrio.AgentSpec("boss", "local:big", tools=[tool]))
                result = await boss.run("What is the capital of Peru?")
        finally:
            await trio.to_thread.run_sync(served_rt.stop)
    assert result.final_text == "It said: Lima, I say to 'Peru?'"
    assert [r.model for r in llm.requests] == ["big", "small", "big"]


async def test_the_calls_count_against_the_callers_budget(
    serve_made: Callable[[Any], Any],
) -> None:
    remote = Remote()
    served = serve_made(sdk_app(remote, streaming=True))
    tool = agentrio.a2a.a2a_tool(served.url, name="remote")
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCallRequest("remote", {"message": "echo first"}, id="c1")]),
            Reply(tool_calls=[ToolCallRequest("remote", {"message": "echo second"}, id="c2")]),
            Reply(text="done"),
        ]
    )
    async with agentrio.open_runtime(budget=agentrio.Budget(max_tool_calls=1)) as rt:
        agent = await rt.spawn_agent(agentrio.AgentSpec("boss", model, tools=[tool]))
        result = await agent.run("ask twice")
        assert rt.usage().tool_calls == 1
    assert [c.status for c in result.tool_calls] == ["ok", "denied"]  # the budget was spent
    assert remote.seen == ["echo first"]  # the second call was never sent


def test_a_file_part_is_the_note_the_server_side_writes_too() -> None:
    # docs/howto/a2a.md: a file part is `[name (type): not shown]` on both sides.
    from agentrio.a2a import _client, _wire

    parts = (
        _wire.Part(text="see "),
        _wire.Part(raw="AAAA", filename="report.pdf", media_type="application/pdf"),
        _wire.Part(url="https://example.invalid/x"),
    )
    assert _client._text(parts) == (
        "see [report.pdf (application/pdf): not shown][a file (unknown type): not shown]"
    )
