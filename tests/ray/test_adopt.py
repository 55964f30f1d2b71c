"""A live host adopts a lost host's store (agentrio.ray._adopt), without Ray: the
"hosts" are runtimes of this process, and the lost one is cut short as a crash
would (``rt.cancel()``: nothing of its phases' ends runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
import trio

import agentrio
from agentrio.agents.budgets.usage import UsageTotals
from agentrio.agents.durability.records import INTERRUPTED
from agentrio.errors import HostLost, InvalidArgument, StoreLocked
from agentrio.ray import _batch
from agentrio.ray._adopt import Adopted, Survival, adopt, host_store
from agentrio.store import DirectoryStore
from agentrio.testing import FunctionModel, Reply

PAID: list[str] = []
HANG = {"on": True}


@agentrio.tool
async def pay(invoice: str) -> str:
    """Pay an invoice (not idempotent)."""
    PAID.append(invoice)
    await trio.sleep(0 if not HANG["on"] else 3600)  # (in flight when the host is lost)
    return f"paid {invoice}"


async def model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    await trio.lowlevel.checkpoint()
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    results = [m for m in messages[last_user:] if m.role == "tool"]
    if not results:
        user = messages[last_user].content
        call = agentrio.ToolCallRequest("pay", {"invoice": user.split()[-1]})
        return Reply(tool_calls=(call,), usage=agentrio.Usage(50, 10))
    return Reply(text=f"done: {results[-1].content}", usage=agentrio.Usage(70, 12))


def make_clerk() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec("clerk", FunctionModel(model), tools=[pay])


SPECS = {"clerk": make_clerk}


async def _lose_host(folder: Path) -> None:
    """Host 1's life: agent c1 is cut short while ``pay`` runs; c2 never runs."""
    HANG["on"] = True
    store = host_store(str(folder), "cluster/host-1")
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        clerk = await rt.spawn_agent(make_clerk(), name="c1")

        async def caller() -> None:
            with pytest.raises(agentrio.ActorStopped):
                await clerk.run("Pay A-1", phase_id="p1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            while not PAID:
                await trio.sleep(0.01)
            rt.cancel()  # the host is lost
    HANG["on"] = False


@pytest.fixture(autouse=True)
def _paid() -> None:
    PAID.clear()


def test_host_store_is_the_host_s_own(tmp_path: Path) -> None:
    store = host_store(tmp_path, "c-1/host-3", lock_timeout=2)
    assert isinstance(store, DirectoryStore) and store.path == str(tmp_path / "host-3")
    with pytest.raises(InvalidArgument, match="connection string or a folder"):
        host_store(3, "c/host-1")  # type: ignore[arg-type]


async def test_a_live_host_goes_on_with_the_lost_host_s_phases(tmp_path: Path) -> None:
    await _lose_host(tmp_path)
    assert PAID == ["A-1"]
    store = host_store(tmp_path, "cluster/host-1", lock_timeout=5)
    async with (
        agentrio.open_runtime(store=str(tmp_path / "host-0"), specs=SPECS),
        trio.open_nursery() as nursery,
    ):
        adopted: Adopted = await nursery.start(
            lambda task_status: adopt(store, host="host-1", specs=SPECS, task_status=task_status)
        )
        assert adopted.resumed == ("p1",) and adopted.host == "host-1"
        result = await adopted.result("p1")
        assert result is not None and result.stop_reason == "done"
        # At most once: the call in flight when the host was lost is not made again.
        (call,) = result.tool_calls
        assert (call.status, call.content) == ("failed", INTERRUPTED.format(name="pay"))
        assert PAID == ["A-1"]
        # The lost host's spending, from its checkpoints, and since.
        assert adopted.usage().requests == 2
        # A phase its store never saw begin: nothing of it ran; run it here.
        assert await adopted.result("p2") is None
        again = await adopted.run("clerk", "c2", "Pay B-2", phase_id="p2")
        assert again.final_text == "done: paid B-2" and PAID == ["A-1", "B-2"]
        # ...and one on an agent the store resumed goes to that agent.
        again = await adopted.run("clerk", "c1", "Pay C-3", phase_id="p3")
        assert again.final_text == "done: paid C-3"
        adopted.close()
    # Its ends are in the lost host's store: a later adopter resumes nothing.
    async with agentrio.open_runtime(store=str(tmp_path / "host-1"), specs=SPECS) as rt:
        assert rt.resumed == ()
        assert (await rt.resumed_result("p1")).stop_reason == "done"


async def test_an_adopter_waits_for_the_lost_host_s_lock(tmp_path: Path) -> None:
    # The lock is the fence: a host taken for lost but still running keeps its
    # store, and no adopter goes on with its phases.
    async with agentrio.open_runtime(store=host_store(tmp_path, "c/host-1"), specs=SPECS):
        store = host_store(tmp_path, "c/host-1", lock_timeout=0.2)
        with pytest.RaisesGroup(StoreLocked):
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: adopt(
                        store, host="host-1", specs=SPECS, task_status=task_status
                    )
                )


# -- the driver's part, on a cluster of stand-ins (no Ray) -----------------------------


class Remote:
    """A Ray method's stand-in: ``.remote(*args)`` records the call, returns a ref."""

    def __init__(self, calls: list[tuple[Any, ...]], answer: Any = None) -> None:
        self.calls = calls
        self.answer = answer

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.answer(*args) if callable(self.answer) else self.answer


