"""What bench/cluster.py's hosts run: imported by name on every host (bench/ is on
their PYTHONPATH), as an application's own module would be."""

from __future__ import annotations

import resource
import time
from typing import Any

import trio

import agentrio


class Payload(agentrio.Message, frozen=True):
    """An ask's body and its echo (about an agent message's size)."""

    text: str = ""


class Go(agentrio.Message, frozen=True):
    """Ask the echo *asks* times, *window* asks at a time."""

    asks: int
    window: int


class Rate(agentrio.Message, frozen=True):
    round_trips_per_s: float


class Echo(agentrio.Actor[Payload]):
    """Answers with what it was sent."""

    async def handle(self, msg: Payload) -> Payload:
        return msg


class Asker(agentrio.Actor[Go]):
    """Asks its target (on another host, a RemoteRef) in *window* loops at once."""

    def __init__(self, target: Any, text: str) -> None:
        self.target = target
        self.text = text

    async def handle(self, msg: Go) -> Rate:
        payload = Payload(self.text)
        each = msg.asks // msg.window

        async def loop() -> None:
            for _ in range(each):
                reply = await self.target.ask(payload, timeout=60)
                assert reply == payload

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(msg.window):
                nursery.start_soon(loop)
        return Rate(each * msg.window / (time.perf_counter() - t0))


def peak_rss_mb(_host: object) -> float:
    """This process's peak RSS, MiB (run on a host with ``__ray_call__``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_spec() -> agentrio.AgentSpec[str]:
    """bench/agents.py's spec, registered as "bench" on the hosts."""
    import agents

    return agents.SPEC
