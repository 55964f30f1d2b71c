"""open_runtime(): the root supervisor's lifetime, failure at the root, lookups, statistics."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    ActorCrashed,
    ActorStopped,
    InvalidArgument,
    PhaseResult,
)
from agentrio.agents.composition.compose import agent_tool
from agentrio.agents.loop.phase import CALLER
from agentrio.errors import RestartIntensityExceeded, RuntimeClosed, UnknownName
from agentrio.testing import FunctionModel, Reply

if TYPE_CHECKING:
    from conftest import TaskTracker

RecordEvents = Callable[..., list[agentrio.events.Event]]


# Virtual seconds (MockClock): a test that deadlocks jumps here and fails at once.
DEADLINE = 1000


class Put(agentrio.Message):
    n: int


class Crash(agentrio.Message):
    pass


class Block(agentrio.Message):
    pass


class Worker(agentrio.Actor[agentrio.Message]):
    def __init__(self, log: list[str], gate: trio.Event | None = None) -> None:
        self.log = log
        self.gate = gate

    async def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Put):
            self.log.append(f"{self.ref.path} put {msg.n}")
            return msg.n
        if isinstance(msg, Crash):
            raise RuntimeError("boom")
        if isinstance(msg, Block):
            assert self.gate is not None
            await self.gate.wait()
            return "unblocked"
        raise AssertionError(msg)

    async def on_stop(self) -> None:
        self.log.append(f"{self.ref.path} stop")


def _runtime_tasks(tracker: TaskTracker) -> list[trio.lowlevel.Task]:
    root = tracker.named("agentrio root supervisor")
    return [root, *tracker.descendants(root)]


async def test_the_runtime_is_the_root_supervisor() -> None:
    async with agentrio.open_runtime() as rt:
        assert isinstance(rt, agentrio.Runtime)
        assert isinstance(rt, agentrio.SupervisorRef)
        assert (rt.name, rt.path) == ("", "")
        assert not rt.closed
        assert rt.statistics().state == "running"
        team = await rt.spawn_supervisor(name="team")
        ref = await team.spawn(Worker, [], name="w")
        assert rt.lookup("team/w") is ref
        assert rt.lookup_supervisor("team") is team
        assert rt.children() == [team]
    assert rt.closed
    assert rt.statistics().state == "exited"


async def test_leaving_the_block_stops_everything_gracefully(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            team = await rt.spawn_supervisor(name="team")
            refs = [await team.spawn(Worker, log, name=f"w{i}") for i in range(3)]
            top = await rt.spawn(Worker, log, name="top")
            for ref in (*refs, top):
                for n in range(3):
                    ref.send_nowait(Put(n=n))  # still queued when the block ends
            tasks = _runtime_tasks(task_tracker)
        # Every queued message was handled, then on_stop ran, last spawned first.
        for path in ("team/w0", "team/w1", "team/w2", "top"):
            assert [line for line in log if line.startswith(path)] == [
                f"{path} put 0",
                f"{path} put 1",
                f"{path} put 2",
                f"{path} stop",
            ]
        stops = [line for line in log if line.endswith(" stop")]
        assert stops == ["top stop", "team/w2 stop", "team/w1 stop", "team/w0 stop"]
        # Nothing outlives the block.
        assert len(tasks) >= 2
        assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
        for ref in (*refs, top):
            assert ref.statistics().state == "exited"
            with pytest.raises(ActorStopped):
                ref.send_nowait(Put(n=9))


async def test_a_child_can_use_earlier_siblings_while_it_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Children stop one at a time, last spawned first (as in OTP)."""
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging

        class Store(agentrio.Actor[Put]):
            def __init__(self) -> None:
                self.total = 0

            async def handle(self, msg: Put) -> object:
                self.total += msg.n
                return self.total

        class User(agentrio.Actor[Put]):
            def __init__(self, store: agentrio.ActorRef, results: list[object]) -> None:
                self.store = store
                self.results = results

            async def handle(self, msg: Put) -> object:
                return await self.store.ask(msg)

            async def on_stop(self) -> None:
                # The store was spawned first, so it is still running.
                self.results.append(await self.store.ask(Put(n=100)))

        results: list[object] = []
        async with agentrio.open_runtime() as rt:
            store = await rt.spawn(Store, name="store")
            users = [await rt.spawn(User, store, results, name=f"u{i}") for i in range(3)]
            for user in users:
                user.send_nowait(Put(n=1))
        assert results == [103, 203, 303]


