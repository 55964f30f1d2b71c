"""PostgresStore: checkpoint records in a PostgreSQL database (psycopg 3, extra ``postgres``).

A store every node of a cluster reaches. Its records are rows of one table,
``agentrio_records (store text, id bigint identity, data bytea, crc bigint)``,
shared by every store of the database and told apart by the store's *name*;
each batch is one transaction, so a crash leaves a batch whole or absent. Each
row carries the CRC-32 of its data: a row whose checksum fails, or that is
longer than ``MAX_RECORD``, is a [`StoreCorrupt`][agentrio.errors.StoreCorrupt]
naming the store and the row id, never quoting it. A table of that name whose
columns are not agentrio's is refused rather than written into.

Every call to the database runs in a worker thread, one at a time (a
``trio.CapacityLimiter(1)``), on one connection.

The store's owner holds a session-level advisory lock
(``pg_try_advisory_lock``) keyed by the store's name, on the store's
connection, from its first ``load`` or ``append`` until ``aclose``: the server
lets it go when that connection ends, even when the owner's process is
killed. A statement that waits on a table lock gives up after 60 seconds
(PostgreSQL's ``lock_timeout``, unless the connection string sets one): the
worker thread it holds is beyond a cancel's reach. The owner writes its pid
and host into ``agentrio_owners``; another opener reads them back (hostile
text: bounded, reduced) to name the holder.

The connection string's password is never in a message or a repr.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import weakref
import zlib
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from .._text import scrub
from ..errors import InvalidArgument, StoreCorrupt, StoreError, StoreLocked
from ._archive import frame, unframe
from ._lock import check_lock_timeout, describe_holder
from .base import Archived, Entry, Loaded, record_phase
from .files import MAX_RECORD
from .sqlite import _check_size, checked_rows

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

_T = TypeVar("_T")

_NAME_LENGTH = 200  # the longest store name
_MESSAGE_LENGTH = 300  # the most of a server's message kept in an error
_CONNECT_TIMEOUT = 10  # seconds, unless the connection string says otherwise
_FIRST_WAIT = 0.01  # seconds between attempts at the lock, doubled up to _LONGEST_WAIT
_LONGEST_WAIT = 0.5
_TABLE_LOCK_WAIT = "60s"  # PostgreSQL's lock_timeout, unless the connection string sets one
_SCHEMA_KEY = -0x61727472  # the advisory lock taken while the tables are made

_RECORDS = (
    "CREATE TABLE IF NOT EXISTS agentrio_records ("
    "store text NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, "
    "data bytea NOT NULL, crc bigint NOT NULL, PRIMARY KEY (store, id))"
)
_ARCHIVE = (
    "CREATE TABLE IF NOT EXISTS agentrio_archive ("
    "store text NOT NULL, phase text NOT NULL, meta bytea NOT NULL, "
    "data bytea NOT NULL, crc bigint NOT NULL, PRIMARY KEY (store, phase))"
)
_OWNERS = (
    "CREATE TABLE IF NOT EXISTS agentrio_owners (store text PRIMARY KEY, pid bigint, host text)"
)
# The records table's columns as agentrio makes them: (name, type, nullable).
_COLUMNS = [
    ("store", "text", "NO"),
    ("id", "bigint", "NO"),
    ("data", "bytea", "NO"),
    ("crc", "bigint", "NO"),
]


class PostgresStore:
    """A [`CheckpointStore`][agentrio.store.CheckpointStore] in a PostgreSQL database.

    Example:

        store = PostgresStore("postgresql://agentrio:secret@db.internal/agentrio", name="swarm")
        async with agentrio.open_runtime(store=store, specs=specs) as rt:
            ...

    The connection is made (and the tables, if missing) on the first ``load``
    or ``append``. Each [`Entry`][agentrio.store.Entry]'s ``source`` is the
    store's [`path`][agentrio.store.PostgresStore] and its ``offset`` the
    record's row id. ``append`` with ``sync=True`` commits with
    ``synchronous_commit = on`` (on the server's disk when it returns), with
    ``sync=False`` with ``off`` (a server crash may lose the last batches, whole).

    A store has one owner at a time: the first ``load`` or ``append`` takes an
    advisory lock keyed by *name* on the store's connection, held until
    ``aclose`` (or until the store object is dropped, its process dies or its
    connection is lost). Another store of the same name on the same database,
    in this process or on another machine, then raises
    [`StoreLocked`][agentrio.errors.StoreLocked] naming the holder's pid and
    host, or waits up to *lock_timeout* seconds for it.

    Needs the ``postgres`` extra (``pip install 'agentrio[postgres]'``: psycopg 3,
    which uses the system's ``libpq``).

    Args:
        dsn: a libpq connection string (``"postgresql://user:pw@host/db"`` or
            ``"host=... dbname=..."``). Without ``connect_timeout`` in it, a
            connection attempt gives up after 10 seconds.
        name: the store's name in the database (several stores share its
            tables); 1 to 200 printable characters.
        lock_timeout: how long ``load`` and ``append`` wait for another owner
            to let the store go, in seconds (default 0: not at all;
            ``math.inf``: until it does). The wait is cancellable.

    Raises:
        StoreError: (from ``load``, ``append``) the server cannot be reached or
            refuses the connection, the tables are not agentrio's, a statement
            failed. The message names the store, never the password.
        StoreLocked: (from ``load``, ``append``) another store owns it (past
            *lock_timeout*).
        InvalidArgument: *dsn* cannot be parsed, *name* is not a name, or
            *lock_timeout* is not a number of seconds >= 0.
        ImportError: psycopg is not installed (the ``postgres`` extra).

    Attributes:
        dsn: the connection string with its password left out.
        name: the store's name.
        path: how messages name the store: ``"<dsn> store '<name>'"``.
    """

    def __init__(self, dsn: str, *, name: str = "agentrio", lock_timeout: float = 0.0) -> None:
        from psycopg import conninfo

        if not isinstance(dsn, str):
            raise InvalidArgument(f"a PostgreSQL connection string is a str, not {type(dsn)!r}")
        try:
            params = conninfo.conninfo_to_dict(dsn)
        except Exception:  # (its message may quote the string, password and all)
            raise InvalidArgument("the PostgreSQL connection string cannot be parsed") from None
        self._secret = str(params.pop("password", "") or "")
        self.dsn = conninfo.make_conninfo("", **params)
        self.name = _check_name(name)
        self.path = f"{self.dsn} store {self.name!r}"
        self._lock_timeout = check_lock_timeout(lock_timeout)
        params.setdefault("connect_timeout", _CONNECT_TIMEOUT)
        if self._secret:
            params["password"] = self._secret
        self._conninfo = conninfo.make_conninfo("", **params)  # (with the password: never shown)
        self._key = _lock_key(self.name)
        self._limiter = trio.CapacityLimiter(1)
        self._taking = trio.Lock()
        self._box: list[psycopg.Connection[Any]] = []  # the connection, once it holds the lock
        weakref.finalize(self, _close_quietly, self._box)  # (dropped without aclose)
        self._sync: bool | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({self.dsn!r}, name={self.name!r})"

    # -- the connection and its lock ------------------------------------------------

    async def _call(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        self._check_open()
        if not self._box:
            async with self._taking:
                if not self._box:
                    await self._take()
        return await trio.to_thread.run_sync(self._run, fn, limiter=self._limiter)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"checkpoint store {self.path} is closed")

    async def _take(self) -> None:
        db = await trio.to_thread.run_sync(self._guarded, self._connect, limiter=self._limiter)
        try:
            deadline = trio.current_time() + self._lock_timeout
            wait = _FIRST_WAIT
            while True:
                holder = await trio.to_thread.run_sync(
                    self._guarded, lambda: self._attempt(db), limiter=self._limiter
                )
                if holder is None:
                    break
                left = deadline - trio.current_time()
                if left <= 0:
                    raise self._locked(holder)
                await trio.sleep(min(wait, left))
                wait = min(wait * 2, _LONGEST_WAIT)
            self._check_open()
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_close_quietly, [db], limiter=self._limiter)
            raise
        self._box.append(db)

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        db = psycopg.connect(self._conninfo, autocommit=True)
        try:
            # A statement waiting on a table lock (another program's migration) would
            # hold the worker thread, which no cancel reaches, and so aclose too.
            db.execute(
                "SELECT set_config('lock_timeout', %s, false)"
                " WHERE current_setting('lock_timeout') = '0'",
                (_TABLE_LOCK_WAIT,),
            )
            with db.transaction():  # (two stores making the tables at once: one does)
                db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_KEY,))
                db.execute(_RECORDS)
                db.execute(_ARCHIVE)
                db.execute(_OWNERS)
            columns = db.execute(
                "SELECT column_name::text, data_type::text, is_nullable::text"
                " FROM information_schema.columns"
                " WHERE table_name = 'agentrio_records'"
                " AND table_schema = current_schema() ORDER BY ordinal_position"
            ).fetchall()
            if [tuple(column) for column in columns] != _COLUMNS:
                raise StoreError(
                    f"checkpoint store {self.path}: the database's agentrio_records table "
                    "is not the one agentrio makes"
                )
        except BaseException:
            db.close()
            raise
        return db

    def _attempt(self, db: psycopg.Connection[Any]) -> str | None:
        """Try once: None if the lock is now held (and the holder's line written),
        else who holds it."""
        row = db.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
        if row is None or row[0] is not True:
            owner = db.execute(
                "SELECT pid, left(host, 256) FROM agentrio_owners WHERE store = %s",
                (self.name,),
            ).fetchone()
            if owner is None:
                return "an unknown process"
            pid, host = owner
            pid_text = str(pid) if isinstance(pid, int) else ""
            host_text = host if isinstance(host, str) else ""
            line = f"pid={pid_text} host={host_text}"
            return describe_holder(line.encode("utf-8", errors="replace"))
        db.execute(
            "INSERT INTO agentrio_owners (store, pid, host) VALUES (%s, %s, %s)"
            " ON CONFLICT (store) DO UPDATE SET pid = excluded.pid, host = excluded.host",
            (self.name, os.getpid(), scrub(socket.gethostname())),
        )
        return None

    def _locked(self, holder: str) -> StoreLocked:
        return StoreLocked(
            f"checkpoint store {self.path} is in use by another runtime, held by "
            f"{holder} (a store has one owner at a time: wait for it to close, or pass "
            "lock_timeout= to wait)",
            path=self.path,
            holder=holder,
        )

    def _run(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        self._check_open()  # (closed while this call waited for the thread)
        return self._guarded(lambda: fn(self._box[0]))

    def _guarded(self, fn: Callable[[], _T]) -> _T:
        """*fn*'s result; a database error as a StoreError naming the store (its
        message bounded, scrubbed, and never holding the password)."""
        import psycopg

        try:
            return fn()
        except psycopg.Error as exc:
            text = scrub(str(exc))
            if self._secret:
                text = text.replace(self._secret, "***")
            text = " ".join(text.split())[:_MESSAGE_LENGTH]
            raise StoreError(f"checkpoint store {self.path}: {text}") from None

    # -- the protocol ---------------------------------------------------------------

    async def load(self) -> Loaded:
        """Every record of this store, in the order appended (``torn`` is always
        empty: batches are transactions).

        A row longer than [`MAX_RECORD`][agentrio.store.MAX_RECORD] is corrupt, and
        never read.

        Raises:
            StoreCorrupt: a row whose checksum fails, or that is longer than
                ``MAX_RECORD`` (its ``offset`` is the row id).
            StoreLocked: another store owns it (past *lock_timeout*).
            StoreError: the database cannot be reached or read.
        """
        return await self._call(self._load)

    def _load(self, db: psycopg.Connection[Any]) -> Loaded:
        rows = db.execute(
            "SELECT id, CASE WHEN octet_length(data) <= %s THEN data END, crc,"
            " octet_length(data) FROM agentrio_records WHERE store = %s ORDER BY id",
            (MAX_RECORD, self.name),
        )
        return checked_rows(rows, self.path, f"checkpoint store {self.path}")

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        """Append *batch* in one transaction (committed with
        ``synchronous_commit = on`` when *sync*).

        Raises:
            StoreError: a record over [`MAX_RECORD`][agentrio.store.MAX_RECORD], the
                store is closed, or the database cannot be written.
        """
        for data in batch:
            _check_size(data, self.path)
        if batch:
            rows = [(self.name, bytes(data), zlib.crc32(data)) for data in batch]
            await self._call(lambda db: self._append(db, rows, sync))

    def _append(
        self, db: psycopg.Connection[Any], rows: list[tuple[str, bytes, int]], sync: bool
    ) -> None:
        if sync is not self._sync:
            db.execute(f"SET synchronous_commit = {'on' if sync else 'off'}")
            self._sync = sync
        with db.transaction(), db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO agentrio_records (store, data, crc) VALUES (%s, %s, %s)", rows
            )

    async def read_live(self) -> Loaded:
        """The live records, as ``load`` gives them, without taking the lock (on a
        connection of its own, unless this store owns the records)."""
        return await self._read(self._load)

    async def read_index(self) -> list[tuple[str, bytes]]:
        """Every archived phase (its id and ``meta``), without taking the lock."""

        def rows(db: psycopg.Connection[Any]) -> list[tuple[str, bytes]]:
            found = db.execute(
                "SELECT phase, meta FROM agentrio_archive WHERE store = %s ORDER BY phase",
                (self.name,),
            ).fetchall()
            return [(str(phase), bytes(meta)) for phase, meta in found]

        return await self._read(rows)

    async def read_archived(self, phase_ids: Collection[str]) -> dict[str, list[Entry]]:
        """The records of the archived phases among *phase_ids*, without the lock.

        Raises:
            StoreCorrupt: an archived row whose checksum fails.
        """
        wanted = list(phase_ids)

        def read(db: psycopg.Connection[Any]) -> dict[str, list[Entry]]:
            rows = db.execute(
                "SELECT phase, data, crc FROM agentrio_archive"
                " WHERE store = %s AND phase = ANY(%s)",
                (self.name, wanted),
            ).fetchall()
            found: dict[str, list[Entry]] = {}
            source = f"{self.path}#archive"
            for phase, data, crc in rows:
                if zlib.crc32(data) != crc:
                    raise StoreCorrupt(
                        f"checkpoint store {self.path} holds an archived phase whose "
                        "checksum fails",
                        source=source,
                        offset=0,
                    )
                found[str(phase)] = unframe(bytes(data), source, 0, MAX_RECORD)
            return found

        return await self._read(read)

    async def _read(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """*fn* on this store's connection if it owns the records, else on a
        connection of its own, closed after."""
        self._check_open()
        if self._box:
            return await self._call(fn)

        def run() -> _T:
            db = self._guarded(self._connect)
            try:
                return self._guarded(lambda: fn(db))
            finally:
                _close_quietly([db])

        return await trio.to_thread.run_sync(run)

    async def compact(
        self, live: Sequence[bytes], archive: Sequence[Archived], drop: Collection[str]
    ) -> None:
        """Move finished phases to the table ``agentrio_archive``, in one
        transaction (see [`ArchivingStore.compact`][agentrio.store.ArchivingStore.compact])."""
        for data in live:
            _check_size(data, self.path)
        rows = [(self.name, bytes(data), zlib.crc32(data)) for data in live]
        phases = []
        for phase in archive:
            data = b"".join(map(frame, phase.records))
            phases.append((self.name, phase.phase, bytes(phase.meta), data, zlib.crc32(data)))
        gone = list(drop)

        def run(db: psycopg.Connection[Any]) -> None:
            with db.transaction(), db.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO agentrio_archive (store, phase, meta, data, crc)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (store, phase) DO UPDATE"
                    " SET meta = excluded.meta, data = excluded.data, crc = excluded.crc",
                    phases,
                )
                cursor.execute(
                    "DELETE FROM agentrio_archive WHERE store = %s AND phase = ANY(%s)",
                    (self.name, gone),
                )
                cursor.execute("DELETE FROM agentrio_records WHERE store = %s", (self.name,))
                cursor.executemany(
                    "INSERT INTO agentrio_records (store, data, crc) VALUES (%s, %s, %s)", rows
                )

        await self._call(run)

    async def delete_phases(self, phase_ids: Collection[str]) -> None:
        """Delete every record of the phases *phase_ids*, live or archived, in one
        transaction, then ``VACUUM FULL`` the two tables: they are rewritten into new
        files and the old ones removed, so none of their bytes is left in the
        tables' files when this returns. (The server's write-ahead log and its
        backups keep them until they are recycled: the server's to manage.)
        ``VACUUM FULL`` holds the tables' lock while it runs: the other stores of
        the database wait for it. Takes the lock if this store does not hold it.

        Raises:
            StoreLocked: another store owns it (past *lock_timeout*).
            StoreError: the database cannot be written.
        """
        gone_ids = set(phase_ids)  # (looked up once for each live row)
        gone = sorted(gone_ids)

        def run(db: psycopg.Connection[Any]) -> None:
            doomed = [
                row_id
                for row_id, data in db.execute(
                    "SELECT id, data FROM agentrio_records WHERE store = %s",
                    (self.name,),
                )
                if record_phase(bytes(data)) in gone_ids
            ]
            with db.transaction():
                db.execute(
                    "DELETE FROM agentrio_records WHERE store = %s AND id = ANY(%s)",
                    (self.name, doomed),
                )
                db.execute(
                    "DELETE FROM agentrio_archive WHERE store = %s AND phase = ANY(%s)",
                    (self.name, gone),
                )
            db.execute("VACUUM FULL agentrio_records")
            db.execute("VACUUM FULL agentrio_archive")

        await self._call(run)

    async def aclose(self) -> None:
        """Close the connection, which lets the lock go; idempotent. Its records stay."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_close_quietly, self._box, limiter=self._limiter)


def _check_name(name: object) -> str:
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= _NAME_LENGTH
        or not name.isprintable()
        or scrub(name) != name
    ):
        shown = repr(name)[:80]
        raise InvalidArgument(
            f"a PostgresStore's name is 1 to {_NAME_LENGTH} printable characters, not {shown}"
        )
    return name


def _lock_key(name: str) -> int:
    """The advisory lock's key of the store *name* (64 bits, signed, as PostgreSQL's)."""
    digest = hashlib.blake2b(b"agentrio store\0" + name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _close_quietly(box: list[psycopg.Connection[Any]]) -> None:
    """Close the connection in *box*, if any (never raises)."""
    while box:
        with contextlib.suppress(Exception):  # (a connection lost: its lock went with it)
            box.pop().close()
