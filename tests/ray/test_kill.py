"""A host of a cluster killed with SIGKILL in the middle of a swarm (marked ``ray``).

The session's real local Ray cluster (two nodes on 127.0.0.1, see cluster.py), a
cluster of two hosts, one per node, with a store (a folder: each host owns
``<store>/host-<i>``), and a swarm of agents over the project's fake LLM server
(in this process, reached over HTTP). Each agent ``w<i>`` runs one phase: the
model has it call ``pay`` (not idempotent), then ``fetch`` (idempotent), then
answer. Each tool appends a line to a file when it runs for real (its side
effect), then takes a little while. When some of host 1's agents have paid,
host 1's worker process is SIGKILLed. Then:

- every phase ends exactly once: each ``run()`` returns once, ``"done"``, and
  each phase has one ``PhaseDone`` across the two stores;
- no non-idempotent tool runs twice: a ``pay`` in flight at the kill is not run
  again (its result says it was interrupted); one whose start was not on disk
  had not run;
- the budget is exact as documented: the cluster's usage is what the hosts'
  checkpoints say was spent (the lost host's last totals on disk, and what its
  adopter spent since): nothing counted twice; only the lost host's model calls
  in flight at the kill, at most one per phase there, are missing from what the
  fake server served.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster import LocalCluster, wait_node_dead

import agentrio
from agentrio.agents.durability.records import INTERRUPTED, PhaseDone, ToolBegun, decode_records
from agentrio.errors import HostLost
from agentrio.testing import FakeRequest, open_fake_llm

ray_module = pytest.importorskip("ray")
import agentrio.ray  # noqa: E402  (after the skip: it imports Ray)
from agentrio.ray._adopt import host_store  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (tests/: its store.pg)
from store.pg import postgres_dsn, require_psycopg  # noqa: E402

__all__ = ["postgres_dsn"]  # (the session's PostgreSQL server, a fixture)

AGENTS = 24
TOML = """
[providers.fake]
kind = "openai"
base_url = "{url}/v1"
"""


def _effect(effects: str, line: str) -> None:
    fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def make_swarm(effects: str) -> agentrio.AgentSpec[str]:
    """The spec registered as "swarm" (made on the hosts; *effects* is the file
    each real run of a tool appends to)."""
    rng = random.Random()

    @agentrio.tool
    async def pay(agent: str) -> str:
        """Pay for the agent's job (not idempotent)."""
        _effect(effects, f"pay {agent}")
        await trio.sleep(rng.uniform(0.2, 0.8))
        return f"paid for {agent}"

    @agentrio.tool(idempotent=True)
    async def fetch(agent: str) -> str:
        """Fetch the agent's data (idempotent)."""
        _effect(effects, f"fetch {agent}")
        await trio.sleep(rng.uniform(0.2, 0.8))
        return f"data of {agent}"

    return agentrio.AgentSpec(
        "swarm",
        "fake:m",
        instructions="Pay, fetch, answer.",
        tools=[pay, fetch],
        limits=agentrio.Limits(max_iterations=5, tool_timeout=60),
    )


class Server:
    """The fake LLM: pay, then fetch, then answer; it counts what it served."""

    def __init__(self) -> None:
        self.served = {"requests": 0, "input_tokens": 0, "output_tokens": 0}

    def reply(self, request: FakeRequest) -> agentrio.ModelReply:
        messages: Sequence[agentrio.ChatMessage] = request.messages
        agent = messages[1].content.split()[-1]
        results = sum(1 for m in messages if m.role == "tool")
        usage = agentrio.Usage(len(messages) * 10, 5 + results)
        self.served["requests"] += 1
        self.served["input_tokens"] += usage.input_tokens
        self.served["output_tokens"] += usage.output_tokens
        if results == 0:
            call = agentrio.ToolCallRequest("pay", {"agent": agent})
            return agentrio.ModelReply(tool_calls=(call,), usage=usage)
        if results == 1:
            call = agentrio.ToolCallRequest("fetch", {"agent": agent})
            return agentrio.ModelReply(tool_calls=(call,), usage=usage)
        return agentrio.ModelReply(text=f"done {agent}", usage=usage)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _records(store: str, name: str, life: int | None = None) -> list[Any]:
    """Every record of the host store *name* (``<cluster>/host-<i>``), in order, or
    those of one *life* of a folder's (its *life*-th segment)."""
    opened = host_store(store, name)
    try:
        entries = (await opened.load()).entries
    finally:
        await opened.aclose()
    if life is not None:
        sources = sorted({entry.source for entry in entries})
        entries = [entry for entry in entries if entry.source == sources[life]]
    return list(decode_records(entries))


