"""Cancelling a runtime of N agents mid-run, beside a raw-Trio tree of the same shape.

Both sides hold N actor-shaped tasks, each parked mid-run in a model call
that never returns, and N caller tasks, each waiting for its actor's reply;
a cancel scope around everything is then cancelled. The time measured is
from ``cancel()`` until the scope's block has been left (for agentrio: the
``open_runtime()`` block, its tasks and its bookkeeping all done).

  floor     N tasks, each with a memory-channel inbox: it takes one request
            and runs the agent loop of bench/agents.py, whose fake model call
            awaits ``trio.sleep_forever()``. They run in the nursery of a
            supervisor task, in a nursery around the block, as a runtime's
            actors do. N callers, in a nursery in the block, each send one
            request and wait on their own reply channel.
  agentrio  N agents spawned from one AgentSpec whose FunctionModel awaits
            ``trio.sleep_forever()``, each asked for one phase by a caller
            task in a nursery inside the ``open_runtime()`` block.

Each side runs in fresh processes, alternately, with CPython's default GC;
``ratio`` is agentrio's median time over the floor's (``cpu_ratio`` the same
in CPU seconds of the process, steadier on a shared machine). Every run checks that
all N model calls were reached before the cancel and that every caller saw
the cancel.

Run: python bench/teardown.py [--agents 10000] [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import msgspec
import trio
import trio.testing
from _common import main, run_child

import agentrio
from agentrio.testing import FunctionModel, Reply

GOAL = 1.3
PARKED = [0]
ENDED = [0]


# -- the floor ------------------------------------------------------------------------


class Request(msgspec.Struct):
    prompt: str
    reply_to: Any


class RawMessage(msgspec.Struct):
    role: str
    content: str = ""


async def _fake_model(history: list[RawMessage]) -> RawMessage:
    PARKED[0] += 1
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def _agent_loop(prompt: str) -> str:
    history = [RawMessage("system", "You are a benchmark agent."), RawMessage("user", prompt)]
    resp = await _fake_model(history)
    return resp.content


async def _actor(inbox: trio.MemoryReceiveChannel[Request]) -> None:
    # (No ``async with inbox``: its aclose() is one more checkpoint, and so
    # one more Cancelled, per task on the way out; the floor is the least a
    # raw tree pays.)
    async for req in inbox:
        await req.reply_to.send(await _agent_loop(req.prompt))


async def _caller(inbox: trio.MemorySendChannel[Request], i: int) -> None:
    reply_send, reply_recv = trio.open_memory_channel[str](1)
    try:
        await inbox.send(Request(f"task {i}", reply_send))
        await reply_recv.receive()
    finally:
        ENDED[0] += 1


async def _supervisor(
    inboxes: list[trio.MemoryReceiveChannel[Request]], task_status: trio.TaskStatus[None]
) -> None:
    async with trio.open_nursery() as nursery:
        for inbox in inboxes:
            nursery.start_soon(_actor, inbox)
        task_status.started()


async def _floor(n: int) -> tuple[float, float]:
    # The shape of a runtime: the actors in the nursery of a supervisor task,
    # itself in a nursery around the block, whose body runs the callers.
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as runtime:
            channels = [trio.open_memory_channel[Request](0) for _ in range(n)]
            await runtime.start(_supervisor, [recv for _, recv in channels])
            async with trio.open_nursery() as callers:
                for i, (send, _) in enumerate(channels):
                    callers.start_soon(_caller, send, i)
                del channels
                await trio.testing.wait_all_tasks_blocked()
                assert PARKED[0] == n, PARKED
                t0 = time.perf_counter(), time.process_time()
                scope.cancel()
    return time.perf_counter() - t0[0], time.process_time() - t0[1]


# -- agentrio -------------------------------------------------------------------------


async def _model(messages: Any, tools: Any) -> Reply:
    PARKED[0] += 1
    await trio.sleep_forever()
    raise AssertionError("unreachable")


SPEC = agentrio.AgentSpec(
    name="bench", model=FunctionModel(_model), instructions="You are a benchmark agent."
)


async def _run(agent: agentrio.AgentRef, i: int) -> None:
    try:
        await agent.run(f"task {i}")
    finally:
        ENDED[0] += 1


async def _agentrio(n: int) -> tuple[float, float]:
    with trio.CancelScope() as scope:
        async with agentrio.open_runtime() as rt, trio.open_nursery() as callers:
            for i in range(n):
                callers.start_soon(_run, await rt.spawn_agent(SPEC, name=f"a{i}"), i)
            await trio.testing.wait_all_tasks_blocked()
            assert PARKED[0] == n, PARKED
            t0 = time.perf_counter(), time.process_time()
            scope.cancel()
    return time.perf_counter() - t0[0], time.process_time() - t0[1]


def cancel(n: int, impl: str) -> dict[str, Any]:
    driver = _floor if impl == "floor" else _agentrio
    trio.run(driver, 10)  # warm-up
    PARKED[0] = ENDED[0] = 0
    wall, cpu = trio.run(driver, n)
    assert ENDED[0] == n, ENDED
    return {"cancel_s": round(wall, 4), "cancel_cpu_s": round(cpu, 4)}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    n = args.agents
    runs: dict[str, list[dict[str, Any]]] = {"floor": [], "agentrio": []}
    for _ in range(args.repeats):  # alternately, so that both see the same machine
        for impl, done in runs.items():
            done.append(run_child(script, "cancel", {"n": n, "impl": impl}, args.timeout))
    print(f"[teardown] {runs}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"bench": "teardown", "agents": n, "repeats": args.repeats}
    for key in ("cancel_s", "cancel_cpu_s"):
        out[key] = round(statistics.median(r[key] for r in runs["agentrio"]), 4)
        out[f"floor_{key}"] = round(statistics.median(r[key] for r in runs["floor"]), 4)
    out["ratio"] = round(out["cancel_s"] / out["floor_cancel_s"], 3)
    # The same in CPU seconds of the process, which a shared machine barely moves.
    out["cpu_ratio"] = round(out["cancel_cpu_s"] / out["floor_cancel_cpu_s"], 3)
    out["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in runs["agentrio"])
    out["floor_peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in runs["floor"])
    out["goal"] = f"ratio<={GOAL} at 10,000 agents"
    out["goals_met"] = {f"ratio<={GOAL}": n != 10_000 or out["ratio"] <= GOAL}
    return out


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=10_000)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"cancel": cancel}, report, _args)
