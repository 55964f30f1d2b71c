"""What #26's skills and security provider cost when used, beside the same agents without.

Each run: N agents spawned from one spec, each one phase of 3 model turns and 2 tool
calls (fetch a 4 KB page, then send a short message that copies nothing from it),
then a final answer of about 300 characters. Four specs, in turn, ``--repeats``
rounds: ``plain`` (the floor), ``security`` (the page's tool untrusted, the send
sensitive, the default sanitiser on every reply), ``skills`` (a registry of 20
skills, one activated on the first turn: the phase's tools narrowed), and ``both``.
Each ratio is the feature's median runs/s over plain's in the same process (1.0:
free; 0.8: a fifth slower). The fake model answers at once, so the ratios are of
agentrio's own work alone: a real model call takes 10^3 to 10^4 times longer than
what the features add. The skills' workload has one model turn and one tool call
more than plain's (the activation), about a quarter more work of its own.

Run: python bench/guarded.py [--agents 2000] [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence

# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import trio

import agentrio
from agentrio.testing import FunctionModel, Reply
from agentrio.types import Skill

PAGE = ("Shipping news of the week. " * 160)[:4096]
ANSWER = ("The parcel left the warehouse and will reach the customer soon. " * 5)[:300]


@agentrio.tool
async def fetch(url: str) -> str:
    """Fetch a page."""
    await trio.lowlevel.checkpoint()
    return PAGE


@agentrio.tool
async def send(to: str, body: str) -> str:
    """Send a message."""
    await trio.lowlevel.checkpoint()
    return "sent"


def model(messages: Sequence[agentrio.ChatMessage], tools: Sequence[object]) -> Reply:
    done = sum(m.role == "tool" for m in messages)
    names = {t.name for t in tools}  # type: ignore[attr-defined]
    script = [agentrio.ToolCallRequest("fetch", {"url": "https://news"})]
    if "activate_skill" in names:
        script.insert(0, agentrio.ToolCallRequest("activate_skill", {"name": "skill-0"}))
    script.append(agentrio.ToolCallRequest("send", {"to": "me@home.example.org", "body": "ok"}))
    if done < len(script):
        return Reply(tool_calls=[script[done]])
    return Reply(text=ANSWER)


def specs() -> dict[str, agentrio.AgentSpec]:
    skills = agentrio.SkillRegistry(
        Skill(f"skill-{i}", f"Skill number {i}.", "Do it well.", tools=["fetch", "send"])
        for i in range(20)
    )
    security = agentrio.SecurityProvider(untrusted=["fetch"], sensitive=["send"])
    made = {}
    for name, kw in (
        ("plain", {}),
        ("security", {"security": security}),
        ("skills", {"skills": skills}),
        ("both", {"security": security, "skills": skills}),
    ):
        made[name] = agentrio.AgentSpec(name, FunctionModel(model), tools=[fetch, send], **kw)  # type: ignore[arg-type]
    return made


async def one_round(spec: agentrio.AgentSpec, agents: int) -> float:
    async with agentrio.open_runtime() as rt:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(agents):

                async def run_one(i: int = i) -> None:
                    agent = await rt.spawn_agent(spec, name=f"a{i}")
                    result = await agent.run("news?")
                    assert result.final_text == ANSWER, result

                nursery.start_soon(run_one)
        return agents / (time.perf_counter() - start)


async def bench(agents: int, repeats: int) -> dict[str, object]:
    made = specs()
    runs: dict[str, list[float]] = {name: [] for name in made}
    for _ in range(repeats):
        for name, spec in made.items():
            runs[name].append(await one_round(spec, agents))
    floor = statistics.median(runs["plain"])
    out: dict[str, object] = {"agents": agents, "plain_runs_per_s": round(floor, 1)}
    for name in ("security", "skills", "both"):
        out[f"{name}_ratio"] = round(statistics.median(runs[name]) / floor, 3)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(trio.run(bench, args.agents, args.repeats)))