async def _swarm(
    ray_cluster: LocalCluster,
    tmp_path: Path,
    server: Server,
    store: str | None,
    sig: signal.Signals = signal.SIGKILL,
    agents_count: int = AGENTS,
    hosts: int = 2,
    remove_node: tuple[int, str] | None = None,
    budget: agentrio.Budget | None = None,
) -> dict[str, Any]:
    """Run the swarm on *hosts* hosts; when some of host 1's agents have paid,
    send *sig* to its process (or, with *remove_node*, remove that node of the
    Ray cluster, and the host on it is the one lost); what each caller got,
    and what the test saw."""
    effects = tmp_path / "effects"
    async with open_fake_llm(server.reply, keep_requests=False) as fake:
        config = agentrio.parse_config(
            tomllib.loads(TOML.format(url=fake.base_url)), path="agentrio.toml"
        )
        specs = {"swarm": functools.partial(make_swarm, str(effects))}
        terms = None if budget is None else agentrio.ray.LeaseTerms(share=0.05, renew_every=0.5)
        async with agentrio.ray.open_cluster(
            hosts=hosts,
            specs=specs,
            config=config,
            store=store,
            address=ray_cluster.address,
            budget=budget,
            lease=terms,
        ) as cluster:
            agents = [
                await cluster.spawn_agent(make_swarm(str(effects)), name=f"w{i}")
                for i in range(agents_count)
            ]
            statuses = [await cluster.ping(i) for i in range(hosts)]
            victim = 1
            if remove_node is not None:
                (victim,) = [s.index for s in statuses if s.node_id == remove_node[1]]
            on_host_1 = {a.name for a in agents if a.host == victim}
            pid = statuses[victim].pid
            outcomes: dict[str, Any] = {}
            seen: dict[str, Any] = {"on_host_1": on_host_1, "victim": victim}

            async def run(agent: Any) -> None:
                try:
                    outcomes[agent.name] = await agent.run(f"job for {agent.name}")
                except HostLost as exc:
                    outcomes[agent.name] = exc

            async def kill() -> None:
                with trio.fail_after(60):
                    while sum(line.split()[-1] in on_host_1 for line in _lines(effects)) < 3:
                        await trio.sleep(0.01)
                seen["killed_at"] = trio.current_time()
                if remove_node is None:
                    os.kill(pid, sig)
                else:  # (its raylet and the processes of its group killed: a lost machine)
                    await trio.to_thread.run_sync(ray_cluster.stop_node, remove_node[0])
                seen["effects_at_kill"] = _lines(effects)

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(kill)
                    for agent in agents:
                        nursery.start_soon(run, agent)
            finally:
                if sig != signal.SIGKILL or remove_node is not None:  # (killed, and here)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            seen["effects"] = _lines(effects)  # (the swarm's; later runs are new phases)
            if store is not None:  # (the lost host's agents take runs on their new host)
                again = [a for a in agents if a.name in on_host_1]
                seen["again"] = {a.name: await a.run(f"job for {a.name}") for a in again}
            seen["usage"] = cluster.usage()
            if budget is not None:  # (the ledger, before the cluster ends its leases)
                import ray

                ledger = ray.get_actor(f"agentrio-{cluster.id}-ledger", namespace="agentrio")
                seen["ledger"] = await trio.to_thread.run_sync(ray.get, ledger.statistics.remote())
            seen["cluster"] = cluster.id
            survival = getattr(cluster, "_survival", None)  # (the driver's watcher)
            seen["lost_at"] = dict(survival.lost_at) if survival is not None else {}
            seen["lost_why"] = dict(survival.lost_why) if survival is not None else {}
            seen["stored"] = dict(survival.stored) if survival is not None else {}
            seen["hosts_after"] = {a.name: a.host for a in agents}
    seen["outcomes"] = outcomes
    return seen


