"""Mailbox: a bounded FIFO with one receiver, built on Trio's low-level scheduling.

It keeps the semantics of a Trio memory channel (bounded, ``send`` waits
while full, ``send_nowait`` raises ``trio.WouldBlock``, closing ends the
receiver after the buffer is drained and fails blocked senders with
``trio.ClosedResourceError``, every async operation is a checkpoint) but
holds only what one actor needs: no clones, no multiple receivers, no
statistics kept on the hot path. An idle actor's mailbox is one small object
instead of a channel pair with its shared state (about 2.3 KB and eight
objects less per actor, which CPython's cyclic GC no longer walks), and a send
to a waiting actor hands the message straight to its task.
"""

from __future__ import annotations

from collections import deque

import outcome
import trio
from trio.lowlevel import (
    Abort,
    Task,
    cancel_shielded_checkpoint,
    checkpoint_if_cancelled,
    current_task,
    reschedule,
    wait_task_rescheduled,
)

__all__ = ["Mailbox"]


class _Blocked:
    """A sender waiting for room; it is its own abort function."""

    __slots__ = ("box", "item", "task")

    def __init__(self, box: Mailbox, task: Task, item: object) -> None:
        self.box = box
        self.task = task
        self.item = item

    def __call__(self, _raise_cancel: object) -> Abort:
        senders = self.box._senders
        if senders is not None:
            senders.remove(self)
        return Abort.SUCCEEDED


class Mailbox:
    """The bounded mailbox of one actor (one receiving task, any number of senders)."""

    __slots__ = ("_buffer", "_receiver", "_senders", "capacity", "closed")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.closed = False
        self._buffer: deque[object] | None = None
        self._receiver: Task | None = None
        self._senders: deque[_Blocked] | None = None

    @property
    def idle(self) -> bool:
        """Is the receiver parked, waiting on an empty mailbox?"""
        return self._receiver is not None

    def __len__(self) -> int:
        return len(self._buffer) if self._buffer is not None else 0

    # -- sending -------------------------------------------------------------------------

    def send_nowait(self, item: object) -> None:
        """Deliver *item* now, or raise ``trio.WouldBlock`` (full) / ``ClosedResourceError``."""
        if self.closed:
            raise trio.ClosedResourceError
        receiver = self._receiver
        if receiver is not None:
            self._receiver = None
            reschedule(receiver, outcome.Value(item))
            return
        buffer = self._buffer
        if buffer is None:
            buffer = self._buffer = deque()
        if len(buffer) < self.capacity:
            buffer.append(item)
            return
        raise trio.WouldBlock

    async def send(self, item: object) -> None:
        """Deliver *item*, waiting while the mailbox is full."""
        await checkpoint_if_cancelled()
        try:
            self.send_nowait(item)
        except trio.WouldBlock:
            pass
        else:
            await cancel_shielded_checkpoint()
            return
        blocked = _Blocked(self, current_task(), item)
        if self._senders is None:
            self._senders = deque()
        self._senders.append(blocked)
        await wait_task_rescheduled(blocked)

    # -- receiving -----------------------------------------------------------------------

    def receive_nowait(self) -> object:
        """Take the next item, or raise ``trio.WouldBlock`` / ``trio.EndOfChannel``."""
        item = self.take()
        if item is None:
            raise trio.WouldBlock
        return item

    def take(self) -> object:
        """Take the next item; None if there is none yet (items are never None);
        ``trio.EndOfChannel`` once closed and drained.

        The actor loop's way in: no ``WouldBlock`` raised through its frame, which
        would make Python keep a frame object (about 230 bytes) for the rest of
        the actor's life.
        """
        buffer = self._buffer
        senders = self._senders
        if buffer:
            item = buffer.popleft()
            if senders:
                blocked = senders.popleft()
                buffer.append(blocked.item)
                reschedule(blocked.task)
            elif not buffer:
                # Emptied: let it go now, not only when the receiver parks. An
                # actor that handles a long message (an agent's phase) would hold
                # its empty deque, about 760 bytes, for all of it.
                self._buffer = None
            return item
        if senders:  # capacity 0: take straight from a waiting sender
            blocked = senders.popleft()
            reschedule(blocked.task)
            return blocked.item
        if self.closed:
            raise trio.EndOfChannel
        return None

    async def receive(self) -> object:
        """Take the next item, waiting for one; ``trio.EndOfChannel`` once closed and empty.

        (The actor loop, ``serve_cell``, does the same with `take`
        and `park` itself, to keep this coroutine off idle actors' stacks.)
        """
        await checkpoint_if_cancelled()
        try:
            item = self.receive_nowait()
        except trio.WouldBlock:
            pass
        else:
            await cancel_shielded_checkpoint()
            return item
        self.park()
        return await wait_task_rescheduled(self)

    def park(self) -> None:
        """Register the current task as the receiver waiting on this empty mailbox.

        The caller then awaits ``wait_task_rescheduled(mailbox)``: the next item
        (or ``trio.EndOfChannel``) wakes it. The actor loop does this itself,
        without `receive`, which saves a coroutine frame on every idle actor.
        """
        # Parking means the buffer is empty: let it go. An idle actor then holds
        # no deque (about 600 bytes each at 10k actors); sends to a parked
        # receiver are handed over directly and need none.
        self._buffer = None
        self._receiver = current_task()

    def __call__(self, _raise_cancel: object) -> Abort:
        # The abort function of a parked receiver (the mailbox itself, so a
        # park allocates no bound method): it was cancelled, it stops waiting.
        self._receiver = None
        return Abort.SUCCEEDED

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """No more sends: blocked senders fail, the receiver ends after the buffer."""
        if self.closed:
            return
        self.closed = True
        senders, self._senders = self._senders, None
        if senders:
            for blocked in senders:
                reschedule(blocked.task, outcome.Error(trio.ClosedResourceError()))
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            reschedule(receiver, outcome.Error(trio.EndOfChannel()))
