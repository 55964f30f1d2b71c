"""A checkpoint store has one owner at a time (#21): two runtimes that both resumed
one store would run a tool not declared idempotent twice. The lock of a
DirectoryStore, of a SQLiteStore and of a PostgresStore (an advisory lock on a real
server, tests/store/pg.py), in one process and across processes."""

from __future__ import annotations

import fcntl
import math
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio.errors import InvalidArgument, StoreError, StoreLocked
from agentrio.store import CheckpointStore, DirectoryStore, PostgresStore, SQLiteStore

from . import pg

Make = Callable[..., CheckpointStore]


def directory(root: Path, **options: float) -> CheckpointStore:
    return DirectoryStore(root / "ckpt", **options)


def database(root: Path, **options: float) -> CheckpointStore:
    return SQLiteStore(root / "ckpt.db", **options)


def postgres(root: Path, **options: float) -> CheckpointStore:
    """A store named after *root* (a test's own) on the session's server."""
    assert pg.DSN is not None
    return PostgresStore(pg.DSN, name=str(root), **options)


def lock_file(make: Make, root: Path) -> Path:
    return root / "ckpt" / "lock" if make is directory else root / "ckpt.db.lock"


FILE_STORES = pytest.mark.parametrize("make", [directory, database], ids=["directory", "sqlite"])
STORES = pytest.mark.parametrize(
    "make", [directory, database, postgres], ids=["directory", "sqlite", "postgres"]
)


