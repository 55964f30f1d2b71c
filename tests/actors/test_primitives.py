"""The kernel's primitives (agentrio.actors): link, interrupt, withdrawn, linked and later
asks, begin_stop, exit_reason, wait_exited. (interrupt_after: test_timers.py.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

import agentrio
from agentrio.actors import (
    PendingAsk,
    begin_stop,
    exit_reason,
    interrupt,
    link,
    wait_exited,
    withdrawn,
)
from agentrio.testing import ScriptedModel

RecordEvents = Callable[[agentrio.Runtime], list[agentrio.events.Event]]


class Work(agentrio.Message):
    n: int = 0
    hold: bool = True  # the first delivery waits (until interrupted or cancelled)


class Ping(agentrio.Message):
    pass


class Worker(agentrio.Actor[agentrio.Message]):
    """Logs each delivery of a Work (with the incarnation and withdrawn()); the first
    delivery of one waits for ever if it holds, a second one returns at once."""

    def __init__(self, log: list[tuple[object, ...]], wind_up: float = 0.0) -> None:
        self.log = log
        self.wind_up = wind_up
        # The messages themselves, not their ids: a freed message's id can be reused.
        self.seen: list[agentrio.Message] = []

    async def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Ping):
            self.log.append(("ping",))
            return "pong"
        assert isinstance(msg, Work)
        again = any(seen is msg for seen in self.seen)
        self.seen.append(msg)
        self.log.append((msg.n, "again" if again else "first", id(self), withdrawn(self.ref)))
        if again:
            if withdrawn(self.ref) and self.wind_up:
                with trio.CancelScope(shield=True):
                    await trio.sleep(self.wind_up)
            return f"{msg.n} handled again"
        if msg.hold:
            await trio.sleep_forever()
        return f"{msg.n} handled"


class Owner(agentrio.Actor[Ping]):
    """On its way out, it still asks what it owns."""

    def __init__(self, owned: list[agentrio.ActorRef], log: list[str]) -> None:
        self.owned = owned
        self.log = log

    async def handle(self, msg: Ping) -> None:
        pass

    async def on_stop(self) -> None:
        for ref in self.owned:
            self.log.append(f"owner asked {ref.name}: {await ref.ask(Ping())}")


class Tally(agentrio.InlineActor[Ping]):
    def handle(self, msg: Ping) -> None:
        pass


def exits(events: list[agentrio.events.Event]) -> list[tuple[str, str]]:
    return [(e.path, e.reason) for e in events if isinstance(e, agentrio.events.ActorExited)]


# -- link ------------------------------------------------------------------------------


async def test_a_linked_actor_stops_after_its_owner(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        owner = await rt.spawn(Worker, log, name="owner")
        owned = await rt.spawn(Worker, log, name="owned")
        link(owned, owner)
        await owner.stop()
        await wait_exited(owner)  # (and what it owns)
        assert (exit_reason(owner), exit_reason(owned)) == ("stopped", "stopped")
        await trio.testing.wait_all_tasks_blocked()
    assert exits(events) == [("owner", "stopped"), ("owned", "stopped")]


async def test_cancelling_the_owner_cancels_what_it_owns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        owner = await rt.spawn(Worker, log, name="owner")
        owned = await rt.spawn(Worker, log, name="owned")
        inline = await rt.spawn(Tally, name="tally")
        link(owned, owner)
        link(inline, owned)  # (through two links)
        owned.send_nowait(Work(1))  # busy: a stop would wait for it
        await trio.testing.wait_all_tasks_blocked()
        owner.cancel()
        with trio.fail_after(1):
            await wait_exited(owner)
        reasons = [exit_reason(r) for r in (owner, owned, inline)]
    assert reasons == ["cancelled"] * 3


async def test_a_shutdown_leaves_the_owned_to_their_owner(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    # Spawned last, the owned actors would be stopped first; linked, they are
    # stopped after their owner, which still uses them in its on_stop.
    log: list[str] = []
    owned: list[agentrio.ActorRef] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        owner = await rt.spawn(Owner, owned, log, name="owner")
        for name in ("w1", "w2"):
            ref = await rt.spawn(Worker, [], name=name)
            link(ref, owner)
            owned.append(ref)
    assert log == ["owner asked w1: pong", "owner asked w2: pong"]
    assert [exit_reason(r) for r in [owner, *owned]] == ["stopped"] * 3
    assert [path for path, _ in exits(events)][:1] == ["owner"]


async def test_link_refuses_what_nothing_would_end_or_what_loops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        a, b, c = [await rt.spawn(Worker, log, name=n) for n in "abc"]
        with pytest.raises(agentrio.InvalidArgument, match="cycle"):
            link(a, a)
        link(b, a)
        link(b, a)  # again: nothing to do
        with pytest.raises(agentrio.InvalidArgument, match="linked to 'a' already"):
            link(b, c)
        link(c, b)
        with pytest.raises(agentrio.InvalidArgument, match="cycle"):
            link(a, c)
        with pytest.raises(agentrio.InvalidArgument, match=r"owner must be an agentrio\.ActorRef"):
            link(a, rt)  # type: ignore[arg-type]
        gone = await rt.spawn(Worker, log, name="gone")
        await gone.stop()
        late = await rt.spawn(Worker, log, name="late")
        with pytest.raises(agentrio.ActorStopped, match="nothing would end 'late'"):
            link(late, gone)


async def test_link_refuses_actors_of_two_supervisors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A supervisor orders only its own children's stop: linked across two, the
    # owned one's supervisor would stop it before its owner.
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        owner = await rt.spawn(Worker, log, name="owner")
        owned = await team.spawn(Worker, log, name="owned")
        with pytest.raises(agentrio.InvalidArgument, match="two actors of one supervisor"):
            link(owned, owner)
        with pytest.raises(agentrio.InvalidArgument, match="two actors of one supervisor"):
            link(owner, owned)
        assert owned._cell.owner is None and owner._cell.owner is None


async def test_an_owner_does_not_keep_every_actor_it_owned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        owner = await rt.spawn(Worker, log, name="owner")
        for i in range(500):
            ref = await rt.spawn(Tally, name=f"t{i}")
            link(ref, owner)
            await ref.stop()
        assert len(owner._cell.dependents or []) <= 128


# -- the refs the primitives take --------------------------------------------------------

PRIMITIVES: list[tuple[str, Callable[[object], object]]] = [
    ("link", lambda ref: link(ref, ref)),  # type: ignore[arg-type]
    ("interrupt", interrupt),  # type: ignore[list-item]
    ("interrupt_after", lambda ref: agentrio.actors.interrupt_after(ref, 1.0)),  # type: ignore[arg-type]
    ("withdrawn", withdrawn),  # type: ignore[list-item]
    ("begin_stop", begin_stop),  # type: ignore[list-item]
    ("exit_reason", exit_reason),  # type: ignore[list-item]
    ("wait_exited", wait_exited),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("name", "primitive"), PRIMITIVES)
async def test_the_primitives_refuse_what_is_not_an_actor_ref(
    autojump_clock: trio.testing.MockClock, name: str, primitive: Callable[[object], object]
) -> None:
    # An agent's handle, a supervisor's, the runtime (the root's): an
    # InvalidArgument that names the call, the argument and what it wanted
    # (not an AttributeError from inside the kernel).
    spec = agentrio.AgentSpec("a", ScriptedModel([]))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        team = await rt.spawn_supervisor(name="team")
        for wrong, hint in [(agent, "AgentRef"), (team, "supervisor"), (rt, "supervisor")]:
            arg = "owned" if name == "link" else "ref"
            wanted = rf"{name}\(\)'s {arg} must be an"
            with pytest.raises(agentrio.InvalidArgument, match=wanted) as info:
                result = primitive(wrong)
                if hasattr(result, "__await__"):
                    await result  # type: ignore[misc]
            assert hint in str(info.value)
        owner = await rt.spawn(Worker, [], name="owner")
        with pytest.raises(agentrio.InvalidArgument, match=r"link\(\)'s owner must be an"):
            link(owner, agent)  # type: ignore[arg-type]


# -- interrupt -------------------------------------------------------------------------


async def test_interrupt_delivers_the_message_again_to_the_same_incarnation(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        worker = await rt.spawn(Worker, log)
        replies: list[object] = []
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                replies.append(await worker.ask(Work(1)))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            worker.send_nowait(Work(2, hold=False))  # queued behind it
            assert interrupt(worker) is True
            assert interrupt(worker) is True  # already under way
        await trio.testing.wait_all_tasks_blocked()
        stats = worker.statistics()
    # the ask's reply reached its asker, from the second delivery
    assert replies == ["1 handled again"]
    incarnation = log[0][2]
    assert log == [
        (1, "first", incarnation, False),
        (1, "again", incarnation, False),  # the same instance, before the queued message
        (2, "first", incarnation, False),
    ]
    assert (stats.restarts, stats.messages_handled, stats.state) == (0, 2, "running")
    kinds = {type(e) for e in events}
    assert not kinds & {
        agentrio.events.ActorRestarted,
        agentrio.events.ActorFailed,
        agentrio.events.DeadLetter,
    }


class SlowStart(agentrio.Actor[Ping]):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def on_start(self) -> None:
        await trio.sleep(5)
        self.log.append("started")

    async def handle(self, msg: Ping) -> None:
        self.log.append("ping")

    async def on_stop(self) -> None:
        await trio.sleep(5)
        self.log.append("stopped")


async def test_interrupt_returns_false_when_nothing_is_being_handled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        idle = await rt.spawn(Worker, [])
        await trio.testing.wait_all_tasks_blocked()
        assert interrupt(idle) is False  # waiting on an empty mailbox
        assert interrupt(await rt.spawn(Tally)) is False  # an inline actor
        slow = await rt.spawn(SlowStart, log)
        await trio.sleep(1)
        assert interrupt(slow) is False  # in on_start
        await slow.ask(Ping())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.stop)
            await trio.sleep(1)
            assert interrupt(slow) is False  # in on_stop
        assert interrupt(slow) is False  # exited
    assert log == ["started", "ping", "stopped"]


class InterruptsItself(agentrio.Actor[Ping]):
    def __init__(self) -> None:
        self.calls = 0

    async def handle(self, msg: Ping) -> int:
        self.calls += 1
        assert interrupt(self.ref) is True
        return self.calls  # no checkpoint before it returns


async def test_an_interrupt_that_lands_as_the_handling_ends_delivers_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(InterruptsItself)
        assert await ref.ask(Ping()) == 1
        assert await ref.ask(Ping()) == 2  # it goes on, not delivered again
        stats = ref.statistics()
    assert (stats.restarts, stats.messages_handled) == (0, 2)


async def test_a_cancel_wins_over_an_interrupt(autojump_clock: trio.testing.MockClock) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log)
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                with pytest.raises(agentrio.ActorStopped):
                    await worker.ask(Work(1))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert interrupt(worker) is True
            worker.cancel()
            assert interrupt(worker) is True  # (under way: it will not happen)
        assert exit_reason(worker) == "cancelled"
    assert [entry[:2] for entry in log] == [(1, "first")]


# -- linked asks -----------------------------------------------------------------------


async def test_a_queued_linked_ask_whose_asker_is_cancelled_is_dropped_unhandled(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        worker = await rt.spawn(Worker, log)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.ask, Work(1))  # busy with it
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(1):
                await worker.ask(Work(2, hold=False), linked=True)
            # not linked, it is handled all the same
            with trio.move_on_after(1):
                await worker.ask(Work(3, hold=False))
            assert interrupt(worker) is True  # Work(1) ends, the queue goes on
        await trio.testing.wait_all_tasks_blocked()
        stats = worker.statistics()
    assert [entry[:2] for entry in log] == [(1, "first"), (1, "again"), (3, "first")]
    assert stats.messages_handled == 2
    assert not [e for e in events if isinstance(e, agentrio.events.DeadLetter)]


async def test_a_linked_ask_being_handled_is_interrupted_and_its_asker_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log, 2.0)  # its wind-up takes 2 s
        t0 = trio.current_time()
        with trio.move_on_after(5) as scope:
            await worker.ask(Work(1), linked=True)
        # the asker saw its Cancelled once the handling had ended: 5 + 2 s
        assert scope.cancelled_caught
        assert trio.current_time() - t0 == 7
        # the actor goes on
        assert await worker.ask(Ping()) == "pong"
        stats = worker.statistics()
    incarnation = log[0][2]
    assert log == [
        (1, "first", incarnation, False),
        (1, "again", incarnation, True),  # withdrawn(): no one waits for the reply
        ("ping",),
    ]
    assert (stats.restarts, stats.messages_handled) == (0, 2)


async def test_an_ask_that_is_not_linked_runs_on_without_its_asker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log)
        t0 = trio.current_time()
        with pytest.raises(agentrio.AskTimeout):
            await worker.ask(Work(1), timeout=5)
        assert trio.current_time() - t0 == 5  # it did not wait for the handling
        await trio.testing.wait_all_tasks_blocked()
        assert worker.statistics().messages_handled == 0  # still handling it
    assert [entry[:2] for entry in log] == [(1, "first")]


# -- asks for later ----------------------------------------------------------------------


async def test_an_ask_for_later_keeps_its_place_and_is_answered_in_another_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log)
        pending = await worker.ask_later(Work(1, hold=False))
        assert isinstance(pending, PendingAsk)
        assert await worker.ask(Work(2, hold=False)) == "2 handled"  # asked after it
        assert pending.done
        replies: list[object] = []
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                replies.append(await pending.reply())

            nursery.start_soon(wait)
        with pytest.raises(agentrio.InvalidArgument, match="once"):
            await pending.reply()
    assert replies == ["1 handled"]
    assert [entry[:2] for entry in log] == [(1, "first"), (2, "first")]


async def test_a_withdrawn_ask_for_later(autojump_clock: trio.testing.MockClock) -> None:
    log: list[tuple[object, ...]] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log)
        busy = await worker.ask_later(Work(1), linked=True)
        queued = await worker.ask_later(Work(2, hold=False), linked=True)
        await trio.testing.wait_all_tasks_blocked()
        queued.withdraw()  # dropped unhandled
        busy.withdraw()  # interrupted, delivered again with withdrawn() true
        assert await worker.ask(Ping()) == "pong"
        with pytest.raises(agentrio.InvalidArgument, match="inline"):
            await (await rt.spawn(Tally)).ask_later(Ping())
    assert [entry[:2] + entry[3:] for entry in log] == [
        (1, "first", False),
        (1, "again", True),
        ("ping",),
    ]


async def test_withdraw_drops_the_reply_even_for_a_waiting_reply(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[object, ...]] = []
    outcomes: list[object] = []
    async with agentrio.open_runtime() as rt:
        worker = await rt.spawn(Worker, log)
        busy = await worker.ask_later(Work(1), linked=True)
        pending = await worker.ask_later(Work(2, hold=False))  # not linked: handled all the same
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                try:
                    outcomes.append(await pending.reply())
                except agentrio.InvalidArgument as exc:
                    outcomes.append(str(exc))

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            pending.withdraw()  # the waiting reply() is told at once...
            await trio.testing.wait_all_tasks_blocked()
            assert outcomes == [
                "this PendingAsk was withdrawn: its reply is dropped, there is none to await"
            ]
            busy.withdraw()  # ...and the reply, when it comes, goes nowhere
            assert await worker.ask(Ping()) == "pong"
        assert len(outcomes) == 1 and pending.done
        with pytest.raises(agentrio.InvalidArgument, match="withdrawn"):
            await pending.reply()
        # Withdrawn after the reply came: dropped too, and said so.
        answered = await worker.ask_later(Work(3, hold=False))
        assert await worker.ask(Ping()) == "pong"
        assert answered.done
        answered.withdraw()
        answered.withdraw()  # again: nothing to do
        with pytest.raises(agentrio.InvalidArgument, match="withdrawn"):
            await answered.reply()
    assert [entry[:2] for entry in log] == [
        (1, "first"),
        (1, "again"),
        (2, "first"),  # handled, its reply dropped
        ("ping",),
        (3, "first"),
        ("ping",),
    ]


# -- stopping and exits ------------------------------------------------------------------


async def test_begin_stop_exit_reason_and_wait_exited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(SlowStart, log)
        owned = await rt.spawn(SlowStart, log)
        link(owned, ref)
        await trio.sleep(6)
        t0 = trio.current_time()
        begin_stop(ref)  # returns at once
        assert trio.current_time() == t0 and exit_reason(ref) is None
        await wait_exited(ref)  # its on_stop (5 s), then the owned one's (5 s)
        assert trio.current_time() - t0 == 10
        assert (exit_reason(ref), exit_reason(owned)) == ("stopped", "stopped")
        begin_stop(ref)  # stopped already: nothing to do
    assert log == ["started", "started", "stopped", "stopped"]
