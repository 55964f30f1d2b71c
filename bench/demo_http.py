"""``agentrio demo`` over HTTP beside the same demo in process.

The demo spawns N agents from one spec and runs one phase on each, all at
once: look a topic up, count the words found, answer (3 model calls and 2
tool calls a run). Two paths, each in fresh processes:

  http        the default: the scripted model is served by the fake LLM
              server on 127.0.0.1, in the same process, and every model call
              is a real HTTP request through a ``Provider`` (its own
              connection pool, ``max_concurrent=8``). Peak RSS counts both
              sides, server included.
  in_process  ``--in-process``: the same script called in process (the
              runtime alone: the floor of the HTTP path).

``--before REF`` also runs the HTTP path of the code at git ref REF (its
``src/`` unpacked to a temporary directory, first on ``PYTHONPATH``), for the
speedup over it measured in the same run; without it, the speedup is over
``BASELINE_RUNS_PER_S``, the figure issue 11 measured before its changes.
Goals: at least 5x the baseline's runs/s, and under 200 MB peak RSS.

Run: python bench/demo_http.py [--agents 10000] [--repeats 3] [--before REF]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import trio
from _common import main, median_of

BASELINE_RUNS_PER_S = 209.0  # issue 11: 10,000 agents over HTTP, 48 s and 333 MB, before
GOAL_SPEEDUP = 5.0
GOAL_RSS_MB = 200.0


def demo(n: int, over_http: bool) -> dict[str, Any]:
    from agentrio.demo import run_demo

    t0 = time.perf_counter()
    report = trio.run(lambda: run_demo(n, over_http=over_http))
    dt = time.perf_counter() - t0
    assert report.stop_reasons == {"done": n}, report.stop_reasons
    assert report.usage.requests == 3 * n and report.usage.tool_calls == 2 * n
    return {"runs_per_s": round(n / report.wall_s, 1), "wall_s": round(dt, 3)}


def _before(ref: str, n: int, repeats: int, timeout: float) -> dict[str, Any]:
    """The HTTP path of the code at *ref*, with this script as its driver."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", repo, "archive", ref, "src"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.path.join(tmp, "src") + (os.pathsep + old if old else "")
        try:
            params = {"n": n, "over_http": True}
            return median_of(os.path.abspath(__file__), "demo", params, repeats, timeout)
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    n = args.agents
    res = {}
    for name, over_http in (("http", True), ("in_process", False)):
        params = {"n": n, "over_http": over_http}
        res[name] = median_of(script, "demo", params, args.repeats, args.timeout)
        print(f"[demo_http] {name}: {res[name]}", file=sys.stderr, flush=True)
    http, local = res["http"], res["in_process"]
    out: dict[str, Any] = {
        "bench": "demo_http",
        "agents": n,
        "repeats": args.repeats,
        "runs_per_s": http["runs_per_s"],
        "in_process_runs_per_s": local["runs_per_s"],
        "ratio": round(http["runs_per_s"] / local["runs_per_s"], 3),
        "peak_rss_mb": http["peak_rss_mb"],
        "in_process_peak_rss_mb": local["peak_rss_mb"],
    }
    baseline = BASELINE_RUNS_PER_S
    if args.before:
        before = _before(args.before, n, args.repeats, args.timeout)
        print(f"[demo_http] before ({args.before}): {before}", file=sys.stderr, flush=True)
        baseline = before["runs_per_s"]
        out["before"] = args.before
        out["before_peak_rss_mb"] = before["peak_rss_mb"]
    out["baseline_runs_per_s"] = baseline
    out["speedup"] = round(http["runs_per_s"] / baseline, 2)
    out["goals_met"] = {
        f"speedup>={GOAL_SPEEDUP:g}": http["runs_per_s"] >= GOAL_SPEEDUP * baseline,
        f"peak_rss_mb<{GOAL_RSS_MB:g}": http["peak_rss_mb"] < GOAL_RSS_MB,
    }
    return out


def _args(ap: Any) -> None:
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--before", default=None, help="a git ref to measure the HTTP path of")


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"demo": demo}, report, _args)
