"""Print a run's tokens to the terminal as they come: a run's own stream.

``agent.stream(...)`` runs one phase, as ``agent.run(...)`` does, and gives its
items as they happen: ``TextDelta`` for each piece of the model's text,
``ToolStarted`` and ``ToolEnded`` for each tool call, ``TurnEnded`` for each
model call, and last ``RunDone`` with the result. This one reads them from a
real HTTP provider: the fake LLM server of ``agentrio.testing``, on
127.0.0.1, which streams its answers as server-sent events, in OpenAI's wire
format, each text in three pieces. No network, no key.

Run it with ``python examples/stream_tokens.py``.
"""

from __future__ import annotations

import trio

import agentrio
from agentrio import AgentSpec, ModelReply, Provider, ProviderConfig, ToolCallRequest, Usage
from agentrio.events import RunDone, TextDelta, ToolEnded, ToolStarted
from agentrio.testing import FakeRequest, open_fake_llm

FORECAST = {"Oslo": "snow, -3 °C", "Lima": "sun, 24 °C"}


@agentrio.tool
async def weather(city: str) -> str:
    """Today's weather in a city."""
    return FORECAST.get(city, "unknown")


def server_model(request: FakeRequest) -> ModelReply:
    """What the fake server answers: look the weather up, then say it."""
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        return ModelReply(
            tool_calls=(ToolCallRequest("weather", {"city": "Oslo"}, id="w1"),), usage=Usage(20, 8)
        )
    text = (
        f"In Oslo today: {results[0].content}. Wear a warm coat, gloves and a hat, "
        "and mind the ice on the pavements."
    )
    return ModelReply(text=text, usage=Usage(40, 30))


async def main() -> None:
    async with open_fake_llm(server_model) as server:
        # stream=True: the provider asks for streamed answers, and hands on each
        # piece of text as it arrives.
        config = ProviderConfig(
            name="fake", kind="openai", base_url=server.base_url + "/v1", stream=True
        )
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(
                AgentSpec("forecaster", provider.model("fake-model"), tools=[weather])
            )
            pieces = 0
            async with agent.stream("What should I wear in Oslo today?") as stream:
                async for item in stream:
                    match item:
                        case TextDelta(text=text):
                            pieces += 1
                            print(text, end="", flush=True)
                        case ToolStarted(tool=tool):
                            print(f"[{tool}...", end="", flush=True)
                        case ToolEnded(status=status):
                            print(f" {status}]")
                        case RunDone(result=result):
                            print()
                            print(f"done: {result.stop_reason}, {pieces} pieces of text")


if __name__ == "__main__":
    trio.run(main)
