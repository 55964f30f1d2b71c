"""A model call over the model's context window (ContextTooLong) in a phase: with
compaction, the history is compacted and the call made once more; without it, or
when the call is still too long, or when nothing can be compacted, the phase ends
with ``"error"`` and ``error_type == "ContextTooLong"``. The model is a provider
talking to the fake server, whose ``context_window`` makes it answer as the real
APIs do."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ChatMessage, Compaction, ModelReply, ToolCallRequest, Usage
from agentrio.agents.loop.summary import SUMMARY_PREFIX
from agentrio.events import CompactionFailed, ContextCompacted, PhaseEnded, PhaseError, TurnStarted
from agentrio.providers.provider import Kind
from agentrio.testing import FakeLLMServer, FakeRequest, FunctionModel, Reply, open_fake_llm
from agentrio.types import ToolSchema

RecordEvents = Callable[..., list[agentrio.events.Event]]
BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}
# On the fake server a page turn (the call and its result) counts 34 tokens, "sys"
# and "read" 3, the summary 26: three pages fit in 120 (105), the fifth call's four
# do not (139), and after the compaction (the summary and page 4) the call fits (63).
WINDOW = 120


@agentrio.tool
async def page(n: int) -> str:
    """Read one page."""
    await trio.lowlevel.checkpoint()
    return f"p{n}:" + "x" * 100


def reader(request: FakeRequest) -> ModelReply:
    """Reads a page per call, and answers once the conversation holds a summary."""
    # (Anthropic's wire joins the summary to the user message before it: "in")
    if any(SUMMARY_PREFIX in m.content for m in request.messages):
        return Reply(text="done", usage=Usage(10, 2))
    n = sum(m.role == "tool" for m in request.messages) + 1
    return Reply(tool_calls=[ToolCallRequest("page", {"n": n})], usage=Usage(10, 5))


class Summariser:
    """A summary model body that records each request."""

    def __init__(self) -> None:
        self.requests: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        self.requests.append(list(messages))
        return Reply(text="pages 1-3 read", usage=Usage(50, 10))


@asynccontextmanager
async def agent_on(
    kind: Kind, window: int, *, compaction: Compaction | None, stream: bool = False
) -> AsyncIterator[tuple[FakeLLMServer, agentrio.Runtime, agentrio.AgentRef]]:
    async with open_fake_llm(reader, context_window=window) as server:
        config = agentrio.ProviderConfig(
            name="p", kind=kind, base_url=server.base_url + BASE[kind], stream=stream
        )
        async with agentrio.Provider(config) as provider, agentrio.open_runtime() as rt:
            spec = AgentSpec(
                "a",
                model=provider.model("m"),
                instructions="sys",
                tools=[page],
                compaction=compaction,
            )
            yield server, rt, await rt.spawn_agent(spec)


def compaction(summariser: Summariser) -> Compaction:
    # (The model's window, 128k for the provider, is far from the threshold: only
    # the server's answer says the request is too long.)
    return Compaction(model=FunctionModel(summariser), keep_recent=1)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_an_overflow_compacts_and_the_call_is_made_again(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, kind: Kind, stream: bool
) -> None:
    summariser = Summariser()
    async with agent_on(kind, WINDOW, compaction=compaction(summariser), stream=stream) as (
        server,
        rt,
        agent,
    ):
        events = record_events(rt)
        outcome = await agent.run("read")
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, outcome.final_text, outcome.error_type) == ("done", "done", "")
    assert server.statistics().rejected == {400: 1}  # the fifth call, once
    # four calls answered, then the fifth was made again after the compaction
    assert len(server.requests) == 5
    assert len(summariser.requests) == 1
    again = server.requests[-1].messages
    assert [m.role for m in again][-2:] == ["assistant", "tool"] and len(again) <= 5
    assert any(m.content.endswith(SUMMARY_PREFIX + "pages 1-3 read") for m in again)
    assert again[-1].content.startswith("p4:")
    (compacted,) = [e for e in events if isinstance(e, ContextCompacted)]
    assert compacted.replaced == 6
    assert not [e for e in events if isinstance(e, PhaseError | CompactionFailed)]
    # the call made again is the same turn: five turns, the fifth started twice
    (ended,) = [e for e in events if isinstance(e, PhaseEnded)]
    assert ended.iterations == 5
    assert [e.iteration for e in events if isinstance(e, TurnStarted)] == [1, 2, 3, 4, 5, 5]


async def test_the_servers_window_bounds_the_turns_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    summariser = Summariser()
    # keep_recent=4: by the model's window (128k) the four pages would all be kept
    # (nothing to summarise), by the server's (120, said in its answer) only the newest
    compaction = Compaction(model=FunctionModel(summariser), keep_recent=4)
    async with agent_on("openai", WINDOW, compaction=compaction) as (server, _, agent):
        outcome = await agent.run("read")
    assert (outcome.stop_reason, outcome.final_text) == ("done", "done")
    assert len(summariser.requests) == 1 and server.statistics().rejected == {400: 1}
    assert server.requests[-1].messages[-1].content.startswith("p4:")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_without_compaction_an_overflow_ends_the_phase_with_context_too_long(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents, kind: Kind
) -> None:
    async with agent_on(kind, WINDOW, compaction=None) as (server, rt, agent):
        events = record_events(rt)
        outcome = await agent.run("read")
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, outcome.error_type) == ("error", "ContextTooLong")
    assert outcome.error.startswith(
        "provider 'p': the request is over the model's context window (HTTP 400, limit 120 tokens"
    )
    assert server.statistics().rejected == {400: 1}  # not retried
    assert len(server.requests) == 4
    (error,) = [e for e in events if isinstance(e, PhaseError)]
    assert (error.error_type, error.error) == ("ContextTooLong", outcome.error)


async def test_still_too_long_after_the_compaction_ends_the_phase_and_is_not_tried_again(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    summariser = Summariser()
    # 60: one page fits (37), two do not (71); after the compaction, the summary and
    # the newest page are still over it (63)
    async with agent_on("openai", 60, compaction=compaction(summariser)) as (server, rt, agent):
        events = record_events(rt)
        outcome = await agent.run("read")
        await trio.testing.wait_all_tasks_blocked()
    assert (outcome.stop_reason, outcome.error_type) == ("error", "ContextTooLong")
    assert len(summariser.requests) == 1  # one compaction
    assert server.statistics().rejected == {400: 2}  # the call, and once more: no third
    assert len(server.requests) == 2
    assert len([e for e in events if isinstance(e, ContextCompacted)]) == 1
    assert len([e for e in events if isinstance(e, PhaseError)]) == 1


async def test_an_overflow_with_nothing_to_compact_ends_the_phase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    summariser = Summariser()
    # the first call (the system prompt and the user's message) is already over
    async with agent_on("anthropic", 2, compaction=compaction(summariser)) as (server, _, agent):
        outcome = await agent.run("read")
    assert (outcome.stop_reason, outcome.error_type) == ("error", "ContextTooLong")
    assert summariser.requests == []  # no summary call: nothing to replace
    assert server.statistics().rejected == {400: 1} and server.requests == []
