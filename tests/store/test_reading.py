"""A store you can read (#27), on the directory, SQLite and PostgreSQL stores: finished
phases archived so that opening reads only the unfinished, StoreReader (phases, turns,
export, fork), retention, delete_phases checked on the files' bytes, spec versions."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

import agentrio
from agentrio import AgentSpec, ChatMessage, ToolCallRequest, Usage
from agentrio.agents.durability.records import decode_records
from agentrio.errors import InvalidArgument, SpecVersionMismatch, StoreLocked, UnknownName
from agentrio.store import (
    ArchivingStore,
    DirectoryStore,
    MemoryStore,
    PostgresStore,
    Retention,
    SQLiteStore,
    record_phase,
)
from agentrio.testing import FunctionModel, Reply
from agentrio.types import StoreReader

KINDS = ["directory", "sqlite", "postgres"]
HANG: set[str] = set()  # user messages whose model call never returns (a crash's stand-in)
SEEN: list[tuple[str | None, int]] = []  # what migrate was called with


@pytest.fixture(autouse=True)
def _reset() -> None:
    HANG.clear()
    SEEN.clear()


@agentrio.tool
async def note(text: str) -> str:
    """Note something."""
    await trio.lowlevel.checkpoint()
    return f"noted {text}"


async def model(messages: Sequence[ChatMessage], tools: object) -> Reply:
    await trio.lowlevel.checkpoint()
    user = next(m.content for m in messages if m.role == "user")
    last_user = [m for m in messages if m.role == "user"][-1].content
    if last_user in HANG:
        await trio.sleep_forever()
    if messages[-1].role == "user":
        call = ToolCallRequest("note", {"text": last_user})
        return Reply(tool_calls=(call,), usage=Usage(10, 2))
    del user
    return Reply(text=f"done {last_user}", usage=Usage(12, 3))


def make_spec(version: str | None = None, migrate: Any = None) -> Callable[[], AgentSpec[str]]:
    def make() -> AgentSpec[str]:
        return AgentSpec(
            "clerk",
            FunctionModel(model),
            instructions="You note things.",
            tools=[note],
            version=version,
            migrate=migrate,
        )

    return make


class Kind:
    """A store of one kind, made again for each life (as a new process would)."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp = tmp_path
        self.dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else ""

    def make(self) -> ArchivingStore:
        if self.kind == "directory":
            return DirectoryStore(self.tmp / "ckpt")
        if self.kind == "sqlite":
            return SQLiteStore(self.tmp / "ckpt.db")
        return PostgresStore(self.dsn, name=str(self.tmp))

    def files_bytes(self) -> bytes:
        """Every byte of the files the store's records live in."""
        if self.kind == "directory":
            return _read_tree(self.tmp / "ckpt")
        if self.kind == "sqlite":
            return b"".join(
                p.read_bytes() for p in self.tmp.iterdir() if p.name.startswith("ckpt.db")
            )
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as db:
            (data,) = db.execute("SHOW data_directory").fetchone()  # type: ignore[misc]
            db.execute("CHECKPOINT")
        return _read_tree(Path(data) / "base")


def _read_tree(root: Path) -> bytes:
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError, PermissionError):
                out.append((Path(folder) / name).read_bytes())
    return b"".join(out)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Kind:
    return Kind(request.param, tmp_path, request)


async def life(
    kind: Kind,
    finished: Sequence[str] = (),
    hanging: Sequence[str] = (),
    *,
    make: Callable[[], AgentSpec[str]] | None = None,
    retention: Retention | None = None,
) -> None:
    """One life: each of *finished* run to its end by an agent of its own, then each
    of *hanging* cut short in its first model call (the runtime cancelled)."""
    make = make or make_spec()
    HANG.update(hanging)
    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make}, retention=retention
    ) as rt:
        for pid in finished:
            agent = await rt.spawn_agent(make(), name=f"a-{pid}")
            result = await agent.run(pid, phase_id=pid)
            assert result.final_text == f"done {pid}"
        started = 0
        async with trio.open_nursery() as nursery:
            for pid in hanging:
                agent = await rt.spawn_agent(make(), name=f"a-{pid}")

                async def run(agent: agentrio.AgentRef[str] = agent, pid: str = pid) -> None:
                    nonlocal started
                    started += 1
                    with contextlib.suppress(agentrio.ActorStopped):
                        await agent.run(pid, phase_id=pid)

                nursery.start_soon(run)
            while started < len(hanging):
                await trio.sleep(0.01)
            await trio.sleep(0.1)  # (their PhaseBegun written)
            if hanging:
                rt.cancel()


