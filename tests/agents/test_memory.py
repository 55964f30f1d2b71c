"""What an agent in flight holds: a bound on the bytes, so that a new object per live
agent shows (bench/agents.py's 10,000-agent peak is what these bytes add up to)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import trio

import agentrio
from agentrio.testing import FunctionModel, Reply

AGENTS = 300


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"value of {key}"


async def _bytes_per_agent_in_third_call() -> float:
    release = trio.Event()
    waiting = 0

    async def model(messages: Any, tools: Any) -> Reply:
        nonlocal waiting
        n = sum(1 for m in messages if m.role == "tool")
        await trio.lowlevel.checkpoint()
        if n < 2:
            call = agentrio.ToolCallRequest("lookup", {"key": f"k{n}"}, id=f"call_{n}")
            return Reply(tool_calls=(call,), usage=agentrio.Usage(40, 8))
        waiting += 1
        await release.wait()
        return Reply(text="done", usage=agentrio.Usage(60, 6))

    spec = agentrio.AgentSpec(
        name="mem", model=FunctionModel(model), tools=[lookup], instructions="Be brief."
    )
    async with agentrio.open_runtime() as rt, trio.open_nursery() as nursery:
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        for i in range(AGENTS):
            agent = await rt.spawn_agent(spec, name=f"a{i}")
            nursery.start_soon(agent.run, f"task {i}")
        while waiting < AGENTS:
            await trio.sleep(0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        release.set()
    return held / AGENTS


def test_an_agent_in_its_third_model_call_holds_under_9_3_kb() -> None:
    # 300 agents: 10.9 KB an agent before #25's cuts (the caller's run() frame,
    # the turn's 24 locals, the ask's own frame), 10.2 KB after; 9.4 KB once the
    # phase's turns, its deadline and its model call are awaited in the phase's
    # one frame (no _loop, no _turn frame), an actor's task sets no context
    # variable, and the phase's times are an array of doubles; 9.18 KB once the
    # stall watch keeps no key (~65 bytes) per call while the calls are few, nor
    # a tuple for the last result (9.37 KB before).
    tracemalloc.start()
    try:
        held = trio.run(_bytes_per_agent_in_third_call)
    finally:
        tracemalloc.stop()
    assert held < 9_300, f"{held:.0f} bytes an agent"


async def _bytes_per_agent_in_second_tool_call() -> float:
    release = trio.Event()
    waiting = 0

    @agentrio.tool
    async def slow_lookup(key: str) -> str:
        """Look a key up; the second lookup waits."""
        nonlocal waiting
        if key == "k1":
            waiting += 1
            await release.wait()
        await trio.lowlevel.checkpoint()
        return f"value of {key}"

    async def model(messages: Any, tools: Any) -> Reply:
        n = sum(1 for m in messages if m.role == "tool")
        await trio.lowlevel.checkpoint()
        if n < 2:
            call = agentrio.ToolCallRequest("slow_lookup", {"key": f"k{n}"}, id=f"call_{n}")
            return Reply(tool_calls=(call,), usage=agentrio.Usage(40, 8))
        return Reply(text="done", usage=agentrio.Usage(60, 6))

    spec = agentrio.AgentSpec(
        name="mem", model=FunctionModel(model), tools=[slow_lookup], instructions="Be brief."
    )
    async with agentrio.open_runtime() as rt, trio.open_nursery() as nursery:
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        for i in range(AGENTS):
            agent = await rt.spawn_agent(spec, name=f"a{i}")
            nursery.start_soon(agent.run, f"task {i}")
        while waiting < AGENTS:
            await trio.sleep(0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        release.set()
    return held / AGENTS


def test_an_agent_in_its_second_tool_call_holds_under_9_78_kb() -> None:
    # 300 agents: 10.5 KB an agent before #25's last cuts (the phase's _run and
    # _loop frames and the tool turn's, with 22 locals, waiting on the call),
    # 9.7 KB after (the batch made in a coroutine of its own, _tool_batch, and a
    # lone call awaited in the phase's own frame; the model call's coroutine not
    # kept once it has returned); 9.72 KB with no stall-watch key of the first
    # call, nor a tuple of its result (9.84 KB before, measured as this test runs).
    tracemalloc.start()
    try:
        held = trio.run(_bytes_per_agent_in_second_tool_call)
    finally:
        tracemalloc.stop()
    assert held < 9_780, f"{held:.0f} bytes an agent"
