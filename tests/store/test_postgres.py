"""PostgresStore on a real PostgreSQL server (tests/store/pg.py): round trips, corrupt
rows, tables that are not its own, the holder of its lock, its password kept out of
every message, and a durable agent resumed from it. Its lock's contract with the
directory and SQLite stores' is in tests/store/test_lock.py."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ChatMessage, ToolCallRequest, Usage
from agentrio.errors import InvalidArgument, StoreCorrupt, StoreError, StoreLocked
from agentrio.store import MAX_RECORD, CheckpointStore, Entry, Loaded, PostgresStore
from agentrio.testing import FunctionModel, Reply

from . import pg
from .pg import PASSWORD, require_psycopg

psycopg = require_psycopg()  # (no libpq, no apt-get: skipped, as the server's tests are)
from psycopg import conninfo  # noqa: E402

from agentrio.store import postgres as postgres_module  # noqa: E402
from agentrio.store.postgres import _lock_key  # noqa: E402


@pytest.fixture
def name(tmp_path: Path) -> str:
    """A store name of the test's own (the session's server is shared)."""
    return str(tmp_path)


@pytest.fixture
def sql(postgres_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A connection of the test's own to the server, to damage rows as another program."""
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        yield db


def in_schema(dsn: str, schema: str) -> str:
    """*dsn* with its tables looked for (and made) in *schema*."""
    return conninfo.make_conninfo(dsn, options=f"-c search_path={schema}")


async def test_round_trip_and_reopen(postgres_dsn: str, name: str) -> None:
    store = PostgresStore(postgres_dsn, name=name)
    assert isinstance(store, CheckpointStore)
    assert store.name == name
    assert PASSWORD not in repr(store) and PASSWORD not in store.path + store.dsn
    assert repr(store) == f"PostgresStore({store.dsn!r}, name={name!r})"
    assert await store.load() == Loaded([])
    await store.append([b"a", b"", b"c" * 1000, b"\0\xff"], sync=False)
    await store.append([], sync=True)
    await store.append([b"d"], sync=True)
    loaded = await store.load()
    data = [b"a", b"", b"c" * 1000, b"\0\xff", b"d"]
    assert [e.data for e in loaded.entries] == data
    assert {e.source for e in loaded.entries} == {store.path}
    offsets = [e.offset for e in loaded.entries]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.append([b"e"], sync=True)

    again = PostgresStore(postgres_dsn, name=name)  # a second life appends after the first
    await again.append([b"e"], sync=True)
    loaded = await again.load()
    assert [e.data for e in loaded.entries] == [*data, b"e"]
    assert loaded.entries[-1].offset > offsets[-1]
    await again.aclose()


async def test_stores_of_other_names_are_apart(postgres_dsn: str, name: str) -> None:
    first = PostgresStore(postgres_dsn, name=name + "/1")
    second = PostgresStore(postgres_dsn, name=name + "/2")  # (not locked by the first)
    await first.append([b"one"], sync=True)
    await second.append([b"two"], sync=True)
    assert [e.data for e in (await first.load()).entries] == [b"one"]
    assert [e.data for e in (await second.load()).entries] == [b"two"]
    await first.aclose()
    await second.aclose()


async def test_many_batches(postgres_dsn: str, name: str) -> None:
    store = PostgresStore(postgres_dsn, name=name)
    data = [b"record %d" % i for i in range(5000)]
    for i in range(0, 5000, 250):
        await store.append(data[i : i + 250], sync=i % 500 == 0)
    assert [e.data for e in (await store.load()).entries] == data
    await store.aclose()


