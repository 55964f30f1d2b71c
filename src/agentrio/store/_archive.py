"""A DirectoryStore's archive: finished phases out of the live area, and rewrites.

The archive is the folder ``archive/`` of the store's directory:

- ``archive/NNNNNN.ckpt``: archived records, framed as a segment's (a
  version-2 header, no flags), each phase's records one after another;
- ``archive/index``: which phases are archived, where: a header
  (``b"ARCKIDX\\n"``, u32 version 1), then two frames: the numbers of the
  archive files it refers to (msgpack list, small: read by the owner's
  ``load`` to remove what a crash left), then the entries (msgpack list of
  ``[phase, meta, file, offset, length]``, read only when asked).

Every change writes new files (new numbers), then the index (a temporary file,
``fsync``-ed, renamed over the old one, the directory ``fsync``-ed), then
removes the files the new index no longer refers to: a crash at any point
leaves the old index or the new one, whole, and files that the owner's next
``load`` removes. A deleted phase's bytes are in no file of the store once
the files that held them are removed: rewritten, not zeroed in place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import struct
import tempfile
import zlib
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

import msgspec

from ..errors import StoreCorrupt, StoreError
from .base import Archived, Entry

__all__ = ["ArchiveDir", "open_regular", "sync_directory", "write_file"]

_INDEX = "index"
_INDEX_HEADER = b"ARCKIDX\n" + struct.pack("<I", 1)
_FILE = re.compile(r"(\d{6,})\.ckpt")
_TMP = re.compile(r"\..*\.tmp")
_LEN_CRC = struct.Struct("<II")
_FRAME = struct.Struct("<III")
_MAX_INDEX = 1 << 30

_Row = tuple[str, bytes, int, int, int]  # phase, meta, file, offset, length


def frame(data: bytes) -> bytes:
    """*data* framed as a record of a segment (see ``files``)."""
    head = _LEN_CRC.pack(len(data), zlib.crc32(data))
    return head + struct.pack("<I", zlib.crc32(head)) + data


def unframe(buf: bytes, source: str, base: int, max_record: int) -> list[Entry]:
    """The records framed in *buf* (read at offset *base* of *source*): every
    frame must be whole and its checksums hold.

    Raises:
        StoreCorrupt: a short or damaged frame, naming *source* and its offset.
    """
    out: list[Entry] = []
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos < _FRAME.size:
            raise _corrupt(source, base + pos, "a short frame")
        length, crc, head_crc = _FRAME.unpack_from(buf, pos)
        if zlib.crc32(buf[pos : pos + 8]) != head_crc or length > max_record:
            raise _corrupt(source, base + pos, "a damaged frame header")
        data = buf[pos + _FRAME.size : pos + _FRAME.size + length]
        if len(data) < length or zlib.crc32(data) != crc:
            raise _corrupt(source, base + pos, "a record whose checksum fails")
        out.append(Entry(source, base + pos, data))
        pos += _FRAME.size + length
    return out


def _corrupt(source: str, offset: int, what: str) -> StoreCorrupt:
    return StoreCorrupt(
        f"checkpoint archive {source!r} holds {what} at offset {offset}",
        source=source,
        offset=offset,
    )


def _bad_header(head: bytes, want: bytes) -> str:
    """What is wrong with the header *head* of an archive's file (not *want*)."""
    if head[:8] == want[:8] and len(head) == len(want):  # (its magic: another version)
        return (
            "a header of another format version (a store written by a later agentrio"
            " is read by that version or a later one)"
        )
    return "a bad header"


def open_regular(path: Path) -> BinaryIO:
    """The regular file at *path*, open to read: a symbolic link is refused without
    being followed, a FIFO or a device without being waited on or read."""
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
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
    return open(fd, "rb", buffering=1 << 20)


def sync_directory(directory: str | Path) -> None:
    """Put *directory*'s names on disk (where the system allows it)."""
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


