"""A swarm of durable agents on the fake LLM server, run as a process that the test
kills (tests/agents/test_checkpoint.py, the SIGKILL test).

    python durable_swarm.py STORE EFFECTS AGENTS SEED LIFE

Each agent ``w<i>`` runs one phase ``p<i>``: the model (the fake server, over
HTTP, in this process) has it call ``pay`` (not idempotent), then ``fetch``
(idempotent), then answer. Each tool appends a line to EFFECTS when it runs
(its side effect), then takes a little while. Life 1 runs the swarm until
it is killed. Life 2 opens the same store: it waits for each resumed phase,
takes the result of each phase that ended in the store, runs again each
phase the store never saw begin, and prints one JSON line: every phase's
result, the budget's totals when it opened and at the end, and what its own
server answered.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Sequence

import trio

import agentrio
from agentrio import AgentSpec, ChatMessage, Limits, ModelReply, ToolCallRequest, Usage
from agentrio.errors import UnknownName
from agentrio.providers.provider import Provider, ProviderConfig
from agentrio.store import DirectoryStore
from agentrio.testing import FakeRequest, open_fake_llm

EFFECTS = -1  # the side-effect file's descriptor (O_APPEND: each line whole)
RNG = random.Random(0)
MODEL: object = None
SERVED = {"replies": 0, "input_tokens": 0, "output_tokens": 0}


def effect(line: str) -> None:
    os.write(EFFECTS, (line + "\n").encode())


@agentrio.tool
async def pay(agent: str) -> str:
    """Pay for the agent's job (not idempotent)."""
    effect(f"pay {agent}")
    await trio.sleep(RNG.uniform(0.05, 0.4))
    return f"paid for {agent}"


@agentrio.tool(idempotent=True)
async def fetch(agent: str) -> str:
    """Fetch the agent's data (idempotent)."""
    effect(f"fetch {agent}")
    await trio.sleep(RNG.uniform(0.05, 0.4))
    return f"data of {agent}"


def reply(request: FakeRequest) -> ModelReply:
    messages: Sequence[ChatMessage] = request.messages
    agent = messages[1].content.split()[-1]
    results = sum(1 for m in messages if m.role == "tool")
    usage = Usage(len(messages) * 10, 5 + results)
    SERVED["replies"] += 1
    SERVED["input_tokens"] += usage.input_tokens
    SERVED["output_tokens"] += usage.output_tokens
    if results == 0:
        return ModelReply(tool_calls=(ToolCallRequest("pay", {"agent": agent}),), usage=usage)
    if results == 1:
        return ModelReply(tool_calls=(ToolCallRequest("fetch", {"agent": agent}),), usage=usage)
    return ModelReply(text=f"done {agent}", usage=usage)


def make_spec() -> AgentSpec[str]:
    return AgentSpec(
        name="swarm",
        model=MODEL,  # type: ignore[arg-type]
        instructions="Pay, fetch, answer.",
        tools=[pay, fetch],
        limits=Limits(max_iterations=5, tool_timeout=60),
    )


async def main(store: str, agents: int, life: int) -> None:
    global MODEL
    async with open_fake_llm(reply, keep_requests=False) as server:
        config = ProviderConfig(
            name="fake", kind="openai", base_url=server.base_url + "/v1", max_concurrent=16
        )
        async with Provider(config) as provider:
            MODEL = provider.model("m")
            async with agentrio.open_runtime(
                store=DirectoryStore(store), specs={"swarm": make_spec}
            ) as rt:
                if life == 1:
                    await _first(rt, agents)
                else:
                    await _second(rt, agents)


async def _first(rt: agentrio.Runtime, agents: int) -> None:
    async with trio.open_nursery() as nursery:
        for i in range(agents):
            agent = await rt.spawn_agent(make_spec(), name=f"w{i}")
            nursery.start_soon(_run, agent, i)
        print("READY", flush=True)


async def _run(agent: agentrio.AgentRef[str], i: int) -> agentrio.PhaseResult[str]:
    return await agent.run(f"job for w{i}", phase_id=f"p{i}")


def _shown(result: agentrio.PhaseResult[str], how: str) -> dict[str, object]:
    return {
        "how": how,
        "stop_reason": result.stop_reason,
        "final_text": result.final_text,
        "calls": [[c.name, c.status, c.content] for c in result.tool_calls],
    }


async def _second(rt: agentrio.Runtime, agents: int) -> None:
    opened = rt.usage()
    results: dict[str, dict[str, object]] = {}

    async def one(i: int) -> None:
        pid = f"p{i}"
        if pid in rt.resumed:
            results[pid] = _shown(await rt.resumed_result(pid), "resumed")
            return
        try:
            results[pid] = _shown(await rt.resumed_result(pid), "stored")
        except UnknownName:  # never begun, as far as the store knows: run it now
            agent = await rt.spawn_agent(make_spec(), name=f"w{i}")
            results[pid] = _shown(await _run(agent, i), "fresh")

    async with trio.open_nursery() as nursery:
        for i in range(agents):
            nursery.start_soon(one, i)
    end = rt.usage()
    print(
        json.dumps(
            {
                "results": results,
                "resumed": list(rt.resumed),
                "opened": [opened.input_tokens, opened.output_tokens, opened.requests],
                "end": [end.input_tokens, end.output_tokens, end.requests],
                "served": SERVED,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    store_path, effects_path, n, seed, life = sys.argv[1:6]
    RNG.seed(int(seed) * 10 + int(life))
    EFFECTS = os.open(effects_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    trio.run(main, store_path, int(n), int(life))
