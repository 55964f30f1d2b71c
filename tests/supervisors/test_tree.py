"""Tree: the kernel's own way in, a supervision tree made and run without the runtime."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import agentrio
from agentrio.actors import exit_reason, interrupt_after
from agentrio.errors import RestartIntensityExceeded, RuntimeClosed
from agentrio.supervisors import Tree


class Ping(agentrio.Message):
    pass


class Crash(agentrio.Message):
    pass


class Echo(agentrio.Actor[agentrio.Message]):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def on_start(self) -> None:
        self.log.append(f"start {self.ref.name}")

    async def handle(self, msg: agentrio.Message) -> str:
        if isinstance(msg, Crash):
            raise RuntimeError("boom")
        return f"pong from {self.ref.path}"

    async def on_stop(self) -> None:
        self.log.append(f"stop {self.ref.name}")


class Root(agentrio.SupervisorRef):
    """A root's ref with something of its own (as the runtime's Runtime is)."""

    __slots__ = ("extra",)


async def test_a_tree_runs_spawns_and_stops_gracefully(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    tree = Tree(agentrio.SupervisorRef)
    root = tree.ref
    assert (root.path, root.name, type(root)) == ("", "", agentrio.SupervisorRef)
    early = await root.spawn(Echo, log, name="early")  # waits for run() to start it
    events: list[agentrio.events.Event] = []

    async def collect() -> None:
        async with tree.bus.subscribe(100) as stream:
            async for event in stream:
                events.append(event)

    ran: list[str] = []

    async def run() -> None:
        await tree.run()
        ran.append("returned")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect)
        await trio.testing.wait_all_tasks_blocked()
        assert log == []
        nursery.start_soon(run)
        team = await root.spawn_supervisor(name="team")
        late = team.spawn_nowait(Echo, log, name="late")
        assert await early.ask(Ping()) == "pong from early"
        assert await late.ask(Ping()) == "pong from team/late"
        assert root.lookup("team/late") is late
        assert tree.holds(root) and tree.holds(team)
        assert root.statistics().state == "running"
        assert not root.closed
        tree.begin_stop()
        assert root.closed and root.statistics().state == "stopping"
        with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
            root.spawn_nowait(Echo, log)
    # run() returned once everything had stopped, last spawned first; the bus closed
    # (the collector's stream ended).
    assert ran == ["returned"]
    assert log == ["start early", "start late", "stop late", "stop early"]
    assert [exit_reason(r) for r in (early, late)] == ["stopped", "stopped"]
    assert root.statistics().state == "exited"
    assert root.statistics().actors == 0
    exits = [e.path for e in events if isinstance(e, agentrio.events.ActorExited)]
    assert exits == ["team/late", "team", "early"]


async def test_cancel_ends_the_tree_but_not_the_task_running_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    tree = Tree(agentrio.SupervisorRef)
    after: list[str] = []

    async def run() -> None:
        await tree.run()
        after.append("run returned")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        a = await tree.ref.spawn(Echo, log, name="a")
        await a.ask(Ping())
        tree.cancel()
    assert after == ["run returned"]
    assert exit_reason(a) == "cancelled"
    assert log == ["start a"]  # no on_stop: cancelled


async def test_the_roots_ref_stops_and_cancels_its_tree(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for how in ("stop", "cancel"):
        log: list[str] = []
        tree = Tree(agentrio.SupervisorRef)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tree.run)
            a = await tree.ref.spawn(Echo, log, name="a")
            await a.ask(Ping())  # (the tree runs)
            if how == "stop":
                await tree.ref.stop()  # begins the stop, returns at once
                assert exit_reason(a) is None
            else:
                tree.ref.cancel()
        assert exit_reason(a) == ("stopped" if how == "stop" else "cancelled")


async def test_cancelling_the_task_that_runs_it_cancels_the_tree(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tree = Tree(agentrio.SupervisorRef)
    with trio.move_on_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tree.run)
            a = await tree.ref.spawn(Echo, [], name="a")
    assert exit_reason(a) == "cancelled"
    assert tree.ref.closed


async def test_a_tree_runs_once() -> None:
    tree = Tree(agentrio.SupervisorRef)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tree.run)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(RuntimeClosed, match="runs once"):
            await tree.run()
        tree.begin_stop()
    with pytest.raises(RuntimeClosed, match="runs once"):
        await tree.run()


async def test_run_raises_when_the_root_gives_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tree = Tree(agentrio.SupervisorRef, max_restarts=0)
    ref = tree.ref.spawn_nowait(Echo, [], name="fragile")
    bystander = tree.ref.spawn_nowait(Echo, [], name="bystander")
    with pytest.RaisesGroup(RestartIntensityExceeded):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tree.run)
            with pytest.raises(agentrio.ActorCrashed):
                await ref.ask(Crash())
            await trio.sleep_forever()
    assert exit_reason(bystander) == "cancelled"
    assert tree.ref.statistics().state == "exited"


async def test_the_root_can_be_a_subclass_and_trees_are_apart() -> None:
    tree = Tree(Root, shutdown_timeout=2.0)
    other = Tree(agentrio.SupervisorRef)
    assert isinstance(tree.ref, Root)
    tree.ref.extra = "mine"
    assert tree.ref.shutdown_timeout == 2.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tree.run)
        nursery.start_soon(other.run)
        team = await tree.ref.spawn_supervisor(name="team")
        inner = await team.spawn_supervisor(name="inner")
        assert [tree.holds(r) for r in (tree.ref, team, inner, other.ref)] == [
            True,
            True,
            True,
            False,
        ]
        assert not tree.holds("team")  # type: ignore[arg-type]
        # The root's ref is the one the tree gives out everywhere.
        with pytest.raises(agentrio.errors.DuplicateName, match="<Root ''>"):
            await tree.ref.spawn_supervisor(name="team")
        tree.begin_stop()
        other.begin_stop()


async def test_a_tree_keeps_the_runtimes_timers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # interrupt_after works under a bare tree: the tree made the timer task's heap.
    class Slow(agentrio.Actor[Ping]):
        async def handle(self, msg: Ping) -> str:
            alarm = interrupt_after(self.ref, 1.0)
            assert alarm is not None
            if alarm.rang:
                return "unreachable"
            try:
                await trio.sleep(0.5)
            finally:
                alarm.disarm()
            return "in time"

    tree = Tree(agentrio.SupervisorRef)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tree.run)
        slow = await tree.ref.spawn(Slow)
        assert await slow.ask(Ping()) == "in time"
        tree.begin_stop()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((object,), {}, "ref_class must be agentrio.SupervisorRef"),
        ((agentrio.ActorRef,), {}, "ref_class must be agentrio.SupervisorRef"),
        ((agentrio.SupervisorRef,), {"strategy": "rest_for_one"}, "strategy"),
        ((agentrio.SupervisorRef,), {"shutdown_timeout": -1}, "shutdown_timeout"),
        ((agentrio.SupervisorRef,), {"max_restarts": -1}, "max_restarts"),
    ],
)
def test_a_tree_checks_its_arguments(
    args: tuple[object], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(agentrio.InvalidArgument, match=match):
        Tree(*args, **kwargs)  # type: ignore[arg-type]


def test_a_tree_has_a_public_constructor_and_its_root_ref_none() -> None:
    tree = Tree(agentrio.SupervisorRef)
    assert repr(tree) == "<Tree <SupervisorRef ''> running>"
    with pytest.raises(TypeError, match="no public constructor"):
        agentrio.SupervisorRef()