async def test_a_row_whose_checksum_fails(
    postgres_dsn: str, name: str, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    store = PostgresStore(postgres_dsn, name=name)
    await store.append([b"one", b"two", b"three"], sync=True)
    second = (await store.load()).entries[1].offset
    await store.aclose()
    sql.execute("UPDATE agentrio_records SET data = 'secret tw0'::bytea WHERE id = %s", (second,))
    store = PostgresStore(postgres_dsn, name=name)
    with pytest.raises(StoreCorrupt, match=f"checksum fails at row {second}") as info:
        await store.load()
    assert (info.value.source, info.value.offset) == (store.path, second)
    assert name in str(info.value)
    assert "secret" not in str(info.value) and PASSWORD not in str(info.value)
    await store.aclose()


async def test_a_row_over_max_record_is_corrupt_and_never_read(
    postgres_dsn: str, name: str, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    store = PostgresStore(postgres_dsn, name=name)
    await store.append([b"one"], sync=True)
    await store.aclose()
    (rowid,) = sql.execute(
        "INSERT INTO agentrio_records (store, data, crc)"
        " VALUES (%s, convert_to(repeat('x', %s), 'UTF8'), 0) RETURNING id",
        (name, MAX_RECORD + 1),
    ).fetchone() or (None,)
    store = PostgresStore(postgres_dsn, name=name)
    tracemalloc.start()
    try:
        with pytest.raises(StoreCorrupt, match=f"over MAX_RECORD, at row {rowid}") as info:
            await store.load()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.offset == rowid and peak < MAX_RECORD // 4
    with pytest.raises(StoreError, match="over MAX_RECORD"):
        await store.append([bytes(MAX_RECORD + 1)], sync=False)
    await store.aclose()


@pytest.mark.parametrize(
    "table",
    [
        "CREATE TABLE agentrio_records (x text)",
        "CREATE TABLE agentrio_records (store text, id bigint, data text, crc bigint)",
        "CREATE TABLE agentrio_records (store text NOT NULL, id bigint GENERATED ALWAYS AS"
        " IDENTITY, data bytea NOT NULL, crc bigint NOT NULL, extra int)",
    ],
)
async def test_a_records_table_of_another_program_is_refused(
    postgres_dsn: str, sql: psycopg.Connection[tuple[object, ...]], table: str, name: str
) -> None:
    schema = f"other_{abs(hash(name))}"
    sql.execute(f"CREATE SCHEMA {schema}")
    sql.execute(f"SET search_path = {schema}")
    sql.execute(table)
    store = PostgresStore(in_schema(postgres_dsn, schema), name=name)
    with pytest.raises(StoreError, match="not the one agentrio makes") as info:
        await store.load()
    assert name in str(info.value) and PASSWORD not in str(info.value)
    with pytest.raises(StoreError, match="not the one agentrio makes"):
        await store.append([b"x"], sync=True)
    await store.aclose()


@pytest.mark.parametrize(
    ("pid", "host", "holder"),
    [
        (12, "build-7", "pid 12 on host 'build-7'"),
        (12, "evil\x1b[2J\x07\r\n", "pid 12 on host 'evil'"),
        (12, None, "pid 12"),
        (3, "h" * 100, "pid 3 on host '" + "h" * 64 + "'"),
        (None, "x", "an unknown process"),
        (99_999_999_999, "x", "an unknown process"),
        (5, " " * 300 + "x", "pid 5"),
        (5, "\ufffe\udc80" * 10_000, "pid 5"),
    ],
)
async def test_the_holder_is_read_back_bounded_and_reduced(
    postgres_dsn: str,
    name: str,
    sql: psycopg.Connection[tuple[object, ...]],
    pid: int | None,
    host: str | None,
    holder: str,
) -> None:
    """Another program holds the store's lock and wrote its line: hostile text."""
    store = PostgresStore(postgres_dsn, name=name)
    await store.load()  # (the tables made)
    await store.aclose()
    with psycopg.connect(postgres_dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (_lock_key(name),))
        other.execute(
            "UPDATE agentrio_owners SET pid = %s, host = %s WHERE store = %s",
            (pid, None if host is None else host.encode("utf-8", "surrogatepass").decode(
                "utf-8", "replace"), name),
        )  # fmt: skip
        with pytest.raises(StoreLocked) as caught:
            await PostgresStore(postgres_dsn, name=name).load()
    assert caught.value.holder == holder
    assert caught.value.path == store.path
    assert f"held by {holder} " in str(caught.value)
    store = PostgresStore(postgres_dsn, name=name)
    await store.load()  # (free again: the other connection closed)
    await store.aclose()


async def test_a_second_store_in_this_process_is_refused_until_the_first_closes(
    postgres_dsn: str, name: str, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    first = PostgresStore(postgres_dsn, name=name)
    await first.append([b"a"], sync=True)
    second = PostgresStore(postgres_dsn, name=name)
    with pytest.raises(StoreLocked, match="in use by another runtime") as caught:
        await second.load()
    assert caught.value.holder.startswith("pid ")
    assert PASSWORD not in str(caught.value)
    with pytest.raises(StoreLocked):
        await second.append([b"b"], sync=True)
    # The server's own advisory lock is what is held.
    held = sql.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
    assert held is not None and held[0] >= 1
    await first.aclose()
    assert [e.data for e in (await second.load()).entries] == [b"a"]
    await second.aclose()


async def test_a_lost_connection_fails_the_store_and_never_writes_unlocked(
    postgres_dsn: str, name: str, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """The lock went with the connection: the store fails rather than reconnect."""
    store = PostgresStore(postgres_dsn, name=name)
    await store.append([b"a"], sync=True)
    sql.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s)",
        (_lock_key(name) & 0xFFFFFFFF,),
    )
    other = PostgresStore(postgres_dsn, name=name, lock_timeout=30)
    await other.load()  # (the server let the lock go with the connection)
    with pytest.raises(StoreError) as info:
        await store.append([b"b"], sync=True)
    assert name in str(info.value) and PASSWORD not in str(info.value)
    assert [e.data for e in (await other.load()).entries] == [b"a"]
    await store.aclose()
    await other.aclose()


async def test_a_table_locked_by_another_program_is_waited_on_boundedly(
    postgres_dsn: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement waiting on a table lock holds a thread no cancel reaches: it gives up."""
    monkeypatch.setattr(postgres_module, "_TABLE_LOCK_WAIT", "200ms")
    store = PostgresStore(postgres_dsn, name=name)
    await store.append([b"a"], sync=True)
    with psycopg.connect(postgres_dsn) as other:  # (a transaction, open until the block ends)
        other.execute("LOCK TABLE agentrio_records IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreError, match="lock timeout") as info:
            await store.append([b"b"], sync=True)
        assert name in str(info.value)
    await store.append([b"c"], sync=True)  # (the store goes on once the table is free)
    assert [e.data for e in (await store.load()).entries] == [b"a", b"c"]
    await store.aclose()


async def test_the_password_is_in_no_message(postgres_dsn: str, name: str) -> None:
    wrong = postgres_dsn.replace(PASSWORD, "not-" + PASSWORD)
    store = PostgresStore(wrong, name=name)
    assert PASSWORD not in repr(store) and PASSWORD not in store.path
    with pytest.raises(StoreError) as info:
        await store.load()
    assert "password authentication failed" in str(info.value)
    assert name in str(info.value) and PASSWORD not in str(info.value)
    await store.aclose()
    # A password as key=value, and a string that cannot be parsed.
    params = conninfo.conninfo_to_dict(postgres_dsn)
    params["password"] = "hunter2 secret"
    keyed = PostgresStore(conninfo.make_conninfo(**params), name=name)
    assert "hunter2" not in repr(keyed) and "hunter2" not in keyed.path
    with pytest.raises(InvalidArgument, match="cannot be parsed") as bad:
        PostgresStore("host=x password='hunter2", name=name)
    assert "hunter2" not in str(bad.value)


async def test_a_server_that_is_not_there(name: str) -> None:
    with trio.socket.socket() as sock:  # (a port nobody listens on)
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresStore(f"postgresql://u:{PASSWORD}@127.0.0.1:{port}/db", name=name)
    with pytest.raises(StoreError, match=r"checkpoint store .*127\.0\.0\.1") as info:
        await store.load()
    assert PASSWORD not in str(info.value)
    await store.aclose()


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\0b", "a\nb", "\udc80", 7])
def test_a_bad_name_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="name"):
        PostgresStore("host=127.0.0.1", name=bad)  # type: ignore[arg-type]


async def test_calls_run_off_the_trio_thread_one_at_a_time(postgres_dsn: str, name: str) -> None:
    store = PostgresStore(postgres_dsn, name=name)
    trio_thread = threading.get_ident()
    threads: set[int] = set()
    inside = 0
    most = 0
    real = store._guarded

    def guarded(fn):  # type: ignore[no-untyped-def]
        nonlocal inside, most
        threads.add(threading.get_ident())
        inside += 1
        most = max(most, inside)
        try:
            return real(fn)
        finally:
            inside -= 1

    store._guarded = guarded  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(partial(store.append, [b"%d" % i], sync=True))
    assert trio_thread not in threads
    assert most == 1
    assert len((await store.load()).entries) == 20
    await store.aclose()


# -- the server, or a clear reason why not ----------------------------------------------


@pytest.mark.parametrize("ci", ["true", ""])
def test_no_server_fails_under_ci_where_apt_get_exists(
    ci: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(pg, "server_binaries", lambda: None)
    monkeypatch.setattr(pg.shutil, "which", {"apt-get": "/usr/bin/apt-get"}.get)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="no PostgreSQL server binaries"):
        pg.require_server()


def test_no_server_skips_where_no_package_manager_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(pg, "server_binaries", lambda: None)
    monkeypatch.setattr(pg.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="no apt-get"):
        pg.require_server()


# -- a durable agent resumed from PostgreSQL ----------------------------------------------

EFFECTS: list[str] = []


@agentrio.tool
async def note(text: str) -> str:
    """Note something (not idempotent)."""
    EFFECTS.append(f"note {text}")
    await trio.lowlevel.checkpoint()
    return f"noted {text}"


def script(*replies: Reply) -> FunctionModel:
    """Answers *replies* in turn, by how many replies the history holds; hangs past them."""

    async def complete(messages: Sequence[ChatMessage], tools: object) -> Reply:
        n = sum(1 for m in messages if m.role == "assistant")
        await trio.lowlevel.checkpoint()
        if n < len(replies):
            return replies[n]
        await trio.sleep_forever()
        raise AssertionError

    return FunctionModel(complete)


def worker(model: FunctionModel) -> AgentSpec[str]:
    return AgentSpec(name="worker", model=model, instructions="You work.", tools=[note])


async def test_a_durable_agent_resumes_from_postgres(
    postgres_dsn: str, name: str, autojump_clock: trio.testing.MockClock
) -> None:
    EFFECTS.clear()
    turn = Reply(tool_calls=(ToolCallRequest("note", {"text": "a"}, id="c1"),), usage=Usage(10, 5))
    first = script(turn)
    async with agentrio.open_runtime(
        store=PostgresStore(postgres_dsn, name=name), specs={"worker": lambda: worker(first)}
    ) as rt:
        agent = await rt.spawn_agent(worker(first), name="w1")

        async def caller() -> None:
            with pytest.raises(agentrio.ActorStopped):
                await agent.run("do the job", phase_id="p1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            while not EFFECTS:
                await trio.sleep(0.01)
            rt.cancel()
    model = script(turn, Reply(text="fine"))
    async with agentrio.open_runtime(
        store=PostgresStore(postgres_dsn, name=name), specs={"worker": lambda: worker(model)}
    ) as rt:
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "fine"
        assert rt.usage().requests == 2
    assert EFFECTS == ["note a"]
    assert isinstance((await _entries(postgres_dsn, name))[0], Entry)


async def _entries(dsn: str, name: str) -> list[Entry]:
    store = PostgresStore(dsn, name=name)
    try:
        return (await store.load()).entries
    finally:
        await store.aclose()
