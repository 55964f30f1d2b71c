"""CheckpointWriter: batching, group commit, backpressure, errors, closing, cancellation."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrio.errors import InvalidArgument, StoreError, UsageError
from agentrio.store import CheckpointWriter, DirectoryStore, Loaded, MemoryStore


class Recording(MemoryStore):
    """A MemoryStore that records each append's size and sync, and may be held
    (append waits until released) or broken (append raises)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[tuple[int, bool]] = []
        self.gate: trio.Event | None = None
        self.entered = 0
        self.fail: Exception | None = None

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        self.entered += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.appends.append((len(batch), sync))
        await super().append(batch, sync=sync)


def data(n: int) -> list[bytes]:
    return [b"r%d" % i for i in range(n)]


async def test_batches_and_closes(autojump_clock: trio.testing.MockClock) -> None:
    store = Recording()
    writer = CheckpointWriter(store, flush_interval=0.05, max_batch=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for record in data(250):
            writer.put_nowait(record)
        await trio.sleep(1)
        assert writer.written == 250
        # (one sync for the burst: its last batch makes those before it durable)
        assert store.appends == [(100, False), (100, False), (50, True)]
        for record in data(10):
            writer.put_nowait(record)
        await writer.aclose()
    assert store.records == data(250) + data(10)
    assert (writer.written, writer.batches) == (260, 4)
    assert store.closed
    with pytest.raises(StoreError, match="closed"):
        writer.put_nowait(b"late")
    await writer.aclose()  # idempotent


async def test_a_record_waits_at_most_flush_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Recording()
    writer = CheckpointWriter(store, flush_interval=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        start = trio.current_time()
        writer.put_nowait(b"a")
        writer.put_nowait(b"b")
        while writer.written < 2:
            await trio.sleep(0.01)
        assert trio.current_time() - start == pytest.approx(0.5, abs=0.02)
        assert store.appends == [(2, True)]
        await trio.sleep(10)  # idle: nothing to append, no append
        assert store.appends == [(2, True)]
        await writer.aclose()


async def test_synced_is_a_group_commit() -> None:
    store = Recording()
    writer = CheckpointWriter(store, flush_interval=3600)  # only synced() makes it append
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        await writer.synced()  # nothing put: returns at once
        done = []

        async def waiter(i: int) -> None:
            writer.put_nowait(b"w%d" % i)
            await writer.synced()
            done.append(i)

        for i in range(100):
            nursery.start_soon(waiter, i)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(done) == list(range(100))
        assert store.appends == [(100, True)]
        await writer.aclose()


class Steps(trio.abc.Instrument):
    """Counts the steps each task takes (each time it is woken)."""

    def __init__(self) -> None:
        self.steps: dict[trio.lowlevel.Task, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task] = self.steps.get(task, 0) + 1


async def test_a_synced_waiter_is_woken_once_its_records_are_appended() -> None:
    # Waiters of synced() that wait for different batches: each is woken when its
    # own records are appended, not at every batch before (thousands of agents
    # waiting, each woken by each batch, made the wait quadratic).
    store = Recording()
    store.gate = trio.Event()  # (the first append is held: the others queue behind it)
    writer = CheckpointWriter(store, flush_interval=3600, max_batch=1)
    steps = Steps()
    waiters = 100
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)

        async def waiter(i: int) -> None:
            writer.put_nowait(b"w%d" % i)
            await writer.synced()

        for i in range(waiters):
            nursery.start_soon(waiter, i, name=f"waiter {i}")
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(steps)
        store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.remove_instrument(steps)
        assert writer.written == waiters and writer.batches == waiters
        await writer.aclose()
    woken = [n for task, n in steps.steps.items() if task.name.startswith("waiter")]
    assert len(woken) == waiters and max(woken) == 1


async def test_synced_waits_for_a_batch_in_flight_without_a_second_append() -> None:
    store = Recording()
    store.gate = trio.Event()
    writer = CheckpointWriter(store, flush_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.put_nowait(b"a")
        nursery.start_soon(writer.synced)
        await trio.testing.wait_all_tasks_blocked()
        assert store.entered == 1  # appending "a", held
        nursery.start_soon(writer.synced)  # "a" is in flight: nothing more to ask
        await trio.testing.wait_all_tasks_blocked()
        writer.put_nowait(b"b")  # ... and "b" waits for the interval
        await trio.testing.wait_all_tasks_blocked()
        store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert store.appends == [(1, True)]
        await writer.aclose()
    assert store.appends == [(1, True), (1, True)]


async def test_put_waits_past_max_pending() -> None:
    store = Recording()
    store.gate = trio.Event()
    writer = CheckpointWriter(store, max_batch=4, max_pending=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for record in data(12):
            writer.put_nowait(record)  # never blocks, past max_pending too
        put = []

        async def putter() -> None:
            await writer.put(b"late")
            put.append(True)

        nursery.start_soon(putter)
        await trio.testing.wait_all_tasks_blocked()
        assert put == []  # 12 wait (4 of them being appended)
        store.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert put == [True]
        await writer.aclose()
    assert store.records == [*data(12), b"late"]
    assert writer.batches == 4


async def test_put_does_not_wait_below_max_pending() -> None:
    store = Recording()
    writer = CheckpointWriter(store, max_pending=10)
    for record in data(9):
        await writer.put(record)  # the writer is not even running
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        await writer.aclose()
    assert store.records == data(9)


@pytest.mark.parametrize("error", [StoreError("disk full"), OSError(5, "I/O error")])
async def test_an_append_error_reaches_run_and_every_waiter(error: Exception) -> None:
    store = Recording()
    store.gate = trio.Event()
    store.fail = error
    writer = CheckpointWriter(store, max_pending=2)
    raised: list[BaseException] = []

    async def waiting(fn: object) -> None:
        try:
            await fn()  # type: ignore[operator]
        except StoreError as exc:
            raised.append(exc)

    with pytest.RaisesGroup(pytest.RaisesExc(StoreError, match="disk full|I/O error")):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.put_nowait(b"a")
            writer.put_nowait(b"b")
            nursery.start_soon(waiting, writer.synced)
            nursery.start_soon(waiting, writer.synced)
            nursery.start_soon(waiting, lambda: writer.put(b"c"))
            await trio.testing.wait_all_tasks_blocked()
            store.gate.set()
    assert len(raised) == 3
    assert all("disk full" in str(e) or "I/O error" in str(e) for e in raised)
    with pytest.raises(StoreError, match="failed"):
        writer.put_nowait(b"d")
    with pytest.raises(StoreError, match="failed"):
        await writer.synced()
    await writer.aclose()  # closes the store, appends nothing more, raises nothing
    assert store.closed
    assert store.entered == 1


async def test_aclose_appends_what_waits_before_stopping_run() -> None:
    store = Recording()
    writer = CheckpointWriter(store, flush_interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for record in data(5):
            writer.put_nowait(record)
        await writer.aclose()
        assert store.records == data(5)
        assert store.appends == [(5, True)]
        assert store.closed


async def test_aclose_without_run_appends_what_waits() -> None:
    store = Recording()
    writer = CheckpointWriter(store)
    writer.put_nowait(b"a")
    await writer.aclose()
    assert store.records == [b"a"]
    assert store.closed
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)  # after aclose: returns at once


async def test_run_is_started_once() -> None:
    writer = CheckpointWriter(Recording())
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        with pytest.raises(UsageError):
            await writer.run()
        await writer.aclose()


def test_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_batch"):
        CheckpointWriter(MemoryStore(), max_batch=0)
    with pytest.raises(InvalidArgument, match="max_pending"):
        CheckpointWriter(MemoryStore(), max_pending=0)
    with pytest.raises(InvalidArgument, match="flush_interval"):
        CheckpointWriter(MemoryStore(), flush_interval=-1)
    assert repr(CheckpointWriter(MemoryStore())) == (
        "CheckpointWriter(MemoryStore(records=0, archived=0), written=0, pending=0)"
    )


async def test_cancelling_run_stops_it_and_its_waiters() -> None:
    store = Recording()
    writer = CheckpointWriter(store, flush_interval=3600)
    outcome: list[str] = []

    async def waiter() -> None:
        try:
            await writer.synced()
        except StoreError:
            outcome.append("stopped")

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            store.gate = trio.Event()
            writer.put_nowait(b"a")
            outer.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert store.entered == 1  # "a" held in append
            nursery.cancel_scope.cancel()
        # Recording's append was cancelled: "a" waits again.
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == ["stopped"]
        store.gate = None
        writer.put_nowait(b"b")
        await writer.aclose()
    assert store.records == [b"a", b"b"]


async def test_synced_waiters_of_a_cancelled_run_are_synced_by_aclose() -> None:
    store = Recording()
    store.gate = trio.Event()
    writer = CheckpointWriter(store, flush_interval=3600, max_batch=1)
    done: list[int] = []

    async def waiter(i: int) -> None:
        writer.put_nowait(b"w%d" % i)
        await writer.synced()
        done.append(i)

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            for i in range(5):
                outer.start_soon(waiter, i)
            await trio.testing.wait_all_tasks_blocked()
            outer.start_soon(writer.aclose)  # (it waits for run(), which is held)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()  # run() stops: aclose appends the rest
        store.gate.set()
    assert sorted(done) == list(range(5))
    assert sorted(store.records) == [b"w%d" % i for i in range(5)]


async def test_cancellation_leaves_no_thread_running(tmp_path: Path) -> None:
    """A cancelled writer's append in a worker thread is waited for, not left behind."""
    store = DirectoryStore(tmp_path)
    release = threading.Event()
    real = store._write
    in_thread = threading.Event()

    def slow(data: bytes | bytearray, sync: bool) -> None:
        in_thread.set()
        release.wait()
        real(data, sync)

    store._write = slow  # type: ignore[method-assign]
    writer = CheckpointWriter(store)
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.put_nowait(b"a")
            writer.put_nowait(b"b")
            await trio.to_thread.run_sync(in_thread.wait)
            nursery.cancel_scope.cancel()
            # The cancel cannot end the append: it is let go only later.
            threading.Timer(0.05, release.set).start()
    # The nursery ended only once the thread's append had ended.
    assert release.is_set()
    assert writer.written == 2
    await writer.aclose()
    loaded: Loaded = await DirectoryStore(tmp_path).load()
    assert [e.data for e in loaded.entries] == [b"a", b"b"]


async def test_aclose_closes_the_store_even_when_cancelled() -> None:
    store = Recording()
    store.gate = trio.Event()  # an append that waits: the cancel ends it
    writer = CheckpointWriter(store)
    writer.put_nowait(b"a")
    with trio.CancelScope() as scope:
        scope.cancel()
        await writer.aclose()
    assert store.closed
    assert store.records == []
    with pytest.raises(StoreError, match="stopped"):
        await writer.synced()


@pytest.mark.parametrize("store_kind", ["directory", "sqlite"])
async def test_with_real_stores(tmp_path: Path, store_kind: str) -> None:
    from agentrio.store import SQLiteStore

    def make() -> DirectoryStore | SQLiteStore:
        if store_kind == "directory":
            return DirectoryStore(tmp_path / "d")
        return SQLiteStore(tmp_path / "db")

    writer = CheckpointWriter(make(), max_batch=64)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for record in data(1000):
            writer.put_nowait(record)
        await writer.synced()
        assert writer.written == 1000
        await writer.aclose()
    store = make()
    assert [e.data for e in (await store.load()).entries] == data(1000)
    await store.aclose()


def test_put_nowait_cost() -> None:
    """Print (not assert) put_nowait's cost per record, with no synced() caller."""
    store = MemoryStore()
    writer = CheckpointWriter(store, max_batch=1 << 30)
    record = b"x" * 200
    n = 1_000_000
    start = time.perf_counter()
    put = writer.put_nowait
    for _ in range(n):
        put(record)
    took = time.perf_counter() - start
    base_list: list[bytes] = []
    start = time.perf_counter()
    append = base_list.append
    for _ in range(n):
        append(record)
    floor = time.perf_counter() - start
    print(f"\nput_nowait: {took / n * 1e9:.0f} ns/record (list.append: {floor / n * 1e9:.0f} ns)")


async def test_a_cancelled_aclose_stops_run_before_closing_the_store() -> None:
    """A cancelled aclose() closed the store while run() went on appending to it
    (a DirectoryStore's segment closed under its write, then StoreError("closed")
    from run(), crashing its nursery)."""
    store = Recording()
    writer = CheckpointWriter(store, flush_interval=3600)
    scopes: list[trio.CancelScope] = []

    async def close_then_give_up() -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await writer.aclose()

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        store.gate = trio.Event()
        writer.put_nowait(b"a")
        nursery.start_soon(close_then_give_up)
        await trio.testing.wait_all_tasks_blocked()
        assert store.entered == 1  # run() appends "a", held
        scopes[0].cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert store.closed
        store.gate.set()
    assert store.records == []  # nothing appended to the closed store
    assert writer.written == 0
    with pytest.raises(StoreError, match="closed"):
        writer.put_nowait(b"b")


class Yielding(MemoryStore):
    """A MemoryStore whose append passes a few checkpoints first (then appends
    all of the batch: a cancel before its end appends none of it)."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    async def append(self, batch: Sequence[bytes], *, sync: bool) -> None:
        for _ in range(self.rng.randrange(3)):
            await trio.lowlevel.checkpoint()
        await super().append(list(batch), sync=sync)


async def _random_life(seed: int) -> None:
    rng = random.Random(seed)
    store = Yielding(rng)
    writer = CheckpointWriter(
        store,
        flush_interval=rng.choice([0, 0.01, 1]),
        max_batch=rng.randrange(1, 6),
        max_pending=rng.randrange(1, 10),
    )
    taken: list[bytes] = []
    early: list[bytes] = []  # records a synced() returned before they were appended

    async def client(n: int) -> None:
        with contextlib.suppress(StoreError):  # the writer stopped or closed
            for k in range(rng.randrange(1, 8)):
                record = b"%d-%d" % (n, k)
                if rng.random() < 0.5:
                    await writer.put(record)
                else:
                    writer.put_nowait(record)
                taken.append(record)
                if rng.random() < 0.5:
                    await writer.synced()
                    if record not in store.records:
                        early.append(record)
                for _ in range(rng.randrange(3)):
                    await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            for n in range(rng.randrange(1, 6)):
                outer.start_soon(client, n)
            for _ in range(rng.randrange(30)):
                await trio.lowlevel.checkpoint()
            if rng.random() < 0.5:
                nursery.cancel_scope.cancel()
            else:
                await writer.aclose()
        await writer.aclose()
    assert early == []
    assert sorted(store.records) == sorted(taken)  # each record taken: appended once
    for n in range(6):  # and each client's in its order
        mine = [r for r in taken if r.startswith(b"%d-" % n)]
        assert [r for r in store.records if r in mine] == mine
    assert store.closed


async def test_random_lives_lose_duplicate_or_sync_early_no_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Clients putting and waiting in synced(), run() cancelled or closed at a
    random point: every record taken is appended exactly once, in order, and no
    synced() returns before its records are appended."""
    for seed in range(300):
        await _random_life(seed)


async def test_a_record_over_max_record_stops_the_writer_of_a_directory_store(
    tmp_path: Path,
) -> None:
    from agentrio.store import MAX_RECORD

    writer = CheckpointWriter(DirectoryStore(tmp_path))
    over = f"{MAX_RECORD + 1} bytes is over MAX_RECORD"

    async def run() -> None:
        with pytest.raises(StoreError, match=over):
            await writer.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        writer.put_nowait(b"small")
        writer.put_nowait(b"x" * (MAX_RECORD + 1))
        with pytest.raises(StoreError, match=over):
            await writer.synced()
    await writer.aclose()
    assert (await DirectoryStore(tmp_path).load()).entries == []  # (nothing of the batch)
