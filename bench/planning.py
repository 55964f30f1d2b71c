"""Planned and delegated runs beside the same model calls made as plain phases.

  planned    N agents, each one planned run: a planning call, 3 steps (in the
             worker subagent), the final answer: 5 model calls, 2 subagents.
  phases     the floor: N agents, each 5 plain phases (5 model calls).
  delegated  N agents, each one run handed to a delegate (a fresh subagent, 1
             model call).
  phase      its floor: N agents, each 1 plain phase.

The models answer at once (no network): what is measured is what planning and
delegation add (spawning the planner, the worker, the delegate; the prompts;
the events, with no one subscribed). Timing includes spawning the agents.
Run: python bench/planning.py [--agents 500] [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import trio
from _common import main, median_of

import agentrio
from agentrio import AgentSpec, Delegate, Delegation, Planning
from agentrio.testing import FunctionModel, Reply
from agentrio.types import ToolSchema

PLAN = json.dumps({"tasks": [{"description": f"task {i}"} for i in range(3)]})
CALLS = {"planned": 5, "phases": 5, "delegated": 1, "phase": 1}
COUNT = [0]


def _answer(messages: Sequence[agentrio.ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
    COUNT[0] += 1
    last = messages[-1].content
    return Reply(text=PLAN if last.startswith("Request:") else "done")


MODEL = FunctionModel(_answer)
CHILD = AgentSpec("helper", MODEL)
SPECS = {
    "planned": AgentSpec("a", MODEL, planning=Planning(mode="on")),
    "phases": AgentSpec("a", MODEL),
    "delegated": AgentSpec(
        "a", MODEL, delegation=Delegation([Delegate(CHILD, "Helps.", keywords=["task"])])
    ),
    "phase": AgentSpec("a", MODEL),
}


async def _agents(n: int, impl: str) -> float:
    spec = SPECS[impl]
    phases = 5 if impl == "phases" else 1
    t0 = time.perf_counter()
    async with agentrio.open_runtime() as rt:

        async def one(agent: agentrio.AgentRef[str]) -> None:
            for _ in range(phases):
                result = await agent.run("do the task")
                assert result.stop_reason == "done", result

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, await rt.spawn_agent(spec, name=f"a{i}"))
    return time.perf_counter() - t0


def runs(n: int, impl: str) -> dict[str, Any]:
    trio.run(_agents, 10, impl)  # warm-up
    COUNT[0] = 0
    dt = trio.run(_agents, n, impl)
    assert COUNT[0] == n * CALLS[impl], COUNT
    return {"runs_per_s": round(n / dt, 1)}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    res = {}
    for impl in ("phases", "planned", "phase", "delegated"):
        res[impl] = median_of(script, "runs", {"n": args.agents, "impl": impl}, args.repeats, 600)
        print(f"[planning] {impl}: {res[impl]}", file=sys.stderr, flush=True)
    planned = res["planned"]["runs_per_s"] / res["phases"]["runs_per_s"]
    delegated = res["delegated"]["runs_per_s"] / res["phase"]["runs_per_s"]
    return {
        "bench": "planning",
        "agents": args.agents,
        "repeats": args.repeats,
        "planned_runs_per_s": res["planned"]["runs_per_s"],
        "five_phases_runs_per_s": res["phases"]["runs_per_s"],
        "planned_ratio": round(planned, 3),
        "delegated_runs_per_s": res["delegated"]["runs_per_s"],
        "one_phase_runs_per_s": res["phase"]["runs_per_s"],
        "delegated_ratio": round(delegated, 3),
        "planned_peak_rss_mb": res["planned"]["peak_rss_mb"],
        "five_phases_peak_rss_mb": res["phases"]["peak_rss_mb"],
    }


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=500)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"runs": runs}, report, _args)
