"""DirectoryStore: checkpoint records in a directory of append-only segment files.

Each life of a runtime (each store object that appends) writes a segment of
its own, ``000001.ckpt``, ``000002.ckpt``..., numbered after the highest
present, so no life ever appends after another's torn tail. A segment is
made whole or not at all: its header is written to a temporary file, flushed
to disk, and linked to its name, which fails if the name is taken.

The format, every integer little-endian:

    segment = header frame*
    header  = MAGIC (8 bytes, b"ARCKPT\\r\\n") version (u32, FORMAT_VERSION)
    frame   = length (u32) crc (u32) header_crc (u32) payload (length bytes)

``crc`` is the CRC-32 of the payload, ``header_crc`` the CRC-32 of the
frame's first 8 bytes: a length is trusted only when its own checksum holds,
so a damaged length in the middle of a segment is an error, never a reason to
take what follows for a torn tail. A length over
[`MAX_RECORD`][agentrio.store.MAX_RECORD] is corrupt (and refused by
``append``), so a damaged file never makes ``load`` allocate more than the
file holds.

The torn-tail rule: the last frame of a segment is *torn*, left out and
reported in [`Loaded.torn`][agentrio.store.Loaded], when its frame header
is short, its payload is short, or its payload's checksum fails or its frame
header is damaged with only zero bytes (or nothing) after it (what a power
loss may leave of blocks that were never written back). Anything else
is a [`StoreCorrupt`][agentrio.errors.StoreCorrupt] naming the segment and
the byte offset of the bad frame (or 0 for a bad segment header).

Segments are read frame by frame, never whole, and never through a symbolic
link. The directory's file ``lock`` is its owner's: see
[`DirectoryStore`][agentrio.store.DirectoryStore].
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import struct
import tempfile
import weakref
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TypeVar

import trio

from ..errors import StoreCorrupt, StoreError
from ._archive import ArchiveDir, open_regular, remove_temporaries, sync_directory, write_file
from ._lock import StoreLock, check_lock_timeout, check_store_path
from .base import Archived, Entry, Loaded, record_phase

_T = TypeVar("_T")

__all__ = ["FORMAT_VERSION", "MAGIC", "MAX_RECORD", "DirectoryStore"]

MAGIC = b"ARCKPT\r\n"
"""The first 8 bytes of every segment file."""

FORMAT_VERSION = 2
"""The newest segment format, read and written. A segment a runtime appends to is
written in version 1 (unchanged); a compaction's *base* segment in version 2, whose
header adds a flags word after the version (bit 0: the segments numbered below it
are superseded, and removed). Both are read."""

MAX_RECORD = 64 * 1024 * 1024
"""The largest record a [`DirectoryStore`][agentrio.store.DirectoryStore] keeps, in
bytes (64 MiB): ``append`` refuses a larger one, ``load`` takes a longer frame for
corrupt."""

_HEADER = MAGIC + struct.pack("<I", 1)
_BASE_HEADER = MAGIC + struct.pack("<II", FORMAT_VERSION, 1)
_ARCHIVE = "archive"
_FRAME = struct.Struct("<III")  # length, crc of the payload, crc of the 8 bytes before
_LEN_CRC = struct.Struct("<II")
_CRC = struct.Struct("<I")
_SEGMENT = re.compile(r"(\d{6,})\.ckpt")
_LOCK = "lock"  # the directory's lock file (see store._lock)
_READ_BUFFER = 1 << 20
_ZEROS_BLOCK = 1 << 20
_SEEK_DATA: int | None = getattr(os, "SEEK_DATA", None)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def frame(data: bytes) -> bytes:
    """*data* framed as one record of a segment (its frame header, then *data*)."""
    head = _LEN_CRC.pack(len(data), zlib.crc32(data))
    return head + struct.pack("<I", zlib.crc32(head)) + data


def frames(batch: Sequence[bytes]) -> bytearray:
    """The records of *batch*, framed, one after another (as ``frame`` frames each)."""
    out = bytearray()
    pack, pack_crc, crc32 = _LEN_CRC.pack, _CRC.pack, zlib.crc32
    for data in batch:
        head = pack(len(data), crc32(data))
        out += head
        out += pack_crc(crc32(head))
        out += data
    return out


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files of *directory*, by number (other files are not looked at)."""
    found = []
    for name in os.listdir(directory):
        match = _SEGMENT.fullmatch(name)
        if match:
            found.append((int(match.group(1)), directory / name))
    found.sort()
    return found


