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
  open       open_runtime on a DirectoryStore that a runtime left with --finished
             (20,000) finished phases and --unfinished (100) cut short, closed with
             retention=Retention() (its finished phases archived): ``open_ms``, the
             time until the block is entered (the 100 phases resumed), and
             ``open_mb``, the peak of the memory allocated meanwhile (tracemalloc,
             in a second opening: tracing slows the one that is timed),
             beside their floor measured in the same run: the same open of a store
             that holds the 100 unfinished phases alone (``floor_open_ms``,
             ``floor_open_mb``); goal open_ms <= 50. ``uncompacted_open_ms`` and
             ``_mb``: the first open of the same store left without a retention (all
             its phases in the live area, read whole, then archived).

Run: python bench/store.py [--records 100000] [--size 200] [--batch 1000]
[--finished 20000] [--unfinished 100] [--only open] [--dir /some/disk]; prints one
JSON line. The figures depend on the disk's
fsync latency: run it where the checkpoints would live.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import trio

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import agentrio
from agentrio.store import CheckpointWriter, DirectoryStore, Retention, SQLiteStore
from agentrio.testing import FunctionModel, Reply


@agentrio.tool
async def note(text: str) -> str:
    """Note something."""
    await trio.lowlevel.checkpoint()
    return f"noted {text}"


async def model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    await trio.lowlevel.checkpoint()
    user = [m for m in messages if m.role == "user"][-1].content
    if user.startswith("u"):
        await trio.sleep_forever()  # (an unfinished phase: cut short)
    if messages[-1].role == "user":
        call = agentrio.ToolCallRequest("note", {"text": user})
        return Reply(tool_calls=(call,), usage=agentrio.Usage(40, 8))
    return Reply(text=f"done {user}: noted, and nothing else to do.", usage=agentrio.Usage(50, 12))


def make_clerk() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec(
        "clerk", FunctionModel(model), instructions="You note things.", tools=[note]
    )


SPECS = {"clerk": make_clerk}


async def fill(path: Path, finished: int, unfinished: int, retention: Retention | None) -> None:
    """A runtime's life on *path*: *finished* phases run to their end, *unfinished*
    cut short (the runtime cancelled while their model calls wait)."""
    spec = make_clerk()
    async with agentrio.open_runtime(store=path, specs=SPECS, retention=retention) as rt:
        async with trio.open_nursery() as nursery:
            for i in range(finished):
                agent = await rt.spawn_agent(spec, name=f"f{i}")
                nursery.start_soon(agent.run, f"f{i}")
        if unfinished:
            async with trio.open_nursery() as nursery:
                for i in range(unfinished):
                    agent = await rt.spawn_agent(spec, name=f"u{i}")
                    nursery.start_soon(_cut_short, agent, f"u{i}")
                await trio.sleep(0.5)  # (their PhaseBegun written)
                rt.cancel()


async def _cut_short(agent: agentrio.AgentRef[str], text: str) -> None:
    with contextlib.suppress(agentrio.ActorStopped):
        await agent.run(text)


async def timed_open(path: Path) -> tuple[float, float, int]:
    """The ms until open_runtime's block is entered on *path* (untraced), the peak MB
    allocated meanwhile (a second opening, under tracemalloc), and the phases it
    resumed. (The opening that is timed leaves the store as it found it: the
    phases it resumes are cut short again, before they record anything.)"""
    took, resumed = await _open_once(path, traced=False)
    peak, _ = await _open_once(path, traced=True)
    return took * 1e3, peak / 1e6, resumed


async def _open_once(path: Path, *, traced: bool) -> tuple[float, int]:
    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    async with agentrio.open_runtime(store=path, specs=SPECS) as rt:
        took = time.perf_counter() - start
        if traced:
            took = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        resumed = len(rt.resumed)
        rt.cancel()  # (they stay unfinished)
    return took, resumed


async def open_figures(root: Path, finished: int, unfinished: int) -> dict[str, object]:
    await fill(root / "open", finished, unfinished, Retention())
    await fill(root / "floor", 0, unfinished, Retention())
    await fill(root / "uncompacted", finished, unfinished, None)
    figures: dict[str, object] = {"finished": finished, "unfinished": unfinished}
    for name in ("uncompacted", "floor", "open"):
        ms, mb, resumed = await timed_open(root / name)
        assert resumed == unfinished, (name, resumed)
        prefix = "" if name == "open" else f"{name}_"
        figures[f"{prefix}open_ms"] = round(ms, 1)
        figures[f"{prefix}open_mb"] = round(mb, 2)
    size = sum(p.stat().st_size for p in (root / "open").rglob("*") if p.is_file())
    figures["store_mb"] = round(size / 1e6, 1)
    figures["goals_met"] = {"open_ms<=50": figures["open_ms"] <= 50}  # type: ignore[operator]
    return figures


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


async def main(
    n: int, size: int, batch: int, where: str | None, finished: int, unfinished: int, only: str
) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="agentrio-bench-store.", dir=where))
    try:
        opened = await open_figures(root, finished, unfinished)
    finally:
        shutil.rmtree(root)
    if only == "open":
        return opened
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
        **opened,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--finished", type=int, default=20_000)
    parser.add_argument("--unfinished", type=int, default=100)
    parser.add_argument("--only", choices=["all", "open"], default="all")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    args = parser.parse_args()
    result = trio.run(
        main,
        args.records,
        args.size,
        args.batch,
        args.dir,
        args.finished,
        args.unfinished,
        args.only,
    )
    print(json.dumps(result))
