"""The checkpoint stores' append throughput, and CheckpointWriter.put_nowait's cost.

  directory  DirectoryStore: N records of SIZE bytes appended in batches of
             BATCH, each append fsync-ed (sync=True), into a fresh directory.
  sqlite     SQLiteStore: the same, each batch one transaction committed with
             synchronous=FULL.
  writer     CheckpointWriter on a DirectoryStore: N put_nowait calls timed
             alone (ns per record; the writer's appends run between them only
             at checkpoints, so this is the agents' cost), then the time until
             every record is on disk (synced()).
  load       DirectoryStore.load() of the N records written above.
  one        each store again, 200 appends of one record each, fsync-ed: the
             latency of one durable append (what a lone synced() waits).

Run: python bench/store.py [--records 100000] [--size 200] [--batch 1000]
[--dir /some/disk]; prints one JSON line. The figures depend on the disk's
fsync latency: run it where the checkpoints would live.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from agentrio.store import CheckpointWriter, DirectoryStore, SQLiteStore


def records(n: int, size: int) -> list[bytes]:
    return [(b"%09d:" % i).ljust(size, b"r") for i in range(n)]


async def append_all(store: DirectoryStore | SQLiteStore, data: list[bytes], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(data), batch):
        await store.append(data[i : i + batch], sync=True)
    took = time.perf_counter() - start
    await store.aclose()
    return took


async def writer_run(path: Path, data: list[bytes], batch: int) -> tuple[float, float, int]:
    writer = CheckpointWriter(DirectoryStore(path), max_batch=batch)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        start = time.perf_counter()
        put = writer.put_nowait
        for record in data:
            put(record)
        put_took = time.perf_counter() - start
        await writer.synced()
        total = time.perf_counter() - start
        await writer.aclose()
    return put_took, total, writer.batches


async def main(n: int, size: int, batch: int, where: str | None) -> dict[str, object]:
    data = records(n, size)
    root = Path(tempfile.mkdtemp(prefix="agentrio-bench-store.", dir=where))
    try:
        directory = await append_all(DirectoryStore(root / "dir"), data, batch)
        sqlite = await append_all(SQLiteStore(root / "ckpt.db"), data, batch)
        put_took, total, batches = await writer_run(root / "writer", data, batch)
        one_dir = await append_all(DirectoryStore(root / "one"), data[:200], 1) / 200
        one_sqlite = await append_all(SQLiteStore(root / "one.db"), data[:200], 1) / 200
        start = time.perf_counter()
        loaded = await DirectoryStore(root / "dir").load()
        load = time.perf_counter() - start
        assert [e.data for e in loaded.entries] == data
    finally:
        shutil.rmtree(root)
    return {
        "records": n,
        "size": size,
        "batch": batch,
        "directory_records_per_s": round(n / directory),
        "directory_mb_per_s": round(n * size / directory / 1e6, 1),
        "sqlite_records_per_s": round(n / sqlite),
        "sqlite_mb_per_s": round(n * size / sqlite / 1e6, 1),
        "writer_put_nowait_ns": round(put_took / n * 1e9),
        "writer_records_per_s": round(n / total),
        "writer_batches": batches,
        "directory_load_records_per_s": round(n / load),
        "directory_one_append_ms": round(one_dir * 1e3, 2),
        "sqlite_one_append_ms": round(one_sqlite * 1e3, 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    args = parser.parse_args()
    result = trio.run(main, args.records, args.size, args.batch, args.dir)
    print(json.dumps(result))
