"""How long a model request waits for a full provider, by lane, beside a FIFO floor.

One provider (``max_concurrent`` requests in flight, an in-process httpx
``MockTransport`` that takes ``--service`` ms per request) is flooded by
background agents, all started at once; interactive agents arrive one by one
while the flood drains. Each agent runs one phase of one model call. A
request's wait is the time from its ``run()`` to the transport receiving it.

  lanes  the provider as it is: the next free slot goes to the highest lane
         waiting, so an interactive request waits for one slot to free, not
         for the whole queue ahead of it.
  fifo   the floor: the same provider with a plain ``trio.CapacityLimiter``
         (first come, first served) in place of its lane limiter.

``ratio`` is the median interactive wait over the median background wait
(goal: <= 0.5); ``fifo_ratio`` is the same with the FIFO limiter (about 1, or
more: the interactive requests arrive behind the flood).

Run: python bench/lanes.py [--background 64] [--interactive 16] [--service 5]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import httpx
import trio
from _common import main, median_of

import agentrio

CONCURRENCY = 4


class _Fifo:
    """A trio.CapacityLimiter behind the lane limiter's interface: lanes ignored."""

    def __init__(self, total: int) -> None:
        self._limiter = trio.CapacityLimiter(total)
        self.waiting = 0

    async def acquire(self, lane: int) -> None:
        await self._limiter.acquire()

    def release(self, lane: int) -> None:
        self._limiter.release()


def _answer(service_s: float, started: dict[str, float]) -> Any:
    async def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        started[body["messages"][-1]["content"]] = time.perf_counter()
        await trio.sleep(service_s)
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            },
        )

    return handle


def waits(impl: str, background: int, interactive: int, service_ms: float) -> dict[str, Any]:
    service = service_ms / 1000
    started: dict[str, float] = {}
    asked: dict[str, float] = {}

    async def run() -> None:
        transport = httpx.MockTransport(_answer(service, started))
        config = agentrio.ProviderConfig(
            name="bench",
            kind="openai",
            base_url="http://bench.invalid/v1",
            max_concurrent=CONCURRENCY,
            max_retries=0,
        )
        async with (
            httpx.AsyncClient(transport=transport) as client,
            agentrio.Provider(config, client=client) as provider,
            agentrio.open_runtime() as rt,
        ):
            if impl == "fifo":
                provider._concurrency = _Fifo(CONCURRENCY)  # type: ignore[assignment]
            spec = agentrio.AgentSpec("a", provider.model("m"))

            async def one(name: str, lane: agentrio.types.Lane) -> None:
                agent = await rt.spawn_agent(spec, name=name)
                asked[name] = time.perf_counter()
                result = await agent.run(name, lane=lane)
                assert result.stop_reason == "done", result

            async with trio.open_nursery() as nursery:
                for i in range(background):
                    nursery.start_soon(one, f"bg{i}", "background")
                # The interactive ones arrive while the flood drains, one per service time.
                for i in range(interactive):
                    await trio.sleep(service)
                    nursery.start_soon(one, f"i{i}", "interactive")

    trio.run(run)

    def median_ms(prefix: str) -> float:
        return 1000 * statistics.median(
            started[name] - asked[name] for name in asked if name.startswith(prefix)
        )

    return {"interactive_wait_ms": median_ms("i"), "background_wait_ms": median_ms("bg")}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    params = {
        "background": args.background,
        "interactive": args.interactive,
        "service_ms": args.service,
    }
    res = {}
    for impl in ("fifo", "lanes"):
        res[impl] = median_of(script, "waits", {**params, "impl": impl}, args.repeats, args.timeout)
        print(f"[lanes] {impl}: {res[impl]}", file=sys.stderr, flush=True)
    ours, fifo = res["lanes"], res["fifo"]
    ratio = ours["interactive_wait_ms"] / ours["background_wait_ms"]
    fifo_ratio = fifo["interactive_wait_ms"] / fifo["background_wait_ms"]
    return {
        "bench": "lanes",
        "background": args.background,
        "interactive": args.interactive,
        "concurrency": CONCURRENCY,
        "service_ms": args.service,
        "repeats": args.repeats,
        "interactive_wait_ms": round(ours["interactive_wait_ms"], 2),
        "background_wait_ms": round(ours["background_wait_ms"], 2),
        "ratio": round(ratio, 3),
        "fifo_interactive_wait_ms": round(fifo["interactive_wait_ms"], 2),
        "fifo_background_wait_ms": round(fifo["background_wait_ms"], 2),
        "fifo_ratio": round(fifo_ratio, 3),
        "goals_met": {"ratio<=0.5": ratio <= 0.5},
    }


def _args(ap: Any) -> None:
    ap.add_argument("--background", type=int, default=64)
    ap.add_argument("--interactive", type=int, default=16)
    ap.add_argument("--service", type=float, default=5.0, help="ms per request")


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"waits": waits}, report, _args)
