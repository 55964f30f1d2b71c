"""Fan-out through ``map`` beside the same agents spawned flat.

Both sides run N agents on the 3-turn workload of bench/agents.py (2 tool
calls then a final answer, one checkpoint per model and tool call):

  map   a coordinator agent calls ``coordinator.map(spec, inputs,
        concurrency=N)``: N subagents of it, one phase each, results in
        input order, each subagent stopped after its phase.
  flat  N agents spawned directly under the runtime, one phase each, run
        from N tasks.

Timing includes spawning and stopping. Run: python bench/fanout.py
[--agents 1000] [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import trio
from _common import main, median_of
from agents import COUNTS, MODEL_TURNS_PER_RUN, SPEC, TOOL_CALLS_PER_RUN

import agentrio
from agentrio.testing import ScriptedModel


async def _flat(n: int) -> float:
    t0 = time.perf_counter()
    results: list[agentrio.PhaseResult | None] = [None] * n
    async with agentrio.open_runtime() as rt:

        async def one(i: int, agent: agentrio.AgentRef) -> None:
            results[i] = await agent.run(f"task {i}")
            await agent.stop()

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i, await rt.spawn_agent(SPEC, name=f"a{i}"))
    dt = time.perf_counter() - t0
    assert all(r is not None and r.stop_reason == "done" for r in results)
    return dt


async def _map(n: int) -> float:
    t0 = time.perf_counter()
    async with agentrio.open_runtime() as rt:
        coordinator = await rt.spawn_agent(
            agentrio.AgentSpec("coordinator", ScriptedModel([]), tools=SPEC.tools)
        )
        results = await coordinator.map(SPEC, [f"task {i}" for i in range(n)], concurrency=n)
    dt = time.perf_counter() - t0
    assert len(results) == n
    assert all(isinstance(r, agentrio.PhaseResult) and r.stop_reason == "done" for r in results)
    return dt


def runs(n: int, impl: str) -> dict[str, Any]:
    driver = _flat if impl == "flat" else _map
    trio.run(driver, 10)  # warm-up
    COUNTS["model"] = COUNTS["tool"] = 0
    dt = trio.run(driver, n)
    assert {"model": n * MODEL_TURNS_PER_RUN, "tool": n * TOOL_CALLS_PER_RUN} == COUNTS, COUNTS
    return {"runs_per_s": round(n / dt, 1)}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    res = {}
    for impl in ("flat", "map"):
        params = {"n": args.agents, "impl": impl}
        res[impl] = median_of(script, "runs", params, args.repeats, args.timeout)
        print(f"[fanout] {impl}: {res[impl]}", file=sys.stderr, flush=True)
    ours, flat = res["map"]["runs_per_s"], res["flat"]["runs_per_s"]
    return {
        "bench": "fanout",
        "agents": args.agents,
        "repeats": args.repeats,
        "map_runs_per_s": ours,
        "flat_runs_per_s": flat,
        "ratio": round(ours / flat, 3),
        "map_peak_rss_mb": res["map"]["peak_rss_mb"],
        "flat_peak_rss_mb": res["flat"]["peak_rss_mb"],
        "goals_met": {"ratio>=0.8": ours / flat >= 0.8},
    }


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=1000)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"runs": runs}, report, _args)
