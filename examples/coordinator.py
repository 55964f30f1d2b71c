"""A coordinator fans out 100 subagents under one token budget, which runs out.

The coordinator is an agent with a budget of its own. ``coordinator.map``
spawns one subagent per topic (at most 20 at a time), each drawing from that
budget: a subagent's allowlist is at most its coordinator's, and its spending
is the coordinator's too. Every model call reserves its estimate before it is
made, so when the budget runs out the subagents still working end with
``budget_exhausted`` and those not yet started end at once, without a call;
the budget is never overspent.

The model is the fake LLM server over real HTTP (OpenAI wire format): each
worker fetches its topic with a tool, then answers.

Run it with ``python examples/coordinator.py``.
"""

from __future__ import annotations

from collections import Counter

import trio

import agentrio
from agentrio import ChatMessage, ModelReply, PhaseResult, ToolCallRequest, Usage
from agentrio.testing import FakeRequest, open_fake_llm

N_TOPICS = 100
TOKEN_LIMIT = 6_000


@agentrio.tool
async def fetch(topic: str) -> str:
    """Fetch the material on a topic."""
    await trio.sleep(0.001)  # stands in for a real fetch
    return f"three facts about {topic}"


def _tokens(messages: list[ChatMessage]) -> int:
    return sum(len(m.content) for m in messages) // 4 + 1


def model(request: FakeRequest) -> ModelReply:
    """A worker: fetch the topic, then summarise what came back."""
    usage = Usage(input_tokens=_tokens(request.messages), output_tokens=25)
    topic = [m.content for m in request.messages if m.role == "user"][-1].split()[-1]
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return ModelReply(tool_calls=(ToolCallRequest("fetch", {"topic": topic}),), usage=usage)
    return ModelReply(text=f"summary of {topic}: {results[-1]}", usage=usage)


async def coordinate() -> bool:
    """Fan out, then report; True if the budget held."""
    budget = agentrio.Budget(max_total_tokens=TOKEN_LIMIT)
    async with open_fake_llm(model) as server:
        config = agentrio.ProviderConfig(
            name="fake", kind="openai", base_url=server.base_url + "/v1"
        )
        async with agentrio.Provider(config) as provider, agentrio.open_runtime() as rt:
            llm = provider.model("fake-model")
            limits = agentrio.Limits(max_output_tokens=40, max_iterations=4)
            coordinator = await rt.spawn_agent(
                agentrio.AgentSpec("coordinator", llm, tools=[fetch], limits=limits),
                budget=budget,
            )
            worker = agentrio.AgentSpec(
                "worker", llm, instructions="Research one topic.", tools=[fetch], limits=limits
            )
            topics = [f"Research topic-{i}" for i in range(N_TOPICS)]
            results = await coordinator.map(worker, topics, concurrency=20)

    reasons = Counter(
        r.stop_reason if isinstance(r, PhaseResult) else type(r).__name__ for r in results
    )
    used = budget.usage()
    print("stop reasons: " + ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())))
    print(
        f"budget: {used.total_tokens} of {TOKEN_LIMIT} tokens, {used.requests} requests, "
        f"{used.tool_calls} tool calls"
    )
    held = used.total_tokens <= TOKEN_LIMIT
    stopped = reasons["budget_exhausted"] > 0 and len(results) == N_TOPICS
    print(
        f"coordinator: {len(results)} subagents ended, "
        f"{'the budget stopped the rest' if stopped else 'THE BUDGET STOPPED NONE'}, "
        f"{'budget not exceeded' if held else 'BUDGET EXCEEDED'}"
    )
    return held and stopped


def main() -> int:
    """Run the example; return the process exit code."""
    return 0 if trio.run(coordinate) else 1


if __name__ == "__main__":
    raise SystemExit(main())
