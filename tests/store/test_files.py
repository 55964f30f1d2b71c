"""DirectoryStore: segments, frames, torn tails and corrupt files."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrio.errors import StoreCorrupt, StoreError
from agentrio.store import (
    FORMAT_VERSION,
    MAGIC,
    MAX_RECORD,
    CheckpointStore,
    DirectoryStore,
    Entry,
    Loaded,
)
from agentrio.store.files import _LEN_CRC, frame, read_segment

HEADER = len(MAGIC) + 4
FRAME = 12


def records(n: int, size: int = 40) -> list[bytes]:
    return [(b"%06d:" % i).ljust(size, b"x") for i in range(n)]


async def write(path: Path, *batches: list[bytes]) -> str:
    """One life: a store appends *batches* and closes; its segment's path."""
    store = DirectoryStore(path)
    for batch in batches:
        await store.append(batch, sync=True)
    await store.aclose()
    assert store.segment is not None
    return store.segment


async def test_round_trip(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "ckpt")
    assert isinstance(store, CheckpointStore)
    assert repr(store) == f"DirectoryStore({str(tmp_path / 'ckpt')!r})"
    assert await store.load() == Loaded([])
    assert store.segment is None  # made on the first append, not before
    await store.append([b"a", b"", b"c" * 1000], sync=False)
    await store.append([], sync=True)
    await store.append([b"d"], sync=True)
    segment = str(tmp_path / "ckpt" / "000001.ckpt")
    assert store.segment == segment
    loaded = await store.load()
    offsets = [HEADER, HEADER + FRAME + 1, HEADER + 2 * FRAME + 1, HEADER + 3 * FRAME + 1001]
    data = [b"a", b"", b"c" * 1000, b"d"]
    assert loaded == Loaded([Entry(segment, o, d) for o, d in zip(offsets, data, strict=True)])
    with open(segment, "rb") as f:
        assert f.read(HEADER) == MAGIC + struct.pack("<I", 1)
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.append([b"e"], sync=True)


async def test_many_batches_and_lives(tmp_path: Path) -> None:
    data = records(3000)
    first = await write(tmp_path, *[data[i : i + 100] for i in range(0, 2000, 100)])
    second = await write(tmp_path, data[2000:2500], data[2500:])
    assert Path(first).name == "000001.ckpt"
    assert Path(second).name == "000002.ckpt"
    loaded = await DirectoryStore(tmp_path).load()
    assert [e.data for e in loaded.entries] == data
    assert {e.source for e in loaded.entries[:2000]} == {first}
    assert {e.source for e in loaded.entries[2000:]} == {second}
    assert loaded.torn == ()


async def test_a_life_numbers_its_segment_after_the_highest(tmp_path: Path) -> None:
    (tmp_path / "000007.ckpt").write_bytes(MAGIC + struct.pack("<I", 1))
    (tmp_path / "notes.txt").write_text("not a segment")  # other files are not looked at
    segment = await write(tmp_path, [b"x"])
    assert Path(segment).name == "000008.ckpt"
    assert [e.data for e in (await DirectoryStore(tmp_path).load()).entries] == [b"x"]
    assert sorted(os.listdir(tmp_path)) == ["000007.ckpt", "000008.ckpt", "lock", "notes.txt"]


async def test_a_taken_name_moves_to_the_next(tmp_path: Path) -> None:
    # Another store made 000002 between this one's listing and its link.
    store = DirectoryStore(tmp_path)
    import agentrio.store.files as files

    real = files.segments

    def listing(directory: Path) -> list[tuple[int, Path]]:
        found = real(directory)
        (tmp_path / "000001.ckpt").write_bytes(MAGIC + struct.pack("<I", 1))
        return found

    files.segments = listing  # type: ignore[assignment]
    try:
        await store.append([b"x"], sync=True)
    finally:
        files.segments = real
    assert store.segment == str(tmp_path / "000002.ckpt")


