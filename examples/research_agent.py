"""A research agent: one context label per subtopic, then a synthesis in the primary context.

The agent studies each subtopic in a conversation of its own (``context_label``):
there it searches, reads what came back and writes a finding. Labels never see
each other's history, so one subtopic's search results do not crowd out the
next one's. Then, in the primary context (no label), it is handed the findings
and writes the synthesis.

The model is the fake LLM server, reached over real HTTP with the OpenAI wire
format; its handler plays the model and checks, on every request, that no
conversation mixes two subtopics.

Run it with ``python examples/research_agent.py``.
"""

from __future__ import annotations

import trio

import agentrio
from agentrio import ChatMessage, ModelReply, ToolCallRequest, Usage
from agentrio.testing import FakeRequest, open_fake_llm

SUBTOPICS = ["supervision trees", "token budgets", "structured concurrency"]

NOTES = {
    "supervision trees": "a supervisor restarts a crashed child within a restart intensity",
    "token budgets": "reserve before each model call, settle with the reported usage",
    "structured concurrency": "every task lives in a nursery; nothing outlives its scope",
}


@agentrio.tool
async def search(query: str) -> str:
    """Search the notes for a subtopic."""
    await trio.sleep(0)  # stands in for a real search
    return NOTES.get(query, "nothing found")


class Researcher:
    """The fake server's handler: plays the model, and watches for mixed contexts."""

    def __init__(self) -> None:
        self.requests = 0
        self.leaks = 0

    def __call__(self, request: FakeRequest) -> ModelReply:
        self.requests += 1
        users = [m.content for m in request.messages if m.role == "user"]
        studied = {t for t in SUBTOPICS for u in users if u == f"Study {t}"}
        if len(studied) > 1:
            self.leaks += 1  # a conversation that saw two subtopics
        usage = Usage(input_tokens=_tokens(request.messages), output_tokens=12)
        last = users[-1]
        if last.startswith("Study "):
            topic = last.removeprefix("Study ")
            results = [m.content for m in request.messages if m.role == "tool"]
            if not results:
                return ModelReply(
                    tool_calls=(ToolCallRequest("search", {"query": topic}),), usage=usage
                )
            return ModelReply(text=f"{topic}: {results[-1]}", usage=usage)
        findings = [line for line in last.splitlines() if line.startswith("- ")]
        return ModelReply(
            text=f"Synthesis of {len(findings)} findings: agents are supervised, "
            "budgeted and structured.",
            usage=usage,
        )


def _tokens(messages: list[ChatMessage]) -> int:
    return sum(len(m.content) for m in messages) // 4 + 1


async def research() -> None:
    """Study every subtopic in its own context, then synthesise in the primary one."""
    handler = Researcher()
    async with open_fake_llm(handler) as server:
        config = agentrio.ProviderConfig(
            name="fake", kind="openai", base_url=server.base_url + "/v1"
        )
        async with agentrio.Provider(config) as provider, agentrio.open_runtime() as rt:
            spec = agentrio.AgentSpec(
                "researcher",
                provider.model("fake-model"),
                instructions="You research one subtopic at a time, then synthesise.",
                tools=[search],
                limits=agentrio.Limits(max_iterations=4),
            )
            agent = await rt.spawn_agent(spec)
            findings = []
            for topic in SUBTOPICS:
                result = await agent.run(f"Study {topic}", context_label=topic)
                print(f"[{topic}] {result.stop_reason}: {result.final_text}")
                findings.append(result.final_text)
            brief = "Synthesise these findings:\n" + "\n".join(f"- {f}" for f in findings)
            synthesis = await agent.run(brief)  # the primary context
            print(synthesis.final_text)
            usage = agent.usage()
            # Each label's history is held by a context actor of its own.
            contexts = [c for c in rt.children() if c.path.startswith("researcher.context")]
    print(f"model calls: {handler.requests}, tokens: {usage.total_tokens}")
    print(f"synthesis: {len(SUBTOPICS)} subtopics, {len(contexts)} contexts, {handler.leaks} leaks")


def main() -> int:
    """Run the example; return the process exit code."""
    trio.run(research)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
