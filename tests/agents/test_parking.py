"""The phases waiting for one sync of the checkpoint store (agents/durability/parking.py):
woken once each, a cancelled one gone at once and never woken again, a failed sync
raised in each as its own StoreError; with Trio's private names and without them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ToolCallRequest, Usage
from agentrio.agents.durability import parking
from agentrio.agents.durability.parking import LEAN, SyncGroup, new_group
from agentrio.errors import StoreError
from agentrio.store import DirectoryStore
from agentrio.testing import FunctionModel, Reply

# Both ways of parking (the public one is what a Trio without the private names gets).
KINDS = [pytest.param(True, id="lean"), pytest.param(False, id="public")]
if not LEAN:  # pragma: no cover (this Trio lacks the private names)
    KINDS = KINDS[1:]


@pytest.mark.parametrize("lean", KINDS)
async def test_a_group_wakes_each_of_its_waiters_once(lean: bool) -> None:
    group = new_group(lean)
    woken: list[int] = []

    async def waiter(i: int) -> None:
        await group.join()
        woken.append(i)
        await trio.sleep_forever()  # (parked elsewhere: a second wake would reach it here)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(waiter, i)
        await trio.testing.wait_all_tasks_blocked()
        assert woken == []
        group.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(woken) == [0, 1, 2]
        group.wake()  # (nobody left in it: nothing happens)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(woken) == [0, 1, 2]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("lean", KINDS)
async def test_a_cancelled_waiter_goes_at_once_and_is_never_woken_by_the_group(
    lean: bool,
) -> None:
    group = new_group(lean)
    elsewhere = trio.Event()
    events: list[str] = []

    async def cancelled() -> None:
        with trio.move_on_after(0.01):
            await group.join()
            events.append("woken by the group")  # pragma: no cover (the failure)
        events.append("cancelled")
        await elsewhere.wait()  # parked on something else when the group wakes
        events.append("elsewhere")

    async def stays() -> None:
        await group.join()
        events.append("synced")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancelled)
        nursery.start_soon(stays)
        while "cancelled" not in events:
            await trio.sleep(0.005)
        await trio.testing.wait_all_tasks_blocked()
        # Rescheduling the cancelled task here would be Trio's internal error.
        group.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert events == ["cancelled", "synced"]
        elsewhere.set()
    assert events == ["cancelled", "synced", "elsewhere"]


@pytest.mark.parametrize("lean", KINDS)
async def test_a_waiter_cancelled_then_joining_again_is_woken_once(lean: bool) -> None:
    group = new_group(lean)
    woken = 0

    async def waiter() -> None:
        nonlocal woken
        with trio.move_on_after(0.01):
            await group.join()
        await group.join()  # (the same group: its sync has not started)
        woken += 1
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(0.05)
        await trio.testing.wait_all_tasks_blocked()
        group.wake()
        await trio.testing.wait_all_tasks_blocked()
        assert woken == 1
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("lean", KINDS)
async def test_a_failed_sync_is_raised_in_each_waiter_as_its_own_store_error(
    lean: bool,
) -> None:
    group = new_group(lean)
    caught: list[StoreError] = []
    cause = OSError(5, "Input/output error")

    async def waiter() -> None:
        with pytest.raises(StoreError) as info:
            await group.join()
        caught.append(info.value)

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        error = StoreError("the disk is gone")
        error.__cause__ = cause
        group.wake(error)
    assert len(caught) == 2 and caught[0] is not caught[1]
    assert all(str(e) == "the disk is gone" and e.__cause__ is cause for e in caught)


def test_this_trio_parks_as_the_lean_way_relies_on() -> None:
    assert parking._behaves(SyncGroup) is LEAN


class _Wrapped(SyncGroup):
    """A group as a Trio that wraps the abort function it is given would see it: the
    parked tasks hold another function than the group's."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self.message = parking._TrioWait(lambda _: trio.lowlevel.Abort.SUCCEEDED)  # type: ignore[misc]


def test_a_trio_that_behaves_otherwise_gets_the_public_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parking._behaves(_Wrapped) is False  # (and returns: no hang)
    monkeypatch.setattr(parking, "_lean", None)
    monkeypatch.setattr(parking, "_behaves", lambda make: False)
    assert type(new_group()) is parking._PublicGroup
    monkeypatch.setattr(parking, "_lean", None)
    monkeypatch.setattr(parking, "_behaves", lambda make: True)
    assert type(new_group()) is (SyncGroup if LEAN else parking._PublicGroup)


def test_the_public_group_is_a_sync_group() -> None:
    assert isinstance(new_group(False), SyncGroup)
    assert type(new_group(False)) is not SyncGroup


# -- through the runtime: a phase whose deadline passes while it waits for the sync ----


class _SlowStore(DirectoryStore):
    """A directory store whose appends wait until released (a disk that stalls)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = trio.Event()
        self.waiting = False

    async def _append_own_frames(self, frames: Sequence[bytes], *, sync: bool) -> None:
        # (what the runtime's CheckpointWriter hands a directory store)
        self.waiting = True
        await self.release.wait()
        await super()._append_own_frames(frames, sync=sync)


RAN: list[str] = []


@agentrio.tool
async def pay(amount: int) -> str:
    """Pay (not idempotent: its start is synced before it runs)."""
    RAN.append(f"pay {amount}")
    await trio.lowlevel.checkpoint()
    return f"paid {amount}"


async def _model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    await trio.lowlevel.checkpoint()
    if not any(m.role == "tool" for m in messages):
        call = ToolCallRequest("pay", {"amount": 5}, id="c1")
        return Reply(tool_calls=(call,), usage=Usage(5, 5))
    return Reply(text="done", usage=Usage(5, 5))


def _spec() -> AgentSpec[str]:
    return AgentSpec(name="payer", model=FunctionModel(_model), tools=[pay])


@pytest.mark.parametrize("lean", KINDS)
async def test_a_phase_whose_deadline_passes_during_the_sync_ends_and_its_tool_never_runs(
    lean: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentrio.agents.durability.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "new_group", lambda: new_group(lean))
    RAN.clear()
    store = _SlowStore(tmp_path / "store")
    async with agentrio.open_runtime(store=store, specs={"payer": _spec}) as rt:
        agent = await rt.spawn_agent(_spec(), name="a")
        result = await agent.run("pay five", timeout=0.2)
        assert store.waiting
        assert result.stop_reason == "timeout"
        assert RAN == []  # (its start was never on disk: it never ran)
        store.release.set()
        other = await rt.spawn_agent(_spec(), name="b")
        with trio.fail_after(10):  # (a waiter never woken fails here, not forever)
            again = await other.run("pay five")
        assert again.stop_reason == "done" and RAN == ["pay 5"]
