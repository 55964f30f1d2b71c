"""The checkpoint store protocol, and the records as a store holds them.

A store keeps opaque records: the msgpack bytes of the runtime's checkpoint
records, appended in batches and given back in the order they were appended.
It knows nothing of what the records mean; framing them, detecting a torn
last record and naming where a bad one lies are its job. Anything that keeps
these three methods is a store (a Redis list, a Postgres table...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ["CheckpointStore", "Entry", "Loaded", "MemoryStore"]


class Entry(NamedTuple):
    """One record as a store gives it back.

    Attributes:
        source: where it was read from (a file's path, a database and table).
        offset: where in *source* it starts (a byte offset, a row id).
        data: the record's bytes, exactly as appended (its length only in
            the repr).
    """

    source: str
    offset: int
    data: bytes

    def __repr__(self) -> str:
        # A record's bytes are a conversation's content: not in a repr, which
        # ends up in logs and in the repr of a Loaded.
        return (
            f"Entry(source={self.source!r}, offset={self.offset!r}, data=<{len(self.data)} bytes>)"
        )


class Loaded(NamedTuple):
    """What a store holds: its records in append order, and any torn tails.

    Attributes:
        entries: every complete record, oldest first.
        torn: the torn records found and left out, each where it starts (its
            ``data`` is what could be read of it: its payload, or its frame
            header when that is what is damaged; never more than one record).
            A torn record is the last
            thing a crashed writer left (a store written by several lives,
            such as one file per life, may hold one per life); a bad record
            anywhere else is a [`StoreCorrupt`][agentrio.errors.StoreCorrupt].
    """

    entries: list[Entry]
    torn: tuple[Entry, ...] = ()


@runtime_checkable
class CheckpointStore(Protocol):
    """What a checkpoint store offers the runtime.

    The runtime calls [`load`][agentrio.store.CheckpointStore.load] once when it
    opens, then [`append`][agentrio.store.CheckpointStore.append] from one task
    at a time (its checkpoint writer), then
    [`aclose`][agentrio.store.CheckpointStore.aclose] once. A store does its
    blocking I/O off the Trio thread (``trio.to_thread.run_sync``).

    A store has one owner at a time: from its first ``load`` (or ``append``)
    to ``aclose``, no other store object may load or append the same records
    (it raises [`StoreLocked`][agentrio.errors.StoreLocked]), or two runtimes
    would both resume the same phases and run a tool not declared idempotent
    twice. The stores of agentrio hold a lock file's ``flock``, which the
    system lets go when the owner's process dies.
    """

    async def load(self) -> Loaded:
        """Every record appended so far (by this process or an earlier one).

        Raises:
            StoreCorrupt: a record that is not the torn tail is damaged; the
                error names the source and offset.
        """
        ...

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        """Append *batch*, each item one record, in order.

        With ``sync=True`` the records are on stable storage when this returns
        (``fsync`` or the database's commit); otherwise they are handed to the
        operating system. A crash may leave the last record torn, never a
        record half-applied: [`load`][agentrio.store.CheckpointStore.load] leaves
        a torn record out.

        Cancelled, it either appends the whole batch and returns, or raises
        ``trio.Cancelled`` having appended none of it (as
        ``trio.to_thread.run_sync`` does: it is cancelled only before its
        thread starts): a [`CheckpointWriter`][agentrio.store.CheckpointWriter]
        appends a cancelled batch again.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's files or connections; records appended stay."""
        ...


class MemoryStore:
    """A store in memory: for tests, and for restarts within one process.

    Nothing survives the process. ``MemoryStore`` objects may be shared by
    runtimes opened one after another in the same process; it has no lock
    (two runtimes open on it at once would both resume its phases).
    """

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.closed = False

    def __repr__(self) -> str:
        return f"MemoryStore(records={len(self.records)})"

    async def load(self) -> Loaded:
        return Loaded([Entry("<memory>", i, data) for i, data in enumerate(self.records)])

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        self.records.extend(batch)

    async def aclose(self) -> None:
        self.closed = True
