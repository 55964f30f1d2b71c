"""bench/agents.py's workload with a checkpoint store on, beside the same without one.

N agents at once (default 10,000), each one phase of 3 model turns and 2 tool
calls (bench/agents.py's ``SPEC``: a FunctionModel and the async ``lookup``
tool, each awaiting one checkpoint), timing from the first spawn to the last
agent stopped. ``on`` runs them on ``open_runtime(store=<a temp folder>,
specs={"bench": ...})`` (a ``DirectoryStore``, the default durability
``"batch"``): each phase records its start, its 3 model turns, its 2 tool
turns, the start of each call to ``lookup`` (a tool not declared idempotent:
synced before it runs) and its end, all fsync-ed before the runtime closes.
``off`` is the same with no store. Off and on alternate, each in a fresh
process; ``ratio`` is on's runs/s over off's (goal >= 0.7), ``idempotent_ratio``
the same with ``lookup`` declared idempotent (no sync before its calls).

Run: python bench/checkpoint.py --agents 10000 [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import agents as workload
import attrs
import trio
from _common import main, run_child

import agentrio
from agentrio.store import DirectoryStore

IDEMPOTENT_LOOKUP = agentrio.Tool(workload.lookup.fn, name="lookup", idempotent=True)


async def _run(
    n: int, folder: str | None, spec: agentrio.AgentSpec[str]
) -> tuple[list[str], float]:
    answers = [""] * n
    store = None if folder is None else DirectoryStore(folder)
    specs = None if store is None else {"bench": lambda: spec}
    async with agentrio.open_runtime(store=store, specs=specs) as rt:
        t0 = time.perf_counter()

        async def one(i: int, agent: agentrio.AgentRef) -> None:
            result = await agent.run(f"task {i}")
            answers[i] = result.final_text if result.stop_reason == "done" else result.stop_reason

        async with trio.open_nursery() as nursery:
            for i in range(n):
                agent = await rt.spawn_agent(spec, name=f"a{i}")
                nursery.start_soon(one, i, agent)
    # like bench/agents.py, the timing includes stopping every agent (and, on,
    # the last records' append and fsync)
    return answers, time.perf_counter() - t0


def runs(n: int, store: bool, idempotent: bool = False) -> dict[str, Any]:
    spec = workload.SPEC
    if idempotent:
        spec = attrs.evolve(spec, tools=[IDEMPOTENT_LOOKUP])
    folder = tempfile.mkdtemp(prefix="agentrio-bench-") if store else None
    try:
        trio.run(_run, 10, None if folder is None else os.path.join(folder, "warm"), spec)
        workload.COUNTS["model"] = workload.COUNTS["tool"] = 0
        answers, dt = trio.run(
            _run, n, None if folder is None else os.path.join(folder, "run"), spec
        )
        size = 0
        if folder is not None:
            for root, _, files in os.walk(os.path.join(folder, "run")):
                size += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    bad = [a for a in answers if not a.startswith("done")]
    assert not bad, bad[:3]
    expected = {"model": n * workload.MODEL_TURNS_PER_RUN, "tool": n * workload.TOOL_CALLS_PER_RUN}
    assert expected == workload.COUNTS, workload.COUNTS
    return {"runs_per_s": round(n / dt, 1), "elapsed_s": round(dt, 4), "store_bytes": size}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    n = args.agents
    out: dict[str, Any] = {"bench": "checkpoint", "agents": n, "repeats": args.repeats}
    figures: dict[str, list[dict[str, Any]]] = {"off": [], "on": [], "on_idempotent": []}
    for _ in range(args.repeats):  # alternating, each in a fresh process
        for name, params in (
            ("off", {"n": n, "store": False}),
            ("on", {"n": n, "store": True}),
            ("on_idempotent", {"n": n, "store": True, "idempotent": True}),
        ):
            figures[name].append(run_child(script, "runs", params, args.timeout))
            print(f"[checkpoint] {name}: {figures[name][-1]}", file=sys.stderr, flush=True)
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        for name, rs in figures.items()
    }
    out["runs_per_s_off"] = med["off"]["runs_per_s"]
    out["runs_per_s_on"] = med["on"]["runs_per_s"]
    out["runs_per_s_on_idempotent"] = med["on_idempotent"]["runs_per_s"]
    out["ratio"] = round(med["on"]["runs_per_s"] / med["off"]["runs_per_s"], 3)
    out["idempotent_ratio"] = round(
        med["on_idempotent"]["runs_per_s"] / med["off"]["runs_per_s"], 3
    )
    out["store_bytes_per_run"] = round(med["on"]["store_bytes"] / n, 1)
    out["peak_rss_mb_off"] = med["off"]["peak_rss_mb"]
    out["peak_rss_mb_on"] = med["on"]["peak_rss_mb"]
    out["goals_met"] = {"ratio>=0.7": out["ratio"] >= 0.7}
    return out


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=10_000)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"runs": runs}, report, _args)
