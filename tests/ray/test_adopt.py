"""A live host adopts a lost host's store (agentrio.ray._adopt), without Ray: the
"hosts" are runtimes of this process, and the lost one is cut short as a crash
would (``rt.cancel()``: nothing of its phases' ends runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

import agentrio
from agentrio.agents.checkpoint import INTERRUPTED
from agentrio.errors import InvalidArgument, StoreLocked
from agentrio.ray._adopt import Adopted, adopt, host_store
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
