"""A real local Ray cluster on 127.0.0.1 for the tests of agentrio.ray, started by the tests.

``ray start --head --node-ip-address=127.0.0.1`` with its own ``--temp-dir`` and
free ports (so it never meets another engineer's cluster, nor a cluster left by
someone else), small: ``--num-cpus`` given, a 100 MB object store, no dashboard,
no usage stats. ``add_node()`` joins a second node to it (``ray start
--address``), which a test can remove (``stop_node``) as a lost machine would
be; ``stop()`` stops every node it started, with ``ray stop`` pointed at its own
temp dir, and nothing else.

The ``ray`` binary is the one beside the running Python (the tests' venv): the
workers it starts import agentrio from that venv, so no ``runtime_env`` is needed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # the smallest Ray takes (/dev/shm is shared)
START_TIMEOUT = 120.0  # seconds a `ray start` may take on a loaded 2-core machine


def ray_binary() -> str | None:
    """The ``ray`` command of the running venv, if Ray is installed there."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    return shutil.which("ray")


def require_ray() -> str:
    """The ``ray`` command; skip the caller without it, unless CI could have
    installed it (the dev extra brings it): then fail."""
    found = ray_binary()
    try:
        import ray  # noqa: F401
    except ImportError:
        found = None
    if found is not None:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("Ray is not installed (pip install 'agentrio[ray]'), and CI needs it")
    pytest.skip("Ray is not installed (pip install 'agentrio[ray]')")


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LocalCluster:
    """A Ray cluster of this machine: a head node, and the nodes joined to it."""

    def __init__(self, *, num_cpus: int = 2) -> None:
        self.ray = require_ray()
        # Short: Ray's unix sockets live under it (a socket path has ~107 bytes).
        self.temp_dir = tempfile.mkdtemp(prefix="agr-", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.num_cpus = num_cpus
        self.head: subprocess.Popen[bytes] | None = None
        self.nodes: list[subprocess.Popen[bytes] | None] = []
        self.start_seconds = 0.0  # how long the head's `ray start` took
        self.join_seconds = 0.0  # then, how long until ray.init and the second node

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        # Never the token of ~/.ray/auth_token (a `ray.init()` of anyone's may have made
        # one): this cluster listens on 127.0.0.1 only, for this test session.
        env["RAY_AUTH_MODE"] = "disabled"
        # The workers import what the tests' specs and actors are made of, by name (the
        # same code on every node, as in production): the test modules of this folder.
        here = str(Path(__file__).resolve().parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        env.pop("RAY_ADDRESS", None)
        return env

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        """``ray start ARGS --block`` in a process group of its own (so that group,
        its daemons and workers, can be killed: never `ray stop`, which stops every
        Ray of the machine)."""
        command = [
            self.ray,
            "start",
            "--node-ip-address=127.0.0.1",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
            "--block",
            *args,
        ]
        log = Path(self.temp_dir) / f"start-{len(self.nodes) + (self.head is not None)}.log"
        with log.open("wb") as output:
            return subprocess.Popen(
                command,
                env=self._env(),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self) -> LocalCluster:
        """Start the head node; return once its GCS takes connections."""
        began = time.monotonic()
        self.head = self._spawn(
            [
                "--head",
                f"--port={self.port}",
                f"--num-cpus={self.num_cpus}",
                "--include-dashboard=false",
            ]
        )
        deadline = began + START_TIMEOUT
        while True:
            if self.head.poll() is not None:
                said = (Path(self.temp_dir) / "start-0.log").read_text(errors="replace")
                raise RuntimeError(f"ray start --head failed: {said[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the Ray head did not start") from None
                time.sleep(0.1)
        self.start_seconds = time.monotonic() - began
        return self

    def add_node(self, *, num_cpus: int = 1, resources: str | None = None) -> int:
        """Join one more node to the cluster (its own process group, which
        `stop_node` kills: a lost machine); returns its index."""
        args = [f"--address={self.address}", f"--num-cpus={num_cpus}"]
        if resources is not None:
            args.append(f"--resources={resources}")
        self.nodes.append(self._spawn(args))
        return len(self.nodes) - 1

    def stop_node(self, index: int) -> None:
        """Kill the node *index* and everything it started (its raylet, its
        workers): a lost machine."""
        node = self.nodes[index]
        if node is not None:
            self.nodes[index] = None
            _kill_group(node, signal.SIGKILL)

    def stop(self) -> None:
        """Stop every node of this cluster (and nothing of anyone else's)."""
        for index in range(len(self.nodes)):
            self.stop_node(index)
        if self.head is not None:
            _kill_group(self.head, signal.SIGTERM)
            self.head = None
        _kill_leftovers(self.temp_dir)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def wait_nodes(count: int, timeout: float = START_TIMEOUT) -> None:
    """Wait until the Ray cluster this process is connected to has *count* live nodes."""
    import ray

    deadline = time.monotonic() + timeout
    while sum(1 for node in ray.nodes() if node["Alive"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray cluster did not reach {count} live nodes")
        time.sleep(0.2)


def wait_node_dead(node_id: str, timeout: float = 90.0) -> None:
    """Wait until Ray has found the node *node_id* dead (15 s or more after it was
    killed): until then Ray may place the next test's actors or bundles on it."""
    import ray

    deadline = time.monotonic() + timeout
    while any(node["NodeID"] == node_id and node["Alive"] for node in ray.nodes()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Ray did not find the node {node_id} dead")
        time.sleep(0.5)


def _kill_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send *sig* to *process*'s group; SIGKILL it if it has not ended in 10 s."""
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=3)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    # (Its daemons may outlive the `ray start` process itself.)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _kill_leftovers(temp_dir: str) -> None:
    """SIGKILL any process whose command line names *temp_dir* (this cluster's own:
    the directory is unique to it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if temp_dir.encode() in command:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