async def test_torn_tail_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    data = records(5, size=30)
    segment = await write(tmp_path / "src", data)
    whole = Path(segment).read_bytes()
    last = len(whole) - FRAME - 30
    torn_dir = tmp_path / "torn"
    torn_dir.mkdir()
    for cut in range(last, len(whole)):
        path = torn_dir / "000001.ckpt"
        path.write_bytes(whole[:cut])
        loaded = await DirectoryStore(torn_dir).load()
        assert [e.data for e in loaded.entries] == data[:4]
        if cut == last:
            assert loaded.torn == ()
        else:
            (tail,) = loaded.torn
            assert (tail.source, tail.offset) == (str(path), last)
    # A torn tail with a bad checksum and nothing after it (the payload's bytes
    # reached the disk but not their final values).
    path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 0xFF]))
    loaded = await DirectoryStore(torn_dir).load()
    assert [e.data for e in loaded.entries] == data[:4]
    assert [t.offset for t in loaded.torn] == [last]


async def test_a_tail_of_zeros_is_torn(tmp_path: Path) -> None:
    segment = await write(tmp_path, [b"kept"])
    with open(segment, "ab") as f:
        f.write(bytes(100))
    loaded = await DirectoryStore(tmp_path).load()
    assert [e.data for e in loaded.entries] == [b"kept"]
    # (the torn record's data: what could be read of it, here its frame header)
    assert [(t.offset, t.data) for t in loaded.torn] == [(HEADER + FRAME + 4, bytes(FRAME))]


async def test_zeros_after_a_bad_checksum_or_a_half_written_header_are_a_torn_tail(
    tmp_path: Path,
) -> None:
    """What a power loss may leave when the file's size reached the disk but some
    of its blocks did not: the last frame's payload, or the end of its header,
    and all that follows read as zeros."""
    whole = frame(b"second record" * 10)
    for cut in (FRAME + 5, 6):  # in the payload, in the frame header
        directory = tmp_path / str(cut)
        segment = await write(directory, [b"first"])
        with open(segment, "ab") as f:
            f.write(whole[:cut] + bytes(4096))
        loaded = await DirectoryStore(directory).load()
        assert [e.data for e in loaded.entries] == [b"first"]
        assert [t.offset for t in loaded.torn] == [HEADER + FRAME + 5]
        # A non-zero byte after the zeros: something was written after them.
        with open(segment, "ab") as f:
            f.write(frame(b"later"))
        with pytest.raises(StoreCorrupt) as info:
            await DirectoryStore(directory).load()
        assert info.value.offset == HEADER + FRAME + 5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
async def test_a_segment_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "000001.ckpt"
    os.mkfifo(fifo)

    def feed() -> None:
        # Were the FIFO opened to be read, this writer would let the open go
        # and the defect would show as a record loaded (not as a hang).
        try:
            with open(fifo, "wb") as f:
                f.write(MAGIC + struct.pack("<I", 1) + frame(b"from a pipe"))
        except BrokenPipeError:
            pass

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        with pytest.raises(StoreError, match="not a regular file") as info:
            await DirectoryStore(tmp_path).load()
        assert str(fifo) in str(info.value)
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the feeder's open goes on
        feeder.join()
        os.close(fd)


async def test_a_segment_that_is_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    if not os.path.exists(os.devnull) or os.devnull != "/dev/null":
        pytest.skip("no /dev/null here")
    # (A link to /dev/zero would be read without end.)
    os.symlink(os.devnull, tmp_path / "000001.ckpt")
    with pytest.raises(StoreError, match="a symbolic link"):
        await DirectoryStore(tmp_path).load()


async def test_each_life_may_leave_a_torn_tail(tmp_path: Path) -> None:
    first = await write(tmp_path, [b"a", b"b"])
    Path(first).write_bytes(Path(first).read_bytes()[:-1])
    second = await write(tmp_path, [b"c"])
    Path(second).write_bytes(Path(second).read_bytes()[:-3])
    third = await write(tmp_path, [b"d"])
    loaded = await DirectoryStore(tmp_path).load()
    assert [e.data for e in loaded.entries] == [b"a", b"d"]
    assert [t.source for t in loaded.torn] == [first, second]
    assert loaded.entries[-1].source == third