async def test_opening_archives_the_finished_and_reads_only_the_unfinished(kind: Kind) -> None:
    await life(kind, ["f0"])
    store = kind.make()  # (without a retention, nothing is archived: read whole)
    assert {record_phase(e.data) for e in (await store.read_live()).entries} >= {"f0"}
    assert await store.read_index() == []
    await store.aclose()
    # With one, the runtime compacts as it opens and as it closes.
    await life(kind, ["f1", "f2", "f3"], ["u1"], retention=Retention())
    store = kind.make()
    live = await store.read_live()
    # Only what is unfinished (and the budget's totals) stayed in the live area...
    assert {record_phase(e.data) for e in live.entries} == {"", "u1"}
    # ...the finished phases are archived, whole.
    assert sorted(pid for pid, _ in await store.read_index()) == ["f0", "f1", "f2", "f3"]
    await store.aclose()
    HANG.clear()
    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make_spec()}, retention=Retention()
    ) as rt:
        assert rt.resumed == ("u1",)
        assert (await rt.resumed_result("u1")).final_text == "done u1"
        # An archived phase's result is read from the archive.
        assert (await rt.resumed_result("f2")).final_text == "done f2"
    store = kind.make()
    assert {record_phase(e.data) for e in (await store.read_live()).entries} == {""}
    assert len(await store.read_index()) == 5
    await store.aclose()
    async with agentrio.open_runtime(store=kind.make(), specs={"clerk": make_spec()}) as rt:
        assert rt.resumed == ()
        assert rt.usage().requests == 10  # (5 phases of 2 calls: the totals were kept)


async def test_a_reader_lists_reads_and_exports(kind: Kind) -> None:
    await life(kind, ["f1", "f2"], ["u1"])
    async with StoreReader(kind.make()) as reader:
        everything = await reader.phases()
        assert [p.phase_id for p in everything] == ["f1", "f2", "u1"]
        finished = await reader.phases(status="finished")
        assert [p.phase_id for p in finished] == ["f1", "f2"]
        assert all(p.stop_reason == "done" and p.ended_at for p in finished)
        (unfinished,) = await reader.phases(status="unfinished")
        assert unfinished.phase_id == "u1" and unfinished.agent == "a-u1"
        assert [p.phase_id for p in await reader.phases(agent="a-f2")] == ["f2"]
        assert await reader.phases(session="nobody") == []
        since = everything[1].started_at
        assert [p.phase_id for p in await reader.phases(since=since)] == ["f2", "u1"]
        assert [p.phase_id for p in await reader.phases(until=since)] == ["f1"]
        turns = await reader.turns("f1")
        assert [t.message.role for t in turns] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert turns[-1].message.content == "done f1" and turns[1].index == 1
        exported = json.loads(await reader.export("f1"))
        assert exported["format"] == "agentrio.phases/1"
        (phase,) = exported["phases"]
        assert phase["summary"]["phase_id"] == "f1"
        assert phase["turns"][-1]["message"]["content"] == "done f1"
        with pytest.raises(UnknownName):
            await reader.turns("nope")
        with pytest.raises(InvalidArgument):
            await reader.export()
    # The same, read while a runtime has the store open (it archived f1 and f2).
    HANG.clear()
    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make_spec()}, retention=Retention()
    ) as rt:
        await rt.resumed_result("u1")
        reader = rt.store_reader()
        archived = await reader.phases(status="finished")
        assert {p.phase_id for p in archived if p.archived} == {"f1", "f2"}
        assert [t.message.content for t in await reader.turns("f2")][-1] == "done f2"
        # A reader of its own, without the lock, on the open store:
        async with StoreReader(kind.make()) as other:
            assert {p.phase_id for p in await other.phases()} >= {"f1", "f2"}