@pytest.fixture(autouse=True)
def _server_for_postgres(request: pytest.FixtureRequest) -> None:
    """The session's PostgreSQL server, started for the tests of a PostgresStore."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("make") is postgres:
        request.getfixturevalue("postgres_dsn")


@contextmanager
def held_elsewhere(path: Path, content: bytes) -> Iterator[None]:
    """The lock file at *path* held, with *content*, by another open file (as another
    process holds it: this process's table of held locks does not know it)."""
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.write(fd, content)
        yield
    finally:
        os.close(fd)


@FILE_STORES
async def test_a_second_store_in_this_process_is_refused(make: Make, tmp_path: Path) -> None:
    first = make(tmp_path)
    await first.append([b"a"], sync=True)
    second = make(tmp_path)
    with pytest.raises(StoreLocked, match="in use by another runtime") as caught:
        await second.load()
    assert caught.value.holder == "this process (another store object on it is open)"
    with pytest.raises(StoreLocked):
        await second.append([b"b"], sync=True)
    # The flock itself is held (per open file description: not only this process's table).
    fd = os.open(lock_file(make, tmp_path), os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        await first.aclose()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go by aclose
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    assert [e.data for e in (await second.load()).entries] == [b"a"]
    await second.aclose()


@STORES
async def test_two_runtimes_in_one_process_exclude_each_other(make: Make, tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=make(tmp_path)) as rt:
        with pytest.raises(StoreLocked):
            async with agentrio.open_runtime(store=make(tmp_path)):
                raise AssertionError("opened on a store another runtime owns")
        assert rt.resumed == ()
    async with agentrio.open_runtime(store=make(tmp_path)):  # free once the first closed
        pass


async def test_a_path_makes_a_directory_store_that_locks(tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=tmp_path / "ckpt"):
        with pytest.raises(StoreLocked):
            async with agentrio.open_runtime(store=tmp_path / "ckpt"):
                pass


async def test_two_paths_to_one_database_share_its_lock(tmp_path: Path) -> None:
    first = SQLiteStore(tmp_path / "ckpt.db")
    await first.load()
    (tmp_path / "link.db").symlink_to(tmp_path / "ckpt.db")
    with pytest.raises(StoreLocked):
        await SQLiteStore(tmp_path / "link.db").load()
    await first.aclose()


@STORES
async def test_a_store_dropped_without_aclose_lets_its_lock_go(make: Make, tmp_path: Path) -> None:
    await make(tmp_path).load()  # (the store is gone with this line)
    store = make(tmp_path)
    await store.load()
    await store.aclose()


@STORES
async def test_a_second_store_waits_when_asked(
    make: Make, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first = make(tmp_path)
    await first.load()
    second = make(tmp_path, lock_timeout=math.inf)
    taken = trio.Event()

    async def take() -> None:
        await second.load()
        taken.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take)
        await trio.sleep(60)
        assert not taken.is_set()
        await first.aclose()
        await taken.wait()
    await second.aclose()


@STORES
async def test_a_wait_ends_with_store_locked_or_cancelled(
    make: Make, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first = make(tmp_path)
    await first.load()
    start = trio.current_time()
    with pytest.raises(StoreLocked):
        await make(tmp_path, lock_timeout=2.5).load()
    assert trio.current_time() - start == pytest.approx(2.5)
    waiting = make(tmp_path, lock_timeout=math.inf)
    with trio.move_on_after(30) as scope:
        await waiting.load()
    assert scope.cancelled_caught
    await first.aclose()
    # The cancelled wait left nothing held: another store takes it, then the same one.
    other = make(tmp_path)
    await other.load()
    await other.aclose()
    await waiting.load()
    await waiting.aclose()


def test_a_bad_lock_timeout_is_refused(tmp_path: Path) -> None:
    for bad in (-1, math.nan, "1", None):
        with pytest.raises(InvalidArgument, match="lock_timeout"):
            DirectoryStore(tmp_path, lock_timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="lock_timeout"):
            SQLiteStore(tmp_path / "db", lock_timeout=bad)  # type: ignore[arg-type]


async def test_a_lock_file_removed_while_held_still_excludes(tmp_path: Path) -> None:
    # Removed (a clean-up script), the lock file was made again by the next opener,
    # which locked it and owned the store too: the directory's own lock holds.
    first = DirectoryStore(tmp_path)
    await first.load()
    os.unlink(tmp_path / "lock")
    second = DirectoryStore(tmp_path)
    with pytest.raises(StoreLocked, match="lock file was removed"):
        await second.load()
    await first.aclose()
    await second.load()  # the owner gone, the store is free
    await second.aclose()


async def test_a_path_with_a_nul_is_refused(tmp_path: Path) -> None:
    # (It was an untyped ValueError from the system call.)
    for make in (DirectoryStore, SQLiteStore):
        with pytest.raises(InvalidArgument, match="NUL"):
            make(tmp_path / "a\0b")
    with pytest.raises(InvalidArgument, match="NUL"):
        async with agentrio.open_runtime(store=str(tmp_path / "a\0b"), specs={}):
            pytest.fail("the block ran")


@FILE_STORES
@pytest.mark.parametrize(
    ("content", "holder"),
    [
        (b"pid=12 host=build-7\n", "pid 12 on host 'build-7'"),
        (b"pid=12 host=evil\x1b[2J\x07\r\n", "pid 12 on host 'evil'"),
        (b"pid=12", "pid 12"),
        (b"host=" + b"h" * 100 + b" pid=3", "pid 3 on host '" + "h" * 64 + "'"),
        (b"pid=" + b"9" * 50, "an unknown process"),
        (b" " * 300 + b"pid=5 host=x", "an unknown process"),  # (read: 256 bytes at most)
        (b"\xff\xfe\xed\x00" * 10_000, "an unknown process"),
        (b"", "an unknown process"),
    ],
)
async def test_the_holder_is_read_back_bounded_and_reduced(
    make: Make, content: bytes, holder: str, tmp_path: Path
) -> None:
    store = make(tmp_path)
    with held_elsewhere(lock_file(make, tmp_path), content), pytest.raises(StoreLocked) as caught:
        await store.load()
    assert caught.value.holder == holder
    assert caught.value.path == store.path  # type: ignore[attr-defined]
    assert f"held by {holder} " in str(caught.value)
    await store.load()  # (free again)
    await store.aclose()


@FILE_STORES
async def test_a_lock_file_that_is_a_link_is_not_followed(make: Make, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"someone else's file")
    path = lock_file(make, tmp_path)
    path.parent.mkdir(exist_ok=True)
    path.symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        await make(tmp_path).load()
    assert victim.read_bytes() == b"someone else's file"


async def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lock").mkdir()
    with pytest.raises(StoreError, match="cannot lock"):
        await DirectoryStore(tmp_path).load()


# -- two processes ------------------------------------------------------------------------

OWNER = """
import sys, trio, agentrio
from agentrio.store import DirectoryStore, PostgresStore, SQLiteStore

async def main():
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "postgres":
        store = PostgresStore(sys.argv[3], name=path)
    else:
        store = DirectoryStore(path) if kind == "directory" else SQLiteStore(path)
    async with agentrio.open_runtime(store=store):
        print("ready", flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


@STORES
def test_a_store_owned_by_another_process_is_refused_until_it_dies(
    make: Make, tmp_path: Path
) -> None:
    path = tmp_path / ("ckpt" if make is directory else "ckpt.db")
    if make is postgres:
        path = tmp_path  # (the store's name: see postgres)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, make.__name__, str(path), pg.DSN or ""],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == b"ready\n"

        async def second_runtime(lock_timeout: float = 0) -> None:
            async with agentrio.open_runtime(store=make(tmp_path, lock_timeout=lock_timeout)):
                pass

        with pytest.raises(StoreLocked) as caught:
            trio.run(second_runtime)
        host = socket.gethostname()
        assert caught.value.holder.startswith(f"pid {owner.pid}")
        if host.replace("-", "").replace(".", "").isalnum() and len(host) <= 64:
            assert caught.value.holder == f"pid {owner.pid} on host {host!r}"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        if owner.stdout is not None:
            owner.stdout.close()
    # The kernel let the lock go with the killed owner (the server, once it sees the
    # killed owner's connection closed: hence a wait).
    trio.run(second_runtime, 60)
