"""The demo: many agents at once on the built-in scripted model.

Each agent runs one phase of three model turns: it looks a topic up, counts
the words of what it found, then answers. The tools are async and the model
is scripted, so the demo measures the runtime itself.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AsyncExitStack

import attrs
import trio

from .actors.agent import AgentRef, AgentSpec
from .messages import ChatMessage, ModelReply, PhaseResult, ToolCallRequest, Usage
from .providers.base import Model
from .providers.provider import Kind, Provider, ProviderConfig
from .providers.redact import redact_url
from .supervisors.budget import Budget, UsageTotals
from .supervisors.limits import Limits
from .supervisors.runtime import open_runtime
from .testing.fake_server import open_fake_llm
from .testing.models import FunctionModel
from .tools.tool import ToolSchema, tool

__all__ = ["DemoReport", "demo_spec", "run_demo"]


@tool
async def lookup(key: str) -> str:
    """Look a key up in the demo's store."""
    await trio.lowlevel.checkpoint()
    return f"the value of {key} is {len(key) * 7}"


@tool
async def word_count(text: str) -> int:
    """Count the words of a text."""
    await trio.lowlevel.checkpoint()
    return len(text.split())


def _script(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> ModelReply:
    """The scripted model: decides by what the conversation holds so far."""
    results = [m for m in messages if m.role == "tool"]
    prompt = len(messages) * 12
    if not results:
        topic = messages[-1].content.rsplit(" ", 1)[-1]
        call = ToolCallRequest("lookup", {"key": topic})
        return ModelReply(tool_calls=(call,), usage=Usage(prompt, 12))
    if len(results) == 1:
        call = ToolCallRequest("word_count", {"text": results[0].content})
        return ModelReply(tool_calls=(call,), usage=Usage(prompt, 14))
    answer = f"{results[0].content} ({results[1].content} words)"
    return ModelReply(text=answer, usage=Usage(prompt, 20))


def demo_spec(model: Model | None = None) -> AgentSpec:
    """The spec every demo agent is spawned from (default model: the script, in process)."""
    return AgentSpec(
        name="demo",
        model=model if model is not None else FunctionModel(_script),
        instructions="Look the topic up, count the words of what you found, then answer.",
        tools=[lookup, word_count],
        limits=Limits(max_iterations=5),
    )


@attrs.frozen
class DemoReport:
    """What a demo run did."""

    agents: int
    stop_reasons: dict[str, int]
    usage: UsageTotals
    wall_s: float
    model: str = "scripted (in process)"

    def table(self) -> str:
        """The report as the lines the CLI prints."""
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.stop_reasons.items()))
        u = self.usage
        rows = [
            ("model", self.model),
            ("agents", f"{self.agents}"),
            ("runs", f"{sum(self.stop_reasons.values())}"),
            ("stop reasons", reasons),
            ("model calls", f"{u.requests}"),
            ("tool calls", f"{u.tool_calls}"),
            ("tokens", f"input={u.input_tokens} output={u.output_tokens} total={u.total_tokens}"),
            ("wall time", f"{self.wall_s:.3f} s"),
            ("runs/s", f"{self.agents / self.wall_s:,.0f}" if self.wall_s else "-"),
        ]
        return "\n".join(f"  {name:<13} {value}" for name, value in rows)


async def run_demo(
    agents: int,
    *,
    max_total_tokens: int | None = None,
    base_url: str | None = None,
    model: str = "demo",
    kind: Kind = "openai",
    api_key_env: str | None = None,
    over_http: bool = True,
) -> DemoReport:
    """Spawn *agents* agents, run one phase on each at once, and report.

    By default the model is the built-in script served by the fake LLM server
    on 127.0.0.1, so every model call is a real HTTP request through a
    :class:`~agentrio.Provider`. With *base_url* the same swarm talks to a real
    server (OpenAI-compatible by default: OpenAI, vLLM, LM Studio, Ollama's
    ``/v1``). With ``over_http=False`` the script runs in process.
    """
    if base_url is not None:
        config = ProviderConfig(name="demo", kind=kind, base_url=base_url, api_key_env=api_key_env)
        where = f"{model} at {redact_url(base_url)}"
        return await _swarm(agents, max_total_tokens, config, model, where)
    if not over_http:
        return await _swarm(agents, max_total_tokens, None, model, "scripted (in process)")
    # (keep_requests=False: 30,000 requests at 10,000 agents, none of them read again)
    async with open_fake_llm(keep_requests=False) as server:
        # A small pool: the local server is CPU-bound in this same process (2 to
        # 64 measured alike here, 8 the best of them; a remote server wants more).
        config = ProviderConfig(
            name="demo", kind="openai", base_url=server.base_url + "/v1", max_concurrent=8
        )
        where = f"scripted, served over HTTP at {server.base_url}"
        return await _swarm(agents, max_total_tokens, config, model, where)


async def _swarm(
    agents: int,
    max_total_tokens: int | None,
    config: ProviderConfig | None,
    model_name: str,
    where: str,
) -> DemoReport:
    results: list[PhaseResult | None] = [None] * agents
    budget = Budget(max_total_tokens=max_total_tokens)
    async with AsyncExitStack() as stack:
        model: Model | None = None
        if config is not None:
            provider = await stack.enter_async_context(Provider(config))
            model = provider.model(model_name)
        spec = demo_spec(model)
        t0 = time.perf_counter()
        async with open_runtime(budget=budget) as rt:

            async def one(i: int, agent: AgentRef) -> None:
                results[i] = await agent.run(f"Tell me about topic-{i}")

            async with trio.open_nursery() as nursery:
                for i in range(agents):
                    agent = await rt.spawn_agent(spec, name=f"agent-{i}")
                    nursery.start_soon(one, i, agent)
            usage = rt.usage()
        wall = time.perf_counter() - t0
    reasons = Counter(r.stop_reason if r is not None else "lost" for r in results)
    return DemoReport(agents, dict(reasons), usage, wall, where)