async def test_a_fork_goes_on_from_a_turn_and_leaves_the_original(kind: Kind) -> None:
    await life(kind, ["f1"])
    async with StoreReader(kind.make()) as reader:
        before = await reader.turns("f1")
        # Fork at the user's turn (index 1): the model is called again from there.
        forked = await reader.fork("f1", turn=1, new_phase_id="f1-again", agent="clerk-2")
        assert forked == "f1-again"
        with pytest.raises(InvalidArgument, match="turn"):
            await reader.fork("f1", turn=99)
        with pytest.raises(InvalidArgument, match="new_phase_id"):
            await reader.fork("f1", turn=1, new_phase_id="f1")
        assert await reader.turns("f1") == before
    async with agentrio.open_runtime(store=kind.make(), specs={"clerk": make_spec()}) as rt:
        assert rt.resumed == ("f1-again",)
        result = await rt.resumed_result("f1-again")
        assert result.final_text == "done f1"
        assert [c.name for c in result.tool_calls] == ["note"]
        # Forked with the runtime's reader: started at once, from the tool's result.
        reader = rt.store_reader()
        turns = await reader.turns("f1")
        tool_turn = next(t.index for t in turns if t.message.role == "tool")
        new = await reader.fork("f1", turn=tool_turn)
        assert (await rt.resumed_result(new)).final_text == "done f1"
        assert rt.usage().requests == 1 + 2 + 1  # (f1-again: 2 calls; the second fork: 1)
    async with StoreReader(kind.make()) as reader:
        assert await reader.turns("f1") == before
        assert {p.phase_id for p in await reader.phases(status="finished")} == {
            "f1",
            "f1-again",
            new,
        }


async def test_a_fork_needs_the_lock_when_a_runtime_holds_the_store(kind: Kind) -> None:
    if kind.kind == "postgres":
        pytest.skip("(the PostgreSQL lock is tested in test_postgres.py)")
    await life(kind, ["f1"])
    async with (
        agentrio.open_runtime(store=kind.make(), specs={"clerk": make_spec()}),
        StoreReader(kind.make()) as reader,
    ):
        with pytest.raises(StoreLocked):
            await reader.fork("f1", turn=1)


async def test_retention_drops_the_oldest_finished_phases(kind: Kind) -> None:
    await life(kind, ["f1", "f2", "f3", "f4"], retention=Retention(max_count=2))
    async with StoreReader(kind.make()) as reader:
        assert [p.phase_id for p in await reader.phases()] == ["f3", "f4"]
    await life(kind, ["f5"], retention=Retention(max_age=0))
    async with StoreReader(kind.make()) as reader:
        assert await reader.phases() == []


async def test_delete_phases_leaves_none_of_their_bytes(kind: Kind) -> None:
    ids = [f"MARK{i:03d}-{kind.kind}-{os.getpid()}" for i in range(3)]
    await life(kind, ids[:2])  # (life 2 archives them)
    await life(kind, hanging=[ids[2]])  # (unfinished: live)
    everything = kind.files_bytes()
    for pid in ids:  # (the check can see them: their bytes are in the files)
        assert pid.encode() in everything
    store = kind.make()
    await store.delete_phases([ids[0], ids[2]])
    await store.aclose()
    everything = kind.files_bytes()
    assert ids[0].encode() not in everything
    assert ids[2].encode() not in everything
    assert ids[1].encode() in everything
    async with StoreReader(kind.make()) as reader:
        assert [p.phase_id for p in await reader.phases()] == [ids[1]]
    HANG.clear()
    async with agentrio.open_runtime(store=kind.make(), specs={"clerk": make_spec()}) as rt:
        assert rt.resumed == ()


