"""Instructions per run of bench/agents.py's workload, counted by callgrind.

As docs/design.md measured before: ``PYTHONHASHSEED=0``, the collector off (its
passes fall differently with each change of code), N agents (1,000) each running one
phase; trio's scheduler seeded (it reverses batches of runnable tasks at random); a
process that only warms up (10 agents) is counted too and subtracted, and what is left
is divided by N. Give ``--src`` to count another copy of the package (the code before
a change, say) with this same script.

Run: python tools/callgrind_agents.py [--agents 1000] [--src DIR] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent


def _child(agents: int) -> None:
    """The measured process: a warm-up of 10 agents, then *agents* more (if any)."""
    import gc

    sys.path.append(str(REPO / "bench"))
    import trio
    import trio._core._run
    from agents import _agentrio  # type: ignore[import-not-found]  # bench/agents.py

    # Trio reverses each batch of runnable tasks at random: seeded, the same
    # order in every process (an empty mailbox's deque or not, ...).
    trio._core._run._r.seed(0)
    gc.disable()
    trio.run(_agentrio, 10)
    if agents:
        answers, _ = trio.run(_agentrio, agents)
        assert all(a.startswith("done") for a in answers), answers[:3]


def instructions(agents: int, src: pathlib.Path | None) -> int:
    """The instructions callgrind counts in one process of *agents* agents."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            str(agents),
        ]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    assert match is not None, "no totals in callgrind's output"
    return int(match.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--src", type=pathlib.Path, default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        _child(args.child)
        return
    for _ in range(args.rounds):
        full = instructions(args.agents, args.src)
        warm = instructions(0, args.src)
        per_run = (full - warm) / args.agents
        print(f"{per_run / 1000:.1f} k instructions a run ({full} - {warm}) / {args.agents}")


if __name__ == "__main__":
    main()
