"""The how-to "From one process to a cluster" is true: its program runs on the tests'
Ray cluster (``RAY_ADDRESS``) and prints what the page shows.

tests/test_docs.py skips the block (it would start a Ray cluster of its own in
every docs run); this runs it, as a user would, in a process of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from cluster import LocalCluster

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "cluster.md"
BLOCK = re.compile(
    r"<!-- docs-test: skip \(starts Ray[^\n]*-->\n```python\n(.*?)```\n\n```text\n(.*?)```",
    re.DOTALL,
)


def test_the_howto_program_prints_what_the_page_shows(
    ray_cluster: LocalCluster, tmp_path: Path
) -> None:
    ((code, shown),) = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    program = tmp_path / "cluster_example.py"
    program.write_text(code, encoding="utf-8")
    env = dict(os.environ, RAY_ADDRESS=ray_cluster.address, RAY_AUTH_MODE="disabled")
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == shown.strip()
