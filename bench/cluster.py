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
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import trio
from _common import main, median_of

PAYLOAD = "x" * 400  # (about an agent message's size: bench/BASELINE.md)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


TEMP_DIRS: list[str] = []  # (removed by _shutdown)


def _init_ray() -> Any:
    """A local Ray of 2 CPUs on 127.0.0.1, in a temp dir of its own (no usage stats)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    TEMP_DIRS.append(tempfile.mkdtemp(prefix="agentrio-bench-ray-"))
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=TEMP_DIRS[-1],
    )
    return ray


def _shutdown(ray: Any) -> None:
    """Stop this process's local Ray and remove its temp dirs."""
    ray.shutdown()
    for folder in TEMP_DIRS:
        shutil.rmtree(folder, ignore_errors=True)


# -- Ray's own actor calls: the baseline ----------------------------------------------


def ray_asks(asks: int, window: int) -> dict[str, Any]:
    ray = _init_ray()
    try:
        return _ray_asks(ray, asks, window)
    finally:
        _shutdown(ray)


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


# -- agentrio on two hosts -----------------------------------------------------------------


def _bench_path() -> None:
    """The hosts import _cluster_work and agents by name: a folder of links to them
    goes on their PYTHONPATH (not bench/ itself, whose http.py would hide the
    standard library's from Ray's own processes)."""
    here = os.path.dirname(os.path.abspath(__file__))
    folder = tempfile.mkdtemp(prefix="agentrio-bench-path-")
    TEMP_DIRS.append(folder)
    for name in ("_cluster_work.py", "agents.py", "_common.py"):
        os.symlink(os.path.join(here, name), os.path.join(folder, name))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (folder, os.environ.get("PYTHONPATH")) if p
    )


def cluster_asks(asks: int, window: int) -> dict[str, Any]:
    _bench_path()
    ray = _init_ray()
    try:
        return trio.run(_cluster_asks, asks, window)
    finally:
        _shutdown(ray)


async def _cluster_asks(asks: int, window: int) -> dict[str, Any]:
    import _cluster_work as work

    import agentrio.ray

    async with agentrio.ray.open_cluster(hosts=2) as cluster:
        echo = await cluster.spawn(work.Echo, name="echo", host=1)
        asker = await cluster.spawn(work.Asker, echo, PAYLOAD, name="asker", host=0)
        await asker.ask(work.Go(min(asks, 1000), window), timeout=600)  # warm-up
        rate = await asker.ask(work.Go(asks, window), timeout=600)
        sender = await cluster.ping(0)
    return {
        "round_trips_per_s": round(rate.round_trips_per_s, 1),
        "messages_per_batch": round(sender.messages / max(1, sender.batches), 1),
    }


def one_process(n: int) -> dict[str, Any]:
    return trio.run(_one_process, n)


async def _one_process(n: int) -> dict[str, Any]:
    import _cluster_work as work

    import agentrio

    spec = work.bench_spec()
    inputs = [f"task {i}" for i in range(n)]
    async with agentrio.open_runtime() as rt:
        await rt.map(spec, inputs[:10], concurrency=10)  # warm-up
        t0 = time.perf_counter()
        results = await rt.map(spec, inputs, concurrency=n)
        elapsed = time.perf_counter() - t0
    _check(results, n)
    return {"runs_per_s": round(n / elapsed, 1), "elapsed_s": round(elapsed, 3)}


def two_hosts(n: int) -> dict[str, Any]:
    _bench_path()
    ray = _init_ray()
    try:
        return trio.run(_two_hosts, ray, n)
    finally:
        _shutdown(ray)


async def _two_hosts(ray: Any, n: int) -> dict[str, Any]:
    import _cluster_work as work

    import agentrio.ray
    from agentrio.ray._host import await_ref

    spec = work.bench_spec()
    inputs = [f"task {i}" for i in range(n)]
    async with agentrio.ray.open_cluster(hosts=2, specs={"bench": work.bench_spec}) as cluster:
        await cluster.map(spec, inputs[:10], concurrency=10)  # warm-up
        t0 = time.perf_counter()
        results = await cluster.map(spec, inputs, concurrency=n)
        elapsed = time.perf_counter() - t0
        peaks = [
            await await_ref(link.handle.__ray_call__.remote(work.peak_rss_mb))
            for link in cluster._links
        ]
    _check(results, n)
    return {
        "runs_per_s": round(n / elapsed, 1),
        "elapsed_s": round(elapsed, 3),
        "host_peak_rss_mb": [round(p, 1) for p in peaks],
    }


def _check(results: list[Any], n: int) -> None:
    bad = [r for r in results if getattr(r, "stop_reason", None) != "done"]
    assert len(results) == n and not bad, bad[:3]


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    out: dict[str, Any] = {"bench": "cluster", "agents": args.agents, "repeats": args.repeats}
    asks = {"asks": args.asks, "window": args.window}
    ray_side = median_of(script, "ray_asks", asks, args.repeats, args.timeout)
    print(f"[cluster] ray: {ray_side}", file=sys.stderr, flush=True)
    ours = median_of(script, "cluster_asks", asks, args.repeats, args.timeout)
    print(f"[cluster] agentrio asks: {ours}", file=sys.stderr, flush=True)
    out["ray_round_trips_per_s"] = ray_side["round_trips_per_s"]
    out["round_trips_per_s"] = ours["round_trips_per_s"]
    out["messages_per_batch"] = ours["messages_per_batch"]
    out["ask_ratio"] = round(ours["round_trips_per_s"] / ray_side["round_trips_per_s"], 3)
    one = median_of(script, "one_process", {"n": args.agents}, args.repeats, args.timeout)
    two = median_of(script, "two_hosts", {"n": args.agents}, args.repeats, args.timeout)
    print(f"[cluster] one process: {one}\n[cluster] two hosts: {two}", file=sys.stderr)
    out["one_process_runs_per_s"] = one["runs_per_s"]
    out["two_hosts_runs_per_s"] = two["runs_per_s"]
    out["scale_ratio"] = round(two["runs_per_s"] / one["runs_per_s"], 3)
    out["one_process_peak_rss_mb"] = one["peak_rss_mb"]
    out["peak_rss_mb_per_host"] = two["host_peak_rss_mb"]
    out["driver_peak_rss_mb"] = two["peak_rss_mb"]
    out["goals_met"] = {
        "ask_ratio>=3": out["ask_ratio"] >= 3,
        "scale_ratio>=1.4": out["scale_ratio"] >= 1.4,
    }
    return out


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--asks", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=1000)


if __name__ == "__main__":
    sys.argv += [] if "--repeats" in sys.argv else ["--repeats", "1"]
    scenarios = {
        "ray_asks": ray_asks,
        "cluster_asks": cluster_asks,
        "one_process": one_process,
        "two_hosts": two_hosts,
    }
    main(os.path.abspath(__file__), scenarios, report, _args)