def read_segment(path: Path) -> tuple[list[Entry], Entry | None]:
    """The complete records of the segment at *path*, and its torn tail if any.

    Read frame by frame: what is in memory at once, beside the records
    returned, is at most one record (``MAX_RECORD``) and a read buffer, however
    large the file (a sparse hole of a terabyte after its last record included).

    Raises:
        StoreCorrupt: a bad segment header, or a bad frame that is not the tail.
        StoreError: *path* is not a regular file (a symbolic link, a FIFO, a
            device: refused before anything is read of it).
        OSError: *path* cannot be read.
    """
    source = os.fspath(path)
    with open_regular(path) as f:
        header = f.read(len(_HEADER))
        if header != _HEADER:
            if header[: len(MAGIC)] != MAGIC:
                raise _bad_header(source, "magic")
            if header + f.read(4) != _BASE_HEADER:
                raise _bad_header(source, "format version")
            return _read_frames(f, source, len(_BASE_HEADER))
        return _read_frames(f, source, len(_HEADER))


def _bad_header(source: str, what: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"checkpoint segment {source!r} has a bad header ({what}) at offset 0; a store "
        "written by a later agentrio is read by that version or a later one",
        source=source,
        offset=0,
    )


def is_base(path: Path) -> bool:
    """Is the segment at *path* a base segment (one written by a compaction)?"""
    with open_regular(path) as f:
        return f.read(len(_BASE_HEADER)) == _BASE_HEADER


def live_segments(directory: Path) -> tuple[list[tuple[int, Path]], list[Path]]:
    """The segments of the live area (from the last base segment on), and those it
    supersedes."""
    found = segments(directory)
    for i in range(len(found) - 1, -1, -1):
        if is_base(found[i][1]):
            return found[i:], [path for _, path in found[:i]]
    return found, []


def _read_frames(f: BinaryIO, source: str, pos: int) -> tuple[list[Entry], Entry | None]:
    """The frames of the segment *f* from *pos* on (see `read_segment`)."""
    entries: list[Entry] = []
    read, unpack, crc32 = f.read, _FRAME.unpack, zlib.crc32
    while True:
        head = read(_FRAME.size)
        if len(head) < _FRAME.size:
            return entries, (Entry(source, pos, head) if head else None)
        length, crc, head_crc = unpack(head)
        if crc32(head[:8]) != head_crc:
            # Only zeros after it: no record follows (a record's frame header is
            # never all zeros), so nothing is hidden by leaving it out.
            if _zeros_after(f.fileno(), pos + _FRAME.size):
                return entries, Entry(source, pos, head)
            raise _corrupt(source, pos, "a damaged frame header")
        if length > MAX_RECORD:
            raise _corrupt(source, pos, f"a length of {length} bytes, over MAX_RECORD")
        data = read(length)
        end = pos + _FRAME.size + length
        if len(data) < length:
            return entries, Entry(source, pos, data)
        if crc32(data) != crc:
            if _zeros_after(f.fileno(), end):
                return entries, Entry(source, pos, data)
            raise _corrupt(source, pos, "a record whose checksum fails")
        entries.append(Entry(source, pos, data))
        pos = end