async def test_a_phase_of_another_spec_version_is_refused_or_migrated(kind: Kind) -> None:
    await life(kind, hanging=["u1"], make=make_spec("1"))
    HANG.clear()
    with pytest.raises(SpecVersionMismatch) as info:
        async with agentrio.open_runtime(store=kind.make(), specs={"clerk": make_spec("2")}):
            pass
    assert (info.value.spec, info.value.phase_id) == ("clerk", "u1")
    assert (info.value.recorded, info.value.current) == ("1", "2")

    def migrate(version: str | None, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        SEEN.append((version, len(messages)))
        return [*messages]

    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make_spec("2", migrate)}
    ) as rt:
        assert (await rt.resumed_result("u1")).final_text == "done u1"
    assert SEEN == [("1", 0)]  # (cut short in its first model call: no turn recorded)
    async with StoreReader(kind.make()) as reader:
        (phase,) = await reader.phases()
        assert phase.version == "1"  # (as it began)


async def one_agent_life(kind: Kind, make: Callable[[], AgentSpec[str]]) -> None:
    """One agent: phase "f1" run to its end, then "u1" cut short (its context holds f1)."""
    HANG.add("u1")
    async with agentrio.open_runtime(store=kind.make(), specs={"clerk": make}) as rt:
        agent = await rt.spawn_agent(make(), name="a-one")
        assert (await agent.run("f1", phase_id="f1")).final_text == "done f1"
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                with contextlib.suppress(agentrio.ActorStopped):
                    await agent.run("u1", phase_id="u1")

            nursery.start_soon(run)
            await trio.sleep(0.2)  # (its PhaseBegun written)
            rt.cancel()
    HANG.clear()


async def test_a_migrate_is_called_with_the_context_s_version_and_only_for_another(
    kind: Kind, request: pytest.FixtureRequest
) -> None:
    def migrate(version: str | None, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        SEEN.append((version, len(messages)))
        return [*messages]

    await one_agent_life(kind, make_spec("2", migrate))
    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make_spec("2", migrate)}
    ) as rt:
        assert (await rt.resumed_result("u1")).final_text == "done u1"
    assert SEEN == []  # (its context and its phase are of version "2" already)
    (kind.tmp / "second").mkdir()
    kind2 = Kind(kind.kind, kind.tmp / "second", request)
    await one_agent_life(kind2, make_spec("2", migrate))
    async with agentrio.open_runtime(
        store=kind2.make(), specs={"clerk": make_spec("3", migrate)}
    ) as rt:
        assert (await rt.resumed_result("u1")).final_text == "done u1"
    assert SEEN and {version for version, _ in SEEN} == {"2"}


async def test_a_crash_in_the_middle_of_a_compaction_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    kind = Kind("directory", tmp_path, request)
    await life(kind, ["f1", "f2"], ["u1"])

    def crash(self: DirectoryStore, live: list[bytes]) -> None:
        raise OSError(5, "the process died here")

    with monkeypatch.context() as patched:
        patched.setattr(DirectoryStore, "_rebase", crash)
        with pytest.raises(agentrio.errors.StoreError, match="compact"):
            async with agentrio.open_runtime(
                store=kind.make(), specs={"clerk": make_spec()}, retention=Retention()
            ):
                pass
    # The archive was written, the live area not replaced: both hold f1 and f2.
    HANG.clear()
    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make_spec()}, retention=Retention()
    ) as rt:
        assert rt.resumed == ("u1",)
        await rt.resumed_result("u1")
    async with StoreReader(kind.make()) as reader:
        assert [p.phase_id for p in await reader.phases()] == ["f1", "f2", "u1"]
    segments = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.suffix == ".ckpt")
    assert len(segments) == 1  # (the base segment its close wrote: the rest removed)


