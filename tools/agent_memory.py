"""What one live agent holds: bytes (tracemalloc) per agent blocked in its first model call.

N agents of bench/agents.py's spec are spawned and each started on a run whose model
call waits on one event; once every one waits, the bytes traced since before the
spawns, divided by N, are an agent's share (its tasks, mailbox, phase, history...).
``--top K`` also prints the K source lines that allocated most of it.

Run: python tools/agent_memory.py [--agents 2000] [--top 0]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from typing import Any

import trio

import agentrio
from agentrio.testing import FunctionModel, Reply


async def _measure(n: int, top: int) -> None:
    release = trio.Event()
    waiting = 0

    async def model(messages: Any, tools: Any) -> Reply:
        nonlocal waiting
        waiting += 1
        await release.wait()
        return Reply(text="done", usage=agentrio.Usage(1, 1))

    spec = agentrio.AgentSpec(name="mem", model=FunctionModel(model), instructions="Be brief.")
    async with agentrio.open_runtime() as rt, trio.open_nursery() as nursery:
        gc.collect()
        before = tracemalloc.take_snapshot()
        start = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            agent = await rt.spawn_agent(spec, name=f"a{i}")
            nursery.start_soon(agent.run, f"task {i}")
        while waiting < n:
            await trio.sleep(0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        print(f"{held / n / 1024:.2f} KB per live agent ({n} agents)")
        if top:
            after = tracemalloc.take_snapshot()
            for stat in after.compare_to(before, "lineno")[:top]:
                share = f"{stat.size_diff / n:8.1f} B {stat.count_diff / n:5.2f} blocks"
                print(f"  {share}  {stat.traceback}")
        release.set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=2000)
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    tracemalloc.start()
    trio.run(_measure, args.agents, args.top)


if __name__ == "__main__":
    main()
