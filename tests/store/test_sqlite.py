"""SQLiteStore: round trips, reopening, corrupt rows and files that are not its own."""

from __future__ import annotations

import sqlite3
import threading
import tracemalloc
import zlib
from functools import partial
from pathlib import Path

import pytest
import trio

from agentrio.errors import StoreCorrupt, StoreError
from agentrio.store import MAX_RECORD, CheckpointStore, Entry, Loaded, SQLiteStore


async def test_round_trip_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.db"
    store = SQLiteStore(path)
    assert isinstance(store, CheckpointStore)
    assert repr(store) == f"SQLiteStore({str(path)!r})"
    assert await store.load() == Loaded([])
    await store.append([b"a", b"", b"c" * 1000], sync=False)
    await store.append([], sync=True)
    await store.append([b"d"], sync=True)
    data = [b"a", b"", b"c" * 1000, b"d"]
    expected = Loaded([Entry(str(path), i + 1, d) for i, d in enumerate(data)])
    assert await store.load() == expected
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.append([b"e"], sync=True)

    again = SQLiteStore(path)  # a second life sees the first's records, appends after them
    await again.append([b"e"], sync=True)
    loaded = await again.load()
    assert [e.data for e in loaded.entries] == [*data, b"e"]
    assert loaded.entries[-1].offset == 5
    await again.aclose()


async def test_many_batches(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    data = [b"record %d" % i for i in range(5000)]
    for i in range(0, 5000, 250):
        await store.append(data[i : i + 250], sync=i % 500 == 0)
    assert [e.data for e in (await store.load()).entries] == data
    await store.aclose()


async def test_a_row_whose_checksum_fails(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = SQLiteStore(path)
    await store.append([b"one", b"two", b"three"], sync=True)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET data = ? WHERE id = 2", (b"tw0",))
    db.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreCorrupt) as info:
        await store.load()
    assert (info.value.source, info.value.offset) == (str(path), 2)
    assert str(path) in str(info.value)
    assert "tw0" not in str(info.value)
    await store.aclose()


async def test_a_row_over_max_record_is_corrupt_and_never_read(tmp_path: Path) -> None:
    # (review of #21: rows of any size were read whole, where a DirectoryStore
    # refuses a frame over MAX_RECORD.)
    path = tmp_path / "db"
    store = SQLiteStore(path)
    await store.append([b"one"], sync=True)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO records (data, crc) VALUES (zeroblob(?), 0)", (MAX_RECORD + 1,))
    db.close()
    store = SQLiteStore(path)
    tracemalloc.start()
    try:
        with pytest.raises(StoreCorrupt, match="over MAX_RECORD, at row 2") as info:
            await store.load()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.offset == 2 and peak < MAX_RECORD // 4
    with pytest.raises(StoreError, match="over MAX_RECORD"):
        await store.append([bytes(MAX_RECORD + 1)], sync=False)
    await store.aclose()


async def test_a_row_that_is_not_bytes(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = SQLiteStore(path)
    await store.append([b"one"], sync=True)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET data = 'text' WHERE id = 1")
    db.close()
    with pytest.raises(StoreCorrupt) as info:
        await SQLiteStore(path).load()
    assert info.value.offset == 1


async def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are notes, not a database\n" * 100)
    store = SQLiteStore(path)
    with pytest.raises(StoreError) as info:
        await store.load()
    assert str(path) in str(info.value)
    await store.aclose()
    assert path.read_bytes() == b"these are notes, not a database\n" * 100


async def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE records (x)")
    db.close()
    with pytest.raises(StoreError, match="not an agentrio checkpoint database"):
        await SQLiteStore(path).append([b"x"], sync=True)


async def test_a_later_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = SQLiteStore(path)
    await store.append([b"x"], sync=True)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreError, match="schema version 99"):
        await SQLiteStore(path).load()


async def test_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot lock") as info:
        await SQLiteStore(tmp_path / "missing" / "db").load()
    assert str(tmp_path / "missing" / "db") in str(info.value)


async def test_calls_run_off_the_trio_thread_one_at_a_time(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    trio_thread = threading.get_ident()
    threads: set[int] = set()
    inside = 0
    most = 0
    real = store._run

    def run(fn):  # type: ignore[no-untyped-def]
        nonlocal inside, most
        threads.add(threading.get_ident())
        inside += 1
        most = max(most, inside)
        try:
            return real(fn)
        finally:
            inside -= 1

    store._run = run  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(partial(store.append, [b"%d" % i], sync=True))
    assert trio_thread not in threads
    assert most == 1
    assert len((await store.load()).entries) == 20
    await store.aclose()


async def test_a_row_of_text_that_is_not_utf8(tmp_path: Path) -> None:
    """A TEXT value is not decoded: decoding it would fail with a message quoting it."""
    path = tmp_path / "db"
    store = SQLiteStore(path)
    await store.append([b"one"], sync=True)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET data = CAST(x'ff' || 'secret' AS TEXT) WHERE id = 1")
        db.execute(
            "INSERT INTO records (data, crc) VALUES (?, CAST(x'ff' || 'secret' AS TEXT))", (b"x",)
        )
    db.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreCorrupt) as info:
        await store.load()
    assert info.value.offset == 1
    assert "secret" not in str(info.value)
    await store.aclose()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM records WHERE id = 1")
    db.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreCorrupt) as info:  # a crc that is not a number
        await store.load()
    assert info.value.offset == 2
    assert "secret" not in str(info.value)
    await store.aclose()


@pytest.mark.parametrize(
    "schema",
    [
        "CREATE TABLE records (id TEXT PRIMARY KEY, data BLOB NOT NULL, crc INTEGER NOT NULL)",
        "CREATE TABLE records (id INTEGER PRIMARY KEY, data BLOB, crc INTEGER, extra)",
        "CREATE TABLE other (x)",
    ],
)
async def test_a_records_table_of_another_schema_is_refused(tmp_path: Path, schema: str) -> None:
    path = tmp_path / "db"
    with sqlite3.connect(path) as db:
        db.execute(schema)
        db.execute("PRAGMA application_id = 1634890866")  # agentrio's mark, "artr"
        db.execute("PRAGMA user_version = 1")
        if "id TEXT" in schema:  # (loaded, its offset would be a string)
            db.execute(
                "INSERT INTO records (id, data, crc) VALUES ('a', x'00', ?)", (zlib.crc32(b"\0"),)
            )
    db.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="records table") as info:
        await store.load()
    assert str(path) in str(info.value)
    with pytest.raises(StoreError, match="records table"):
        await store.append([b"x"], sync=True)
    await store.aclose()