def corrupt(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


async def corrupt_at(tmp_path: Path, offset: int, data: bytes) -> StoreCorrupt:
    segment = await write(tmp_path, records(3, size=20))
    corrupt(segment, offset, data)
    with pytest.raises(StoreCorrupt) as info:
        await DirectoryStore(tmp_path).load()
    assert info.value.source == segment
    assert segment in str(info.value)
    assert f"offset {info.value.offset}" in str(info.value)
    return info.value


async def test_a_flipped_byte_in_a_middle_record(tmp_path: Path) -> None:
    second = HEADER + FRAME + 20
    error = await corrupt_at(tmp_path, second + FRAME + 5, b"\x00")
    assert error.offset == second
    assert "checksum" in str(error)
    assert "000000" not in str(error)  # no record's content in the message


async def test_a_damaged_length_in_the_middle(tmp_path: Path) -> None:
    second = HEADER + FRAME + 20
    # A length pointing past the end of the file: not taken for a torn tail.
    error = await corrupt_at(tmp_path, second, struct.pack("<I", 10_000))
    assert error.offset == second
    assert "frame header" in str(error)


async def test_garbage_in_the_middle(tmp_path: Path) -> None:
    segment = await write(tmp_path, records(2, size=20))
    with open(segment, "ab") as f:
        f.write(b"garbage!" * 4)
    await write(tmp_path, [b"next life"])  # a torn tail is per segment, so is this
    with open(segment, "ab") as f:
        f.write(frame(b"after the garbage"))
    with pytest.raises(StoreCorrupt) as info:
        await DirectoryStore(tmp_path).load()
    assert (info.value.source, info.value.offset) == (segment, HEADER + 2 * (FRAME + 20))


async def test_an_absurd_length(tmp_path: Path) -> None:
    segment = await write(tmp_path, [b"first"])
    head = struct.pack("<II", 2**32 - 1, 0)
    import zlib

    with open(segment, "ab") as f:
        f.write(head + struct.pack("<I", zlib.crc32(head)) + b"short")
    with pytest.raises(StoreCorrupt, match="over MAX_RECORD") as info:
        await DirectoryStore(tmp_path).load()
    assert info.value.offset == HEADER + FRAME + 5


@pytest.mark.parametrize(
    ("header", "what"),
    [
        (b"NOTCKPT\n\x01\x00\x00\x00", "magic"),
        (MAGIC + struct.pack("<I", FORMAT_VERSION + 1), "format version"),
        (b"", "magic"),
    ],
)
async def test_a_bad_segment_header(tmp_path: Path, header: bytes, what: str) -> None:
    await write(tmp_path, [b"first life"])
    bad = tmp_path / "000002.ckpt"
    bad.write_bytes(header + frame(b"x"))
    with pytest.raises(StoreCorrupt, match=what) as info:
        await DirectoryStore(tmp_path).load()
    assert (info.value.source, info.value.offset) == (str(bad), 0)


async def test_a_record_over_max_record_is_refused(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    with pytest.raises(StoreError, match="MAX_RECORD"):
        await store.append([b"x" * (MAX_RECORD + 1)], sync=False)
    assert store.segment is None
    await store.aclose()


def test_a_missing_parent_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="missing") as info:
        DirectoryStore(tmp_path / "missing" / "ckpt")
    assert str(tmp_path / "missing" / "ckpt") in str(info.value)
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="not a directory"):
        DirectoryStore(tmp_path / "file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions")