def _zeros_after(fd: int, pos: int) -> bool:
    """Does the file hold only zero bytes (or nothing) from *pos* on? Read a block
    at a time; the holes of a sparse file are skipped, not read."""
    while True:
        if _SEEK_DATA is not None:
            try:
                pos = os.lseek(fd, pos, _SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after pos: holes, or the end
                    return True
                # (a file system without SEEK_DATA: read on from pos)
        block = os.pread(fd, _ZEROS_BLOCK, pos)
        if not block:
            return True
        if block.count(0) != len(block):
            return False
        pos += len(block)


def _corrupt(source: str, offset: int, what: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"checkpoint segment {source!r} holds {what} at offset {offset}",
        source=source,
        offset=offset,
    )


class DirectoryStore:
    """A [`CheckpointStore`][agentrio.store.CheckpointStore] in a directory of
    append-only files: one segment per life, records framed and checksummed.

    Example:

        store = DirectoryStore("checkpoints")  # made if missing
        await store.append([b"one", b"two"], sync=True)
        loaded = await store.load()  # every life's records, oldest first

    The directory is made if missing (its parent must exist). Each store
    object that appends writes a segment of its own, made on its first
    ``append`` and numbered after the highest present; ``load`` reads every
    segment in order. Each [`Entry`][agentrio.store.Entry]'s ``source`` is
    its segment's path and its ``offset`` the byte offset of its frame.
    Reading and writing happen in a worker thread, off the Trio thread.

    A store has one owner at a time: the first ``load`` or ``append`` takes
    the directory's lock (an exclusive ``flock`` on its file ``lock``, which
    names the holder's pid and host, and one on the directory itself, which
    holds if ``lock`` is removed), held until ``aclose`` (or until the
    store object is dropped, or its process dies: the system releases it,
    even after a SIGKILL). Another store on the same directory, in this
    process or another, then raises [`StoreLocked`][agentrio.errors.StoreLocked]
    naming the holder, or waits up to *lock_timeout* seconds for it.

    Args:
        path: the directory.
        lock_timeout: how long ``load`` and ``append`` wait for another owner
            to let the store go, in seconds (default 0: not at all;
            ``math.inf``: until it does). The wait is cancellable.

    Raises:
        StoreError: the directory cannot be made (its parent is missing or not
            writable), or *path* is not a directory.
        InvalidArgument: *lock_timeout* is not a number of seconds >= 0, or *path*
            holds a NUL character.

    Attributes:
        path: the directory's path.
        segment: the path of the segment this store appends to, or None before
            its first ``append``.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = 0.0) -> None:
        self.path = check_store_path(path)
        self.segment: str | None = None
        self._lock_timeout = check_lock_timeout(lock_timeout)
        self._lock = StoreLock(os.path.join(self.path, _LOCK), self.path, directory=self.path)
        # (A store dropped without aclose lets its lock go with it.)
        weakref.finalize(self, self._lock.release)
        self._dir = Path(self.path)
        self._archive = ArchiveDir(self._dir / _ARCHIVE, _HEADER, MAX_RECORD)
        self._fd: int | None = None
        self._closed = False
        # Held by an append's worker thread, and by aclose: the segment is never
        # closed under a write (its descriptor could be reused by another file).
        self._limiter = trio.CapacityLimiter(1)
        try:
            self._dir.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreError(
                f"cannot make checkpoint directory {self.path!r}: {exc.strerror}"
            ) from None
        if not self._dir.is_dir():
            raise StoreError(f"checkpoint store {self.path!r} is not a directory")

    def __repr__(self) -> str:
        return f"DirectoryStore({self.path!r})"

    async def load(self) -> Loaded:
        """Every complete record of every segment, oldest first, and each
        segment's torn tail (see the module's torn-tail rule).

        Takes the store's lock first, if this store does not hold it yet.

        Raises:
            StoreCorrupt: a bad segment header, or a bad record that is not a
                segment's last; it names the segment and the offset.
            StoreLocked: another store holds the lock (past *lock_timeout*).
            StoreError: a segment cannot be read (or is not a regular file: a
                symbolic link is refused, not followed), the lock file cannot
                be opened, or the store is closed.
        """
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        await self._lock.acquire(self._lock_timeout)
        return await trio.to_thread.run_sync(self._load)

    def _load(self, clean: bool = True) -> Loaded:
        entries: list[Entry] = []
        torn: list[Entry] = []
        with self._errors():
            live, superseded = live_segments(self._dir)
            if clean:  # (the owner's: what a crash left of a compaction goes)
                self._remove(superseded)
                remove_temporaries(self._dir)
                self._archive.clean()
            for _, path in live:
                found, tail = read_segment(path)
                entries += found
                if tail is not None:
                    torn.append(tail)
        return Loaded(entries, tuple(torn))

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            where = exc.filename if exc.filename is not None else self.path
            raise StoreError(f"cannot read checkpoint store {where!r}: {exc.strerror}") from None

    def _remove(self, paths: Sequence[Path]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if paths:
            sync_directory(self._dir)

    async def read_live(self) -> Loaded:
        """The live area's records, as ``load`` gives them, without taking the lock
        (a [`StoreReader`][agentrio.types.StoreReader]'s: the owner may be appending).

        Raises:
            StoreCorrupt: as ``load``.
            StoreError: a segment cannot be read.
        """
        return await trio.to_thread.run_sync(self._retry, self._load, False)

    def _retry(self, fn: Callable[..., _T], *args: object) -> _T:
        # A compaction by the owner may remove a file between the listing and
        # its reading: read again (a few times: a compaction is rare).
        for _ in range(4):
            try:
                return fn(*args)
            except StoreError as exc:
                if not isinstance(exc.__context__, FileNotFoundError):
                    raise
        return fn(*args)

    async def read_index(self) -> list[tuple[str, bytes]]:
        """Every archived phase (its id and ``meta``), without taking the lock."""

        def rows() -> list[tuple[str, bytes]]:
            with self._errors():
                return [(row[0], row[1]) for row in self._archive.rows()]

        return await trio.to_thread.run_sync(self._retry, rows)

    async def read_archived(self, phase_ids: Collection[str]) -> dict[str, list[Entry]]:
        """The records of the archived phases among *phase_ids*, without the lock.

        Raises:
            StoreCorrupt: a damaged archive file or index.
        """
        wanted = list(phase_ids)

        def read() -> dict[str, list[Entry]]:
            with self._errors():
                return self._archive.read(wanted)

        return await trio.to_thread.run_sync(self._retry, read)

    async def compact(
        self, live: Sequence[bytes], archive: Sequence[Archived], drop: Collection[str]
    ) -> None:
        """Move finished phases to the archive (see
        [`ArchivingStore.compact`][agentrio.store.ArchivingStore.compact]): the
        archive's files are written first, then *live* as a new *base* segment
        (its header says the segments numbered below it are superseded), then the
        superseded segments are removed. This store's next ``append`` starts a
        segment of its own after it.

        Raises:
            StoreError: a file cannot be written, or the store is closed.
        """
        await self._owned()
        records, phases, gone = list(live), list(archive), list(drop)
        await trio.to_thread.run_sync(self._compact, records, phases, gone, limiter=self._limiter)

    async def _owned(self) -> None:
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        if not self._lock.held:
            await self._lock.acquire(self._lock_timeout)

    def _compact(self, live: list[bytes], archive: list[Archived], drop: list[str]) -> None:
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        for data in live:
            self._check_size(data)
        try:
            self._archive.change(archive, drop)
            self._rebase(live)
        except OSError as exc:
            raise StoreError(
                f"cannot compact checkpoint store {self.path!r}: {exc.strerror}"
            ) from None

    def _rebase(self, live: list[bytes]) -> None:
        """Write *live* as the new base segment, and remove what it supersedes."""
        if self._fd is not None:  # (this store's segment is superseded: the next append starts one)
            fd, self._fd = self._fd, None
            os.close(fd)
        found = segments(self._dir)
        number = found[-1][0] + 1 if found else 1
        chunks = [_BASE_HEADER, *map(frame, live)]
        write_file(self._dir, f"{number:06d}.ckpt", chunks, replace=False)
        self._remove([path for _, path in found])

    async def delete_phases(self, phase_ids: Collection[str]) -> None:
        """Delete every record of the phases *phase_ids*: the live area is rewritten
        as a new base segment without them (and the segments it supersedes
        removed), and the archive's files that held them rewritten without them.
        When this returns, none of their bytes is in any file of the directory
        (the file system may keep freed blocks until it reuses them). Takes the
        lock if this store does not hold it.

        Raises:
            StoreLocked: another store holds the lock (past *lock_timeout*).
            StoreCorrupt: a damaged record elsewhere in the live area (nothing is
                deleted: the damage is the owner's to look at).
            StoreError: a file cannot be read or written.
        """
        await self._owned()
        gone = set(phase_ids)
        await trio.to_thread.run_sync(self._delete, gone, limiter=self._limiter)

    def _delete(self, gone: set[str]) -> None:
        loaded = self._load()
        live = [e.data for e in loaded.entries if record_phase(e.data) not in gone]
        self._compact(live, [], sorted(gone))

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        """Append *batch* to this store's segment in one write (``fsync``-ed when
        *sync*), making the segment on the first call (and taking the store's
        lock first, if this store does not hold it yet).

        Raises:
            StoreLocked: another store holds the lock (past *lock_timeout*).
            StoreError: a record over [`MAX_RECORD`][agentrio.store.MAX_RECORD],
                the store is closed, or the write failed (the message names the
                segment; after a failed write the next ``append`` starts a new
                segment, so what the failed one left is only ever a torn tail).
        """
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        for data in batch:
            self._check_size(data)
        if batch:
            if not self._lock.held:
                await self._lock.acquire(self._lock_timeout)
            # (Framed in the worker thread: the agents' thread only hands the batch.)
            await trio.to_thread.run_sync(self._append, batch, sync, limiter=self._limiter)

    async def append_framed(self, frames: Sequence[bytes], *, sync: bool) -> None:
        """``append``, of records already framed (each as ``frame`` makes it): what a
        [`CheckpointWriter`][agentrio.store.CheckpointWriter] hands this store.

        Raises:
            StoreError: as ``append`` (a record over ``MAX_RECORD`` included), or
                a frame whose header's length is not its payload's (nothing of the
                batch is written).
        """
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        if frames:
            if not self._lock.held:
                await self._lock.acquire(self._lock_timeout)
            # (Checked and joined in the worker thread: a burst that thousands of
            # agents wait for is not walked on their thread.)
            await trio.to_thread.run_sync(self._append_framed, frames, sync, limiter=self._limiter)

    def _check_size(self, data: bytes) -> None:
        if len(data) > MAX_RECORD:
            raise StoreError(
                f"a checkpoint record of {len(data)} bytes is over MAX_RECORD "
                f"({MAX_RECORD}) for {self.path!r}"
            )

    def _append(self, batch: Sequence[bytes], sync: bool) -> None:
        self._write(frames(batch), sync)

    def _append_framed(self, framed: Sequence[bytes], sync: bool) -> None:
        unpack = _LEN_CRC.unpack_from
        for record in framed:
            if len(record) < _FRAME.size:
                raise StoreError(f"a checkpoint frame of {len(record)} bytes is no frame")
            length = unpack(record)[0]
            if length > MAX_RECORD or length != len(record) - _FRAME.size:
                raise StoreError(
                    f"a checkpoint record of {length} bytes is over MAX_RECORD "
                    f"({MAX_RECORD}) for {self.path!r}"
                    if length > MAX_RECORD
                    else f"a checkpoint frame's length ({length}) is not its payload's"
                )
        self._write(b"".join(framed), sync)

    async def _append_own_frames(self, frames: Sequence[bytes], *, sync: bool) -> None:
        """`append_framed`, of frames a [`CheckpointWriter`][agentrio.store.CheckpointWriter]
        made itself (each header's length is its payload's): only their sizes are
        checked, the longest first, at C speed (a burst of 10,000 agents' records
        is not walked record by record while they wait for its sync)."""
        if self._closed:
            raise StoreError(f"checkpoint store {self.path!r} is closed")
        if frames:
            if not self._lock.held:
                await self._lock.acquire(self._lock_timeout)
            await trio.to_thread.run_sync(self._append_own, frames, sync, limiter=self._limiter)

    def _append_own(self, framed: Sequence[bytes], sync: bool) -> None:
        if max(map(len, framed)) > MAX_RECORD + _FRAME.size:
            longest = max(map(len, framed)) - _FRAME.size
            raise StoreError(
                f"a checkpoint record of {longest} bytes is over MAX_RECORD "
                f"({MAX_RECORD}) for {self.path!r}"
            )
        self._write(b"".join(framed), sync)

    def _write(self, data: bytes | bytearray, sync: bool) -> None:
        if self._fd is None:
            if self._closed:  # closed while this append waited for its thread
                raise StoreError(f"checkpoint store {self.path!r} is closed")
            self._open_segment()
        assert self._fd is not None
        fd = self._fd
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        except OSError as exc:
            # What reached the file is at most a torn tail if no more is written
            # after it: leave the segment, the next append makes a new one.
            self._fd = None
            with contextlib.suppress(OSError):  # (the write's error is the one to tell)
                os.close(fd)
            raise StoreError(
                f"cannot write checkpoint segment {self.segment!r}: {exc.strerror}"
            ) from None

    def _open_segment(self) -> None:
        """Make the next segment, header written and on disk, and open it to append."""
        try:
            found = segments(self._dir)
            number = found[-1][0] + 1 if found else 1
            fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=".segment.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_HEADER)
                    f.flush()
                    os.fsync(f.fileno())
                while True:
                    path = self._dir / f"{number:06d}.ckpt"
                    try:
                        os.link(tmp, path)  # fails if the name is taken: O_EXCL's guarantee
                        break
                    except FileExistsError:
                        number += 1
            finally:
                os.unlink(tmp)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self.segment = os.fspath(path)
            sync_directory(self._dir)
        except OSError as exc:
            raise StoreError(
                f"cannot make a checkpoint segment in {self.path!r}: {exc.strerror}"
            ) from None

    async def aclose(self) -> None:
        """Close this store's segment, once an append in progress has ended, and
        let its lock go; idempotent. Its records stay.

        Raises:
            StoreError: closing the segment failed (the system reported a
                write error late).
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            async with self._limiter:
                fd, self._fd = self._fd, None
        if fd is None:
            self._lock.release()
            return
        try:
            os.close(fd)
        except OSError as exc:  # (NFS, some FUSE systems: a late write error)
            raise StoreError(
                f"cannot close checkpoint segment {self.segment!r}: {exc.strerror}"
            ) from None
        finally:
            self._lock.release()  # (after the segment: its owner is done with it)
