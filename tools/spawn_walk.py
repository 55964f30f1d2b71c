"""The modules a spec's walk from ``Runtime.spawn_agent`` to its first model call enters.

Traces the calls (``sys.setprofile``) of one agent spawned and run on a model that
stops the trace at its first call, and counts, for each agentrio module, how many
times code of another module called into it (calls within a module, and returns,
are not counted; a coroutine resumed by trio is not a call).

Run: python tools/spawn_walk.py
"""

from __future__ import annotations

import sys
from collections import Counter
from types import FrameType
from typing import Any

import trio

import agentrio
from agentrio.testing import FunctionModel, Reply

_entered: Counter[str] = Counter()


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if isinstance(name, str) and name.startswith("agentrio") else None


def _profile(frame: FrameType, event: str, arg: object) -> None:
    if event != "call":
        return
    module = _module(frame)
    caller = frame.f_back
    if module is not None and (caller is None or _module(caller) != module):
        _entered[module] += 1


async def _walk() -> None:
    async def model(messages: Any, tools: Any) -> Reply:
        sys.setprofile(None)
        return Reply(text="done")

    spec = agentrio.AgentSpec(name="walk", model=FunctionModel(model), instructions="Hi.")
    async with agentrio.open_runtime() as rt:
        sys.setprofile(_profile)
        agent = await rt.spawn_agent(spec)
        await agent.run("go")


def main() -> None:
    trio.run(_walk)
    for module, times in sorted(_entered.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{times:3d}  {module}")


if __name__ == "__main__":
    main()