class Link:
    def __init__(self, index: int, cluster: FakeCluster) -> None:
        self.index = index
        self.agents = 0
        self.calls: set[int] = set()
        self.usage = UsageTotals(requests=7)
        self.sent: list[Any] = []
        self.outbox = SimpleNamespace(put=self.sent.append)
        self.adopts: list[tuple[Any, ...]] = []
        self.pinged = Remote([], "pong")

        def adopted(host: int, phases: Any, agents: Any, call: int) -> str:
            if cluster.adoptable:
                body = msgspec.msgpack.encode(UsageTotals(requests=3))
                cluster._pending.resolve(call, _batch.Reply(call, "", body))
            else:
                cluster._pending.fail(call, StoreLocked("held", path="p", holder="h"))
            return "adopting"

        self.handle = SimpleNamespace(ping=self.pinged, adopt=Remote(self.adopts, adopted))


class FakeCluster:
    """What Survival reads of a Cluster: links, pending calls, names."""

    def __init__(self, hosts: int) -> None:
        self._links = [Link(i, self) for i in range(hosts)]
        self._pending = _batch.Pending()
        self._names: dict[str, int] = {}
        self._closed = False
        self.adoptable = True

    async def _control(self, link: Link, ref: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return ref


async def _ref(ref: Any) -> Any:
    await trio.lowlevel.checkpoint()
    return ref


def _survival(cluster: FakeCluster, store: str | None) -> Survival:
    return Survival(cluster, store, max_restarts=3, period=5.0, await_ref=_ref)


def _run(survival: Survival, cluster: FakeCluster, host: int, agent: str) -> int:
    """A run of *agent* sent to *host*, as ClusterAgent.run sends one; its call."""
    call = cluster._pending.open()
    cluster._links[host].calls.add(call)
    options = survival.options({})
    survival.sent(call, host, _batch.Run(call, "driver", agent, "hi", options))
    return call


async def _outcome(cluster: FakeCluster, call: int) -> Any:
    try:
        return await cluster._pending.wait(call)
    except HostLost as exc:
        return exc


async def test_without_a_store_each_phase_of_a_lost_host_fails_once() -> None:
    cluster = FakeCluster(2)
    survival = _survival(cluster, None)
    cluster._names = {"a": 1, "b": 0}
    async with trio.open_nursery() as nursery:
        await nursery.start(survival.run)
        call = _run(survival, cluster, 1, "a")
        other = _run(survival, cluster, 0, "b")
        assert "phase_id" not in survival._frames[call].options  # (no store: no id made up)
        survival.lost(1, "its poll failed: ActorDiedError")
        survival.lost(1, "again")
        lost = await _outcome(cluster, call)
        assert isinstance(lost, HostLost) and (lost.path, lost.host) == ("a", 1)
        # A run sent to it afterwards fails at once; agents go to live hosts only.
        late = _run(survival, cluster, 1, "a")
        assert isinstance(await _outcome(cluster, late), HostLost)
        assert survival.live(cluster._links) == [cluster._links[0]]
        assert not cluster._links[1].adopts and other not in survival.lost_at
        nursery.cancel_scope.cancel()


async def test_with_a_store_a_lost_host_s_phases_move_to_the_adopter_as_the_same_calls() -> None:
    cluster = FakeCluster(3)
    survival = _survival(cluster, "/shared/store")
    cluster._names = {"a": 1, "b": 1, "c": 0}
    cluster._links[0].agents, cluster._links[2].agents = 5, 1  # (host 2 holds fewest)
    async with trio.open_nursery() as nursery:
        await nursery.start(survival.run)
        first = _run(survival, cluster, 1, "a")
        ask = cluster._pending.open()  # (an ask waiting on host 1: not a phase)
        cluster._links[1].calls.add(ask)
        survival.sent(ask, 1, _batch.Ask(ask, "driver", "x", "", b"", None))
        survival.lost(1, "its poll failed: ActorDiedError")
        assert isinstance(await _outcome(cluster, ask), HostLost)
        while 1 not in survival.stored:
            await trio.sleep(0.01)
        adopter = cluster._links[2]
        ((host, phases, agents, _),) = adopter.adopts
        phase_id = survival._frames[first].options["phase_id"]
        assert (host, phases, agents) == (1, {phase_id: ("a", "")}, {"a": "", "b": ""})
        # The same call, the same frame, now the adopter's; the agents too.
        assert [f.call for f in adopter.sent] == [first] and first in adopter.calls
        assert survival.where(first, 1) == 2 and survival.host_of("b", 1) == 2
        assert cluster._links[1].usage == UsageTotals()  # (the adopter reports it now)
        assert survival.stored[1] == UsageTotals(requests=3)
        # Its answer comes from the adopter, once.
        cluster._pending.resolve(first, "result")
        cluster._pending.resolve(first, "again")
        assert await cluster._pending.wait(first) == "result"
        nursery.cancel_scope.cancel()


async def test_if_no_live_host_can_adopt_the_store_the_phases_fail_once() -> None:
    cluster = FakeCluster(2)
    cluster.adoptable = False
    survival = _survival(cluster, "/shared/store")
    cluster._names = {"a": 1}
    async with trio.open_nursery() as nursery:
        await nursery.start(survival.run)
        call = _run(survival, cluster, 1, "a")
        survival.lost(1, "its poll failed: ActorDiedError")
        lost = await _outcome(cluster, call)
        assert isinstance(lost, HostLost) and "could not be adopted" in str(lost)
        assert lost.path == "a"
        nursery.cancel_scope.cancel()