def write_file(directory: Path, name: str, chunks: Iterable[bytes], *, replace: bool) -> None:
    """Write *name* in *directory* whole or not at all: a temporary file, ``fsync``-ed,
    then renamed (*replace*) or linked (fails if *name* is taken) to its name."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".write.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, directory / name)
        else:
            os.link(tmp, directory / name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    sync_directory(directory)


def remove_temporaries(directory: Path) -> None:
    """Remove what a crash left of a write in *directory* (its ``.*.tmp`` files)."""
    for name in os.listdir(directory):
        if _TMP.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)


class ArchiveDir:
    """The archive folder of a DirectoryStore (see the module)."""

    def __init__(self, directory: Path, header: bytes, max_record: int) -> None:
        self.dir = directory
        self.header = header  # an archive file's header (a segment's, version 2)
        self.max_record = max_record

    # -- reading ---------------------------------------------------------------------

    def _index_bytes(self, entries: bool) -> tuple[list[int], bytes | None]:
        """The index's file numbers, and its entries' frame if *entries* (None: no
        index). Without *entries*, only the index's first (small) frame is read."""
        path = self.dir / _INDEX
        source = os.fspath(path)
        try:
            f = open_regular(path)
        except FileNotFoundError:
            return [], None
        with f:
            head = f.read(len(_INDEX_HEADER))
            if head != _INDEX_HEADER:
                raise _corrupt(source, 0, "in its index " + _bad_header(head, _INDEX_HEADER))
            first = self._frame(f, source, len(_INDEX_HEADER))
            try:
                files = msgspec.msgpack.decode(first, type=list[int])
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise _corrupt(source, len(_INDEX_HEADER), "an undecodable index") from None
            if not entries:
                return files, None
            return files, self._frame(f, source, f.tell())

    def _frame(self, f: BinaryIO, source: str, pos: int) -> bytes:
        """The next frame's payload of the index *f* (at *pos*)."""
        head = f.read(_FRAME.size)
        if len(head) < _FRAME.size:
            raise _corrupt(source, pos, "an index cut short")
        length = _FRAME.unpack(head)[0]
        if length > _MAX_INDEX:
            raise _corrupt(source, pos, "a damaged frame header")
        (entry,) = unframe(head + f.read(length), source, pos, _MAX_INDEX)
        return entry.data

    def rows(self) -> list[_Row]:
        """Every archived phase's index entry."""
        if not self.dir.is_dir():
            return []
        _, data = self._index_bytes(entries=True)
        if data is None:
            return []
        try:
            return msgspec.msgpack.decode(data, type=list[tuple[str, bytes, int, int, int]])
        except (msgspec.DecodeError, msgspec.ValidationError):
            where = os.fspath(self.dir / _INDEX)
            raise _corrupt(where, 0, "an undecodable index") from None

    def read(self, phase_ids: Collection[str]) -> dict[str, list[Entry]]:
        """The records of the archived phases among *phase_ids*."""
        wanted = set(phase_ids)
        found: dict[str, list[Entry]] = {}
        for phase, _, number, offset, length in self.rows():
            if phase in wanted:
                found[phase] = self._records(number, offset, length)
        return found

    def _records(self, number: int, offset: int, length: int) -> list[Entry]:
        path = self.dir / f"{number:06d}.ckpt"
        source = os.fspath(path)
        try:
            with open_regular(path) as f:
                head = f.read(len(self.header))
                if head != self.header:
                    raise _corrupt(source, 0, _bad_header(head, self.header))
                size = os.fstat(f.fileno()).st_size
                if offset < len(self.header) or length > size - offset:
                    # (an index entry past the file's end: nothing read for it)
                    raise _corrupt(source, offset, "an archived phase cut short")
                f.seek(offset)
                buf = f.read(length)
        except OSError as exc:
            raise StoreError(
                f"checkpoint archive {source!r} cannot be read ({type(exc).__name__}:"
                f" {exc.strerror})"
            ) from None
        if len(buf) != length:
            raise _corrupt(source, offset, "an archived phase cut short")
        return unframe(buf, source, offset, self.max_record)

    # -- writing (the owner's) -------------------------------------------------------

    def clean(self) -> None:
        """Remove the files no index refers to (what a crash left), and temporaries."""
        if not self.dir.is_dir():
            return
        remove_temporaries(self.dir)
        files, _ = self._index_bytes(entries=False)
        self._remove_unreferenced(set(files))

    def _remove_unreferenced(self, referenced: set[int]) -> None:
        removed = False
        for name in os.listdir(self.dir):
            match = _FILE.fullmatch(name)
            if match and int(match.group(1)) not in referenced:
                os.unlink(self.dir / name)
                removed = True
        if removed:
            sync_directory(self.dir)

    def _next_number(self) -> int:
        numbers = [int(m.group(1)) for n in os.listdir(self.dir) if (m := _FILE.fullmatch(n))]
        return max(numbers, default=0) + 1

    def change(self, add: Sequence[Archived], drop: Collection[str]) -> None:
        """Add the phases *add* (replacing those of the same ids) and drop *drop*;
        every file holding a phase dropped or replaced is rewritten without it."""
        if not add and not drop:
            return
        self.dir.mkdir(exist_ok=True)
        rows = self.rows()
        gone = set(drop) | {added.phase for added in add}
        # The files that hold a phase gone are rewritten: their other phases move.
        dirty = {number for phase, _, number, _, _ in rows if phase in gone}
        kept = [row for row in rows if row[0] not in gone]
        moving = [row for row in kept if row[2] in dirty]
        kept = [row for row in kept if row[2] not in dirty]
        number = self._next_number()
        new_rows: list[_Row] = []
        chunks: list[bytes] = [self.header]
        pos = len(self.header)
        for phase, meta, old, offset, length in moving:
            buf = b"".join(frame(e.data) for e in self._records(old, offset, length))
            chunks.append(buf)
            new_rows.append((phase, meta, number, pos, len(buf)))
            pos += len(buf)
        for added in add:
            if added.phase in drop:
                continue
            buf = b"".join(map(frame, added.records))
            chunks.append(buf)
            new_rows.append((added.phase, added.meta, number, pos, len(buf)))
            pos += len(buf)
        if new_rows:
            write_file(self.dir, f"{number:06d}.ckpt", chunks, replace=False)
        rows = kept + new_rows
        files = sorted({row[2] for row in rows})
        encode = msgspec.msgpack.encode
        write_file(
            self.dir,
            _INDEX,
            [_INDEX_HEADER, frame(encode(files)), frame(encode(rows))],
            replace=True,
        )
        self._remove_unreferenced(set(files))
