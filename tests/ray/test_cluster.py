"""agentrio.ray's cluster on a real local Ray cluster: hosts, agents, run, stream, cancel, map.

The agents' model is the fake LLM server, in this test's process on 127.0.0.1: the
hosts (other processes) reach it over HTTP, as they would reach a real provider.
"""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from cluster import LocalCluster

import agentrio
from agentrio.testing import FakeRequest, Reply, open_fake_llm

ray_module = pytest.importorskip("ray")
import agentrio.ray  # noqa: E402  (after the skip: it imports Ray)

TOML = """
[providers.fake]
kind = "openai"
base_url = "{url}/v1"
"""


def make_echo() -> agentrio.AgentSpec[str]:
    """The spec registered as "echo": answers with what it was told."""
    return agentrio.AgentSpec("echo", "fake:m")


SPECS = {"echo": make_echo}


async def answer(request: FakeRequest) -> agentrio.ModelReply:
    """The fake LLM: "slow ..." takes 60 s; anything else is echoed at once."""
    told = request.messages[-1].content
    if told.startswith("slow"):
        await trio.sleep(60)
    return Reply(text=f"echo: {told}")


@pytest.fixture
async def fake_config() -> AsyncIterator[agentrio.Config]:
    async with open_fake_llm(answer) as server:
        text = TOML.format(url=server.base_url)
        yield agentrio.parse_config(tomllib.loads(text), path="agentrio.toml")


def cluster_of(ray_cluster: LocalCluster, config: agentrio.Config, **options: Any) -> Any:
    return agentrio.ray.open_cluster(
        hosts=2, specs=SPECS, config=config, address=ray_cluster.address, **options
    )


async def test_agents_placed_on_both_hosts_run_there(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    async with cluster_of(ray_cluster, fake_config) as cluster:
        first = await cluster.spawn_agent(make_echo(), name="a")
        second = await cluster.spawn_agent(make_echo(), name="b")
        assert {first.host, second.host} == {0, 1}  # least-loaded: one each
        results = [await first.run("hello"), await second.run("world")]
        statuses = [await cluster.ping(0), await cluster.ping(1)]
    assert [r.final_text for r in results] == ["echo: hello", "echo: world"]
    assert [r.stop_reason for r in results] == ["done", "done"]
    # Two hosts, two processes, one on each node (SPREAD).
    assert len({s.pid for s in statuses}) == 2
    assert len({s.node_id for s in statuses}) == 2
