"""Anthropic's server tools and a tool that returns an image, over real HTTP.

The agent offers Anthropic's web search (``ModelSettings.server_tools``) beside
a tool of its own. The fake LLM server speaks the Anthropic wire format and
plays the model: it searches (a ``server_tool_use`` block), pauses the long
turn (``pause_turn``), and, once the paused turn comes back block for block,
answers with the search results and a cited text block. The agent keeps those
blocks on the assistant turn and sends them back with every later call.

The second phase asks for a chart: the agent's ``chart`` tool returns text and
an image, which go to the model as a ``tool_result`` of a text block and an
image block.

Run it with ``python examples/server_tools.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import trio

import agentrio
from agentrio import ImagePart, ModelReply, ModelSettings, Provider, ProviderConfig, Usage
from agentrio.testing import FakeRequest, open_fake_llm
from agentrio.types import RawBlock

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)  # (the first bytes of a PNG; a real one in real life)
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}

SEARCH = {
    "type": "server_tool_use",
    "id": "srvtoolu_01",
    "name": "web_search",
    "input": {"query": "trio structured concurrency"},
}
RESULTS = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://trio.readthedocs.io/",
            "title": "Trio: a friendly Python library for async concurrency and I/O",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAw",
            "page_age": None,
        }
    ],
}
CITED = {
    "type": "text",
    "text": "Trio runs every task inside a nursery.",
    "citations": [
        {
            "type": "web_search_result_location",
            "url": "https://trio.readthedocs.io/",
            "title": "Trio: a friendly Python library for async concurrency and I/O",
            "encrypted_index": "Eo8BCioIAhgBIiQy",
            "cited_text": "Trio's nurseries: every task has a parent.",
        }
    ],
}


def blocks(*given: Mapping[str, object]) -> tuple[RawBlock, ...]:
    return tuple(RawBlock.of(b) for b in given)


def model(request: FakeRequest) -> ModelReply:
    """Search, pause, then answer with citations; then draw a chart."""
    usage = Usage(input_tokens=60, output_tokens=20)
    last = request.messages[-1]
    if last.role == "tool":  # the chart came back: say what was in it
        kinds = [type(p).__name__ for p in last.parts]
        return ModelReply(text=f"The chart tool gave me {' and '.join(kinds)}.", usage=usage)
    if "chart" in last.content:
        call = agentrio.ToolCallRequest("chart", {"title": "tasks"}, id="toolu_1")
        return ModelReply(tool_calls=(call,), usage=usage)
    if last.role == "assistant":  # the paused turn, sent back block for block
        assert [json.loads(b.json) for b in last.blocks] == [SEARCH]
        return ModelReply(blocks=blocks(RESULTS, CITED), usage=usage)
    assert "web_search" in request.tools
    return ModelReply(blocks=blocks(SEARCH), finish_reason="pause_turn", usage=usage)


@agentrio.tool
async def chart(title: str) -> list[object]:
    """Draw a chart of *title*."""
    await trio.lowlevel.checkpoint()
    return [f"the {title} chart", ImagePart(data=PNG, media_type="image/png")]


async def main() -> None:
    async with open_fake_llm(model) as server:
        config = ProviderConfig(name="claude", kind="anthropic", base_url=server.base_url)
        settings = ModelSettings(server_tools=[WEB_SEARCH])
        async with Provider(config) as claude, agentrio.open_runtime() as rt:
            spec = agentrio.AgentSpec(
                "researcher", claude.model("claude-x"), tools=[chart], settings=settings
            )
            agent = await rt.spawn_agent(spec)
            found = await agent.run("How does Trio run tasks? Search the web.")
            drawn = await agent.run("Now draw me a chart.")
    print(f"answer: {found.final_text}")
    print(f"after the chart: {drawn.final_text}")
    last_request = server.requests[-1].messages  # the search goes back with every call
    sent = [b.kind for m in last_request for b in m.blocks]
    print(
        f"server_tools: {len(server.requests)} requests, "
        f"{' + '.join(sent)} sent back, the chart's image in its tool_result"
    )


if __name__ == "__main__":
    trio.run(main)
