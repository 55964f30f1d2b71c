"""Mailbox: a bounded single-receiver FIFO with the semantics of a Trio memory channel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrio.actors.mailbox import Mailbox


async def test_fifo_and_capacity() -> None:
    box = Mailbox(3)
    for i in range(3):
        box.send_nowait(i)
    assert len(box) == 3
    with pytest.raises(trio.WouldBlock):
        box.send_nowait(3)
    assert [box.receive_nowait() for _ in range(3)] == [0, 1, 2]
    assert len(box) == 0
    with pytest.raises(trio.WouldBlock):
        box.receive_nowait()


def test_an_emptied_mailbox_holds_no_buffer() -> None:
    # An actor handling a long message (an agent's phase) does not keep an empty
    # deque for all of it: the buffer goes with the last item taken.
    mailbox = Mailbox(4)
    mailbox.send_nowait("a")
    mailbox.send_nowait("b")
    assert mailbox.receive_nowait() == "a"
    assert mailbox._buffer is not None  # (one item left)
    assert mailbox.receive_nowait() == "b"
    assert mailbox._buffer is None
    assert len(mailbox) == 0
    mailbox.send_nowait("c")  # and a new one when needed
    assert mailbox.receive_nowait() == "c"


def test_take_says_empty_without_raising() -> None:
    # The actor loop takes with take(): an exception raised through its frame (a
    # WouldBlock) would keep a frame object alive for the actor's life.
    mailbox = Mailbox(2)
    assert mailbox.take() is None
    mailbox.send_nowait("a")
    assert mailbox.take() == "a"
    assert mailbox.take() is None
    mailbox.close()
    with pytest.raises(trio.EndOfChannel):
        mailbox.take()


async def test_send_waits_while_full_and_resumes_when_one_is_taken() -> None:
    box = Mailbox(1)
    box.send_nowait("a")
    sent: list[str] = []

    async def sender(item: str) -> None:
        await box.send(item)
        sent.append(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender, "b")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(sender, "c")
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []
        assert len(box) == 1
        assert await box.receive() == "a"
        await trio.testing.wait_all_tasks_blocked()
        assert sent == ["b"]  # b's item moved into the buffer, b resumed
        assert len(box) == 1
        assert await box.receive() == "b"
        assert await box.receive() == "c"
        await trio.testing.wait_all_tasks_blocked()
    assert sent == ["b", "c"]


async def test_capacity_zero_is_a_rendezvous() -> None:
    box = Mailbox(0)
    with pytest.raises(trio.WouldBlock):
        box.send_nowait("x")
    done: list[str] = []

    async def sender() -> None:
        await box.send("x")
        done.append("sent")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert done == [] and len(box) == 0
        assert box.receive_nowait() == "x"  # taken straight from the waiting sender
        await trio.testing.wait_all_tasks_blocked()
        assert done == ["sent"]

    got: list[object] = []

    async def receiver() -> None:
        got.append(await box.receive())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await trio.testing.wait_all_tasks_blocked()
        box.send_nowait("y")  # handed to the waiting receiver
        await trio.testing.wait_all_tasks_blocked()
    assert got == ["y"]


async def test_close_fails_blocked_senders_and_ends_the_receiver_after_the_buffer() -> None:
    box = Mailbox(1)
    box.send_nowait(1)
    errors: list[type[BaseException]] = []

    async def sender() -> None:
        try:
            await box.send(2)
        except trio.ClosedResourceError as exc:
            errors.append(type(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        box.close()
        box.close()  # closing twice is harmless
    assert errors == [trio.ClosedResourceError] * 2
    with pytest.raises(trio.ClosedResourceError):
        box.send_nowait(3)
    with pytest.raises(trio.ClosedResourceError):
        await box.send(3)
    assert await box.receive() == 1  # what was buffered is still delivered
    with pytest.raises(trio.EndOfChannel):
        await box.receive()
    with pytest.raises(trio.EndOfChannel):
        box.receive_nowait()


async def test_close_wakes_a_waiting_receiver() -> None:
    box = Mailbox(2)
    ended: list[bool] = []

    async def receiver() -> None:
        with pytest.raises(trio.EndOfChannel):
            await box.receive()
        ended.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await trio.testing.wait_all_tasks_blocked()
        box.close()
    assert ended == [True]


async def test_cancelled_sender_leaves_the_mailbox_consistent() -> None:
    box = Mailbox(1)
    box.send_nowait("a")
    async with trio.open_nursery() as nursery:
        scopes = []
        for item in ("b", "c", "d"):
            scope = trio.CancelScope()
            scopes.append(scope)

            async def sender(item: str = item, scope: trio.CancelScope = scope) -> None:
                with scope:
                    await box.send(item)

            nursery.start_soon(sender)
            await trio.testing.wait_all_tasks_blocked()
        scopes[1].cancel()  # "c" gives up
        await trio.testing.wait_all_tasks_blocked()
        assert [await box.receive() for _ in range(3)] == ["a", "b", "d"]
    assert len(box) == 0
    assert scopes[1].cancelled_caught


async def test_cancelled_receiver_leaves_the_mailbox_consistent() -> None:
    box = Mailbox(2)
    with trio.move_on_after(0) as scope:
        await box.receive()
    assert scope.cancelled_caught
    box.send_nowait("kept")  # not handed to the receiver that left
    assert len(box) == 1
    assert await box.receive() == "kept"


async def test_operations_are_checkpoints() -> None:
    box = Mailbox(1)
    with trio.testing.assert_checkpoints():
        await box.send(1)
    with trio.testing.assert_checkpoints():
        assert await box.receive() == 1
    # a cancelled send delivers nothing
    with trio.CancelScope() as scope:
        scope.cancel()
        await box.send(2)
    assert len(box) == 0
    box.send_nowait(3)
    with trio.CancelScope() as scope:
        scope.cancel()
        await box.receive()
    assert box.receive_nowait() == 3  # a cancelled receive took nothing


# -- against trio.open_memory_channel -------------------------------------------------------


class Box(Protocol):
    def send_nowait(self, item: int) -> None: ...
    async def send(self, item: int) -> None: ...
    def receive_nowait(self) -> int: ...
    async def receive(self) -> int: ...
    def close(self) -> None: ...
    def size(self) -> int: ...


class MailboxBox:
    def __init__(self, capacity: int) -> None:
        self.box = Mailbox(capacity)
        self.send_nowait = self.box.send_nowait
        self.send = self.box.send
        self.receive_nowait = self.box.receive_nowait
        self.receive = self.box.receive
        self.close = self.box.close

    def size(self) -> int:
        return len(self.box)


class ChannelBox:
    def __init__(self, capacity: int) -> None:
        self.tx, self.rx = trio.open_memory_channel[int](capacity)
        self.send_nowait = self.tx.send_nowait
        self.send = self.tx.send
        self.receive_nowait = self.rx.receive_nowait
        self.receive = self.rx.receive
        self.close = self.tx.close

    def size(self) -> int:
        return self.rx.statistics().current_buffer_used


ops = st.lists(
    st.one_of(
        st.tuples(st.just("send_nowait")),
        st.tuples(st.just("send")),
        st.tuples(st.just("receive_nowait")),
        st.tuples(st.just("receive")),
        st.tuples(st.just("close")),
        st.tuples(st.just("cancel_sender"), st.integers(0, 5)),
        st.tuples(st.just("cancel_receiver")),
    ),
    max_size=40,
)


def trace(
    make: Callable[[int], Box], capacity: int, script: list[tuple[object, ...]]
) -> list[object]:
    log: list[object] = []

    async def main() -> None:
        box = make(capacity)
        counter = iter(range(1_000_000))
        senders: list[tuple[int, trio.CancelScope]] = []
        receiver: list[trio.CancelScope] = []
        finished: list[tuple[str, int, str]] = []

        async def outcome_of(
            kind: str, n: int, fn: Callable[[], object], scope: trio.CancelScope
        ) -> None:
            with scope:
                try:
                    value = await fn()  # type: ignore[misc]
                except (trio.ClosedResourceError, trio.EndOfChannel) as exc:
                    finished.append((kind, n, type(exc).__name__))
                    return
                finished.append((kind, n, f"ok {value}"))
                return
            finished.append((kind, n, "cancelled"))

        async with trio.open_nursery() as nursery:
            for op in script:
                name = op[0]
                result: object = None
                try:
                    if name == "send_nowait":
                        box.send_nowait(next(counter))
                    elif name == "send":
                        n = next(counter)
                        scope = trio.CancelScope()
                        senders.append((n, scope))
                        nursery.start_soon(outcome_of, "send", n, lambda n=n: box.send(n), scope)
                    elif name == "receive_nowait":
                        result = box.receive_nowait()
                    elif name == "receive":
                        if receiver:  # one receiver at a time, as an actor has
                            continue
                        scope = trio.CancelScope()
                        receiver.append(scope)
                        nursery.start_soon(outcome_of, "receive", 0, box.receive, scope)
                    elif name == "close":
                        box.close()
                    elif name == "cancel_sender" and senders:
                        senders[op[1] % len(senders)][1].cancel()
                    elif name == "cancel_receiver" and receiver:
                        receiver[0].cancel()
                except (trio.WouldBlock, trio.ClosedResourceError, trio.EndOfChannel) as exc:
                    result = type(exc).__name__
                await trio.testing.wait_all_tasks_blocked()
                done = sorted(finished)
                finished.clear()
                if any(kind == "receive" for kind, _, _ in done):
                    receiver.clear()
                ended = {n for kind, n, _ in done if kind == "send"}
                senders[:] = [(n, s) for n, s in senders if n not in ended]
                log.append((name, result, done, box.size()))
            nursery.cancel_scope.cancel()

    trio.run(main)
    return log


@settings(deadline=None, max_examples=150)
@given(st.integers(0, 3), ops)
def test_behaves_like_a_memory_channel(capacity: int, script: list[tuple[object, ...]]) -> None:
    assert trace(MailboxBox, capacity, script) == trace(ChannelBox, capacity, script)