async def test_segments_a_base_segment_supersedes_are_left_out_and_removed(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    kind = Kind("directory", tmp_path, request)
    await life(kind, ["f1"], ["u1"])
    folder = tmp_path / "ckpt"
    old = (folder / "000001.ckpt").read_bytes()
    HANG.clear()
    async with agentrio.open_runtime(
        store=kind.make(), specs={"clerk": make_spec()}, retention=Retention()
    ) as rt:
        await rt.resumed_result("u1")
    # What a crash between the base segment's link and the removals would leave:
    (folder / "000001.ckpt").write_bytes(old)
    store = DirectoryStore(folder)
    loaded = await store.load()
    assert not (folder / "000001.ckpt").exists()
    phases = [r.phase for r in decode_records(loaded.entries)]
    assert "f1" not in phases
    await store.aclose()


async def test_an_old_sqlite_database_is_migrated(tmp_path: Path) -> None:
    import sqlite3
    import zlib

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE records (id INTEGER PRIMARY KEY, data BLOB NOT NULL, crc INTEGER NOT NULL)"
    )
    db.execute("PRAGMA application_id = 1634890866")
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO records (data, crc) VALUES (?, ?)", (b"x", zlib.crc32(b"x")))
    db.commit()
    db.close()
    store = SQLiteStore(path)
    assert [e.data for e in (await store.read_live()).entries] == [b"x"]
    assert await store.read_index() == []
    assert [e.data for e in (await store.load()).entries] == [b"x"]
    await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (2,)
    db.close()


async def test_the_memory_store_archives_too() -> None:
    store = MemoryStore()
    kind_store: Any = store

    async def one(pid: str) -> None:
        async with agentrio.open_runtime(
            store=kind_store, specs={"clerk": make_spec()}, retention=Retention()
        ) as rt:
            agent = await rt.spawn_agent(make_spec()(), name=f"a-{pid}")
            await agent.run(pid, phase_id=pid)

    await one("f1")
    await one("f2")
    assert [pid for pid, _ in await store.read_index()] == ["f1", "f2"]
    async with StoreReader(store) as reader:
        assert [p.phase_id for p in await reader.phases()] == ["f1", "f2"]
        await reader.delete_phases(["f1"])
        assert [p.phase_id for p in await reader.phases()] == ["f2"]
        with pytest.raises(InvalidArgument):
            await reader.delete_phases("f2")


def test_record_phase_reads_hostile_bytes_as_none() -> None:
    assert record_phase(msgspec.msgpack.encode(["PhaseDone", "p1", 3])) == "p1"
    assert record_phase(msgspec.msgpack.encode(["T", "x" * 70000])) == "x" * 70000
    for bad in [b"", b"\x91\xa1a", b"\x92\xa1a\x01", b"\x92\xa1a\xa5ab", b"\xc0", b"\x92\xdb\xff"]:
        assert record_phase(bad) is None


async def test_the_budget_totals_survive_a_compaction(tmp_path: Path) -> None:
    # An agent with an unfinished phase keeps its finished ones live (older totals);
    # the newest totals, of phases archived, must still be the ones read back.
    store = tmp_path / "ckpt"
    make = make_spec()
    HANG.add("a2")
    async with agentrio.open_runtime(store=store, specs={"clerk": make}) as rt:
        a = await rt.spawn_agent(make(), name="a")
        await a.run("a1", phase_id="a1")
        b = await rt.spawn_agent(make(), name="b")
        await b.run("b1", phase_id="b1")
        async with trio.open_nursery() as nursery:

            async def cut_short() -> None:
                with contextlib.suppress(agentrio.ActorStopped):
                    await a.run("a2", phase_id="a2")

            nursery.start_soon(cut_short)
            await trio.sleep(0.1)
            rt.cancel()
    for _ in range(2):  # (the second opening reads what the first compacted)
        async with agentrio.open_runtime(
            store=store, specs={"clerk": make}, retention=Retention()
        ) as rt:
            assert rt.resumed == ("a2",)
            assert rt.usage().requests == 4
            rt.cancel()
    async with StoreReader(store) as reader:
        assert {p.phase_id for p in await reader.phases(status="finished")} == {"a1", "b1"}


async def test_exited_durable_agents_are_not_kept(tmp_path: Path) -> None:
    import gc
    import weakref

    make = make_spec()
    async with agentrio.open_runtime(store=tmp_path / "ckpt", specs={"clerk": make}) as rt:
        spec = make()
        kept = weakref.ref(spec)  # (held by the agent's state while it is kept)
        first = await rt.spawn_agent(spec, name="first")
        await first.stop()
        del first, spec
        for i in range(1100):  # (past the first look for exited agents, at 1024)
            agent = await rt.spawn_agent(make(), name=f"a{i}")
            await agent.stop()
        del agent
        gc.collect()
        assert kept() is None
