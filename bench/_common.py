"""Shared by the benchmarks: run a scenario in a fresh process, take medians.

Each measurement runs in its own child process (``python <script> --child
NAME --params JSON``), so peak RSS and GC state belong to that one scenario,
as in ``../shared/bench/_harness.py``. The raw-Trio floor and agentrio are
measured alternately in the same run, so their ratio compares like with like.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any


def rss_now_mb() -> float:
    """Current resident set size of this process, MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def peak_rss_mb() -> float:
    """High-water-mark RSS of this process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_child(script: str, name: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, script, "--child", name, "--params", json.dumps(params)]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("{")]
    if cp.returncode != 0 or not lines:
        raise RuntimeError(f"{name} {params} failed (rc={cp.returncode}): {cp.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def median_of(
    script: str, name: str, params: dict[str, Any], repeats: int, timeout: float
) -> dict[str, Any]:
    """Run a scenario *repeats* times in fresh processes; the median of every number."""
    runs = [run_child(script, name, params, timeout) for _ in range(repeats)]
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs)
        else:
            out[key] = value
    return out


def main(
    script: str,
    scenarios: dict[str, Callable[..., dict[str, Any]]],
    report: Callable[[argparse.Namespace], dict[str, Any]],
    add_args: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """Child mode runs one scenario; parent mode calls *report* and prints one JSON line."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    if add_args is not None:
        add_args(ap)
    args = ap.parse_args()
    if args.child:
        res = scenarios[args.child](**json.loads(args.params))
        res["peak_rss_mb"] = round(peak_rss_mb(), 2)
        print(json.dumps(res), flush=True)
        return
    print(json.dumps(report(args)), flush=True)
