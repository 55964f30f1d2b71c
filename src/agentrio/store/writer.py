"""CheckpointWriter: the one task that appends to a checkpoint store, in batches.

Agents hand records to the writer with ``put_nowait`` (a list append) and go
on; the writer appends what has gathered, ``fsync``-ed, every
``flush_interval`` seconds, at once when ``max_batch`` records wait, and at
once when someone waits in ``synced()``. Waiters of ``synced()`` that arrive
together share one append and one ``fsync`` (group commit).

Waking the writer costs one ``trio.Event.set()`` per batch: when the first
record of a batch arrives (to start the interval's timer) and when the batch
is full; every other ``put_nowait`` is a list append and a length check.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Awaitable, Callable
from zlib import crc32

import trio

from .._checks import check_int, check_seconds
from ..errors import StoreError, UsageError
from .base import CheckpointStore
from .files import _FRAME, _LEN_CRC, DirectoryStore

__all__ = ["CheckpointWriter"]


class CheckpointWriter:
    """Appends records to a [`CheckpointStore`][agentrio.store.CheckpointStore]
    in batches, off the agents' path.

    Example:

        writer = CheckpointWriter(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.put_nowait(record)  # never blocks
            await writer.synced()  # the record is on disk
            await writer.aclose()  # the rest too; run() returns, the store is closed

    The last batch of those waiting, and any batch a ``synced()`` waits for, is
    appended with ``sync=True``; a batch before it (more than ``max_batch``
    records waited) with ``sync=False``, made durable by the next one.
    ``put_nowait`` never blocks and never drops a record; ``put`` waits while
    ``max_pending`` records wait to be written. A store error (any exception
    from ``append``) stops the writer: ``run()`` raises it as a
    [`StoreError`][agentrio.errors.StoreError], and so does every ``put``,
    ``synced`` and ``put_nowait`` after it. Records put then are not written.

    Cancelling ``run()`` stops it at once, without appending what waits (no
    thread is left running: an append in a worker thread is waited for); a
    batch whose ``append`` raised ``trio.Cancelled`` is taken to be unwritten
    and waits again, so ``aclose`` can still append it. Waiters of ``put``
    and ``synced`` then raise ``StoreError``, unless ``aclose`` is running
    (it appends their records).

    Args:
        store: where the records go.
        flush_interval: the longest a record waits before its batch is
            appended, in seconds.
        max_batch: the most records in one append; this many waiting makes
            the writer append at once. (A burst that thousands of agents put at
            once, waited for by ``synced()``, is one append: one trip to the
            store's thread.)
        max_pending: ``put`` waits while this many records wait to be written.

    Attributes:
        written: records appended and synced so far.
        batches: appends so far.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        flush_interval: float = 0.05,
        max_batch: int = 65536,
        max_pending: int = 65536,
    ) -> None:
        self._store = store
        # A DirectoryStore's records are framed as they are put, on the agents'
        # path, a microsecond each: not all at once, at the end of a burst that
        # thousands of agents wait for (before their tools) with nothing else to do.
        self._framed = store if isinstance(store, DirectoryStore) else None
        check_seconds("flush_interval", flush_interval)
        self._flush_interval = flush_interval
        self._max_batch = check_int("max_batch", max_batch, 1)
        self._max_pending = check_int("max_pending", max_pending, 1)
        self.written = 0
        self.batches = 0
        self._unsynced = 0  # records appended with sync=False since the last sync
        self._pending: list[bytes] = []
        self._taken = 0  # records taken into batches (written, or being appended)
        self._sync_target = 0  # the most records a synced() waits to see written
        self._wake = trio.Event()  # the writer's: records, a synced(), or aclose()
        self._progress = trio.Event()  # put()'s: set and replaced after each append
        # synced()'s waiters, by the records appended that each waits for (in
        # order; one event per count): an append wakes only those it satisfies.
        self._synced: deque[tuple[int, trio.Event]] = deque()
        self._refuse: str | None = None  # why put_nowait refuses a record, if it does
        self._error: BaseException | None = None
        self._started = False
        self._running = False
        self._closing = False
        self._closed = False
        self._in_aclose = False  # aclose() is appending or waiting for run()
        self._scope: trio.CancelScope | None = None  # run()'s: a cancelled aclose() stops it
        # Run by aclose() once every record is appended, before the store closes
        # (the runtime's compaction); not when the writer failed.
        self.before_close: Callable[[], Awaitable[None]] | None = None

    def __repr__(self) -> str:
        return (
            f"CheckpointWriter({self._store!r}, written={self.written}, "
            f"pending={len(self._pending)})"
        )

    def put_nowait(self, data: bytes) -> None:
        """Hand *data* to the writer as one record; never blocks, never drops.

        Raises:
            StoreError: the writer is closed, or stopped by a store error.
        """
        if self._refuse is not None:
            raise StoreError(self._refuse) from self._error
        pending = self._pending
        if self._framed is None:
            pending.append(data)
        else:  # (frame(data), inline: a call less for each record)
            n, crc = len(data), crc32(data)
            pending.append(_FRAME.pack(n, crc, crc32(_LEN_CRC.pack(n, crc))) + data)
        n = len(pending)
        if n == 1 or n == self._max_batch:
            self._wake.set()

    async def put(self, data: bytes) -> None:
        """[`put_nowait`][agentrio.store.CheckpointWriter.put_nowait], after waiting
        while ``max_pending`` records wait to be written.

        Raises:
            StoreError: the writer is closed or has stopped (a store error, or
                ``run()`` cancelled) before the record could be taken.
        """
        await trio.lowlevel.checkpoint()
        while self._taken + len(self._pending) - self.written >= self._max_pending:
            self._check()
            await self._progress.wait()
        self.put_nowait(data)

    async def synced(self) -> None:
        """Return when every record put so far is appended with ``sync=True``.

        Asks the writer to append at once (without waiting for
        ``flush_interval``); waiters that ask together share one append.

        Raises:
            StoreError: the writer stopped (a store error, or ``run()``
                cancelled) before those records were appended.
        """
        target = self._taken + len(self._pending)
        if self.written >= target:
            await trio.lowlevel.checkpoint()
            return
        if target > self._sync_target:
            self._sync_target = target
            self._wake.set()
        while self.written < target:
            self._check()
            await self._synced_event(target).wait()

    def _synced_event(self, target: int) -> trio.Event:
        """The event set once *target* records are appended (or the writer stops)."""
        waiting = self._synced
        if waiting and waiting[-1][0] >= target:
            if waiting[-1][0] == target:
                return waiting[-1][1]
            # (After the writer stopped and woke every waiter, they come back
            # in any order: kept in order all the same.)
            at = bisect.bisect_left(waiting, target, key=lambda w: w[0])
            if at < len(waiting) and waiting[at][0] == target:
                return waiting[at][1]
            event = trio.Event()
            waiting.insert(at, (target, event))
            return event
        event = trio.Event()
        waiting.append((target, event))
        return event

    def _check(self) -> None:
        """Raise if the writer cannot write any more (waiting would be forever)."""
        if self._error is not None:
            raise StoreError(f"the checkpoint writer failed: {self._error}") from self._error
        if (self._started or self._closed) and not (self._running or self._in_aclose):
            raise StoreError("the checkpoint writer has stopped")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Append batches until [`aclose`][agentrio.store.CheckpointWriter.aclose]
        (having appended what waits), or cancelled (at once).

        Start it in a nursery (``await nursery.start(writer.run)``).

        Raises:
            StoreError: an append failed (the store's error, or any other
                exception from it, as the cause).
            UsageError: ``run()`` was started twice.
        """
        if self._started:
            raise UsageError("CheckpointWriter.run() is started once")
        self._started = self._running = True
        task_status.started()
        try:
            with trio.CancelScope() as self._scope:
                await self._loop()
        finally:
            self._running = False
            self._notify()

    async def _loop(self) -> None:
        while True:
            if self._pending:
                if not self._urgent() and len(self._pending) < self._max_batch:
                    self._wake = trio.Event()
                    with trio.move_on_after(self._flush_interval):
                        await self._wake.wait()
                await self._flush()
            elif self._closing:
                return
            else:
                self._wake = trio.Event()
                await self._wake.wait()

    def _urgent(self) -> bool:
        return self._closing or self._sync_target > self._taken

    async def _flush(self) -> None:
        """Append the oldest ``max_batch`` records waiting (``fsync``-ed if they are the
        last waiting, or a ``synced()`` waits for them)."""
        pending = self._pending
        if len(pending) <= self._max_batch:
            batch, self._pending = pending, []
        else:
            batch = pending[: self._max_batch]
            del pending[: self._max_batch]
        self._taken += len(batch)
        # One sync for a drain: a batch is synced if it is the last of those waiting,
        # or if a synced() waits for it; a batch synced makes those before it
        # durable too (the protocol's rule), so a burst of records waits for one
        # fsync, not one per max_batch.
        waiting = self._synced
        sync = not self._pending or bool(waiting and waiting[0][0] <= self._taken)
        try:
            if self._framed is None:
                await self._store.append(batch, sync=sync)
            else:
                await self._framed._append_own_frames(batch, sync=sync)
        except trio.Cancelled:
            # A cancelled append appended nothing (the protocol's rule): the
            # batch waits again, ahead of what came after it.
            self._pending[:0] = batch
            self._taken -= len(batch)
            raise
        except Exception as exc:
            self._error = exc
            self._refuse = f"the checkpoint writer failed: {exc}"
            self._notify()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"checkpoint store append failed: {exc!r}") from exc
        self.batches += 1
        self._unsynced += len(batch)
        if sync:
            self.written += self._unsynced
            self._unsynced = 0
            self._notify()

    def _notify(self) -> None:
        progress, self._progress = self._progress, trio.Event()
        progress.set()
        waiting, written = self._synced, self.written
        while waiting and waiting[0][0] <= written:
            waiting.popleft()[1].set()
        if waiting and (self._error is not None or not self._running):
            # Failed or stopped: every waiter looks again (it raises, or waits
            # for aclose's appends).
            for _, event in waiting:
                event.set()
            waiting.clear()

    async def aclose(self) -> None:
        """Append what waits (``sync=True``), stop ``run()``, close the store;
        idempotent.

        If ``run()`` is not running (never started, or cancelled), what waits is
        appended here; if it stopped on a store error, nothing more is appended.
        The store is closed in any case, even if this is cancelled: then
        ``run()`` is stopped first, as if cancelled (it returns), and what
        waits is not appended.

        Raises:
            StoreError: appending what waits failed here.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = self._closing = True
        if self._refuse is None:
            self._refuse = "the checkpoint writer is closed"
        self._wake.set()
        self._in_aclose = True
        try:
            while self._running:
                await self._progress.wait()
            # run() was never started, or was cancelled: append what waits here.
            while self._pending and self._error is None:
                await self._flush()
            await trio.lowlevel.checkpoint()
        finally:
            self._in_aclose = False
            self._notify()
            with trio.CancelScope(shield=True):
                if self._running and self._scope is not None:
                    # Cancelled while run() appends: stop it (at once, as a
                    # cancelled run() stops) before its store is closed under it.
                    self._scope.cancel()
                    while self._running:
                        await self._progress.wait()
                await self._close_store()

    async def _close_store(self) -> None:
        """Run ``before_close`` (if every record was appended), then close the store;
        raise what ``before_close`` raised, once the store is closed."""
        failed: BaseException | None = None
        hook = self.before_close
        if hook is not None and self._error is None and not self._pending:
            try:
                await hook()
            except Exception as exc:
                failed = exc
        await self._store.aclose()
        if failed is not None:
            if isinstance(failed, StoreError):
                raise failed
            raise StoreError(f"checkpoint store compaction failed: {failed!r}") from failed
