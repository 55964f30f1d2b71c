"""The agents tests/test_mcp_server.py serves with ``agentrio mcp-serve swarm_specs:SPECS``.

Their models are FunctionModels (no network): ``shout`` calls a tool, then
answers; ``critic`` answers typed; ``down`` fails; ``hang`` never answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import trio

import agentrio
from agentrio import ChatMessage, ToolCallRequest
from agentrio.testing import FunctionModel, Reply


@agentrio.tool
async def upper(text: str) -> str:
    """The text in capitals."""
    return text.upper()


def shouts(messages: Sequence[ChatMessage], tools: object) -> Reply:
    if messages[-1].role != "tool":
        return Reply(tool_calls=(ToolCallRequest("upper", {"text": messages[-1].content}),))
    return Reply(text=f"{messages[-1].content}!")


def fails(messages: Sequence[ChatMessage], tools: object) -> Reply:
    raise agentrio.errors.ProviderUnavailable("the model is down", provider="fake")


async def hangs(messages: Sequence[ChatMessage], tools: object) -> Reply:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


class Movie(msgspec.Struct):
    title: str
    year: int


@agentrio.tool
async def broken(reason: str) -> str:
    """Always fail."""
    raise RuntimeError(f"broken: {reason}")


# Tools served as they are, beside an agent (`agentrio mcp-serve swarm_specs:MIXED`).
MIXED = [upper, broken]

SPECS: list[agentrio.AgentSpec[Any]] = [
    agentrio.AgentSpec(
        "shout", FunctionModel(shouts), tools=[upper], instructions="Shout the prompt back."
    ),
    agentrio.AgentSpec(
        "critic",
        FunctionModel(lambda messages, tools: Reply(text='{"title": "Alien", "year": 1979}')),
        output_type=Movie,
    ),
    agentrio.AgentSpec("down", FunctionModel(fails)),
    agentrio.AgentSpec("hang", FunctionModel(hangs)),
]

MIXED.insert(0, SPECS[0])