async def test_leaving_with_an_exception_cancels_everything(task_tracker: TaskTracker) -> None:
    log: list[str] = []
    never = trio.Event()
    with pytest.raises(ValueError, match="user code failed"):  # (as itself: no group)
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, never, name="w")
            ref.send_nowait(Block())
            ref.send_nowait(Put(n=1))
            await trio.testing.wait_all_tasks_blocked()
            tasks = _runtime_tasks(task_tracker)
            raise ValueError("user code failed")
    assert log == []  # no on_stop, the queued Put was never handled
    assert len(tasks) >= 2
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    assert ref.statistics().state == "exited"
    with pytest.raises(ActorStopped) as info:
        await ref.send(Put(n=2))
    assert info.value.reason == "cancelled"


async def test_an_outer_cancel_scope_cancels_the_runtime(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    log: list[str] = []
    with trio.move_on_after(5) as scope:
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, trio.Event(), name="w")
            ref.send_nowait(Block())
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() == 5
    assert log == []
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    assert ref.statistics().state == "exited"


async def test_a_cancel_from_above_reaches_every_busy_child_at_once(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    # A child's task swallows the Cancelled that ends it (see _child_main): safe
    # only because it is the task's top frame. The cancel must still reach the
    # supervisors and the scope that made it, with nothing left running.
    async def stuck(messages: object, tools: object) -> Reply:
        await trio.sleep_forever()
        raise AssertionError

    log: list[str] = []
    never = trio.Event()
    went_on = False
    with trio.CancelScope() as scope:
        async with agentrio.open_runtime(shutdown_timeout=60) as rt:
            workers = [await rt.spawn(Worker, log, never, name=f"w{i}") for i in range(20)]
            team = await rt.spawn_supervisor(name="team")
            workers += [await team.spawn(Worker, log, never, name=f"t{i}") for i in range(20)]
            for ref in workers:
                ref.send_nowait(Block())
            spec = agentrio.AgentSpec("a", FunctionModel(stuck))
            agents = [await rt.spawn_agent(spec, name=f"a{i}") for i in range(10)]
            agents += [await agent.spawn_subagent(spec) for agent in agents]
            async with trio.open_nursery() as nursery:
                for agent in agents:
                    nursery.start_soon(agent.run, "hi")
                await trio.testing.wait_all_tasks_blocked()
                start = trio.current_time()
                scope.cancel()
                await trio.sleep_forever()
        went_on = True  # (never: the cancel reaches this scope)
    assert scope.cancelled_caught and not went_on
    assert trio.current_time() == start  # no shutdown_timeout, no on_stop
    assert log == []
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    assert {ref.statistics().state for ref in [*workers, *agents]} == {"exited"}


async def test_shutdown_timeout_at_the_root(autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    async with agentrio.open_runtime(shutdown_timeout=2.5) as rt:
        stuck = await rt.spawn(Worker, log, trio.Event(), name="stuck")
        fine = await rt.spawn(Worker, log, name="fine")
        stuck.send_nowait(Block())
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
    assert trio.current_time() - start == 2.5
    assert log == ["fine stop"]  # stuck was cancelled: no on_stop
    assert stuck.statistics().state == fine.statistics().state == "exited"


async def test_root_gives_up_with_an_exception_group_naming_actor_and_cause(
    task_tracker: TaskTracker,
) -> None:
    with pytest.RaisesGroup(RestartIntensityExceeded) as info:
        async with agentrio.open_runtime(max_restarts=2, period=10) as rt:
            team = await rt.spawn_supervisor(name="team", max_restarts=10)
            bystander = await team.spawn(Worker, [], trio.Event(), name="bystander")
            bystander.send_nowait(Block())
            ref = await rt.spawn(Worker, [], name="w", restart="permanent")
            for _ in range(2):
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash())
            with pytest.raises(ActorCrashed):
                await ref.ask(Crash())  # the third restart in 10 s: too many
            await trio.sleep_forever()  # the block is cancelled
    (err,) = info.value.exceptions
    assert isinstance(err, RestartIntensityExceeded)
    assert err.child == "w"
    assert isinstance(err.cause, RuntimeError)
    assert err.__cause__ is err.cause
    text = str(err)
    assert "'w'" in text
    assert "RuntimeError('boom')" in text
    assert "more than 2 restarts within 10" in text
    assert rt.closed
    assert bystander.statistics().state == "exited"
    assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
    with pytest.raises(RuntimeClosed):
        await rt.spawn(Worker, [])


async def test_a_failing_subtree_escalates_up_to_the_root(record_events: RecordEvents) -> None:
    with pytest.RaisesGroup(RestartIntensityExceeded) as info:
        async with agentrio.open_runtime(max_restarts=1) as rt:
            events = record_events(rt)
            team = await rt.spawn_supervisor(name="team", max_restarts=0)
            ref = await team.spawn(Worker, [], name="w")
            for _ in range(2):  # each crash fails team; the second is one team restart too many
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash())
                await trio.testing.wait_all_tasks_blocked()
            await trio.sleep_forever()
    (err,) = info.value.exceptions
    assert isinstance(err, RestartIntensityExceeded)
    assert err.child == "team"
    assert isinstance(err.cause, RestartIntensityExceeded)
    assert err.cause.child == "team/w"
    assert "'team'" in str(err)
    assert "'team/w'" in str(err)
    await trio.testing.wait_all_tasks_blocked()  # let the recorder read the last events
    escalated = [e for e in events if isinstance(e, agentrio.events.SupervisorEscalated)]
    assert [(e.path, e.child) for e in escalated] == [
        ("team", "team/w"),
        ("team", "team/w"),
        ("", "team"),
    ]


