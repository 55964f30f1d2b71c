"""agentrio.ray's cluster on a real local Ray cluster: hosts, agents, run, stream, cancel, map.

The agents' model is the fake LLM server, in this test's process on 127.0.0.1: the
hosts (other processes) reach it over HTTP, as they would reach a real provider.
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster import LocalCluster
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrio
import agentrio.otel
from agentrio.testing import FakeRequest, Reply, open_fake_llm
from agentrio.tracing import read_trace

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
    """The fake LLM: "slow ..." takes 60 s; "who ..." asks for ``whoami`` (then
    echoes its result); anything else is echoed at once."""
    told = request.messages[-1].content
    if told.startswith("slow"):
        await trio.sleep(60)
    if told.startswith("who") and request.messages[-1].role == "user":
        return Reply(tool_calls=[agentrio.ToolCallRequest("whoami", {})])
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


# --- specs and actors the hosts import (this folder is on their PYTHONPATH) -------------


@agentrio.tool
def whoami() -> str:
    """The process id of the host the agent runs on."""
    return str(os.getpid())


def make_pid() -> agentrio.AgentSpec[str]:
    """The spec registered as "pid": asks for ``whoami``, answers with its result."""
    return agentrio.AgentSpec("pid", "fake:m", tools=[whoami])


SPECS["pid"] = make_pid


def make_broken() -> agentrio.AgentSpec[str]:
    """The spec registered as "broken": its factory fails (on the host)."""
    raise agentrio.InvalidArgument("no spec today")


SPECS["broken"] = make_broken


async def collect(stream: Any, into: list[Any]) -> None:
    async with stream:
        async for event in stream:
            into.append(event)


async def wait_for(events: list[Any], found: Any, seconds: float = 30) -> Any:
    """The first event of *events* for which *found(event)* is true, waiting for it."""
    with trio.fail_after(seconds):
        while True:
            for event in events:
                if found(event):
                    return event
            await trio.sleep(0.05)


# --- the tests ------------------------------------------------------------------------


async def test_pinned_agents_stay_on_their_host_and_map_spreads(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    async with cluster_of(ray_cluster, fake_config) as cluster:
        pinned = [await cluster.spawn_agent(make_pid(), name=f"p{i}", host=1) for i in range(3)]
        pinned_pids = {(await agent.run("who")).final_text for agent in pinned}
        results = await cluster.map(make_pid(), [f"who {i}" for i in range(6)], concurrency=4)
        host_pids = [(await cluster.ping(i)).pid for i in range(2)]
    assert [agent.host for agent in pinned] == [1, 1, 1]
    assert pinned_pids == {f"echo: {host_pids[1]}"}
    mapped = [r.final_text for r in results if isinstance(r, agentrio.PhaseResult)]
    assert len(mapped) == 6
    assert {int(text.removeprefix("echo: ")) for text in mapped} == set(host_pids)


async def test_stream_brings_the_remote_run_items_then_its_result(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    async with cluster_of(ray_cluster, fake_config) as cluster:
        agent = await cluster.spawn_agent(make_echo(), host=1)
        async with agent.stream("streamed") as stream:
            items = [item async for item in stream]
            result = await stream.result()
    kinds = [type(item).__name__ for item in items]
    assert "TurnEnded" in kinds
    assert kinds[-1] == "RunDone"
    assert items[-1].result.final_text == "echo: streamed" == result.final_text


async def test_a_cancelled_agent_frees_its_name_and_its_place(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    async with cluster_of(ray_cluster, fake_config) as cluster:
        a, b, c = [await cluster.spawn_agent(make_echo(), name=n) for n in "abc"]
        with pytest.raises(agentrio.errors.DuplicateName):
            await cluster.spawn_agent(make_echo(), name="a")
        async with trio.open_nursery() as nursery:

            async def slow_run() -> None:
                with pytest.raises(agentrio.ActorStopped):
                    await a.run("slow answer")

            nursery.start_soon(slow_run)
            await trio.sleep(1)
            await a.cancel()  # the running phase is abandoned: run() raises
        await c.stop()  # host 0 holds none now, host 1 one
        again = await cluster.spawn_agent(make_echo(), name="a")  # (the name is free)
        answer = await again.run("back")
        assert cluster.statistics().agents == 2
    assert (a.host, b.host, c.host, again.host) == (0, 1, 0, 0)
    assert answer.final_text == "echo: back"


async def test_what_waits_on_a_host_that_is_gone_fails_with_host_lost(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    async with cluster_of(ray_cluster, fake_config) as cluster:
        agent = await cluster.spawn_agent(make_echo(), host=1)
        survivor = await cluster.spawn_agent(make_echo(), name="survivor", host=0)
        async with trio.open_nursery() as nursery:

            async def slow_run() -> None:
                with pytest.raises(agentrio.errors.HostLost) as lost:
                    await agent.run("slow answer")
                assert lost.value.host == 1

            nursery.start_soon(slow_run)
            await trio.sleep(1)
            ray_module.kill(cluster._links[1].handle, no_restart=True)
        with pytest.raises(agentrio.errors.HostLost), trio.fail_after(30):
            await agent.run("again")  # (at once: the host is known to be gone)
        assert (await survivor.run("still here")).final_text == "echo: still here"


async def test_a_stream_sends_no_more_than_its_buffer_ahead_of_its_reader(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    async with cluster_of(ray_cluster, fake_config) as cluster:
        agent = await cluster.spawn_agent(make_pid(), host=0)
        async with agent.stream("who runs me", max_buffer_size=1) as stream:
            await trio.sleep(2)  # (the run's items, unread: the host waits for credit)
            unread = stream._items.statistics().current_buffer_used
            items = [item async for item in stream]
    assert unread == 1
    assert [type(item).__name__ for item in items].count("TurnEnded") == 2
    assert items[-1].result.final_text.startswith("echo: ")


async def test_a_cancelled_caller_cancels_the_remote_phase(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    events: list[Any] = []
    async with cluster_of(ray_cluster, fake_config) as cluster, trio.open_nursery() as nursery:
        nursery.start_soon(collect, cluster.events(), events)
        agent = await cluster.spawn_agent(make_echo(), host=1)
        await agent.run("warm up")  # (the events flow once this has come back)
        with trio.move_on_after(2) as scope:
            await agent.run("slow answer")  # the model takes 60 s
        assert scope.cancelled_caught
        ended = await wait_for(
            events,
            lambda e: type(e).__name__ == "PhaseEnded" and e.stop_reason == "cancelled",
        )
        again = await agent.run("after")  # the agent takes its next phase as usual
        nursery.cancel_scope.cancel()
    assert ended.path == agent.path
    assert again.final_text == "echo: after"
    assert cluster.statistics().calls == 0


async def test_events_and_usage_of_every_host_reach_the_caller(
    ray_cluster: LocalCluster, fake_config: agentrio.Config, tmp_path: Path
) -> None:
    trace = tmp_path / "cluster.jsonl"
    events: list[Any] = []
    async with (
        cluster_of(ray_cluster, fake_config, trace=trace) as cluster,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(collect, cluster.events(), events)
        agents = [await cluster.spawn_agent(make_echo(), name=f"e{i}", host=i) for i in (0, 1)]
        for agent in agents:
            await agent.run("hi")
        for agent in agents:
            await wait_for(
                events, lambda e, a=agent: type(e).__name__ == "PhaseEnded" and e.path == a.path
            )
        usage = cluster.usage()
        nursery.cancel_scope.cancel()
    assert usage.requests == 2
    ended = {r.e.path for r in read_trace(trace) if type(r.e).__name__ == "PhaseEnded"}
    assert ended == {"e0", "e1"}


class SpanFile(SpanExporter):
    """Writes each span as a JSON line (the hosts' spans, read back by the test)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Any) -> SpanExportResult:
        with open(self.path, "a") as file:
            for span in spans:
                parent = span.parent.span_id if span.parent is not None else None
                line = {
                    "name": span.name,
                    "trace": span.context.trace_id,
                    "span": span.context.span_id,
                    "parent": parent,
                    "operation": span.attributes.get("gen_ai.operation.name"),
                }
                file.write(json.dumps(line) + "\n")
        return SpanExportResult.SUCCESS


def make_otel(path: str) -> Any:
    """The hosts' OpenTelemetry: spans to the file *path* (called on each host)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SpanFile(path)))
    return agentrio.otel.OpenTelemetry(tracer_provider=provider)


async def test_a_runs_spans_form_one_tree_across_hosts(
    ray_cluster: LocalCluster, fake_config: agentrio.Config, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("caller")
    otel = functools.partial(make_otel, str(spans_file))
    async with cluster_of(ray_cluster, fake_config, otel=otel) as cluster:
        agent = await cluster.spawn_agent(make_pid(), host=1)
        with tracer.start_as_current_span("caller"):
            await agent.run("who am I")
    (caller,) = exporter.get_finished_spans()
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    by_id = {span["span"]: span for span in spans}
    (phase,) = [span for span in spans if span["operation"] == "invoke_agent"]
    assert phase["parent"] == caller.context.span_id  # the caller's span, in the driver
    assert {span["trace"] for span in spans} == {caller.context.trace_id}
    # Every host span hangs, through its parents, from the phase: one tree.
    for span in spans:
        while span["parent"] in by_id:
            span = by_id[span["parent"]]
        assert span is phase
    assert {"chat", "execute_tool"} <= {span["operation"] for span in spans}


async def test_the_blocks_own_exception_comes_out_as_itself(
    ray_cluster: LocalCluster, fake_config: agentrio.Config
) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with cluster_of(ray_cluster, fake_config) as cluster:
            await cluster.spawn_agent(make_echo())
            raise KeyError("mine")
    with pytest.raises(trio.TooSlowError):  # (the block's own, not "hosts did not start")
        async with cluster_of(ray_cluster, fake_config):
            with trio.fail_after(0.01):
                await trio.sleep(1)
    with pytest.raises(agentrio.InvalidArgument, match="no spec today"):  # (a map's too)
        async with cluster_of(ray_cluster, fake_config) as cluster:
            await cluster.map(agentrio.AgentSpec("broken", "fake:m"), ["x"])


async def test_hosts_the_cluster_has_no_room_for_fail_with_host_lost(
    ray_cluster: LocalCluster, fake_config: agentrio.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrio.ray import _cluster

    monkeypatch.setattr(_cluster, "START_TIMEOUT", 3.0)
    with pytest.raises(agentrio.errors.HostLost, match="CPU free"):
        async with agentrio.ray.open_cluster(hosts=3, address=ray_cluster.address):
            pass  # (two CPUs: never here)
    async with cluster_of(ray_cluster, fake_config) as cluster:  # (all was given back)
        assert (await (await cluster.spawn_agent(make_echo())).run("ok")).stop_reason == "done"