async def test_an_unwritable_or_unreadable_directory(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    await write(directory, [b"x"])
    directory.chmod(0o500)
    try:
        store = DirectoryStore(directory)
        with pytest.raises(StoreError, match="cannot make a checkpoint segment") as info:
            await store.append([b"y"], sync=True)
        assert str(directory) in str(info.value)
        assert (await store.load()).entries[0].data == b"x"
        os.chmod(directory / "000001.ckpt", 0)
        with pytest.raises(StoreError, match="cannot read") as info:
            await store.load()
        assert "000001.ckpt" in str(info.value)
    finally:
        os.chmod(directory / "000001.ckpt", 0o600)
        directory.chmod(0o700)


async def test_a_removed_directory_or_an_unreadable_segment(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "ckpt")
    (tmp_path / "ckpt").rmdir()
    with pytest.raises(StoreError, match="cannot lock checkpoint store") as info:
        await store.append([b"y"], sync=True)
    assert str(tmp_path / "ckpt") in str(info.value)
    (tmp_path / "ckpt" / "000001.ckpt").mkdir(parents=True)
    with pytest.raises(StoreError, match="cannot read") as info:
        await store.load()
    assert "000001.ckpt" in str(info.value)


async def test_a_failed_write_starts_a_new_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await store.append([b"a"], sync=True)
    real = os.write

    def half(fd: int, data: bytes | memoryview) -> int:
        real(fd, bytes(data[:5]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(StoreError, match="No space left") as info:
        await store.append([b"secret record"], sync=True)
    assert "000001.ckpt" in str(info.value)
    assert "secret" not in str(info.value)
    monkeypatch.setattr(os, "write", real)
    await store.append([b"b"], sync=True)
    assert store.segment == str(tmp_path / "000002.ckpt")
    loaded = await store.load()
    assert [e.data for e in loaded.entries] == [b"a", b"b"]
    assert [t.source for t in loaded.torn] == [str(tmp_path / "000001.ckpt")]
    await store.aclose()


async def test_a_store_appending_while_cancelled_writes_whole_batches(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await store.append([b"never"], sync=True)
    assert (await store.load()).entries == []
    await store.aclose()


CHILD = """
import sys, trio
from agentrio.store import DirectoryStore

async def main():
    store = DirectoryStore(sys.argv[1])
    i = 0
    while True:
        batch = [(b"%08d:" % (i + k)).ljust(100 + (i + k) % 900, b"r") for k in range(50)]
        await store.append(batch, sync=False)
        i += 50
        if i == 500:
            print("ready", flush=True)

trio.run(main)
"""


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.05])
async def test_killed_while_appending(tmp_path: Path, delay: float) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for life in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, env=env
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        loaded = await DirectoryStore(tmp_path).load()
        assert len(loaded.torn) <= life + 1
        # Every life's records are whole, in order, and each one is what was appended.
        numbers: list[int] = []
        for entry in loaded.entries:
            n = int(entry.data[:8])
            assert entry.data == (b"%08d:" % n).ljust(100 + n % 900, b"r")
            numbers.append(n)
        starts = [i for i, n in enumerate(numbers) if n == 0]
        assert len(starts) == life + 1
        for a, b in zip(starts, [*starts[1:], len(numbers)], strict=True):
            assert numbers[a:b] == list(range(b - a))
            assert b - a >= 500


def _segments_with_records(directory: Path) -> dict[str, tuple[bytes, list[tuple[int, bytes]]]]:
    """Two lives' segments: each one's bytes, and its records (offset, data)."""

    async def lives() -> list[str]:
        return [
            await write(directory, [b"a" * 10, b""], [bytes(range(256))]),
            await write(directory, [b"\x00" * 30, b"zz"]),
        ]

    out = {}
    for segment in trio.run(lives):
        whole = Path(segment).read_bytes()
        found, tail = read_segment(Path(segment))
        assert tail is None
        out[segment] = (whole, [(e.offset, e.data) for e in found])
    return out


_segment_pick = st.integers(0, 1)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    which=_segment_pick,
    kind=st.sampled_from(["overwrite", "zero", "insert", "truncate", "append"]),
    at=st.integers(0, 400),
    blob=st.binary(min_size=1, max_size=40),
)
def test_load_of_a_damaged_segment_is_typed_and_drops_no_intact_record(
    which: int, kind: str, at: int, blob: bytes
) -> None:
    """Any damage to a real segment: ``load`` gives records back or raises a
    StoreError, never another exception; and a record left out is one whose
    bytes were damaged, or one after which the file holds only zeros."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        original = _segments_with_records(directory)
        segment = sorted(original)[which]
        whole, expected = original[segment]
        at = min(at, len(whole))
        if kind == "overwrite":
            damaged = whole[:at] + blob + whole[at + len(blob) :]
        elif kind == "zero":
            damaged = whole[:at] + bytes(len(blob)) + whole[at + len(blob) :]
        elif kind == "insert":
            damaged = whole[:at] + blob + whole[at:]
        elif kind == "truncate":
            damaged = whole[:at]
        else:
            damaged = whole + blob
        Path(segment).write_bytes(damaged)
        try:
            loaded = trio.run(DirectoryStore(directory).load)
        except StoreCorrupt as exc:
            assert exc.source == segment
            assert 0 <= exc.offset <= len(damaged)
            return
        except StoreError:
            pytest.fail("a damaged segment is StoreCorrupt, not a plain StoreError")
        got = [(e.offset, e.data) for e in loaded.entries if e.source == segment]
        assert got == expected[: len(got)]  # in order, none made up
        for offset, data in expected[len(got) :]:
            end = offset + FRAME + len(data)
            intact = damaged[offset:end] == whole[offset:end]
            assert not intact or not any(damaged[end:]), (offset, kind)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(which=_segment_pick, at=st.integers(0, 400), zeros=st.integers(0, 8192))
def test_what_a_crash_leaves_always_loads(which: int, at: int, zeros: int) -> None:
    """A segment cut anywhere after its header, or zero-filled from anywhere to
    its end and beyond: never StoreCorrupt, and every record before the cut kept."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        original = _segments_with_records(directory)
        segment = sorted(original)[which]
        whole, expected = original[segment]
        at = max(HEADER, min(at, len(whole)))
        damaged = whole[:at] + bytes(zeros)
        Path(segment).write_bytes(damaged)
        loaded = trio.run(DirectoryStore(directory).load)
        got = [(e.offset, e.data) for e in loaded.entries if e.source == segment]
        kept = 0  # the records still whole (one of zeros may be, past the cut)
        for offset, data in expected:
            end = offset + FRAME + len(data)
            if damaged[offset:end] != whole[offset:end]:
                break
            kept += 1
        assert got == expected[:kept]


async def test_aclose_waits_for_an_append_in_its_thread(tmp_path: Path) -> None:
    """Closing the segment under a write would let the write land in whatever file
    reuses its descriptor (or, as it was, in a new segment made after the close)."""
    store = DirectoryStore(tmp_path)
    await store.append([b"a"], sync=True)
    real = store._append
    entered, release = threading.Event(), threading.Event()
    done: list[str] = []

    def held(data: bytes, sync: bool) -> None:
        entered.set()
        release.wait()
        real(data, sync)
        done.append("written")

    store._append = held  # type: ignore[method-assign]

    async def append() -> None:
        await store.append([b"b"], sync=True)

    async def aclose() -> None:
        await store.aclose()
        done.append("aclose")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(append)
        await trio.to_thread.run_sync(entered.wait)
        nursery.start_soon(aclose)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert done == ["written", "aclose"]
    loaded = await DirectoryStore(tmp_path).load()
    assert [(e.source, e.data) for e in loaded.entries] == [
        (store.segment, b"a"),
        (store.segment, b"b"),
    ]
    assert sorted(os.listdir(tmp_path)) == ["000001.ckpt", "lock"]
    with pytest.raises(StoreError, match="closed"):
        await store.append([b"c"], sync=True)


async def test_an_error_closing_the_segment_is_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.close may report a late write error (NFS): never an OSError out of the store."""
    real_close, real_write = os.close, os.write
    store = DirectoryStore(tmp_path)
    await store.append([b"a"], sync=True)
    segment_fd = store._fd

    def close(fd: int) -> None:
        real_close(fd)
        if fd == segment_fd:
            raise OSError(5, "Input/output error")

    def write(fd: int, data: bytes | memoryview) -> int:
        if fd == segment_fd:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "close", close)
    monkeypatch.setattr(os, "write", write)
    with pytest.raises(StoreError, match="No space left"):  # the write's error, not close's
        await store.append([b"b"], sync=True)
    monkeypatch.setattr(os, "write", real_write)
    await store.append([b"c"], sync=True)  # a new segment
    segment_fd = store._fd
    with pytest.raises(StoreError, match="cannot close checkpoint segment") as info:
        await store.aclose()
    assert "000002.ckpt" in str(info.value)


# -- #21: a hostile disk: a huge hole, a link to a file outside the store -------------

GIB = 1 << 30


def _peak_of(fn: object) -> int:
    """The peak of Python's allocations (every thread's) while *fn* ran, in bytes."""
    import tracemalloc

    tracemalloc.start()
    try:
        trio.run(fn)  # type: ignore[arg-type]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("records", [[], [b"kept"]])
def test_a_sparse_hole_of_a_gib_loads_in_bounded_memory(
    records: list[bytes], tmp_path: Path
) -> None:
    """A valid header (and records), then a GiB of zeros that take no disk: the hole
    is a torn tail, and loading it never holds the file in memory (it held 2 GiB)."""
    segment = trio.run(write, tmp_path, records) if records else str(tmp_path / "000001.ckpt")
    if not records:
        Path(segment).write_bytes(MAGIC + struct.pack("<I", 1))
    os.truncate(segment, GIB)
    found: list[Loaded] = []

    async def load() -> None:
        with trio.fail_after(120):  # (a hang guard, not a timing)
            found.append(await DirectoryStore(tmp_path).load())

    peak = _peak_of(load)
    assert peak < 64 << 20, f"{peak} bytes allocated to load"
    (loaded,) = found
    assert [e.data for e in loaded.entries] == records
    (torn,) = loaded.torn
    assert torn.offset == HEADER + sum(FRAME + len(r) for r in records)
    assert torn.data == bytes(FRAME)


def test_a_record_then_garbage_far_into_a_hole_is_corrupt(tmp_path: Path) -> None:
    segment = trio.run(write, tmp_path, [b"kept"])
    with open(segment, "r+b") as f:
        f.seek(GIB)
        f.write(b"\x01")  # (a hole, then a byte that is not zero: not a torn tail)

    async def load() -> None:
        with trio.fail_after(120), pytest.raises(StoreCorrupt, match="damaged frame header"):
            await DirectoryStore(tmp_path).load()

    assert _peak_of(load) < 64 << 20


def test_a_segment_linked_to_a_file_outside_the_store_is_refused_unread(tmp_path: Path) -> None:
    """The link is not followed: its target (a GiB, with a valid header and a record)
    is neither read nor taken for a segment."""
    outside = trio.run(write, tmp_path / "outside", [b"not this store's"])
    os.truncate(outside, GIB)
    store = tmp_path / "store"
    store.mkdir()
    (store / "000001.ckpt").symlink_to(outside)

    async def load() -> None:
        with trio.fail_after(120), pytest.raises(StoreError, match="symbolic link") as caught:
            await DirectoryStore(store).load()
        assert "000001.ckpt" in str(caught.value)
        assert not isinstance(caught.value, StoreCorrupt)

    assert _peak_of(load) < 64 << 20


async def test_a_framed_record_over_max_record_is_refused_among_small_ones(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    big = frame(b"x" * (MAX_RECORD + 1))
    with pytest.raises(StoreError, match=f"{MAX_RECORD + 1} bytes is over MAX_RECORD"):
        await store.append_framed([frame(b"small"), big, frame(b"small")], sync=False)
    assert store.segment is None  # (nothing of the batch was written)
    await store.append_framed([frame(b"small"), frame(b"x" * 100)], sync=True)
    await store.aclose()
    loaded = await DirectoryStore(tmp_path).load()
    assert [bytes(e.data) for e in loaded.entries] == [b"small", b"x" * 100]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(
            _LEN_CRC.pack(MAX_RECORD + 1, 0) + b"\0\0\0\0tiny", id="a header over MAX_RECORD"
        ),
        pytest.param(_LEN_CRC.pack(3, 0) + b"\0\0\0\0tiny", id="a header shorter than its payload"),
        pytest.param(b"\x05\0\0\0\0", id="shorter than a frame header"),
    ],
)
async def test_a_frame_that_is_no_frame_is_refused_and_nothing_is_written(
    tmp_path: Path, bad: bytes
) -> None:
    store = DirectoryStore(tmp_path)
    with pytest.raises(StoreError, match=r"MAX_RECORD|not its payload|no frame"):
        await store.append_framed([frame(b"a"), bad, frame(b"b")], sync=True)
    assert store.segment is None
    await store.aclose()
    assert (await DirectoryStore(tmp_path).load()).entries == []


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
async def test_an_archive_index_that_is_no_regular_file_is_refused_not_waited_on(
    tmp_path: Path, kind: str
) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    if kind == "fifo":
        os.mkfifo(archive / "index")
    else:
        (tmp_path / "elsewhere").write_bytes(b"x" * 64)
        (archive / "index").symlink_to(tmp_path / "elsewhere")
    store = DirectoryStore(tmp_path)
    with trio.fail_after(10), pytest.raises(StoreError, match=r"symbolic link|not a regular file"):
        await store.read_index()
    await store.aclose()