async def test_stop_inside_the_block_begins_the_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, name="w")
            ref.send_nowait(Put(n=1))
            await rt.stop()
            assert rt.closed
            with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
                await rt.spawn(Worker, log)
            await trio.testing.wait_all_tasks_blocked()
            assert log == ["w put 1", "w stop"]
            assert ref.statistics().state == "exited"


async def test_cancel_inside_the_block_cancels_every_actor(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Worker, log, trio.Event(), name="w")
            ref.send_nowait(Block())
            await trio.testing.wait_all_tasks_blocked()
            rt.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert task_tracker.alive(_runtime_tasks(task_tracker)) == []
            assert ref.statistics().state == "exited"
            assert log == []
            with pytest.raises(RuntimeClosed):
                await rt.spawn_supervisor()


async def test_spawning_on_a_closed_runtime() -> None:
    async with agentrio.open_runtime() as rt:
        pass
    with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
        await rt.spawn(Worker, [])
    with pytest.raises(RuntimeClosed, match="the runtime has stopped"):
        await rt.spawn_supervisor(name="late")
    with pytest.raises(UnknownName, match="the runtime"):
        rt.lookup("anything")


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"strategy": "x"}, "strategy"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": "3"}, "max_restarts"),
        ({"period": math.nan}, "period"),
        ({"period": -5}, "period"),
        ({"backoff": "fast"}, "backoff"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"shutdown_timeout": "5"}, "shutdown_timeout"),
    ],
)
async def test_open_runtime_rejects_bad_arguments(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        async with agentrio.open_runtime(**kwargs):
            raise AssertionError("should not start")
    assert str(info.value).startswith(argument)


async def test_events_capacity_is_checked() -> None:
    async with agentrio.open_runtime() as rt:
        for bad in (0, -1, "5"):
            with pytest.raises(InvalidArgument, match="capacity"):
                rt.events(capacity=bad)  # type: ignore[arg-type]


async def test_root_strategy_and_backoff(autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    backoff = agentrio.Backoff(initial=2, factor=2, maximum=10)
    async with agentrio.open_runtime(strategy="one_for_all", backoff=backoff) as rt:
        a = await rt.spawn(Worker, log, name="a")
        b = await rt.spawn(Worker, log, name="b")
        await trio.testing.wait_all_tasks_blocked()  # both running before a crashes
        start = trio.current_time()
        with pytest.raises(ActorCrashed):
            await a.ask(Crash())
        assert await b.ask(Put(n=1)) == 1  # b was restarted at once
        assert trio.current_time() == start
        assert await a.ask(Put(n=2)) == 2  # a waits out its backoff
        assert trio.current_time() - start == 2
        assert a.statistics().restarts == b.statistics().restarts == 1


async def test_runtime_statistics() -> None:
    gate = trio.Event()
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        w = await team.spawn(Worker, [], gate, name="w", restart="permanent")
        top = await rt.spawn(Worker, [], name="top", mailbox=3)
        await top.ask(Put(n=1))
        with pytest.raises(ActorCrashed):
            await w.ask(Crash())
        w.send_nowait(Block())
        w.send_nowait(Put(n=1))
        await top.stop()
        with pytest.raises(ActorStopped):
            top.send_nowait(Put(n=2))
        await trio.testing.wait_all_tasks_blocked()
        stats = rt.statistics()
        assert stats == agentrio.types.SupervisorStatistics(
            path="",
            state="running",
            children=1,  # top has exited
            actors=1,
            supervisors=1,
            messages_handled=0,  # top's count left with it
            restarts=1,
            mailbox_size=1,
            dead_letters=2,  # the crashing message and the one sent to top
        )
        assert top.statistics().messages_handled == 1
        gate.set()
    assert rt.statistics().state == "exited"
    assert rt.statistics().actors == 0


# -- agents, helpers and maps under a supervisor of choice ---------------------------------


def _answer(messages: Sequence[agentrio.ChatMessage], tools: Sequence[object]) -> Reply:
    return Reply(text="did: " + [m.content for m in messages if m.role == "user"][-1])


async def test_spawn_agent_helper_and_map_under_a_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    spec = agentrio.AgentSpec("a", FunctionModel(_answer))
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        inner = await team.spawn_supervisor(name="inner")
        top = await rt.spawn_agent(spec)
        member = await rt.spawn_agent(spec, under=team, name="b")
        deep = await rt.spawn_agent(spec, under=inner)
        helper = rt.helper(FunctionModel(_answer), name="h", under=team)
        assert [top.path, member.path, deep.path] == ["a", "team/b", "team/inner/a"]
        assert helper.agent.path == "team/h"
        assert team.lookup("b") is member.ref and inner.lookup("a") is deep.ref
        assert (await member.run("go")).final_text == "did: go"
        assert (await helper.execute("x")).content == "did: x"
        mapped = await rt.map(spec, ["m1", "m2"], under=inner, concurrency=1)
        assert [r.final_text for r in mapped if isinstance(r, agentrio.PhaseResult)] == [
            "did: m1",
            "did: m2",
        ]
        await team.stop()  # what was spawned under it stops with it, and only that
        for agent in (member, deep, helper.agent):
            assert agent.statistics().state == "exited"
        assert top.statistics().state == "running"
        with pytest.raises(RuntimeClosed, match="'team' has stopped"):
            await rt.spawn_agent(spec, under=team)
        with pytest.raises(RuntimeClosed):
            rt.helper(FunctionModel(_answer), under=team)


async def test_a_cancelled_supervisor_cancels_the_agents_spawned_under_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(messages: Sequence[agentrio.ChatMessage], tools: Sequence[object]) -> Reply:
        await trio.sleep(100)
        return Reply(text="late")

    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        agent = await rt.spawn_agent(agentrio.AgentSpec("a", FunctionModel(slow)), under=team)
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with pytest.raises(ActorStopped):
                    await agent.run("go")

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            team.cancel()
        assert agent.statistics().state == "exited"
        assert trio.current_time() < 100


async def test_under_must_be_a_supervisor_of_this_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    spec = agentrio.AgentSpec("a", FunctionModel(_answer))
    async with agentrio.open_runtime() as other, agentrio.open_runtime() as rt:
        foreign = await other.spawn_supervisor(name="foreign")
        agent = await rt.spawn_agent(spec)
        actor = await rt.spawn(Worker, [], name="w")
        for bad, why in [
            (agent, r"under must be a SupervisorRef .* got AgentRef: <AgentRef 'a' \w+>"),
            (actor, r"under must be a SupervisorRef .* got ActorRef: <ActorRef 'w' \w+>"),
            ("team", r"under must be a SupervisorRef .* got str: 'team'"),
            (foreign, r"under=<SupervisorRef 'foreign'> is a supervisor of another runtime"),
            (other, r"under=<Runtime ''> is a supervisor of another runtime"),
        ]:
            with pytest.raises(InvalidArgument, match=why):
                await rt.spawn_agent(spec, under=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match=why):
                rt.helper(FunctionModel(_answer), under=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match=why):
                await rt.map(spec, ["x"], under=bad)  # type: ignore[arg-type]
        assert [c.path for c in rt.children()] == ["a", "w"]
        assert other.children() == [foreign] and foreign.children() == []
        assert (await rt.spawn_agent(spec, under=rt, name="b")).path == "b"


async def test_what_an_agent_spawns_draws_on_the_runtime_services(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Subagents, session helpers, the agents of a map and of an agent tool, and
    background runs: all under the agent's supervisor, with the runtime's services."""
    seen: dict[str, object] = {}

    async def probe() -> str:
        """Say who calls."""
        caller = CALLER.get()
        assert caller is not None and caller.ref is not None
        seen[caller.ref.path] = caller.services
        return "ok"

    tool = agentrio.Tool(probe)
    tool.needs_caller = True

    def once(messages: Sequence[agentrio.ChatMessage], tools: Sequence[object]) -> Reply:
        """One tool call (the agent tool for "delegate", else probe), then "done"."""
        if messages[-1].role == "tool":
            return Reply(text="done")
        if messages[-1].content == "delegate":
            return Reply(tool_calls=(agentrio.ToolCallRequest("ask_w", {"task": "t"}),))
        return Reply(tool_calls=(agentrio.ToolCallRequest("probe"),))

    worker = agentrio.AgentSpec("w", FunctionModel(once), tools=[tool])
    async with agentrio.open_runtime(modes=[agentrio.Mode("brief", max_iterations=2)]) as rt:
        team = await rt.spawn_supervisor(name="team")
        as_tool = agent_tool(worker, name="ask_w")
        lead = await rt.spawn_agent(
            agentrio.AgentSpec(
                "lead", FunctionModel(once), tools=[tool, as_tool], approver=lambda r: True
            ),
            under=team,
        )
        child = await lead.spawn_subagent(worker, name="child")
        # A mode only the runtime has: found through the subagent's services.
        assert (await child.run("go", mode="brief")).stop_reason == "done"
        assert (await lead.helper(name="h").execute("go")).content == "done"
        (mapped,) = await lead.map(worker, ["a"])
        assert isinstance(mapped, PhaseResult) and mapped.stop_reason == "done"
        await (await lead.start_background("go", mode="brief")).wait()
        assert (await lead.run("delegate")).final_text == "done"
    services = rt._services
    assert seen.pop("team/lead") is services
    assert seen.pop("team/child") is services  # a subagent
    assert seen.pop("team/lead.h") is services  # a session helper
    (tooled, mapped_path) = sorted(seen)  # the agent of an agent tool, and of a map
    assert mapped_path.startswith("team/w.map") and tooled.startswith("team/lead.w-")
    assert seen[mapped_path] is services and seen[tooled] is services


# -- the block's own exception comes out as itself ------------------------------------------


class Crashy(agentrio.Actor[Crash]):
    async def handle(self, msg: Crash) -> object:
        raise ValueError("bad")


async def test_an_exception_of_the_block_comes_out_as_itself() -> None:
    with pytest.raises(agentrio.ConfigError, match="unknown provider instance 'nosuch'"):
        async with agentrio.open_runtime() as rt:
            await rt.spawn_agent(agentrio.AgentSpec("a", "nosuch:model"))


async def test_a_group_the_block_raises_comes_out_as_that_group() -> None:
    raised = ExceptionGroup("mine", [KeyError("a"), KeyError("b")])
    with pytest.raises(ExceptionGroup) as caught:
        async with agentrio.open_runtime():
            raise raised
    assert caught.value is raised


async def test_the_blocks_exception_beside_the_runtimes_failure_is_a_group() -> None:
    with pytest.raises(ExceptionGroup) as caught:
        async with agentrio.open_runtime(max_restarts=0) as rt:
            worker = await rt.spawn(Crashy, name="w", restart="permanent")
            try:
                await worker.ask(Crash())
            except ActorCrashed:
                raise KeyError("mine") from None
    kinds = sorted(type(e).__name__ for e in caught.value.exceptions)
    assert kinds == ["KeyError", "RestartIntensityExceeded"]


def test_a_sync_hosts_block_raises_its_own_exception_as_itself() -> None:
    with pytest.raises(agentrio.ConfigError), agentrio.open_runtime_sync() as rt:
        rt.spawn_agent(agentrio.AgentSpec("a", "nosuch:model"))
