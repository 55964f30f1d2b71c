"""SQLiteStore: checkpoint records in a SQLite database (the standard library's ``sqlite3``).

One table, ``records (id INTEGER PRIMARY KEY, data BLOB NOT NULL, crc INTEGER
NOT NULL)``; each batch is one transaction, so a crash leaves a batch whole
or absent and there is never a torn record. Each row carries the CRC-32 of its data: a row whose
checksum fails is a [`StoreCorrupt`][agentrio.errors.StoreCorrupt] naming the
database and the row id. The database is marked as agentrio's
(``PRAGMA application_id``, ``user_version``), so another program's database
is refused rather than written into, and so is one whose ``records`` table is
not the one above. A value of another type (a TEXT, a NULL) in a row is a
``StoreCorrupt`` too: TEXT is read as bytes, never decoded.

Every call to the database runs in a worker thread, one at a time (a
``trio.CapacityLimiter(1)``), so the connection is never used by two threads
at once; the journal is in WAL mode.

The store's owner holds an exclusive ``flock`` on a lock file beside the
database, ``<database>.lock`` (of its real path: two paths to one database
share it). Not a lock of the database itself: SQLite's own locks on it are
POSIX locks, released when any descriptor of the file is closed, and a
transaction held for a runtime's life would keep its batches uncommitted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
import weakref
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import trio

from ..errors import StoreCorrupt, StoreError
from ._archive import frame, unframe
from ._lock import StoreLock, check_lock_timeout, check_store_path
from .base import Archived, Entry, Loaded, record_phase
from .files import MAX_RECORD

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")

_APPLICATION_ID = 0x61727472  # "artr": an agentrio checkpoint database
_USER_VERSION = 2  # the schema written; a version 1 database is migrated (a table added)
_SCHEMA = "CREATE TABLE records (id INTEGER PRIMARY KEY, data BLOB NOT NULL, crc INTEGER NOT NULL)"
_ARCHIVE_SCHEMA = (
    "CREATE TABLE archive (phase TEXT PRIMARY KEY, meta BLOB NOT NULL, "
    "data BLOB NOT NULL, crc INTEGER NOT NULL)"
)


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    """One transaction on *db*: committed if the block ends, rolled back if it raises."""
    db.execute(begin)
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class SQLiteStore:
    """A [`CheckpointStore`][agentrio.store.CheckpointStore] in a SQLite database file.

    Example:

        store = SQLiteStore("checkpoints.db")  # made on first use if missing
        await store.append([b"one", b"two"], sync=True)
        loaded = await store.load()

    The database is opened (and its table made) on the first ``load`` or
    ``append``. Each [`Entry`][agentrio.store.Entry]'s ``source`` is the
    database's path and its ``offset`` the record's row id. ``append`` with
    ``sync=True`` commits with ``PRAGMA synchronous=FULL`` (on disk when it
    returns), with ``sync=False`` with ``NORMAL`` (a crash may lose the last
    batches, whole).

    A store has one owner at a time: the first ``load`` or ``append`` takes
    the lock file ``<database>.lock`` beside the database (an exclusive
    ``flock``; it names the holder's pid and host), held until ``aclose``
    (or until the store object is dropped, or its process dies). Another
    store on the same database, in this process or another, then raises
    [`StoreLocked`][agentrio.errors.StoreLocked] naming the holder, or waits
    up to *lock_timeout* seconds for it. A ``":memory:"`` database is this
    store's alone and has no lock file.

    Args:
        path: the database file.
        lock_timeout: how long ``load`` and ``append`` wait for another owner
            to let the store go, in seconds (default 0: not at all;
            ``math.inf``: until it does). The wait is cancellable.

    Raises:
        StoreError: (from ``load``, ``append``) the file cannot be opened, is not
            a SQLite database, or is another program's; a statement failed; its
            lock file cannot be made. The message names the file.
        StoreLocked: (from ``load``, ``append``) another store owns the
            database (past *lock_timeout*).
        InvalidArgument: *lock_timeout* is not a number of seconds >= 0, or *path*
            holds a NUL character.

    Attributes:
        path: the database's path.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = 0.0) -> None:
        self.path = check_store_path(path)
        self._lock_timeout = check_lock_timeout(lock_timeout)
        self._lock: StoreLock | None = None
        if self.path not in ("", ":memory:"):  # (a database of its own: nobody else's)
            self._lock = StoreLock(os.path.realpath(self.path) + ".lock", self.path)
            weakref.finalize(self, self._lock.release)  # (dropped without aclose)
        self._limiter = trio.CapacityLimiter(1)
        self._db: sqlite3.Connection | None = None
        self._sync: bool | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    async def _call(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        lock = self._lock
        if lock is not None and not lock.held:
            await lock.acquire(self._lock_timeout)
        return await trio.to_thread.run_sync(self._run, fn, limiter=self._limiter)

    def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:  # closed while this call waited for the thread
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        try:
            if self._db is None:
                self._db = self._open()
            return fn(self._db)
        except sqlite3.Error as exc:
            raise StoreError(f"checkpoint database {self.path!r}: {exc}") from None

    def _open(self) -> sqlite3.Connection:
        # Calls are serialized by the limiter, but the thread cache may run two
        # in different threads: hence check_same_thread=False.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # A TEXT value is read as bytes: decoding one that is not UTF-8 would
        # fail with a message quoting it (a record's content).
        db.text_factory = bytes
        try:
            (app,) = db.execute("PRAGMA application_id").fetchone()
            (version,) = db.execute("PRAGMA user_version").fetchone()
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            # (A deleted row's bytes are overwritten with zeros: delete_phases.)
            db.execute("PRAGMA secure_delete = ON")
            if app == 0 and version == 0 and tables == 0:
                db.execute("BEGIN IMMEDIATE")
                db.execute(_SCHEMA)
                db.execute(_ARCHIVE_SCHEMA)
                db.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {_USER_VERSION}")
                db.execute("COMMIT")
            elif app != _APPLICATION_ID:
                raise StoreError(f"{self.path!r} is not an agentrio checkpoint database")
            elif version not in (1, _USER_VERSION):
                raise StoreError(
                    f"checkpoint database {self.path!r} has schema version {version}, "
                    f"not {_USER_VERSION}: written by a later agentrio, read it with that one"
                )
            else:
                self._check_tables(db, version)
            db.execute("PRAGMA journal_mode = WAL")
        except BaseException:
            db.close()
            raise
        return db

    def _check_tables(self, db: sqlite3.Connection, version: int) -> None:
        """Refuse a database whose tables are not agentrio's; migrate version 1
        (no archive) to 2, in one transaction, if this store may write."""
        wanted = {"records": _SCHEMA.encode(), "archive": _ARCHIVE_SCHEMA.encode()}
        found = dict(
            db.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                "AND name IN ('records', 'archive')"
            ).fetchall()
        )
        found = {
            (name.decode() if isinstance(name, bytes) else name): sql for name, sql in found.items()
        }
        if version == 1 and "archive" not in found:
            found["archive"] = wanted["archive"]
            migrate = True
        else:
            migrate = False
        if found != wanted:
            raise StoreError(
                f"checkpoint database {self.path!r} does not hold the records table "
                "(and archive table) agentrio makes"
            )
        if migrate:
            db.execute("BEGIN IMMEDIATE")
            db.execute(_ARCHIVE_SCHEMA)
            db.execute(f"PRAGMA user_version = {_USER_VERSION}")
            db.execute("COMMIT")

    async def load(self) -> Loaded:
        """Every record, in the order appended (``torn`` is always empty:
        batches are transactions).

        A row longer than [`MAX_RECORD`][agentrio.store.MAX_RECORD] is corrupt, and
        never read (as a ``DirectoryStore`` refuses such a frame).

        Raises:
            StoreCorrupt: a row whose checksum fails, or that is longer than
                ``MAX_RECORD`` (its ``offset`` is the row id).
            StoreLocked: another store owns the database (past *lock_timeout*).
            StoreError: the database cannot be opened or read.
        """
        return await self._call(self._load)

    def _load(self, db: sqlite3.Connection) -> Loaded:
        # (A row over MAX_RECORD is not read: length() of a blob is in its header.)
        rows = db.execute(
            "SELECT id, CASE WHEN length(data) <= ? THEN data END, crc, length(data)"
            " FROM records ORDER BY id",
            (MAX_RECORD,),
        )
        return checked_rows(rows, self.path, f"checkpoint database {self.path!r}")

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        """Append *batch* in one transaction (committed with ``synchronous=FULL``
        when *sync*).

        Raises:
            StoreError: a record over [`MAX_RECORD`][agentrio.store.MAX_RECORD], the
                store is closed, or the database cannot be written.
        """
        for data in batch:
            _check_size(data, self.path)
        if batch:
            rows = [(bytes(data), zlib.crc32(data)) for data in batch]
            await self._call(lambda db: self._append(db, rows, sync))

    def _append(self, db: sqlite3.Connection, rows: list[tuple[bytes, int]], sync: bool) -> None:
        if sync is not self._sync:
            db.execute(f"PRAGMA synchronous = {'FULL' if sync else 'NORMAL'}")
            self._sync = sync
        with _transaction(db, "BEGIN"):
            db.executemany("INSERT INTO records (data, crc) VALUES (?, ?)", rows)

    async def read_live(self) -> Loaded:
        """The live records, as ``load`` gives them, on a connection of its own
        (without taking the lock: a [`StoreReader`][agentrio.types.StoreReader]'s)."""
        return await self._read(self._load)

    async def read_index(self) -> list[tuple[str, bytes]]:
        """Every archived phase (its id and ``meta``), without taking the lock."""
        return await self._read(
            lambda db: [
                (_text(phase), bytes(meta))
                for phase, meta in db.execute("SELECT phase, meta FROM archive ORDER BY rowid")
            ]
        )

    async def read_archived(self, phase_ids: Collection[str]) -> dict[str, list[Entry]]:
        """The records of the archived phases among *phase_ids*, without the lock.

        Raises:
            StoreCorrupt: an archived row whose checksum fails.
        """
        wanted = list(phase_ids)
        return await self._read(lambda db: self._archived(db, wanted))

    def _archived(self, db: sqlite3.Connection, wanted: list[str]) -> dict[str, list[Entry]]:
        found: dict[str, list[Entry]] = {}
        for phase in wanted:
            row = db.execute(
                "SELECT rowid, data, crc FROM archive WHERE phase = ?", (phase,)
            ).fetchone()
            if row is None:
                continue
            rowid, data, crc = row
            source = f"{self.path}#archive"
            if not isinstance(data, bytes) or zlib.crc32(data) != crc:
                raise StoreCorrupt(
                    f"checkpoint database {self.path!r} holds an archived phase whose "
                    f"checksum fails at archive row {rowid}",
                    source=source,
                    offset=rowid,
                )
            found[phase] = unframe(data, source, 0, MAX_RECORD)
        return found

    async def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """*fn* on a read-only connection of its own (an owner may be writing)."""
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        if self._db is not None or self.path in ("", ":memory:"):
            return await self._call(fn)  # (this store's own connection: it owns it)

        def run() -> _T:
            try:
                uri = f"file:{urllib.parse.quote(self.path)}?mode=ro"  # (a '?' or '#' in it)
                db = sqlite3.connect(uri, uri=True)
            except sqlite3.Error as exc:
                raise StoreError(f"checkpoint database {self.path!r}: {exc}") from None
            try:
                db.text_factory = bytes
                (app,) = db.execute("PRAGMA application_id").fetchone()
                if app != _APPLICATION_ID:
                    raise StoreError(f"{self.path!r} is not an agentrio checkpoint database")
                (version,) = db.execute("PRAGMA user_version").fetchone()
                if version not in (1, _USER_VERSION):
                    raise StoreError(
                        f"checkpoint database {self.path!r} has schema version {version}, "
                        f"not {_USER_VERSION}: written by a later agentrio, read it with that one"
                    )
                if version == 1:  # (not migrated yet: nothing is archived)
                    db.execute(
                        "CREATE TEMP TABLE archive (phase TEXT, meta BLOB, data BLOB, crc INTEGER)"
                    )
                return fn(db)
            except sqlite3.Error as exc:
                raise StoreError(f"checkpoint database {self.path!r}: {exc}") from None
            finally:
                db.close()

        return await trio.to_thread.run_sync(run)

    async def compact(
        self, live: Sequence[bytes], archive: Sequence[Archived], drop: Collection[str]
    ) -> None:
        """Move finished phases to the archive table, in one transaction (see
        [`ArchivingStore.compact`][agentrio.store.ArchivingStore.compact])."""
        for data in live:
            _check_size(data, self.path)
        rows = [(bytes(data), zlib.crc32(data)) for data in live]
        phases = []
        for phase in archive:
            data = b"".join(map(frame, phase.records))
            phases.append((phase.phase, bytes(phase.meta), data, zlib.crc32(data)))
        gone = [(pid,) for pid in drop]
        await self._call(lambda db: self._compact(db, rows, phases, gone))

    def _compact(
        self,
        db: sqlite3.Connection,
        rows: list[tuple[bytes, int]],
        phases: list[tuple[str, bytes, bytes, int]],
        gone: list[tuple[str]],
    ) -> None:
        with _transaction(db):
            db.executemany("INSERT OR REPLACE INTO archive VALUES (?, ?, ?, ?)", phases)
            db.executemany("DELETE FROM archive WHERE phase = ?", gone)
            db.execute("DELETE FROM records")
            db.executemany("INSERT INTO records (data, crc) VALUES (?, ?)", rows)

    async def delete_phases(self, phase_ids: Collection[str]) -> None:
        """Delete every record of the phases *phase_ids*, live or archived, in one
        transaction; the database's ``secure_delete`` overwrites their bytes with
        zeros, a ``VACUUM`` rewrites the file, and the write-ahead log is
        checkpointed and truncated: none of their bytes is left in the database's
        files when this returns. Takes the lock if this store does not hold it.

        Raises:
            StoreLocked: another store owns the database (past *lock_timeout*).
            StoreError: the database cannot be written.
        """
        gone = set(phase_ids)
        await self._call(lambda db: self._delete(db, gone))

    def _delete(self, db: sqlite3.Connection, gone: set[str]) -> None:
        doomed = [
            (rowid,)
            for rowid, data in db.execute("SELECT id, data FROM records")
            if isinstance(data, bytes) and record_phase(data) in gone
        ]
        with _transaction(db):
            db.executemany("DELETE FROM records WHERE id = ?", doomed)
            db.executemany("DELETE FROM archive WHERE phase = ?", [(p,) for p in gone])
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def aclose(self) -> None:
        """Close the database and let its lock go; idempotent. Its records stay."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        db, self._db = self._db, None
        try:
            if db is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(db.close, limiter=self._limiter)
            else:
                await trio.lowlevel.checkpoint()
        finally:
            if self._lock is not None:
                self._lock.release()


def _check_size(data: bytes, path: str) -> None:
    if len(data) > MAX_RECORD:
        raise StoreError(
            f"a checkpoint record of {len(data)} bytes is over MAX_RECORD "
            f"({MAX_RECORD}) for {path!r}"
        )


def _text(value: object) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def checked_rows(rows: Iterable[Sequence[Any]], source: str, shown: str) -> Loaded:
    """The records of *rows* (``id``, the data or None when it is over ``MAX_RECORD``,
    its CRC-32, its length), as a table store reads them; *shown* names the store in
    messages.

    Raises:
        StoreCorrupt: a row over ``MAX_RECORD`` (never read), or whose checksum
            fails; named by its id, its content never quoted.
    """
    entries = []
    for rowid, data, crc, length in rows:
        if isinstance(length, int) and length > MAX_RECORD:
            raise StoreCorrupt(
                f"{shown} holds a record of {length} bytes, over MAX_RECORD, at row {rowid}",
                source=source,
                offset=rowid,
            )
        if not isinstance(data, bytes) or zlib.crc32(data) != crc:
            raise StoreCorrupt(
                f"{shown} holds a record whose checksum fails at row {rowid}",
                source=source,
                offset=rowid,
            )
        entries.append(Entry(source, rowid, data))
    return Loaded(entries)
