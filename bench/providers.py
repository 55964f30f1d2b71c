"""The agentrio provider beside raw httpx, against the fake LLM server on loopback.

The fake server runs in its own process (``agentrio fake-llm --port 0``), so
the sides compared are the clients alone. All send the same OpenAI chat
completion bodies (built once by the provider's wire format), with the same
number of requests in flight:

  raw       ``client.post(url, json=body)`` then ``response.json()``, on an
            ``httpx.AsyncClient``.
  agentrio  ``Provider(config, client=client)`` on such a client:
            ``Provider.complete(...)``: body building, the breaker, limits,
            retries-ready error handling, and parsing into a ModelReply.
            The goal (``ratio`` >= 0.9) is for this path: a client of one's own.
  default   ``Provider(config)``: the same calls on the provider's own
            HTTP/1.1 pool (``default_ratio``: against the same raw httpx).

Run: python bench/providers.py [--requests 3000] [--concurrency 16] [--repeats 3]
"""

from __future__ import annotations

import os
import subprocess
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
from agentrio.providers.openai import OpenAIWire

MESSAGES = [
    agentrio.ChatMessage("system", "You answer briefly."),
    agentrio.ChatMessage("user", "Tell me about topic-7"),
]


def requests(impl: str, base_url: str, n: int, concurrency: int) -> dict[str, Any]:
    async def run() -> float:
        limiter = trio.CapacityLimiter(concurrency)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits) as client:
            config = agentrio.ProviderConfig(
                name="bench", kind="openai", base_url=base_url + "/v1", max_concurrent=concurrency
            )
            provider = agentrio.Provider(config, client=None if impl == "default" else client)
            body = OpenAIWire().body("demo", MESSAGES, (), 256, False)
            url = base_url + "/v1/chat/completions"

            async def raw_one() -> None:
                async with limiter:
                    response = await client.post(url, json=body)
                    assert response.status_code == 200
                    assert response.json()["choices"]

            async def ours_one() -> None:
                reply = await provider.complete("demo", MESSAGES, (), max_output_tokens=256)
                assert reply.tool_calls or reply.text

            one = raw_one if impl == "raw" else ours_one
            for _ in range(concurrency):  # warm the connections
                await one()
            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(one)
            dt = time.perf_counter() - t0
            await provider.aclose()
            return dt

    dt = trio.run(run)
    return {"requests_per_s": round(n / dt, 1)}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    server = subprocess.Popen(
        [sys.executable, "-m", "agentrio.cli", "fake-llm", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        base_url = line.split(" on ", 1)[1].split()[0]
        params = {"base_url": base_url, "n": args.requests, "concurrency": args.concurrency}
        res = {}
        for impl in ("raw", "agentrio", "default"):
            res[impl] = median_of(
                script, "requests", {**params, "impl": impl}, args.repeats, args.timeout
            )
            print(f"[providers] {impl}: {res[impl]}", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    ours, raw = res["agentrio"]["requests_per_s"], res["raw"]["requests_per_s"]
    default = res["default"]["requests_per_s"]
    return {
        "bench": "providers",
        "requests": args.requests,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "requests_per_s": ours,
        "raw_requests_per_s": raw,
        "ratio": round(ours / raw, 3),
        "default_requests_per_s": default,
        "default_ratio": round(default / raw, 3),
        "goals_met": {"ratio>=0.9": ours / raw >= 0.9},
    }


def _args(ap: Any) -> None:
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"requests": requests}, report, _args)
