"""The event bus: bounded subscribers, EventsLost with exact counts, never slowing actors."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrio
from agentrio import (
    InvalidArgument,
)
from agentrio.actors.bus import QUIET, EventBus
from agentrio.events import (
    ActorExited,
    ActorFailed,
    ActorRestarted,
    ActorStarted,
    DeadLetter,
    EventsLost,
)

RecordEvents = Callable[..., list[agentrio.events.Event]]


def ev(n: int) -> agentrio.events.Event:
    return ActorStarted(path=f"a{n}", restarts=n)


class Ping(agentrio.Message):
    n: int = 0


class Crash(agentrio.Message):
    pass


class Echo(agentrio.Actor[agentrio.Message]):
    async def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Crash):
            raise ValueError("bad")
        return msg


async def drain(stream: agentrio.events.EventStream) -> list[agentrio.events.Event]:
    """Everything a closed stream still holds."""
    return [event async for event in stream]


# -- the bus on its own -------------------------------------------------------------------


def test_the_bus_is_public_in_agentrio_core() -> None:
    # The agent layer publishes on it: a documented seam of the kernel.
    assert agentrio.actors.EventBus is EventBus
    assert "EventBus" in agentrio.actors.__all__
    assert EventBus.__module__ == "agentrio.actors"
    tree = agentrio.supervisors.Tree(agentrio.SupervisorRef)
    assert type(tree.bus) is EventBus and not tree.bus.active


async def test_every_subscriber_gets_every_event_in_order() -> None:
    bus = EventBus()
    assert not bus.active
    one, two = bus.subscribe(), bus.subscribe(capacity=5)
    assert bus.active
    for n in range(5):
        bus.publish(ev(n))
    bus.close()
    assert not bus.active
    assert await drain(one) == [ev(n) for n in range(5)]
    assert await drain(two) == [ev(n) for n in range(5)]


async def test_a_full_subscriber_loses_events_and_is_told_how_many_in_place() -> None:
    bus = EventBus()
    slow = bus.subscribe(capacity=2)
    fast = bus.subscribe(capacity=100)
    for n in range(6):
        bus.publish(ev(n))  # 0 and 1 fit, 2..5 are lost for `slow`
    assert slow.lost == 4
    assert await slow.receive() == ev(0)
    bus.publish(ev(6))  # room for one: the loss report comes first, and fills it
    assert slow.lost == 1  # ... so ev(6) was lost too
    assert await slow.receive() == ev(1)
    assert await slow.receive() == EventsLost(path="", count=4)
    assert slow.lost == 1
    assert await slow.receive() == EventsLost(path="", count=1)
    assert slow.lost == 0
    bus.publish(ev(7))
    bus.close()
    assert await drain(slow) == [ev(7)]
    assert await drain(fast) == [ev(n) for n in range(8)]


async def test_a_loss_is_reported_before_later_events() -> None:
    bus = EventBus()
    stream = bus.subscribe(capacity=3)
    for n in range(5):
        bus.publish(ev(n))
    assert [await stream.receive() for _ in range(3)] == [ev(0), ev(1), ev(2)]
    bus.publish(ev(5))
    bus.publish(ev(6))
    bus.close()
    assert await drain(stream) == [EventsLost(path="", count=2), ev(5), ev(6)]


async def test_receive_waits_for_the_next_event() -> None:
    bus = EventBus()
    stream = bus.subscribe()
    got: list[agentrio.events.Event] = []
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            got.append(await stream.receive())

        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        bus.publish(ev(1))
    assert got == [ev(1)]


async def test_end_of_stream() -> None:
    bus = EventBus()
    stream = bus.subscribe()
    bus.publish(ev(1))
    async with trio.open_nursery() as nursery:
        ended = trio.Event()

        async def reader() -> None:
            assert await stream.receive() == ev(1)
            with pytest.raises(trio.EndOfChannel):
                await stream.receive()
            ended.set()

        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not ended.is_set()  # waiting for more
        bus.close()
    assert ended.is_set()
    late = bus.subscribe()  # after close: a stream that has already ended
    assert not bus.active
    assert await drain(late) == []


async def test_leaving_the_async_with_unsubscribes() -> None:
    bus = EventBus()
    stream = bus.subscribe()
    async with stream as same:
        assert same is stream
        bus.publish(ev(1))
    assert not bus.active
    bus.publish(ev(2))  # not seen: unsubscribed
    assert await drain(stream) == [ev(1)]


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5, "10", None])
def test_capacity_must_be_a_positive_int(capacity: object) -> None:
    with pytest.raises(InvalidArgument, match="capacity"):
        EventBus().subscribe(capacity)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=6),
    ops=st.lists(st.sampled_from(["publish", "publish", "publish", "read"]), max_size=80),
)
def test_what_a_subscriber_sees_accounts_for_every_event(capacity: int, ops: list[str]) -> None:
    """Events arrive in order, and each EventsLost(n) stands for exactly the n missing."""

    async def main() -> None:
        bus = EventBus()
        stream = bus.subscribe(capacity=capacity)
        published: list[agentrio.events.Event] = []
        received: list[agentrio.events.Event] = []
        accounted = 0  # published events the subscriber has seen or been told it lost

        def check(event: agentrio.events.Event) -> None:
            nonlocal accounted
            received.append(event)
            if isinstance(event, EventsLost):
                assert event.count > 0
                accounted += event.count
            else:
                assert event == published[accounted]
                accounted += 1

        for op in ops:
            if op == "publish":
                published.append(ev(len(published)))
                bus.publish(published[-1])
            elif accounted < len(published):  # so receive() cannot block
                check(await stream.receive())
        bus.close()
        for event in await drain(stream):
            check(event)
        assert accounted == len(published)
        # Nothing is lost while the subscriber keeps up.
        if capacity >= len(published):
            assert received == published

    trio.run(main)


# -- through the runtime ----------------------------------------------------------------------


async def test_runtime_lifecycle_events(record_events: RecordEvents) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team")
        ref = await team.spawn(Echo, name="echo", restart="transient")
        with pytest.raises(agentrio.ActorCrashed):
            await ref.ask(Crash())
        await ref.stop()
        with pytest.raises(agentrio.ActorStopped):
            await ref.send(Ping(n=1))
    await trio.testing.wait_all_tasks_blocked()
    assert events == [
        ActorStarted(path="team"),
        ActorStarted(path="team/echo"),
        DeadLetter(path="team/echo", reason="crashed_on", message_type="Crash", message="Crash()"),
        ActorFailed(path="team/echo", error_type="ValueError", error="bad"),
        ActorRestarted(path="team/echo", restarts=1),
        ActorStarted(path="team/echo", restarts=1),
        ActorExited(path="team/echo", reason="stopped"),
        DeadLetter(path="team/echo", reason="stopped", message_type="Ping", message="Ping(n=1)"),
        ActorExited(path="team", reason="stopped"),
    ]


async def test_a_slow_subscriber_never_slows_the_actors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        slow = rt.events(capacity=3)
        fast = rt.events(capacity=10_000)
        start = trio.current_time()
        refs = [await rt.spawn(Echo, name=f"e{i}", mailbox=0) for i in range(20)]
        for ref in refs:
            assert await ref.ask(Ping(n=1)) == Ping(n=1)
        for ref in refs:
            await ref.stop()
        # 40 events published, nobody read them, and no time passed.
        assert trio.current_time() == start
        assert slow.lost == 37
        await fast.__aexit__(None, None, None)
        assert len(await drain(fast)) == 40
        first = [await slow.receive() for _ in range(4)]
    rest = await drain(slow)
    assert all(isinstance(e, ActorStarted) for e in first[:3])  # the first three published
    assert first[3] == EventsLost(path="", count=37)
    assert rest == []


async def test_events_end_when_the_runtime_stops() -> None:
    async with agentrio.open_runtime() as rt:
        stream = rt.events()
        await rt.spawn(Echo, name="e")
    assert await drain(stream) == [ActorStarted(path="e"), ActorExited(path="e")]
    after = rt.events()
    assert await drain(after) == []


async def test_no_subscriber_no_event_but_dead_letters_are_counted() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Echo, name="e")
        await ref.stop()
        with pytest.raises(agentrio.ActorStopped):
            ref.send_nowait(Ping())
        assert rt.statistics().dead_letters == 1
        late = rt.events()
        await late.__aexit__(None, None, None)
        assert await drain(late) == []


async def test_drops_are_logged_once_per_stretch_not_once_per_event(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrio.actors.bus")
    warned = "an event subscriber fell behind (its buffer of 2 events is full): events are "
    warned += "dropped for it (counted in EventsLost) until it catches up"
    bus = EventBus()
    slow = bus.subscribe(capacity=2)
    for n in range(10_000):
        bus.publish(ev(n))
    for _ in range(100):  # always behind: each event taken makes room for one more drop
        await slow.receive()
        bus.publish(ev(0))
        bus.publish(ev(1))
    await trio.sleep(QUIET - 1)
    bus.publish(ev(2))  # still within the quiet time
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [line for line in lines if line[0] == logging.WARNING] == [(logging.WARNING, warned)]
    told = [line for line in lines if line[0] == logging.DEBUG]
    assert told[0] == (
        logging.DEBUG,
        "an event subscriber is told 9998 event(s) were dropped for it",
    )
    caplog.clear()
    while slow.lost or slow._buffer:  # it catches up...
        await slow.receive()
    await trio.sleep(QUIET)  # ...and stays so: its next drop is news again
    for n in range(3):
        bus.publish(ev(n))
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [warned]
    assert "a0" not in caplog.text  # (no event's content either)


def test_attach_calls_back_at_publish_and_on_close() -> None:
    from agentrio.actors import EventBus
    from agentrio.events import Stalled

    bus = EventBus()
    seen: list[object] = []
    closed: list[bool] = []
    detach = bus.attach(seen.append, lambda: closed.append(True))
    assert bus.active
    bus.publish(Stalled(path="a"))
    assert seen == [Stalled(path="a")]
    detach()
    assert not bus.active
    bus.publish(Stalled(path="b"))
    assert len(seen) == 1
    bus.attach(seen.append, lambda: closed.append(True))
    bus.close()
    assert closed == [True] and not bus.active
    bus.attach(seen.append, lambda: closed.append(True))  # closed already: at once
    assert closed == [True, True] and not bus.active
