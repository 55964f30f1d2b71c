"""agentrio on a Ray cluster of two node hosts, beside Ray's own calls and one process.

Each figure runs in a fresh child process that starts its own local Ray
(``ray.init`` on 127.0.0.1, its own temp dir, 2 CPUs) and stops it.

  ask_ratio    cross-host request/reply round trips per second through
               agentrio's batched messages, over Ray's own actor method calls
               between the same two hosts (goal >= 3).
               ``ray``: an actor placed as host 0 calls ``echo`` of an actor
               placed as host 1, ``--window`` calls outstanding at a time
               (submitted with ``.remote()``, then ``ray.get`` of the window:
               Ray's fastest way for one caller, as its
               ``1_1_actor_calls_async`` microbenchmark), 400-byte payloads.
               ``agentrio``: ``--window`` actors on host 0 each ``ask`` an echo
               actor on host 1 in a loop, the same payload; their messages
               cross in agentrio's batches.
  scale_ratio  bench/agents.py's workload (N agents, each one phase of 3 model
               turns and 2 tool calls) on two hosts (``cluster.map``), over the
               same in one process (``open_runtime``) (goal >= 1.4 on this
               2-core machine; 2 is the limit).
  peak_rss_mb_per_host  each host's peak RSS during the two-host workload.

Run: python bench/cluster.py [--agents 10000] [--asks 20000] [--window 1000]
[--repeats 1]; prints one JSON line.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

from _common import main, median_of

PAYLOAD = "x" * 400  # (about an agent message's size: bench/BASELINE.md)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _init_ray() -> Any:
    """A local Ray of 2 CPUs on 127.0.0.1, in a temp dir of its own (no usage stats)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=tempfile.mkdtemp(prefix="agentrio-bench-ray-"),
    )
    return ray


# -- Ray's own actor calls: the baseline ----------------------------------------------


def ray_asks(asks: int, window: int) -> dict[str, Any]:
    ray = _init_ray()
    try:
        return _ray_asks(ray, asks, window)
    finally:
        ray.shutdown()


def _ray_asks(ray: Any, asks: int, window: int) -> dict[str, Any]:
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=1)
    class Echo:
        def echo(self, payload: str) -> str:
            return payload

    @ray.remote(num_cpus=1)
    class Caller:
        def __init__(self, peer: Any) -> None:
            self.peer = peer

        def run(self, n: int, window: int, payload: str) -> float:
            t0 = time.perf_counter()
            done = 0
            while done < n:
                refs = [self.peer.echo.remote(payload) for _ in range(min(window, n - done))]
                assert ray.get(refs) == [payload] * len(refs)
                done += len(refs)
            return n / (time.perf_counter() - t0)

    group = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD")
    ray.get(group.ready())

    def on(bundle: int) -> Any:
        return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)

    echo = Echo.options(scheduling_strategy=on(1)).remote()
    caller = Caller.options(scheduling_strategy=on(0)).remote(echo)
    ray.get(caller.run.remote(min(asks, 1000), window, PAYLOAD))  # warm-up
    per_s = ray.get(caller.run.remote(asks, window, PAYLOAD))
    return {"round_trips_per_s": round(per_s, 1)}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    out: dict[str, Any] = {"bench": "cluster", "agents": args.agents, "repeats": args.repeats}
    asks = {"asks": args.asks, "window": args.window}
    ray_side = median_of(script, "ray_asks", asks, args.repeats, args.timeout)
    print(f"[cluster] ray: {ray_side}", file=sys.stderr, flush=True)
    out["ray_round_trips_per_s"] = ray_side["round_trips_per_s"]
    return out


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--asks", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=1000)


if __name__ == "__main__":
    sys.argv += [] if "--repeats" in sys.argv else ["--repeats", "1"]
    main(os.path.abspath(__file__), {"ray_asks": ray_asks}, report, _args)
