"""A call that may call no tool, after turns that called some, is one the API takes.

The final-answer call (on ``max_iterations`` or a stall) and a phase run with
``tool_names=[]`` after one that used tools send a history holding tool calls
and results. Anthropic refuses such a call that defines no tools (400,
"Requests which include tool_use or tool_result blocks must define tools"),
and so does the fake server's Anthropic route. The agent offers such a call
its tools with ``tool_choice="none"`` (the provider sends the tool turns as
text when no tool is known: tests/providers/test_anthropic.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ModelSettings, Provider, ProviderConfig, ToolCallRequest
from agentrio.testing import FakeRequest, Reply, open_fake_llm

ANSWER = "the final answer"


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} is 1"


def may_call(request: FakeRequest) -> bool:
    return bool(request.tools) and request.tool_choice != "none"


def results(request: FakeRequest) -> int:
    return sum(m.role == "tool" for m in request.messages)


def calls_on(request: FakeRequest) -> Reply:
    """A new lookup each time one may be called: only max_iterations ends it."""
    if not may_call(request):
        return Reply(text=ANSWER)
    return Reply(tool_calls=(ToolCallRequest("lookup", {"key": f"k{results(request)}"}),))


def repeats(request: FakeRequest) -> Reply:
    """The same lookup each time one may be called: a stall."""
    if not may_call(request):
        return Reply(text=ANSWER)
    return Reply(tool_calls=(ToolCallRequest("lookup", {"key": "k0"}),))


def once(request: FakeRequest) -> Reply:
    """One lookup, then an answer; an answer at once when no tool may be called."""
    if may_call(request) and not results(request):
        return Reply(tool_calls=(ToolCallRequest("lookup", {"key": "k0"}),))
    return Reply(text=ANSWER)


@asynccontextmanager
async def anthropic_agent(
    handler: object, stream: bool, settings: ModelSettings | None = None
) -> AsyncIterator[tuple[agentrio.AgentRef[str], list[FakeRequest]]]:
    seen: list[FakeRequest] = []

    def recorded(request: FakeRequest) -> Reply:
        seen.append(request)
        return handler(request)  # type: ignore[operator,no-any-return]

    async with open_fake_llm(recorded) as server:
        config = ProviderConfig(
            name="an", kind="anthropic", base_url=server.base_url + "/v1", stream=stream
        )
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            spec = AgentSpec("a", provider.model("claude"), tools=[lookup], settings=settings)
            yield await rt.spawn_agent(spec), seen


def offered_tools_none_callable(request: FakeRequest) -> None:
    """The call offers the tools, none of which may be called, with the tool turns
    sent as they were (the prompt cache's prefix is kept)."""
    assert (request.tools, request.tool_choice) == (["lookup"], "none")
    assert any(m.role == "tool" and m.content == "k0 is 1" for m in request.messages)


@pytest.mark.parametrize(
    ("stream", "settings"),
    [
        (False, None),
        (True, None),
        (False, ModelSettings(tool_choice="required", parallel_tool_calls=False)),
    ],
)
async def test_the_final_answer_call_on_max_iterations(
    autojump_clock: trio.testing.MockClock, stream: bool, settings: ModelSettings | None
) -> None:
    async with anthropic_agent(calls_on, stream, settings) as (agent, seen):
        result = await agent.run("go", max_iterations=2)
    assert (result.stop_reason, result.error, result.final_text) == ("max_iterations", "", ANSWER)
    assert len(seen) == 3
    offered_tools_none_callable(seen[-1])


@pytest.mark.parametrize("stream", [False, True])
async def test_the_final_answer_call_after_a_stall(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    async with anthropic_agent(repeats, stream) as (agent, seen):
        result = await agent.run("go", max_iterations=10)
    assert (result.stop_reason, result.error, result.final_text) == ("stalled", "", ANSWER)
    offered_tools_none_callable(seen[-1])


@pytest.mark.parametrize("stream", [False, True])
async def test_a_phase_without_tools_after_one_that_used_them(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    async with anthropic_agent(once, stream) as (agent, seen):
        first = await agent.run("go")
        assert (first.stop_reason, len(first.tool_calls)) == ("done", 1)
        second = await agent.run("and now?", tool_names=[])
    assert (second.stop_reason, second.error, second.final_text) == ("done", "", ANSWER)
    offered_tools_none_callable(seen[-1])
