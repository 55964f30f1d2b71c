"""The checkpoint store protocol, and the records as a store holds them.

A store keeps opaque records: the msgpack bytes of the runtime's checkpoint
records, appended in batches and given back in the order they were appended.
It knows nothing of what the records mean; framing them, detecting a torn
last record and naming where a bad one lies are its job. Anything that keeps
these three methods is a store (a Redis list, a Postgres table...).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = [
    "Archived",
    "ArchivingStore",
    "CheckpointStore",
    "Entry",
    "Loaded",
    "MemoryStore",
    "record_phase",
]


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

        With ``sync=True`` the records, and those of every batch appended before
        them, are on stable storage when this returns (``fsync`` or the
        database's commit); otherwise they are handed to the operating system
        (a [`CheckpointWriter`][agentrio.store.CheckpointWriter] appends a burst
        of batches with ``sync=False`` but the last). A crash may leave the last
        record torn, never a record half-applied:
        [`load`][agentrio.store.CheckpointStore.load] leaves a torn record out.

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


class Archived(NamedTuple):
    """A finished phase as a store's archive keeps it.

    Attributes:
        phase: the phase's id.
        meta: what the runtime says of it (opaque to the store: the msgpack of a
            [`PhaseSummary`][agentrio.types.PhaseSummary]).
        records: its records, in order.
    """

    phase: str
    meta: bytes
    records: Sequence[bytes]

    def __repr__(self) -> str:
        return f"Archived(phase={self.phase!r}, records={len(self.records)})"


@runtime_checkable
class ArchivingStore(CheckpointStore, Protocol):
    """A [`CheckpointStore`][agentrio.store.CheckpointStore] with a *live area* and an
    *archive*: what a runtime opening it reads, and what it reads only when asked.

    ``load`` reads the live area alone. The runtime moves the finished phases
    out of it into the archive (``compact``), so that opening a store reads what
    is unfinished, however many phases it has finished; a
    [`Retention`][agentrio.store.Retention] policy drops archived phases. Every store of
    agentrio is one; a store that is not still works, read whole at each open
    (and cannot be read by a [`StoreReader`][agentrio.types.StoreReader]).

    A record's phase, for ``delete_phases``, is the second item of the msgpack
    array that the record is (see [`record_phase`][agentrio.store.record_phase]).
    """

    async def read_live(self) -> Loaded:
        """The live area's records, read without taking the store's lock (a
        reader's: the owner may be appending)."""
        ...

    async def read_index(self) -> list[tuple[str, bytes]]:
        """Every archived phase: its id and its ``meta``, without taking the lock."""
        ...

    async def read_archived(self, phase_ids: Collection[str]) -> dict[str, list[Entry]]:
        """The records of the archived phases *phase_ids* (those archived), without
        taking the lock.

        Raises:
            StoreCorrupt: a damaged archived record.
        """
        ...

    async def compact(
        self, live: Sequence[bytes], archive: Sequence[Archived], drop: Collection[str]
    ) -> None:
        """Replace the live area with *live*, add *archive* to the archive (an
        archived phase of the same id is replaced) and drop the archived phases
        *drop*; by the store's owner, while no ``append`` runs.

        Crash-safe: the archive is written first, then the live area replaced in
        one step; a crash leaves at worst a phase both live and archived (the
        next compaction archives it again), never one lost. What a crash left of
        a rewrite (files, rows no longer referenced) is removed by the owner's
        next ``load`` or ``compact``.
        """
        ...

    async def delete_phases(self, phase_ids: Collection[str]) -> None:
        """Delete every record of the phases *phase_ids*, live or archived, so
        that none of their bytes is left in the store's files when this returns
        (see each store for what that means on its medium). Takes the lock if
        this store does not hold it."""
        ...


def record_phase(data: bytes) -> str | None:
    """The phase id of the record *data*: the second item of the msgpack array it
    is, when that is a str (as in every record the runtime writes); else None.

    Read from the record's first bytes without decoding it; hostile bytes give
    None, never an error.
    """
    try:
        first = data[0]
        if 0x90 <= first <= 0x9F:
            if first - 0x90 < 2:
                return None
            pos = 1
        elif first == 0xDC:
            pos = 3
        elif first == 0xDD:
            pos = 5
        else:
            return None
        pos = _skip_str(data, pos)
        if pos < 0:
            return None
        start, length = _str_at(data, pos)
        if start < 0 or start + length > len(data):
            return None
        return data[start : start + length].decode("utf-8", "surrogatepass")
    except (IndexError, UnicodeDecodeError):
        return None


def _str_at(data: bytes, pos: int) -> tuple[int, int]:
    """Where the msgpack str at *pos* starts, and its length ((-1, 0): not a str)."""
    tag = data[pos]
    if 0xA0 <= tag <= 0xBF:
        return pos + 1, tag - 0xA0
    if tag == 0xD9:
        return pos + 2, data[pos + 1]
    if tag == 0xDA:
        return pos + 3, int.from_bytes(data[pos + 1 : pos + 3], "big")
    if tag == 0xDB:
        return pos + 5, int.from_bytes(data[pos + 1 : pos + 5], "big")
    return -1, 0


def _skip_str(data: bytes, pos: int) -> int:
    start, length = _str_at(data, pos)
    return -1 if start < 0 else start + length


class MemoryStore:
    """A store in memory: for tests, and for restarts within one process.

    Nothing survives the process. ``MemoryStore`` objects may be shared by
    runtimes opened one after another in the same process; it has no lock
    (two runtimes open on it at once would both resume its phases).
    """

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.archive: dict[str, Archived] = {}
        self.closed = False

    def __repr__(self) -> str:
        return f"MemoryStore(records={len(self.records)}, archived={len(self.archive)})"

    async def load(self) -> Loaded:
        return Loaded([Entry("<memory>", i, data) for i, data in enumerate(self.records)])

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        self.records.extend(batch)

    async def read_live(self) -> Loaded:
        return await self.load()

    async def read_index(self) -> list[tuple[str, bytes]]:
        return [(phase.phase, phase.meta) for phase in self.archive.values()]

    async def read_archived(self, phase_ids: Collection[str]) -> dict[str, list[Entry]]:
        found = {}
        for pid in phase_ids:
            phase = self.archive.get(pid)
            if phase is not None:
                found[pid] = [
                    Entry(f"<memory archive {pid}>", i, r) for i, r in enumerate(phase.records)
                ]
        return found

    async def compact(
        self, live: Sequence[bytes], archive: Sequence[Archived], drop: Collection[str]
    ) -> None:
        for phase in archive:
            self.archive[phase.phase] = Archived(phase.phase, phase.meta, list(phase.records))
        for pid in drop:
            self.archive.pop(pid, None)
        self.records = list(live)

    async def delete_phases(self, phase_ids: Collection[str]) -> None:
        gone = set(phase_ids)
        self.records = [r for r in self.records if record_phase(r) not in gone]
        for pid in gone:
            self.archive.pop(pid, None)

    async def aclose(self) -> None:
        self.closed = True
