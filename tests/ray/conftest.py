"""The tests of agentrio.ray share one real local Ray cluster, started once.

A head node and a second node joined to it, one CPU each, on 127.0.0.1 (see
``cluster.py``); this process connects to it once (``ray.init``), so each test's
``open_cluster(address=...)`` only starts its hosts. Every test here is marked
``ray``. The cluster is stopped when the session ends.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, require_ray, wait_nodes


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ray/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalCluster]:
    """A running local Ray cluster of two nodes, this process connected to it."""
    require_ray()
    import ray

    cluster = LocalCluster(num_cpus=1)
    previous = signal.getsignal(signal.SIGTERM)
    auth_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # (as the cluster: see cluster.py)
    try:
        cluster.start()
        cluster.add_node(num_cpus=1)
        began = time.monotonic()
        ray.init(
            address=cluster.address,
            namespace="agentrio",
            logging_level="ERROR",
            log_to_driver=False,
        )
        # A SIGTERM (a CI timeout) ends the session through this fixture's teardown,
        # which stops the cluster: never left running. (After ray.init, which sets a
        # SIGTERM handler of its own.)
        signal.signal(signal.SIGTERM, _interrupt)
        wait_nodes(2)
        cluster.join_seconds = time.monotonic() - began
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()
        if auth_mode is None:
            del os.environ["RAY_AUTH_MODE"]
        else:
            os.environ["RAY_AUTH_MODE"] = auth_mode
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
