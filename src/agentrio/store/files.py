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
import stat
import struct
import tempfile
import weakref
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import trio

from ..errors import StoreCorrupt, StoreError
from ._lock import StoreLock, check_lock_timeout, check_store_path
from .base import Entry, Loaded

__all__ = ["FORMAT_VERSION", "MAGIC", "MAX_RECORD", "DirectoryStore"]

MAGIC = b"ARCKPT\r\n"
"""The first 8 bytes of every segment file."""

FORMAT_VERSION = 1
"""The segment format written, and the only one read."""

MAX_RECORD = 64 * 1024 * 1024
"""The largest record a [`DirectoryStore`][agentrio.store.DirectoryStore] keeps, in
bytes (64 MiB): ``append`` refuses a larger one, ``load`` takes a longer frame for
corrupt."""

_HEADER = MAGIC + struct.pack("<I", FORMAT_VERSION)
_FRAME = struct.Struct("<III")  # length, crc of the payload, crc of the 8 bytes before
_LEN_CRC = struct.Struct("<II")
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
    with _open_regular(path) as f:
        header = f.read(len(_HEADER))
        if header != _HEADER:
            what = "magic" if header[: len(MAGIC)] != MAGIC else "format version"
            raise StoreCorrupt(
                f"checkpoint segment {source!r} has a bad header ({what}) at offset 0",
                source=source,
                offset=0,
            )
        return _read_frames(f, source, len(_HEADER))


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


def _open_regular(path: Path) -> BinaryIO:
    """The regular file at *path*, open to read: a symbolic link is refused without
    being followed, a FIFO or a device without being waited on or read."""
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(
                f"cannot read checkpoint store {os.fspath(path)!r}: a symbolic link, "
                "not a segment file (refused, not followed)"
            ) from None
        raise
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise StoreError(f"cannot read checkpoint store {os.fspath(path)!r}: not a regular file")
    return open(fd, "rb", buffering=_READ_BUFFER)


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

    def _load(self) -> Loaded:
        entries: list[Entry] = []
        torn: list[Entry] = []
        try:
            for _, path in segments(self._dir):
                found, tail = read_segment(path)
                entries += found
                if tail is not None:
                    torn.append(tail)
        except OSError as exc:
            where = exc.filename if exc.filename is not None else self.path
            raise StoreError(f"cannot read checkpoint store {where!r}: {exc.strerror}") from None
        return Loaded(entries, tuple(torn))

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
            if len(data) > MAX_RECORD:
                raise StoreError(
                    f"a checkpoint record of {len(data)} bytes is over MAX_RECORD "
                    f"({MAX_RECORD}) for {self.path!r}"
                )
        if batch:
            if not self._lock.held:
                await self._lock.acquire(self._lock_timeout)
            data = b"".join(map(frame, batch))
            await trio.to_thread.run_sync(self._append, data, sync, limiter=self._limiter)

    def _append(self, data: bytes, sync: bool) -> None:
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
            _sync_directory(self._dir)
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


def _sync_directory(directory: Path) -> None:
    """Put a new name in *directory* on disk (where the system allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - systems whose directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - and those that refuse to sync one
        pass
    finally:
        os.close(fd)
