"""Actors and ActorRef: the serve loop, send/send_nowait/ask, stop/cancel, errors, statistics."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrio
from agentrio import (
    ActorCrashed,
    ActorStopped,
    AskTimeout,
    InvalidArgument,
)
from agentrio.actors.actor import LOGGED_DEAD_LETTERS
from agentrio.errors import MailboxFull, NotAMessage, RestartIntensityExceeded, SelfAsk
from agentrio.events import (
    ActorExited,
    ActorFailed,
    ActorRestarted,
    ActorStarted,
    DeadLetter,
    SupervisorEscalated,
)

if TYPE_CHECKING:
    from conftest import TaskTracker

# Virtual seconds (MockClock): a test that deadlocks jumps here and fails at once.
DEADLINE = 1000


class Put(agentrio.Message):
    n: int


class Get(agentrio.Message):
    pass


class Crash(agentrio.Message):
    text: str = "boom"


class Block(agentrio.Message):
    pass


class Blob(agentrio.Message):
    data: str


class PlainStruct(msgspec.Struct):
    n: int


class Recorder(agentrio.Actor[agentrio.Message]):
    """Records what it handles; Get returns the list; Crash raises; Block waits on a gate."""

    log: list[str]

    def __init__(self, log: list[str] | None = None, gate: trio.Event | None = None) -> None:
        self.log = log if log is not None else []
        self.gate = gate
        self.seen: list[int] = []

    async def on_start(self) -> None:
        self.log.append("start")

    async def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Put):
            self.seen.append(msg.n)
            self.log.append(f"put {msg.n}")
            return msg.n * 10
        if isinstance(msg, Get):
            return list(self.seen)
        if isinstance(msg, Crash):
            raise RuntimeError(msg.text)
        if isinstance(msg, Block):
            assert self.gate is not None
            self.log.append("blocked")
            await self.gate.wait()
            self.log.append("unblocked")
            return "unblocked"
        return None

    async def on_stop(self) -> None:
        self.log.append("stop")


RecordEvents = Callable[[agentrio.Runtime], list[agentrio.events.Event]]


# -- the basics -----------------------------------------------------------------------


async def test_ask_returns_what_handle_returns_and_send_is_handled() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, name="r")
        await ref.send(Put(n=1))
        ref.send_nowait(Put(n=2))
        assert await ref.ask(Put(n=3)) == 30
        assert await ref.ask(Get()) == [1, 2, 3]


async def test_an_ask_started_as_a_task_is_that_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # nursery.start_soon makes the coroutine in the parent's task: the asker is
    # the task that awaits it, whose reply wakes it (not the parent).
    class Slow(agentrio.Actor[Put]):
        async def handle(self, msg: Put) -> int:
            await trio.sleep(1)
            return msg.n * 10

    with trio.fail_after(DEADLINE):
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Slow, name="slow")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ref.ask, Put(n=1))
                nursery.start_soon(functools.partial(ref.ask, Put(n=2), timeout=5))
            assert await ref.ask(Put(n=3)) == 30


async def test_constructor_args_and_lifecycle_hooks() -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, log, name="r")
        await ref.ask(Put(n=1))
        assert log == ["start", "put 1"]
    assert log == ["start", "put 1", "stop"]


async def test_messages_sent_before_start_wait_for_on_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()

        class SlowStart(Recorder):
            async def on_start(self) -> None:
                self.log.append("starting")
                await gate.wait()
                await super().on_start()

        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(SlowStart, log)
            ref.send_nowait(Put(n=1))
            await ref.send(Put(n=2))
            await trio.testing.wait_all_tasks_blocked()
            assert log == ["starting"]
            assert ref.statistics().mailbox_size == 2
            gate.set()
            assert await ref.ask(Get()) == [1, 2]
        assert log == ["starting", "start", "put 1", "put 2", "stop"]


async def test_ref_identity_name_path_repr() -> None:
    async with agentrio.open_runtime() as rt:
        sup = await rt.spawn_supervisor(name="team")
        ref = await sup.spawn(Recorder, name="r")
        assert ref.name == "r"
        assert ref.path == "team/r"
        assert rt.lookup("team/r") is ref
        assert rt.lookup("team/r") == ref
        await trio.testing.wait_all_tasks_blocked()
        assert repr(ref) == "<ActorRef 'team/r' running>"
        await ref.stop()
        assert repr(ref) == "<ActorRef 'team/r' exited>"


async def test_actor_sees_its_own_ref() -> None:
    class Me(agentrio.Actor[Get]):
        async def handle(self, msg: Get) -> object:
            return self.ref

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Me)
        assert await ref.ask(Get()) is ref


@pytest.mark.parametrize("base", [agentrio.Actor, agentrio.InlineActor])
async def test_default_handle_is_not_implemented(base: type) -> None:
    class Lazy(base[Get]):  # type: ignore[misc,valid-type]
        pass

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Lazy, restart="temporary")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Get())
        assert isinstance(info.value.cause, NotImplementedError)
        assert "Lazy must implement handle()" in str(info.value.cause)


async def test_one_message_at_a_time(autojump_clock: trio.testing.MockClock) -> None:
    class Exclusive(agentrio.Actor[Put]):
        def __init__(self) -> None:
            self.active = 0
            self.peak = 0
            self.done = 0

        async def handle(self, msg: Put) -> object:
            self.active += 1
            self.peak = max(self.peak, self.active)
            # Several checkpoints, including ones that let time pass: any other
            # task (e.g. a second copy of this loop) would run here.
            await trio.sleep(0)
            await trio.sleep(msg.n % 3)
            await trio.sleep(0)
            self.active -= 1
            self.done += 1
            return (self.peak, self.done)

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Exclusive, mailbox=3)
        results: list[object] = []

        async def client(i: int) -> None:
            results.append(await ref.ask(Put(n=i)))

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(client, i)
        assert len(results) == 20
        assert max(peak for peak, _ in results) == 1  # type: ignore[misc]
        assert sorted(done for _, done in results) == list(range(1, 21))  # type: ignore[misc]


# -- backpressure and send_nowait ----------------------------------------------------


async def test_send_blocks_while_the_mailbox_is_full(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Recorder, log, gate, mailbox=2)
            await ref.send(Block())
            await trio.testing.wait_all_tasks_blocked()
            assert log == ["start", "blocked"]
            await ref.send(Put(n=1))
            await ref.send(Put(n=2))
            assert ref.statistics().mailbox_size == 2
            sent = trio.Event()

            async def third() -> None:
                await ref.send(Put(n=3))
                sent.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(third)
                await trio.testing.wait_all_tasks_blocked()
                assert not sent.is_set()  # the sender waits: backpressure
                with pytest.raises(MailboxFull):
                    ref.send_nowait(Put(n=99))
                gate.set()
                await sent.wait()
            assert await ref.ask(Get()) == [1, 2, 3]


async def test_mailbox_zero_hands_each_message_over() -> None:
    gate = trio.Event()
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, [], gate, mailbox=0)
        await trio.testing.wait_all_tasks_blocked()
        ref.send_nowait(Block())  # taken by the waiting actor at once
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(MailboxFull):  # the actor is busy: nobody takes it
            ref.send_nowait(Put(n=0))
        with trio.move_on_after(0) as cancel:
            await ref.send(Put(n=1))
        assert cancel.cancelled_caught
        assert ref.statistics().mailbox_capacity == 0
        gate.set()
        await ref.send(Put(n=2))
        assert await ref.ask(Get()) == [2]


async def test_send_nowait_raises_mailbox_full_naming_the_actor() -> None:
    gate = trio.Event()
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, [], gate, name="busy", mailbox=1)
        ref.send_nowait(Block())
        await trio.testing.wait_all_tasks_blocked()
        ref.send_nowait(Put(n=1))
        with pytest.raises(MailboxFull) as info:
            ref.send_nowait(Put(n=2))
        assert info.value.path == "busy"
        assert "'busy'" in str(info.value)
        assert "1 messages" in str(info.value)
        gate.set()
        assert await ref.ask(Get()) == [1]


# -- ask ------------------------------------------------------------------------------


async def test_ask_timeout(autojump_clock: trio.testing.MockClock) -> None:
    gate = trio.Event()
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, log, gate, name="slow")
        start = trio.current_time()
        with pytest.raises(AskTimeout) as info:
            await ref.ask(Block(), timeout=2.5)
        assert trio.current_time() - start == 2.5
        assert isinstance(info.value, TimeoutError)
        assert info.value.path == "slow"
        assert "2.5" in str(info.value)
        # The message was delivered: the actor still handles it, the reply is dropped.
        gate.set()
        assert await ref.ask(Put(n=1), timeout=1) == 10
        assert log == ["start", "blocked", "unblocked", "put 1"]


async def test_ask_within_timeout_returns(autojump_clock: trio.testing.MockClock) -> None:
    class Sleeper(agentrio.Actor[Put]):
        async def handle(self, msg: Put) -> object:
            await trio.sleep(msg.n)
            return trio.current_time()

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Sleeper)
        assert await ref.ask(Put(n=3), timeout=3.5) == 3.0
        with pytest.raises(AskTimeout):
            await ref.ask(Put(n=3), timeout=2.0)


async def test_cancelled_ask_leaves_the_actor_working(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Recorder, [], gate)
            async with trio.open_nursery() as nursery:

                async def asker() -> None:
                    await ref.ask(Block())
                    raise AssertionError("the ask should have been cancelled")

                nursery.start_soon(asker)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            gate.set()
            assert await ref.ask(Put(n=4)) == 40


@pytest.mark.parametrize("timeout", [-1, -0.5, math.nan, "1", True, [1]])
async def test_ask_rejects_bad_timeouts(timeout: object) -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder)
        with pytest.raises(InvalidArgument, match="timeout"):
            await ref.ask(Put(n=1), timeout=timeout)  # type: ignore[arg-type]
        assert ref.statistics().messages_handled == 0


async def test_ask_timeout_zero_times_out_at_once(autojump_clock: trio.testing.MockClock) -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder)
        with pytest.raises(AskTimeout):
            await ref.ask(Put(n=1), timeout=0)
        assert trio.current_time() == 0


async def test_ask_after_crash_raises_actor_crashed_with_cause() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, name="c")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Crash(text="kaput"))
        assert isinstance(info.value.cause, RuntimeError)
        assert str(info.value.cause) == "kaput"
        assert info.value.__cause__ is info.value.cause
        assert info.value.path == "c"
        assert "'c'" in str(info.value)
        assert "Crash" in str(info.value)


async def test_self_ask_raises_instead_of_deadlocking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging

        class Narcissist(agentrio.Actor[agentrio.Message]):
            async def handle(self, msg: agentrio.Message) -> object:
                if isinstance(msg, Put):
                    return msg.n
                try:
                    await self.ref.ask(Put(n=1))
                except SelfAsk as exc:
                    return str(exc)
                return "no error"

        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Narcissist, name="me")
            text = await ref.ask(Get())
            assert isinstance(text, str)
            assert "'me' asked itself" in text
            # Asking it from outside is fine.
            assert await ref.ask(Put(n=5)) == 5


async def test_uncaught_self_ask_crashes_the_actor_with_self_ask(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging

        class Narcissist(agentrio.Actor[Get]):
            async def handle(self, msg: Get) -> object:
                return await self.ref.ask(Get(), timeout=1)

        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Narcissist, restart="temporary")
            with pytest.raises(ActorCrashed) as info:
                await ref.ask(Get())
            assert isinstance(info.value.cause, SelfAsk)


async def test_asking_another_actor_from_handle_is_fine() -> None:
    class Proxy(agentrio.Actor[Put]):
        def __init__(self, target: agentrio.ActorRef) -> None:
            self.target = target

        async def handle(self, msg: Put) -> object:
            return await self.target.ask(msg)

    async with agentrio.open_runtime() as rt:
        back = await rt.spawn(Recorder)
        proxy = await rt.spawn(Proxy, back)
        assert await proxy.ask(Put(n=2)) == 20


# -- not a message ---------------------------------------------------------------------


BAD_MESSAGES = [{"n": 1}, PlainStruct(n=1), 5, None, "Put"]


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=lambda b: type(b).__name__)
async def test_non_messages_raise_at_the_call_site(bad: object) -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder)
        with pytest.raises(NotAMessage, match=type(bad).__name__):
            await ref.send(bad)  # type: ignore[arg-type]
        with pytest.raises(NotAMessage, match=r"agentrio\.Message"):
            ref.send_nowait(bad)  # type: ignore[arg-type]
        with pytest.raises(NotAMessage, match=r"agentrio\.Message"):
            await ref.ask(bad)  # type: ignore[arg-type]
        await ref.ask(Get())
        assert ref.statistics().messages_handled == 1


# -- stop and cancel --------------------------------------------------------------------


async def test_stop_drains_the_mailbox_then_runs_on_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Recorder, log, gate, name="r")
            ref.send_nowait(Block())
            for n in range(3):
                ref.send_nowait(Put(n=n))
            stopped = trio.Event()

            async def stopper() -> None:
                await ref.stop()
                stopped.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stopper)
                await trio.testing.wait_all_tasks_blocked()
                assert not stopped.is_set()  # stop() waits for the exit
                assert ref.statistics().state == "stopping"
                with pytest.raises(ActorStopped):  # no new messages
                    ref.send_nowait(Put(n=9))
                gate.set()
            assert log == ["start", "blocked", "unblocked", "put 0", "put 1", "put 2", "stop"]
            assert ref.statistics().state == "exited"
            await ref.stop()  # stopping a stopped actor does nothing
            ref.cancel()
        assert log.count("stop") == 1


async def test_cancel_is_immediate_and_fails_what_is_pending(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        gate = trio.Event()
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            ref = await rt.spawn(Recorder, log, gate, name="r", restart="permanent")
            errors: list[BaseException] = []

            async def asker(msg: agentrio.Message) -> None:
                try:
                    await ref.ask(msg)
                except ActorStopped as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(asker, Block())
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(asker, Put(n=1))
                await trio.testing.wait_all_tasks_blocked()
                ref.cancel()
            assert log == ["start", "blocked"]  # on_stop did not run; Put was never handled
            assert [e.reason for e in errors] == ["cancelled", "cancelled"]  # type: ignore[attr-defined]
            assert ref.statistics().state == "exited"
            await trio.testing.wait_all_tasks_blocked()
            dead = [e for e in events if isinstance(e, DeadLetter)]
            assert sorted(d.message_type for d in dead) == ["Block", "Put"]
            assert {d.reason for d in dead} == {"cancelled"}
            assert agentrio.events.ActorExited(path="r", reason="cancelled") in events
            assert not any(isinstance(e, agentrio.events.ActorRestarted) for e in events)


async def test_send_right_after_cancel_says_cancelled() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder)
        ref.cancel()
        with pytest.raises(ActorStopped) as info:
            await ref.send(Put(n=1))
        assert info.value.reason == "cancelled"


async def test_stop_and_cancel_are_not_blocked_by_a_full_mailbox(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        for how in ("stop", "cancel"):
            gate = trio.Event()
            log: list[str] = []
            async with agentrio.open_runtime() as rt:
                ref = await rt.spawn(Recorder, log, gate, mailbox=1)
                await ref.send(Block())
                await ref.send(Put(n=1))
                outcomes: list[str] = []

                async def sender(n: int) -> None:
                    try:
                        await ref.send(Put(n=n))  # noqa: B023 - awaited inside the loop
                        outcomes.append("sent")  # noqa: B023
                    except ActorStopped as exc:
                        outcomes.append(exc.reason)  # noqa: B023

                async with trio.open_nursery() as nursery:
                    for n in range(2, 5):
                        nursery.start_soon(sender, n)
                    await trio.testing.wait_all_tasks_blocked()
                    assert outcomes == []  # three senders blocked on the full mailbox
                    if how == "stop":
                        async with trio.open_nursery() as inner:
                            inner.start_soon(ref.stop)
                            await trio.testing.wait_all_tasks_blocked()
                            gate.set()  # let it drain
                    else:
                        ref.cancel()
                assert ref.statistics().state == "exited"
                expected = "stopped" if how == "stop" else "cancelled"
                assert outcomes == [expected] * 3, how
                if how == "stop":
                    assert log == ["start", "blocked", "unblocked", "put 1", "stop"]
                else:
                    assert log == ["start", "blocked"]


async def test_self_stop_returns_at_once_and_drains(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging

        class Quitter(Recorder):
            async def handle(self, msg: agentrio.Message) -> object:
                if isinstance(msg, Get):
                    await self.ref.stop()
                    self.log.append("after stop")
                    return "bye"
                return await super().handle(msg)

        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Quitter, log, restart="transient")
            ref.send_nowait(Put(n=1))
            ref.send_nowait(Get())
            ref.send_nowait(Put(n=2))  # queued behind the stop: still handled
            await ref.stop()
            assert log == ["start", "put 1", "after stop", "put 2", "stop"]
            with pytest.raises(ActorStopped) as info:
                await ref.send(Put(n=3))
            assert info.value.reason == "stopped"


# -- dead letters -----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["stopped", "cancelled", "crashed"])
async def test_message_to_an_exited_actor_is_a_dead_letter(
    how: str, record_events: RecordEvents
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(Recorder, name="gone", restart="temporary")
        if how == "stopped":
            await ref.stop()
        elif how == "cancelled":
            ref.cancel()
        else:
            with pytest.raises(ActorCrashed):
                await ref.ask(Crash())
        await trio.testing.wait_all_tasks_blocked()
        before = rt.statistics().dead_letters
        seen = len(events)
        for call in ("send", "send_nowait", "ask"):
            with pytest.raises(ActorStopped) as info:
                if call == "send":
                    await ref.send(Put(n=1))
                elif call == "send_nowait":
                    ref.send_nowait(Put(n=1))
                else:
                    await ref.ask(Put(n=1))
            assert info.value.reason == how
            assert info.value.path == "gone"
            assert f"has {how}" in str(info.value)
            assert "Put" in str(info.value)
        await trio.testing.wait_all_tasks_blocked()
        assert rt.statistics().dead_letters == before + 3
        assert (
            events[seen:]
            == [DeadLetter(path="gone", reason=how, message_type="Put", message="Put(n=1)")] * 3
        )


async def test_long_messages_are_shortened_in_dead_letters(record_events: RecordEvents) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(Recorder, name="gone")
        await ref.stop()
        await trio.testing.wait_all_tasks_blocked()
        seen = len(events)
        with pytest.raises(ActorStopped):
            ref.send_nowait(Blob(data="x" * 500))
        await trio.testing.wait_all_tasks_blocked()
        (event,) = events[seen:]
    assert isinstance(event, DeadLetter)
    assert len(event.message) == 200
    assert event.message.startswith("Blob(data='xxx")
    assert event.message.endswith("...")


# -- statistics ---------------------------------------------------------------------


async def test_statistics() -> None:
    gate = trio.Event()
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, [], gate, name="s", mailbox=5, restart="permanent")
        assert ref.statistics().state == "starting"  # its task has not run yet
        await trio.testing.wait_all_tasks_blocked()
        stats = ref.statistics()
        assert stats == agentrio.types.ActorStatistics(
            path="s",
            state="running",
            mailbox_size=0,
            mailbox_capacity=5,
            messages_handled=0,
            restarts=0,
        )
        await ref.ask(Put(n=1))
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash())
        ref.send_nowait(Block())
        ref.send_nowait(Put(n=2))
        ref.send_nowait(Put(n=3))
        await trio.testing.wait_all_tasks_blocked()
        stats = ref.statistics()
        assert stats.state == "running"
        assert stats.mailbox_size == 2
        assert stats.messages_handled == 1  # the crash does not count
        assert stats.restarts == 1
        gate.set()
        await ref.ask(Get())
        assert ref.statistics().messages_handled == 5
        assert ref.statistics().mailbox_size == 0
    assert ref.statistics().state == "exited"


# -- ordering (hypothesis) -------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    mailbox=st.integers(min_value=0, max_value=8),
    ops=st.lists(st.sampled_from(["send", "send_nowait", "ask", "pause"]), max_size=60),
    delays=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=5),
)
def test_messages_from_one_sender_arrive_in_order(
    mailbox: int, ops: list[str], delays: list[int]
) -> None:
    class Slowish(agentrio.Actor[Put]):
        def __init__(self, seen: list[int]) -> None:
            self.seen = seen

        async def handle(self, msg: Put) -> object:
            self.seen.append(msg.n)
            await trio.sleep(delays[msg.n % len(delays)])
            return msg.n

    async def main() -> list[int]:
        seen: list[int] = []
        sent: list[int] = []
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Slowish, seen, mailbox=mailbox)
            for i, op in enumerate(ops):
                if op == "send":
                    await ref.send(Put(n=i))
                elif op == "send_nowait":
                    try:
                        ref.send_nowait(Put(n=i))
                    except MailboxFull:
                        continue
                elif op == "ask":
                    assert await ref.ask(Put(n=i)) == i
                else:
                    await trio.sleep(1)
                    continue
                sent.append(i)
            await ref.stop()
        assert seen == sent
        return seen

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- InlineActor -------------------------------------------------------------------------


class Tally(agentrio.InlineActor[agentrio.Message]):
    """Inline: records Puts (and the task that handled each); Get returns them; Crash raises."""

    def __init__(self, log: list[str] | None = None) -> None:
        self.log = log if log is not None else []
        self.seen: list[int] = []
        self.tasks: list[trio.lowlevel.Task] = []

    def on_start(self) -> None:
        self.log.append("start")

    def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Put):
            self.seen.append(msg.n)
            self.tasks.append(trio.lowlevel.current_task())
            self.log.append(f"put {msg.n}")
            return msg.n * 10
        if isinstance(msg, Get):
            return list(self.seen)
        if isinstance(msg, Crash):
            raise RuntimeError(msg.text)
        return None

    def on_stop(self) -> None:
        self.log.append("stop")


class Tasks(agentrio.Message):
    pass


class TaskTally(Tally):
    def handle(self, msg: agentrio.Message) -> object:
        if isinstance(msg, Tasks):
            return list(self.tasks)
        return super().handle(msg)


async def test_inline_tell_and_ask_are_handled_at_once_in_the_senders_task() -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(TaskTally, log, name="tally", mailbox=7)
        assert log == ["start"]  # made and started by spawn itself
        await ref.send(Put(n=1))
        assert log == ["start", "put 1"]
        ref.send_nowait(Put(n=2))
        assert log == ["start", "put 1", "put 2"]  # handled before send_nowait returned
        assert await ref.ask(Put(n=3)) == 30
        assert await ref.ask(Get()) == [1, 2, 3]
        me = trio.lowlevel.current_task()
        assert await ref.ask(Tasks()) == [me, me, me]
        assert ref.statistics() == agentrio.types.ActorStatistics(
            path="tally",
            state="running",
            mailbox_size=0,
            mailbox_capacity=7,
            messages_handled=5,
            restarts=0,
        )
    assert log == ["start", "put 1", "put 2", "put 3", "stop"]
    assert ref.statistics().state == "exited"


async def test_inline_actor_sees_its_own_ref() -> None:
    class Me(agentrio.InlineActor[Get]):
        def handle(self, msg: Get) -> object:
            return self.ref

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Me, name="me")
        assert await ref.ask(Get()) is ref
        assert rt.lookup("me") is ref


async def test_spawning_an_inline_actor_starts_no_task(task_tracker: TaskTracker) -> None:
    async with agentrio.open_runtime() as rt:
        await trio.testing.wait_all_tasks_blocked()
        before = len(task_tracker.spawned)
        refs = [await rt.spawn(Tally, name=f"inline{i}") for i in range(3)]
        for ref in refs:
            await ref.send(Put(n=1))
            assert await ref.ask(Get()) == [1]
        await trio.testing.wait_all_tasks_blocked()
        assert task_tracker.spawned[before:] == []
        # A task actor, for contrast: one task, named after its path.
        await rt.spawn(Recorder, name="task")
        await trio.testing.wait_all_tasks_blocked()
        assert [t.name for t in task_tracker.spawned[before:]] == ["task"]


async def test_inline_messages_from_several_tasks_are_all_handled() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Tally)
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(ref.send, Put(n=i))
        seen = await ref.ask(Get())
        assert sorted(seen) == list(range(10))  # type: ignore[call-overload]
        assert ref.statistics().messages_handled == 11


async def test_inline_send_and_ask_in_a_cancelled_scope_deliver_nothing() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Tally)
        with trio.CancelScope() as scope:
            scope.cancel()
            await ref.send(Put(n=1))
        assert scope.cancelled_caught
        with pytest.raises(AskTimeout):
            await ref.ask(Put(n=2), timeout=0)
        assert await ref.ask(Get()) == []


async def test_inline_crash_fails_the_ask_not_the_tell_and_restarts_fresh(
    record_events: RecordEvents,
) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(Tally, log, name="t", restart="permanent")
        assert await ref.ask(Put(n=1)) == 10
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Crash(text="kaput"))
        assert isinstance(info.value.cause, RuntimeError)
        assert str(info.value.cause) == "kaput"
        assert info.value.path == "t"
        assert "Crash" in str(info.value)
        assert await ref.ask(Get()) == []  # a fresh instance
        await ref.send(Put(n=2))
        ref.send_nowait(Crash(text="told"))  # the sender is not told
        await ref.send(Crash(text="told again"))
        assert await ref.ask(Get()) == []
        assert ref.statistics().restarts == 3
        assert ref.statistics().messages_handled == 4  # the crashes do not count
        assert ref.statistics().state == "running"
        await trio.testing.wait_all_tasks_blocked()
        assert [e for e in events if e.path == "t"][:5] == [
            ActorStarted(path="t", restarts=0),
            DeadLetter(
                path="t", reason="crashed_on", message_type="Crash", message="Crash(text='kaput')"
            ),
            ActorFailed(path="t", error_type="RuntimeError", error="kaput"),
            ActorRestarted(path="t", restarts=1, delay=0.0),
            ActorStarted(path="t", restarts=1),
        ]
        assert rt.statistics().dead_letters == 3
    assert log == ["start", "put 1", "start", "put 2", "start", "start", "stop"]


async def test_inline_actor_crashed_has_the_cause_as_dunder_cause() -> None:
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Tally, restart="temporary")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Crash())
        assert info.value.__cause__ is info.value.cause


async def test_temporary_inline_actor_that_crashes_exits(record_events: RecordEvents) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(Tally, log, name="gone", restart="temporary")
        ref.send_nowait(Crash())
        assert ref.statistics().state == "exited"
        for call in ("send", "send_nowait", "ask"):
            with pytest.raises(ActorStopped) as info:
                if call == "send":
                    await ref.send(Put(n=1))
                elif call == "send_nowait":
                    ref.send_nowait(Put(n=1))
                else:
                    await ref.ask(Put(n=1))
            assert info.value.reason == "crashed"
            assert info.value.path == "gone"
        await trio.testing.wait_all_tasks_blocked()
        assert ActorExited(path="gone", reason="crashed") in events
        assert not any(isinstance(e, ActorRestarted) for e in events)
        dead = [e.reason for e in events if isinstance(e, DeadLetter)]
        assert dead == ["crashed_on", "crashed", "crashed", "crashed"]
        with pytest.raises(agentrio.errors.UnknownName):
            rt.lookup("gone")
    assert log == ["start"]  # no on_stop after a crash


async def test_inline_crashes_over_the_intensity_fail_its_supervisor_which_is_restarted(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        async with agentrio.open_runtime(max_restarts=5) as rt:
            events = record_events(rt)
            team = await rt.spawn_supervisor(name="team", max_restarts=1, period=10)
            await trio.testing.wait_all_tasks_blocked()  # team's task runs
            ref = await team.spawn(Tally, name="t", restart="permanent")
            await ref.send(Put(n=1))
            ref.send_nowait(Crash(text="once"))  # restart 1: within the intensity
            await ref.send(Put(n=2))
            with pytest.raises(ActorCrashed):
                await ref.ask(Crash(text="twice"))  # restart 2: over it, team fails
            await trio.testing.wait_all_tasks_blocked()
            # The root restarted team, and team remade its inline child, fresh.
            assert team.statistics().state == "running"
            assert await ref.ask(Get()) == []
            assert await ref.ask(Put(n=3)) == 30
            assert ref.statistics().state == "running"
            assert ref.statistics().restarts == 2
            assert rt.lookup("team/t") is ref
            await trio.testing.wait_all_tasks_blocked()
            assert SupervisorEscalated(path="team", child="team/t", error="twice") in events
            failed = [e for e in events if isinstance(e, ActorFailed) and e.path == "team"]
            assert [e.error_type for e in failed] == ["RestartIntensityExceeded"]
            assert ActorRestarted(path="team", restarts=1, delay=0.0) in events
            lifecycle = [e for e in events if e.path == "team/t"]
            assert [type(e).__name__ for e in lifecycle[-3:]] == [
                "ActorFailed",
                "ActorRestarted",
                "ActorStarted",
            ]


async def test_inline_crashes_over_the_root_intensity_fail_the_runtime() -> None:
    with pytest.RaisesGroup(RestartIntensityExceeded):
        async with agentrio.open_runtime(max_restarts=1) as rt:
            ref = await rt.spawn(Tally, name="t", restart="permanent")
            ref.send_nowait(Crash())
            ref.send_nowait(Crash())
            await trio.sleep_forever()


async def test_inline_actor_waiting_for_its_supervisors_restart_refuses_messages(
    record_events: RecordEvents,
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team", max_restarts=0)
        await trio.testing.wait_all_tasks_blocked()
        ref = await team.spawn(Tally, name="t", restart="permanent")
        ref.send_nowait(Crash())  # over max_restarts=0: team is failing
        assert ref.statistics().state == "suspended"
        with pytest.raises(ActorStopped) as info:
            ref.send_nowait(Put(n=1))
        assert info.value.reason == "crashed"
        assert "waits for its supervisor's restart" in str(info.value)
        await trio.testing.wait_all_tasks_blocked()
        assert ref.statistics().state == "running"
        assert await ref.ask(Put(n=2)) == 20
        dead = [(e.reason, e.message) for e in events if isinstance(e, DeadLetter)]
        assert dead == [("crashed_on", "Crash(text='boom')"), ("crashed", "Put(n=1)")]


async def test_inline_crash_over_the_intensity_before_its_supervisor_runs_fails_it(
    record_events: RecordEvents,
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team", max_restarts=0)
        ref = await team.spawn(Tally, name="t", restart="permanent")
        ref.send_nowait(Crash())  # team's task has not run yet
        await trio.testing.wait_all_tasks_blocked()
        assert SupervisorEscalated(path="team", child="team/t", error="boom") in events
        failed = [e for e in events if isinstance(e, ActorFailed) and e.path == "team"]
        assert [e.error_type for e in failed] == ["RestartIntensityExceeded"]
        assert ActorRestarted(path="team", restarts=1, delay=0.0) in events
        assert await ref.ask(Put(n=1)) == 10


async def test_temporary_inline_child_is_not_remade_by_its_supervisors_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        async with agentrio.open_runtime(max_restarts=5) as rt:
            team = await rt.spawn_supervisor(name="team", max_restarts=0)
            temp = await team.spawn(Tally, name="temp", restart="temporary")
            task_temp = await team.spawn(Recorder, name="task_temp", restart="temporary")
            crasher = await team.spawn(Recorder, name="crasher", restart="permanent")
            await trio.testing.wait_all_tasks_blocked()
            await temp.send(Put(n=1))
            with pytest.raises(ActorCrashed):
                await crasher.ask(Crash())  # over max_restarts=0: team fails, is restarted
            await trio.testing.wait_all_tasks_blocked()
            assert team.statistics().state == "running"
            assert task_temp.statistics().state == "exited"  # the task sibling: ended
            assert temp.statistics().state == "exited"
            assert temp.statistics().restarts == 0


async def test_inline_on_start_that_raises_is_a_crash(record_events: RecordEvents) -> None:
    attempts: list[int] = []

    class ShakyStart(Tally):
        def on_start(self) -> None:
            attempts.append(len(attempts) + 1)
            if len(attempts) == 1:
                raise ValueError("no start")
            super().on_start()

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(ShakyStart, name="s", restart="transient")
        assert attempts == [1, 2]
        assert ref.statistics().restarts == 1
        assert await ref.ask(Put(n=1)) == 10
        await trio.testing.wait_all_tasks_blocked()
        assert [e for e in events if e.path == "s"][:3] == [
            ActorFailed(path="s", error_type="ValueError", error="no start"),
            ActorRestarted(path="s", restarts=1, delay=0.0),
            ActorStarted(path="s", restarts=1),
        ]


async def test_temporary_inline_on_start_that_raises_exits() -> None:
    class BadStart(Tally):
        def on_start(self) -> None:
            raise ValueError("no start")

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(BadStart, name="bad", restart="temporary")
        assert ref.statistics().state == "exited"
        with pytest.raises(ActorStopped) as info:
            await ref.ask(Get())
        assert info.value.reason == "crashed"


async def test_inline_on_start_that_always_raises_fails_the_runtime() -> None:
    attempts: list[int] = []

    class BadStart(Tally):
        def on_start(self) -> None:
            attempts.append(1)
            raise ValueError("no start")

    with pytest.RaisesGroup(RestartIntensityExceeded):
        async with agentrio.open_runtime(max_restarts=2) as rt:
            await rt.spawn(BadStart, name="bad", restart="permanent")
            await trio.sleep_forever()
    assert len(attempts) == 3


@pytest.mark.parametrize("how", ["stop", "close", "cancel"])
async def test_inline_on_stop_runs_on_a_graceful_stop_only(
    how: str, record_events: RecordEvents
) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(Tally, log, name="t", restart="permanent")
        ref.send_nowait(Put(n=1))
        if how == "stop":
            await ref.stop()
            assert log == ["start", "put 1", "stop"]
            await ref.stop()  # again: nothing to do
        elif how == "cancel":
            ref.cancel()
            assert log == ["start", "put 1"]
        if how != "close":
            assert ref.statistics().state == "exited"
            with pytest.raises(ActorStopped) as info:
                await ref.send(Put(n=2))
            assert info.value.reason == ("stopped" if how == "stop" else "cancelled")
    assert log == ["start", "put 1"] + ([] if how == "cancel" else ["stop"])
    await trio.testing.wait_all_tasks_blocked()
    reason = "cancelled" if how == "cancel" else "stopped"
    assert ActorExited(path="t", reason=reason) in events  # type: ignore[arg-type]
    assert not any(isinstance(e, ActorRestarted) for e in events)


async def test_inline_on_stop_that_raises_ends_it_crashed(record_events: RecordEvents) -> None:
    class BadStop(Tally):
        def on_stop(self) -> None:
            raise OSError("disk gone")

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(BadStop, name="b", restart="permanent")
        await ref.stop()  # does not raise
        assert ref.statistics().state == "exited"
        with pytest.raises(ActorStopped) as info:
            ref.send_nowait(Put(n=1))
        assert info.value.reason == "crashed"
        await trio.testing.wait_all_tasks_blocked()
        assert [e for e in events if e.path == "b" and not isinstance(e, DeadLetter)] == [
            ActorStarted(path="b", restarts=0),
            ActorFailed(path="b", error_type="OSError", error="disk gone"),
            ActorExited(path="b", reason="crashed"),
        ]


async def test_a_tell_to_itself_is_handled_right_after_and_an_ask_raises_self_ask() -> None:
    log: list[str] = []

    class Narcissist(agentrio.InlineActor[agentrio.Message]):
        def handle(self, msg: agentrio.Message) -> object:
            if isinstance(msg, Put):
                log.append(f"put {msg.n}")
                return msg.n
            self.ref.send_nowait(Put(n=1))  # waits for this handle to return
            self.ref.send_nowait(Put(n=2))
            log.append("get done")
            return "got"

    class Asker(agentrio.InlineActor[agentrio.Message]):
        def handle(self, msg: agentrio.Message) -> object:
            # ask() is async and a plain handle cannot await it: this is the
            # ask as the runtime delivers it, to an actor that is busy.
            from agentrio.actors.actor import deliver

            try:
                deliver(self.ref._cell, Get(), asked=True)
            except SelfAsk as exc:
                return str(exc)
            return "no error"

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Narcissist, name="me")
        assert await ref.ask(Get()) == "got"
        assert log == ["get done", "put 1", "put 2"]
        assert ref.statistics().messages_handled == 3
        assert ref.statistics().restarts == 0
        asker = await rt.spawn(Asker, name="asker")
        text = await asker.ask(Put(n=0))
        assert isinstance(text, str) and "'asker' was asked Get while it handles" in text


async def test_a_tell_queued_by_a_crashing_handle_reaches_the_restarted_instance() -> None:
    class Keeper(agentrio.InlineActor[agentrio.Message]):
        def __init__(self) -> None:
            self.seen: list[int] = []

        def handle(self, msg: agentrio.Message) -> object:
            if isinstance(msg, Put):
                self.seen.append(msg.n)
                return None
            if isinstance(msg, Crash):
                self.ref.send_nowait(Put(n=7))  # queued behind this message
                raise RuntimeError(msg.text)
            return list(self.seen)

    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Keeper, name="k")
        await ref.send(Put(n=1))
        with pytest.raises(ActorCrashed, match="boom"):
            await ref.ask(Crash())
        # The queued tell was handled (by the fresh instance) before the ask failed.
        assert await ref.ask(Get()) == [7]
        assert ref.statistics().restarts == 1


async def test_a_cycle_of_inline_tells_is_handled_in_order_without_a_crash(
    record_events: RecordEvents,
) -> None:
    log: list[str] = []

    class Ping(agentrio.InlineActor[agentrio.Message]):
        def __init__(self, other: list[agentrio.ActorRef]) -> None:
            self.other = other

        def handle(self, msg: agentrio.Message) -> object:
            assert isinstance(msg, Put)
            log.append(f"{self.ref.name} {msg.n}")
            if msg.n < 4:
                self.other[0].send_nowait(Put(n=msg.n + 1))
            log.append(f"{self.ref.name} {msg.n} done")
            return None

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        to_b: list[agentrio.ActorRef] = []
        to_a: list[agentrio.ActorRef] = []
        a = await rt.spawn(Ping, to_b, name="a")
        b = await rt.spawn(Ping, to_a, name="b")
        to_b.append(b)
        to_a.append(a)
        a.send_nowait(Put(n=0))
        # a's second message (2) arrives while a handles 0 (via b): it waits.
        assert log == [
            "a 0",
            "b 1",
            "b 1 done",
            "a 0 done",
            "a 2",
            "b 3",
            "b 3 done",
            "a 2 done",
            "a 4",
            "a 4 done",
        ]
        assert (a.statistics().messages_handled, b.statistics().messages_handled) == (3, 2)
        await trio.testing.wait_all_tasks_blocked()
    assert not [e for e in events if isinstance(e, (ActorFailed, DeadLetter))]


async def test_an_uncaught_self_ask_crashes_the_inline_actor(record_events: RecordEvents) -> None:
    from agentrio.actors.actor import deliver

    class Asker(agentrio.InlineActor[agentrio.Message]):
        def handle(self, msg: agentrio.Message) -> object:
            if isinstance(msg, Put):
                return msg.n
            return deliver(self.ref._cell, Put(n=1), asked=True)  # raises SelfAsk

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        ref = await rt.spawn(Asker, name="me", restart="transient")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Get())
        assert isinstance(info.value.cause, SelfAsk)
        ref.send_nowait(Get())  # a tell: the crash is not the sender's
        assert ref.statistics().restarts == 2
        assert await ref.ask(Put(n=5)) == 5
        await trio.testing.wait_all_tasks_blocked()
        dead = [(e.reason, e.message_type) for e in events if isinstance(e, DeadLetter)]
        assert dead == [("crashed_on", "Get"), ("crashed_on", "Get")]


async def test_an_inline_constructor_that_raises_is_a_crash(record_events: RecordEvents) -> None:
    attempts: list[int] = []

    class Fragile(agentrio.InlineActor[agentrio.Message]):
        def __init__(self) -> None:
            attempts.append(1)
            if len(attempts) % 2:
                raise OSError("no disk")

        def handle(self, msg: agentrio.Message) -> object:
            return "ok"

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        # transient: the raise is a crash and it is restarted, like a task actor
        ref = await rt.spawn(Fragile, name="f")
        assert await ref.ask(Get()) == "ok"
        assert (len(attempts), ref.statistics().restarts) == (2, 1)
        # temporary: it ends crashed, and its name is free again
        gone = await rt.spawn(Fragile, name="g", restart="temporary")
        assert gone.statistics().state == "exited"
        with pytest.raises(ActorStopped):
            gone.send_nowait(Get())
        again = await rt.spawn(Fragile, name="g", restart="temporary")
        assert await again.ask(Get()) == "ok"
        await trio.testing.wait_all_tasks_blocked()
    failed = [(e.path, e.error_type) for e in events if isinstance(e, ActorFailed)]
    assert failed == [("f", "OSError"), ("g", "OSError")]


async def test_an_async_method_on_an_inline_actor_is_refused_at_spawn() -> None:
    class Wrong(agentrio.InlineActor[agentrio.Message]):
        async def handle(self, msg: agentrio.Message) -> object:  # type: ignore[override]
            return None

    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match=r"Wrong.handle is async"):
            await rt.spawn(Wrong)
        assert rt.children() == []


async def test_one_for_all_remakes_a_busy_inline_sibling_after_its_handle() -> None:
    class Fails(agentrio.InlineActor[agentrio.Message]):
        def handle(self, msg: agentrio.Message) -> object:
            raise RuntimeError("boom")

    class Caller(agentrio.InlineActor[agentrio.Message]):
        def __init__(self, target: list[agentrio.ActorRef]) -> None:
            self.target = target
            self.seen: list[str] = []

        def handle(self, msg: agentrio.Message) -> object:
            self.seen.append("in")
            self.target[0].send_nowait(Get())  # crashes the sibling: one_for_all
            self.seen.append("still the same instance")
            return list(self.seen)

    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team", strategy="one_for_all", max_restarts=5)
        target: list[agentrio.ActorRef] = []
        caller = await team.spawn(Caller, target, name="caller")
        target.append(await team.spawn(Fails, name="fails"))
        assert await caller.ask(Get()) == ["in", "still the same instance"]
        # remade once, after its handle returned: the next message meets a fresh instance
        assert caller.statistics().restarts == 1
        assert await caller.ask(Put(n=1)) == ["in", "still the same instance"]
        assert caller.statistics().restarts == 2


async def test_inline_and_task_actors_stop_last_spawned_first(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []

        class Named(Recorder):
            def __init__(self, name: str, log: list[str]) -> None:
                super().__init__(log)
                self.name = name

            async def on_stop(self) -> None:
                await trio.sleep(0)  # a real wait: this one is stopped in its own task
                self.log.append(f"stop {self.name}")

        class InlineNamed(Tally):
            def __init__(self, name: str, log: list[str]) -> None:
                super().__init__(log)
                self.name = name

            def on_stop(self) -> None:
                self.log.append(f"stop {self.name}")

        names = ["task1", "inline1", "task2", "inline2", "inline3", "task3"]
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            for name in names:
                cls = InlineNamed if name.startswith("inline") else Named
                await rt.spawn(cls, name, log, name=name)
            await trio.testing.wait_all_tasks_blocked()
            log.clear()
        assert log == [f"stop {name}" for name in reversed(names)]
        await trio.testing.wait_all_tasks_blocked()
        exits = [e for e in events if isinstance(e, ActorExited)]
        assert exits == [ActorExited(path=name, reason="stopped") for name in reversed(names)]


async def test_one_for_all_remakes_permanent_inline_siblings_and_cancels_temporary_ones(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        log: list[str] = []
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            sup = await rt.spawn_supervisor(name="s", strategy="one_for_all", max_restarts=5)
            kept = await sup.spawn(Tally, log, name="kept", restart="permanent")
            temp = await sup.spawn(Tally, name="temp", restart="temporary")
            task = await sup.spawn(Recorder, name="task", restart="transient")
            await kept.send(Put(n=1))
            await temp.send(Put(n=2))
            with pytest.raises(ActorCrashed):
                await task.ask(Crash())
            assert await kept.ask(Get()) == []  # remade: fresh state
            assert kept.statistics().restarts == 1
            assert kept.statistics().messages_handled == 2
            assert log == ["start", "put 1", "start"]  # no on_stop on a remake
            with pytest.raises(ActorStopped) as info:
                await temp.ask(Get())
            assert info.value.reason == "cancelled"
            assert await task.ask(Put(n=3)) == 30
            await trio.testing.wait_all_tasks_blocked()
            assert ActorExited(path="s/temp", reason="cancelled") in events
            restarted = {e.path for e in events if isinstance(e, ActorRestarted)}
            assert restarted == {"s/kept", "s/task"}


async def test_one_for_all_inline_crash_restarts_task_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE):  # a deadlock fails fast instead of hanging
        async with agentrio.open_runtime() as rt:
            sup = await rt.spawn_supervisor(name="s", strategy="one_for_all", max_restarts=5)
            task = await sup.spawn(Recorder, name="task", restart="permanent")
            inline = await sup.spawn(Tally, name="inline", restart="permanent")
            assert await task.ask(Put(n=1)) == 10
            with pytest.raises(ActorCrashed):
                await inline.ask(Crash())
            assert await task.ask(Get()) == []  # a fresh incarnation
            assert task.statistics().restarts == 1
            assert inline.statistics().restarts == 1
            assert await inline.ask(Put(n=2)) == 20


async def test_inline_actor_under_a_supervisor_not_yet_started_works_at_once(
    record_events: RecordEvents,
) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team")
        ref = await team.spawn(Tally, log, name="t")
        assert team.statistics().state == "starting"  # its task has not run yet
        ref.send_nowait(Put(n=1))
        assert log == ["start", "put 1"]
        await trio.testing.wait_all_tasks_blocked()
        assert team.statistics().state == "running"
        # The supervisor's start kept the instance it found (no remake).
        assert await ref.ask(Get()) == [1]
        assert log == ["start", "put 1"]
        assert ref.statistics().restarts == 0
        assert [e for e in events if e.path == "team/t"] == [
            ActorStarted(path="team/t", restarts=0)
        ]


@pytest.mark.parametrize(
    "actor_class",
    [Tally(), "Tally", agentrio.Message, Tally.handle, lambda: Tally()],
    ids=["instance", "str", "message", "function", "factory"],
)
async def test_spawn_rejects_what_is_neither_actor_nor_inline_actor(actor_class: object) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument) as info:
            await rt.spawn(actor_class)  # type: ignore[arg-type]
        assert str(info.value).startswith("actor_class must be a subclass of agentrio.Actor")
        assert "agentrio.InlineActor" in str(info.value)
        assert rt.children() == []


async def test_the_first_dead_letters_are_logged_then_only_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrio.actors.actor")
    async with agentrio.open_runtime() as rt:
        ref = await rt.spawn(Recorder, name="gone", restart="temporary")
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash())  # a crash: the supervisor's to log, not a dead letter line
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(LOGGED_DEAD_LETTERS + 5):
            with pytest.raises(ActorStopped):
                ref.send_nowait(Put(n=4242))
        assert rt.statistics().dead_letters == LOGGED_DEAD_LETTERS + 6
    records = [r for r in caplog.records if r.name == "agentrio.actors.actor"]
    lines = [r.getMessage() for r in records]
    line = "dead letter: a Put for 'gone' was not handled (crashed)"
    assert lines == [line] * (LOGGED_DEAD_LETTERS - 2) + [
        line + "; further dead letters are only counted (statistics().dead_letters)"
    ]
    assert {r.levelno for r in records} == {logging.WARNING}
    assert "4242" not in caplog.text  # the message's type, never its content