@pytest.fixture(params=["folder", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The cluster's store: a folder (a DirectoryStore per host), or the session's
    real PostgreSQL server (a PostgresStore per host)."""
    if request.param == "postgres":
        require_psycopg()
        dsn: str = request.getfixturevalue("postgres_dsn")
        return dsn
    (tmp_path / "store").mkdir()
    return str(tmp_path / "store")


async def test_a_host_killed_mid_swarm_is_survived_from_the_store(
    ray_cluster: LocalCluster, tmp_path: Path, store: str
) -> None:
    server = Server()
    seen = await _swarm(ray_cluster, tmp_path, server, store)
    on_host_1, outcomes = seen["on_host_1"], seen["outcomes"]
    assert 0 < len(on_host_1) < AGENTS
    if 1 in seen["lost_at"]:
        print(f"host 1 found lost {seen['lost_at'][1] - seen['killed_at']:.3f} s after its SIGKILL")

    # The lost host's agents live on host 0 now, and take runs there.
    assert set(seen["hosts_after"].values()) == {0}
    for name, result in seen["again"].items():
        assert (result.stop_reason, result.final_text) == ("done", f"done {name}")
    # Every phase ends exactly once, "done"...
    assert sorted(outcomes) == sorted(f"w{i}" for i in range(AGENTS))
    cluster = seen["cluster"]
    host_0 = await _records(store, f"{cluster}/host-0")
    host_1 = await _records(store, f"{cluster}/host-1")
    ends = [r.phase for r in host_0 + host_1 if type(r) is PhaseDone]
    assert len(ends) == len(set(ends)) == AGENTS + len(seen["again"])
    begun = {r.phase for r in host_1 if type(r) is ToolBegun}  # (pay's start, on disk)
    interrupted = 0
    before = seen["effects_at_kill"]
    for name, result in outcomes.items():
        assert isinstance(result, agentrio.PhaseResult), (name, result)
        assert (result.stop_reason, result.final_text) == ("done", f"done {name}")
        # ...and no call of a tool not declared idempotent is made twice.
        pays = seen["effects"].count(f"pay {name}")
        assert pays <= 1, name
        (pay,) = [c for c in result.tool_calls if c.name == "pay"]
        if pay.status == "failed":
            # In flight at the kill: not made again (it may have taken effect).
            assert name in on_host_1 and pay.content == INTERRUPTED.format(name="pay")
            assert pays == before.count(f"pay {name}")
            interrupted += 1
        else:
            assert (pay.status, pay.content, pays) == ("ok", f"paid for {name}", 1)
    assert interrupted, "no pay was in flight at the kill"
    assert len(begun) >= interrupted
    # The budget: what the checkpoints say was spent, nothing twice; the lost
    # host's calls in flight at the kill (at most one per phase) are not counted.
    usage, served = seen["usage"], server.served
    last = [r.totals for r in host_0 if getattr(r, "totals", None) is not None][-1]
    lost = [r.totals for r in host_1 if getattr(r, "totals", None) is not None][-1]
    # (What host 1's adopter read from its store as it opened: its last totals
    # before the kill, the evidence the ledger takes back the rest of its lease on.)
    stored = seen["stored"][1]
    if not store.startswith("postgresql://"):  # (a folder: one segment per life)
        life_1 = await _records(store, f"{cluster}/host-1", life=0)
        before_kill = [r.totals for r in life_1 if getattr(r, "totals", None)]
        assert [stored.requests, stored.input_tokens] == (
            [before_kill[-1].requests, before_kill[-1].input_tokens] if before_kill else [0, 0]
        )
    assert stored.requests <= lost.requests
    assert usage.requests == last.requests + lost.requests
    assert usage.input_tokens == last.input_tokens + lost.input_tokens
    assert 0 <= served["requests"] - usage.requests <= len(on_host_1)
    assert usage.requests >= 3 * AGENTS


async def test_without_a_store_a_lost_host_s_phases_end_with_host_lost(
    ray_cluster: LocalCluster, tmp_path: Path
) -> None:
    server = Server()
    seen = await _swarm(ray_cluster, tmp_path, server, None)
    on_host_1, outcomes = seen["on_host_1"], seen["outcomes"]
    assert sorted(outcomes) == sorted(f"w{i}" for i in range(AGENTS))
    lost = {name for name, outcome in outcomes.items() if isinstance(outcome, HostLost)}
    # Each phase under way on the lost host ended once, with HostLost naming its agent.
    assert lost and lost <= on_host_1
    for name in lost:
        assert outcomes[name].host == 1 and outcomes[name].path == name
    for name in set(outcomes) - lost:
        assert outcomes[name].final_text == f"done {name}"
    assert all(seen["effects"].count(f"pay {name}") <= 1 for name in outcomes)


async def test_a_host_that_stops_answering_is_found_by_the_ping_and_survived(
    ray_cluster: LocalCluster, tmp_path: Path
) -> None:
    # SIGSTOP: the host's process holds on (its store's lock too) but answers
    # nothing, as a machine cut off would: Ray would take 20 s or more to say;
    # the cluster's ping finds it lost within LOST_AFTER, kills it (the fence:
    # its lock goes with it) and host 0 goes on with its phases.
    server = Server()
    (tmp_path / "store").mkdir()
    store = str(tmp_path / "store")
    seen = await _swarm(ray_cluster, tmp_path, server, store, signal.SIGSTOP, agents_count=8)
    assert "no answer to a ping for 2 s" in seen["lost_why"][1]
    print(f"host 1 found lost {seen['lost_at'][1] - seen['killed_at']:.3f} s after its SIGSTOP")
    outcomes = seen["outcomes"]
    assert sorted(outcomes) == sorted(f"w{i}" for i in range(8))
    for name, result in outcomes.items():
        assert isinstance(result, agentrio.PhaseResult), (name, result)
        assert (result.stop_reason, result.final_text) == ("done", f"done {name}")
        assert seen["effects"].count(f"pay {name}") <= 1
    ends = [
        r.phase
        for host in ("host-0", "host-1")
        for r in await _records(store, f"{seen['cluster']}/{host}")
        if type(r) is PhaseDone
    ]
    assert len(ends) == len(set(ends)) == 8 + len(seen["again"])


def _join_node(ray_cluster: LocalCluster) -> tuple[int, str]:
    """Join one more node to the session's cluster: its index there, its Ray id."""
    import ray

    before = {node["NodeID"] for node in ray.nodes()}
    index = ray_cluster.add_node(num_cpus=1)
    deadline = time.monotonic() + 120
    while True:
        new = {node["NodeID"] for node in ray.nodes() if node["Alive"]} - before
        if new:
            return index, new.pop()
        assert time.monotonic() < deadline, "the third node did not join"
        time.sleep(0.2)


async def test_a_host_whose_ray_node_is_removed_is_found_by_the_ping_and_survived(
    ray_cluster: LocalCluster, tmp_path: Path
) -> None:
    # A third node joins the session's cluster; three hosts, one on each node.
    # Removing the node (its raylet and workers killed, as a lost machine's)
    # loses the host on it: Ray takes 15 s or more to say so; the ping, 2 s.
    node = _join_node(ray_cluster)
    server = Server()
    (tmp_path / "store").mkdir()
    store = str(tmp_path / "store")
    try:
        seen = await _swarm(
            ray_cluster, tmp_path, server, store, agents_count=9, hosts=3, remove_node=node
        )
    finally:  # (the next tests' actors must not be placed on it while Ray thinks it lives)
        if ray_cluster.nodes[node[0]] is None:  # (removed)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(wait_node_dead, node[1])
    victim = seen["victim"]
    print(
        f"host {victim} found lost {seen['lost_at'][victim] - seen['killed_at']:.3f} s "
        f"after its node was removed ({seen['lost_why'][victim]})"
    )
    outcomes = seen["outcomes"]
    assert sorted(outcomes) == sorted(f"w{i}" for i in range(9))
    for name, result in outcomes.items():
        assert isinstance(result, agentrio.PhaseResult), (name, result)
        assert (result.stop_reason, result.final_text) == ("done", f"done {name}")
        assert seen["effects"].count(f"pay {name}") <= 1
    assert victim not in set(seen["hosts_after"].values())


async def test_a_lost_host_s_phases_go_on_under_the_cluster_budget(
    ray_cluster: LocalCluster, tmp_path: Path
) -> None:
    # The adopter opens the lost host's store in a runtime that spends from a lease
    # of its own, as a host's runtime does: the ledger sees three leases (host 0,
    # the lost host 1, host 0's adopted runtime), and the cluster stays within its
    # limit with the lost host's checkpointed spending counted once.
    (tmp_path / "store").mkdir()
    limits = {"max_requests": 10 * AGENTS, "max_total_tokens": 1_000_000}
    server = Server()
    seen = await _swarm(
        ray_cluster, tmp_path, server, str(tmp_path / "store"), budget=agentrio.Budget(**limits)
    )
    outcomes = seen["outcomes"]
    assert sorted(outcomes) == sorted(f"w{i}" for i in range(AGENTS))
    for name, result in outcomes.items():
        assert isinstance(result, agentrio.PhaseResult), (name, result)
        assert result.stop_reason == "done", (name, result.stop_reason)
    stats = seen["ledger"]
    # Three leases: host 0's, its adopted runtime's, and the lost host 1's (live
    # until its ttl passes, then expired, then closed by its checkpoints' evidence).
    assert stats.live + stats.expired + stats.closed == 3
    assert seen["usage"].requests <= limits["max_requests"]
    assert stats.committed[3] <= limits["max_requests"]
