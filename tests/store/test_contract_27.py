"""#27 as a user reads the docs (sessions, deferred decisions, the store reader):
each promise tried through the public API, and hostile inputs on the new paths."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

import agentrio
from agentrio import PermissionPolicy, ToolCallRequest, ask_rule
from agentrio.errors import InvalidArgument, StoreCorrupt, StoreError, UnknownName
from agentrio.memory import Memory
from agentrio.store import DirectoryStore, SQLiteStore
from agentrio.testing import FunctionModel, Reply
from agentrio.types import StoreReader

KINDS = pytest.mark.parametrize("kind", ["directory", "sqlite"])


def _store(kind: str, root: Path) -> DirectoryStore | SQLiteStore:
    if kind == "directory":
        return DirectoryStore(root / "ckpt")
    return SQLiteStore(root / "ckpt.db")


def _bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _main_files(root: Path) -> dict[str, bytes]:
    """The store's files, without SQLite's shared-memory index and empty log (a
    reader opening the database makes them)."""
    return {
        p.name: p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(("-shm", "-wal"))
    }


def _echo(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    said = [m.content for m in messages if m.role == "user"]
    return Reply(text="heard: " + " | ".join(said))


def _chat() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec("chat", FunctionModel(_echo))


# -- sessions ------------------------------------------------------------------------


@agentrio.tool
async def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"the vault code of {topic} is SECRET-{topic}"


def _looker(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    if messages[-1].role == "user":
        topic = messages[-1].content.split()[-1]
        return Reply(tool_calls=(ToolCallRequest("lookup", {"topic": topic}),))
    return Reply(text="ok")


def _remembering() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec("rem", FunctionModel(_looker), tools=[lookup], memory=Memory())


@KINDS
def test_delete_session_leaves_no_byte_of_its_memory(kind: str, tmp_path: Path) -> None:
    """A session agent with its own memory (#26) keeps MemoryKept records in the
    store: delete_session removes them too (every byte of the session gone)."""

    async def main() -> None:
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"rem": _remembering}
        ) as rt:
            chat = await rt.session("ann", "rem")
            await chat.run("code of ann")
            assert [i.text for i in await chat.memory.items()]
            await (await rt.session("bob", "rem")).run("code of bob")
        assert b"SECRET-ann" in _bytes(tmp_path)
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"rem": _remembering}
        ) as rt:
            assert await rt.delete_session("ann") == 1
            assert b"SECRET-ann" not in _bytes(tmp_path)
            again = await rt.session("ann", "rem")  # (not replayed from the opening)
            assert await again.memory.items() == []
            await rt.delete_session("ann")
        assert b"SECRET-ann" not in _bytes(tmp_path)
        assert b"SECRET-bob" in _bytes(tmp_path)
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"rem": _remembering}
        ) as rt:
            assert sorted(await rt.sessions()) == ["bob"]
            again = await rt.session("ann", "rem")
            assert await again.memory.items() == []

    trio.run(main)


@KINDS
def test_delete_session_of_a_live_session_with_memory(kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"rem": _remembering}
        ) as rt:
            chat = await rt.session("ann", "rem")
            await chat.run("code of ann")
            assert await rt.delete_session("ann") == 1
            assert b"SECRET-ann" not in _bytes(tmp_path)
        assert b"SECRET-ann" not in _bytes(tmp_path)

    trio.run(main)


@pytest.mark.parametrize(
    "bad", ["", "a/b", "x" * 201, "nul\x00", "line\nbreak", "\udcff", 42, None, b"ann"]
)
def test_a_hostile_session_id_is_refused(bad: object, tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            with pytest.raises(InvalidArgument) as info:
                await rt.session(bad, "chat")  # type: ignore[arg-type]
            assert len(str(info.value)) < 500
            with pytest.raises(InvalidArgument):
                await rt.delete_session(bad)  # type: ignore[arg-type]
            assert await rt.sessions() == {}
        assert not any(p.is_file() and p.stat().st_size > 4096 for p in tmp_path.rglob("*"))

    trio.run(main)


def test_session_bounds_and_errors(tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime() as rt:
            with pytest.raises(InvalidArgument):
                await rt.session("ann", _chat())
            assert await rt.sessions() == {}
        other = lambda: agentrio.AgentSpec("other", FunctionModel(_echo))  # noqa: E731
        async with agentrio.open_runtime(
            store=tmp_path / "s", specs={"chat": _chat, "other": other}
        ) as rt:
            ok = await rt.session("x" * 200, "chat")  # (200 characters: the bound)
            assert ok.path == "sessions/" + "x" * 200
            chat = await rt.session("ann", "chat")
            assert (await chat.run("hi")).final_text == "heard: hi"
            assert await rt.session("ann", "chat") is chat or (
                (await rt.session("ann", "chat")).path == chat.path
            )
            with pytest.raises(InvalidArgument):
                await rt.session("ann", "other")
            with pytest.raises(InvalidArgument):
                await rt.session("bob", "nobody-registered-this")
            with pytest.raises(UnknownName):
                await rt.delete_session("nobody")
            for bad in ({"max_age": -1}, {"max_count": -1}, {"max_count": True}, {"max_age": "1"}):
                with pytest.raises(InvalidArgument):
                    await rt.prune_sessions(**bad)  # type: ignore[arg-type]
            assert await rt.prune_sessions() == ()
            assert set(await rt.sessions()) == {"ann", "x" * 200}

    trio.run(main)


def test_session_by_spec_object(tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            chat = await rt.session("ann", _chat())
            await chat.run("one")
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            chat = await rt.session("ann", _chat())
            assert (await chat.run("two")).final_text == "heard: one | two"

    trio.run(main)


# -- deferred decisions --------------------------------------------------------------


@agentrio.tool
async def pay(invoice: str, amount: int) -> str:
    """Pay an invoice."""
    return f"paid {invoice} ({amount} EUR)"


async def _defer(request: object) -> agentrio.Defer:
    return agentrio.Defer("the treasurer decides")


def _payer(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return Reply(tool_calls=(ToolCallRequest("pay", {"invoice": "A-7", "amount": 4000}),))
    return Reply(text=f"Done: {results[-1].content}")


def _clerk() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec(
        "clerk",
        FunctionModel(_payer),
        tools=[pay],
        permissions=PermissionPolicy(rules=[ask_rule("pay")]),
        approver=_defer,
    )


@KINDS
def test_a_deferred_approval_with_a_huge_message(kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"clerk": _clerk}
        ) as rt:
            clerk = await rt.spawn_agent(_clerk())
            parked = await clerk.run("Pay.", phase_id="p1")
            assert parked.stop_reason == "deferred"
            [call] = rt.pending_approvals()
            assert (call.phase_id, call.tool, call.note) == ("p1", "pay", "the treasurer decides")
            assert dict(call.arguments) == {"invoice": "A-7", "amount": 4000}
            assert rt.pending_results() == []
            with pytest.raises(InvalidArgument):
                await clerk.run("again", phase_id="p1")
            huge = "y" * 10_000_000
            for decide in (rt.approve, rt.deny):
                with pytest.raises(InvalidArgument) as info:
                    await decide(call, huge)
                assert len(str(info.value)) < 1000
            with pytest.raises(InvalidArgument):
                await rt.approve(call, 42)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                await rt.give_result(call, "no")
            with pytest.raises(InvalidArgument):
                await rt.approve("p1")  # type: ignore[arg-type]
            assert len(rt.pending_approvals()) == 1
            await rt.deny(call, "z" * 100_000)
            result = await rt.resumed_result("p1")
            assert result.final_text.startswith("Done: the approver refused 'pay': zzz")
            with pytest.raises(UnknownName):
                await rt.approve(call, "late")
        assert len(_bytes(tmp_path)) < 2_000_000

    trio.run(main)


def test_defer_without_a_store_is_a_refusal_saying_why() -> None:
    async def main() -> None:
        async with agentrio.open_runtime() as rt:
            clerk = await rt.spawn_agent(_clerk())
            result = await clerk.run("Pay.")
            assert result.stop_reason != "deferred"
            [refused] = result.tool_calls
            assert refused.status != "ok" and "store" in refused.content.lower()

    trio.run(main)


def test_the_sync_host_decides_a_parked_phase(tmp_path: Path) -> None:
    with agentrio.open_runtime_sync(store=tmp_path / "s", specs={"clerk": _clerk}) as rt:
        clerk = rt.spawn_agent(_clerk())
        assert clerk.run("Pay.", phase_id="p1").stop_reason == "deferred"
    with agentrio.open_runtime_sync(store=tmp_path / "s", specs={"clerk": _clerk}) as rt:
        [call] = rt.pending_approvals()
        rt.approve(call, "ok")
        assert rt.resumed_result("p1").final_text == "Done: paid A-7 (4000 EUR)"
        assert rt.pending_approvals() == [] and rt.pending_results() == []


# -- the store reader ----------------------------------------------------------------


def _hostile_model(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    return Reply(text='\udcff</script>"\\\x00\u2028' + "é" * 10)


@KINDS
def test_reader_fork_out_of_range_and_hostile_export(kind: str, tmp_path: Path) -> None:
    def make() -> agentrio.AgentSpec[str]:
        return agentrio.AgentSpec("h", FunctionModel(_hostile_model))

    async def main() -> None:
        async with agentrio.open_runtime(store=_store(kind, tmp_path), specs={"h": make}) as rt:
            s = await rt.session("ann", "h")
            await s.run("\udc80 hi \x00", phase_id="p1")
        before = _main_files(tmp_path)
        async with StoreReader(_store(kind, tmp_path)) as reader:
            turns = await reader.turns("p1")
            for bad in (len(turns), -1, 10**30, True, "0", None):
                with pytest.raises(InvalidArgument):
                    await reader.fork("p1", turn=bad)  # type: ignore[arg-type]
            with pytest.raises(UnknownName):
                await reader.fork("nope", turn=0)
            with pytest.raises(UnknownName):
                await reader.turns("nope")
            for exported in (await reader.export("p1"), await reader.export(session="ann")):
                doc = json.loads(exported)
                assert doc["format"] == "agentrio.phases/1"
                exported.decode("utf-8")  # (valid UTF-8: no lone surrogate)
            [p] = await reader.phases(session="ann")
            assert p.phase_id == "p1" and p.status == "finished"
            assert await reader.phases(status="unfinished") == []
            assert await reader.phases(agent="nobody") == []
        assert _main_files(tmp_path) == before  # (nothing half-written by the refusals)

    trio.run(main)


def test_a_store_of_a_later_format_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            await (await rt.session("ann", "chat")).run("hi")
        [seg] = [p for p in (tmp_path / "s").rglob("*") if p.is_file() and p.suffix != ".lock"][:1]
        segs = sorted(p for p in (tmp_path / "s").iterdir() if p.is_file())
        data = bytearray(segs[0].read_bytes()) if segs else bytearray(seg.read_bytes())
        target = segs[0] if segs else seg
        from agentrio.store import FORMAT_VERSION, MAGIC

        assert bytes(data[: len(MAGIC)]) == MAGIC
        data[len(MAGIC)] = FORMAT_VERSION + 7
        target.write_bytes(bytes(data))
        with pytest.raises(StoreError) as info:
            async with StoreReader(DirectoryStore(tmp_path / "s")) as reader:
                await reader.phases()
        assert "later" in str(info.value) or "version" in str(info.value)
        with pytest.raises(StoreError):
            async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}):
                pass

    trio.run(main)


def test_a_truncated_segment_is_a_typed_error_or_a_torn_tail(tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            for text in ("one", "two"):
                await (await rt.session("ann", "chat")).run(text)
        segs = sorted(p for p in (tmp_path / "s").iterdir() if p.suffix == ".ckpt")
        assert segs  # (the test reaches the segments it cuts)
        for seg in segs:
            seg.write_bytes(seg.read_bytes()[: len(seg.read_bytes()) // 2])
        try:
            async with StoreReader(DirectoryStore(tmp_path / "s")) as reader:
                await reader.phases()
                await reader.export(session="ann")
        except StoreCorrupt as exc:
            assert "SECRET" not in str(exc)

    trio.run(main)


def test_delete_session_forgets_its_memory_on_postgres(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from agentrio.store import PostgresStore

    from . import pg

    request.getfixturevalue("postgres_dsn")
    assert pg.DSN is not None
    dsn = pg.DSN

    def store() -> PostgresStore:
        return PostgresStore(dsn, name=f"c27-{tmp_path.name}"[:60])

    async def main() -> None:
        async with agentrio.open_runtime(store=store(), specs={"rem": _remembering}) as rt:
            await (await rt.session("ann", "rem")).run("code of ann")
        async with agentrio.open_runtime(store=store(), specs={"rem": _remembering}) as rt:
            assert await rt.delete_session("ann") == 1
        async with agentrio.open_runtime(store=store(), specs={"rem": _remembering}) as rt:
            assert await rt.sessions() == {}
            assert await (await rt.session("ann", "rem")).memory.items() == []

    trio.run(main)


def test_reader_refuses_hostile_arguments_briefly(tmp_path: Path) -> None:
    """Every refusal is typed, names the input in a bounded message, and writes
    nothing; the filters of phases() are checked (a typo matched nothing before)."""

    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            await (await rt.session("ann", "chat")).run("hi", phase_id="p1")
        before = _main_files(tmp_path)
        huge = "q" * 1_000_000
        async with StoreReader(tmp_path / "s") as reader:
            calls = [
                (UnknownName, lambda: reader.turns(huge)),
                (UnknownName, lambda: reader.export(huge)),
                (UnknownName, lambda: reader.export(session=huge)),
                (InvalidArgument, lambda: reader.export()),
                (InvalidArgument, lambda: reader.export("p1", session="ann")),
                (InvalidArgument, lambda: reader.fork("p1", turn=huge)),
                (InvalidArgument, lambda: reader.fork("p1", turn=0, new_phase_id=huge)),
                (InvalidArgument, lambda: reader.fork("p1", turn=0, new_phase_id="x" * 201)),
                (InvalidArgument, lambda: reader.fork("p1", turn=0, new_phase_id="a\udcff")),
                (InvalidArgument, lambda: reader.fork("p1", turn=0, new_phase_id="")),
                (InvalidArgument, lambda: reader.fork("p1", turn=0, new_phase_id="p1")),
                (InvalidArgument, lambda: reader.fork("p1", turn=0, agent=huge)),
                (InvalidArgument, lambda: reader.phases(status="finshed")),  # type: ignore[arg-type]
                (InvalidArgument, lambda: reader.phases(since="yesterday")),  # type: ignore[arg-type]
                (InvalidArgument, lambda: reader.phases(agent=42)),  # type: ignore[arg-type]
                (InvalidArgument, lambda: reader.delete_phases("p1")),
            ]
            for error, call in calls:
                with pytest.raises(error) as info:
                    await call()
                assert len(str(info.value)) < 400, str(info.value)[:200]
            assert [p.phase_id for p in await reader.phases()] == ["p1"]
        assert _main_files(tmp_path) == before
        with pytest.raises(InvalidArgument):
            StoreReader(42)  # type: ignore[arg-type]

    trio.run(main)


def test_a_reader_of_its_own_cannot_fork_on_an_open_store(tmp_path: Path) -> None:
    from agentrio.errors import StoreLocked

    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            await (await rt.session("ann", "chat")).run("hi", phase_id="p1")
            mine = rt.store_reader()  # (it sees what the runtime recorded so far)
            assert [p.phase_id for p in await mine.phases()] == ["p1"]
            async with StoreReader(tmp_path / "s") as reader:
                with pytest.raises(StoreLocked):
                    await reader.fork("p1", turn=0)
            forked = await rt.store_reader().fork("p1", turn=0, new_phase_id="again")
            assert forked == "again"
            assert (await rt.resumed_result("again")).final_text == "heard: hi"
            assert (await rt.store_reader().turns("p1"))[-1].message.content == "heard: hi"

    trio.run(main)


# -- spec versions -------------------------------------------------------------------

_CRASH = [True]


async def _stalling(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    if _CRASH[0]:
        await trio.sleep_forever()
    return Reply(text=f"Done, from {len(messages)} messages.")


def _versioned(version: str, migrate: object = None) -> object:
    return lambda: agentrio.AgentSpec(
        "clerk",
        FunctionModel(_stalling),
        version=version,
        migrate=migrate,  # type: ignore[arg-type]
    )


async def _crash_under_v1(folder: Path) -> None:
    _CRASH[0] = True
    async with agentrio.open_runtime(store=folder, specs={"clerk": _versioned("1")}) as rt:
        clerk = await rt.spawn_agent(_versioned("1")())  # type: ignore[operator]

        async def report() -> None:
            with pytest.raises(agentrio.ActorStopped):
                await clerk.run("Report.", phase_id="r1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(report)
            await trio.sleep(0.1)
            rt.cancel()
    _CRASH[0] = False


def test_a_migrate_that_returns_no_messages_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        await _crash_under_v1(tmp_path / "s")
        garbage = _versioned("2", lambda version, messages: 42)
        with pytest.raises(InvalidArgument, match="migrate function of spec 'clerk'"):
            async with agentrio.open_runtime(store=tmp_path / "s", specs={"clerk": garbage}):
                pass
        with pytest.raises(agentrio.errors.SpecVersionMismatch) as info:
            async with agentrio.open_runtime(
                store=tmp_path / "s", specs={"clerk": _versioned("2")}
            ):
                pass
        assert (info.value.recorded, info.value.current) == ("1", "2")
        good = _versioned("2", lambda version, messages: list(messages))
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"clerk": good}) as rt:
            assert rt.resumed == ("r1",)
            assert (await rt.resumed_result("r1")).final_text.startswith("Done")

    trio.run(main)


@pytest.mark.parametrize("bad", [42, "", "v" * 201, "v\udcff"])
def test_a_spec_version_is_a_short_str(bad: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        agentrio.AgentSpec("clerk", FunctionModel(_stalling), version=bad)  # type: ignore[arg-type]
    assert len(str(info.value)) < 300
    assert agentrio.AgentSpec("c", FunctionModel(_stalling), version="v" * 200).version


# -- an archive damaged, or written by a later agentrio ------------------------------


async def _archived_session(root: Path) -> None:
    from agentrio.store import Retention

    for text in ("one", "two"):
        async with agentrio.open_runtime(
            store=root, specs={"chat": _chat}, retention=Retention()
        ) as rt:
            await (await rt.session("ann", "chat")).run(text)


async def _read_everything(root: Path) -> None:
    async with StoreReader(root) as reader:
        await reader.phases()
        await reader.export(session="ann")


@pytest.mark.parametrize("damage", ["later-file", "later-index", "missing-file", "short"])
def test_a_damaged_archive_is_a_typed_error_naming_it(damage: str, tmp_path: Path) -> None:
    async def main() -> None:
        root = tmp_path / "s"
        await _archived_session(root)
        await _read_everything(root)
        files = sorted((root / "archive").glob("*.ckpt"))
        assert files
        target = root / "archive" / "index" if damage == "later-index" else files[0]
        if damage == "missing-file":
            target.unlink()
        elif damage == "short":
            target.write_bytes(target.read_bytes()[:20])
        else:
            data = bytearray(target.read_bytes())
            data[8] = 0x7F  # (the format version after the magic)
            target.write_bytes(bytes(data))
        with pytest.raises(StoreError) as info:
            await _read_everything(root)
        assert str(target) in str(info.value)
        if damage.startswith("later"):
            assert "later agentrio" in str(info.value)
        with pytest.raises(StoreError):
            async with agentrio.open_runtime(store=root, specs={"chat": _chat}) as rt:
                await (await rt.session("ann", "chat")).run("three")

    trio.run(main)


def test_a_sqlite_store_of_a_later_schema_is_refused(tmp_path: Path) -> None:
    import sqlite3

    async def main() -> None:
        async with agentrio.open_runtime(
            store=SQLiteStore(tmp_path / "c.db"), specs={"chat": _chat}
        ) as rt:
            await (await rt.session("ann", "chat")).run("one")
        with sqlite3.connect(tmp_path / "c.db") as db:
            db.execute("PRAGMA user_version = 99")
        db.close()
        with pytest.raises(StoreError, match="later agentrio"):
            async with StoreReader(SQLiteStore(tmp_path / "c.db")) as reader:
                await reader.phases()
        with pytest.raises(StoreError, match="later agentrio"):
            async with agentrio.open_runtime(store=SQLiteStore(tmp_path / "c.db")):
                pass

    trio.run(main)


def test_a_reader_of_a_sqlite_store_whose_path_has_uri_characters(tmp_path: Path) -> None:
    path = tmp_path / "odd ?name#1 %20.db"

    async def main() -> None:
        async with agentrio.open_runtime(store=SQLiteStore(path), specs={"chat": _chat}) as rt:
            await (await rt.session("ann", "chat")).run("one")
        async with StoreReader(SQLiteStore(path)) as reader:
            assert [p.session for p in await reader.phases()] == ["ann"]

    trio.run(main)


def test_session_ids_as_documented(tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": _chat}) as rt:
            for sid in ("x.context", "a.context.b", "\u200b", "tab\t"):
                with pytest.raises(InvalidArgument):
                    await rt.session(sid, "chat")
            for sid in ("..", " ", "é", "user 42: ann@example.com"):
                agent = await rt.session(sid, "chat")
                assert agent.path == f"sessions/{sid}"
                assert (await agent.run("hi")).final_text == "heard: hi"
            assert sorted(await rt.sessions()) == sorted(
                ["..", " ", "é", "user 42: ann@example.com"]
            )

    trio.run(main)


@KINDS
def test_deleting_a_parked_session_drops_what_it_waits_for(kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"clerk": _clerk}
        ) as rt:
            clerk = await rt.session("pay", "clerk")
            parked = await clerk.run("Pay SECRET-PAY now.", phase_id="pp")
            assert parked.stop_reason == "deferred"
            [call] = rt.pending_approvals()
            assert await rt.delete_session("pay") == 1
            assert rt.pending_approvals() == []
            with pytest.raises(UnknownName):
                await rt.approve(call, "too late")
        assert b"SECRET-PAY" not in _bytes(tmp_path)
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"clerk": _clerk}
        ) as rt:
            assert rt.pending_approvals() == [] and await rt.sessions() == {}

    trio.run(main)


@KINDS
def test_a_fork_leaves_the_original_untouched(kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=_store(kind, tmp_path), specs={"chat": _chat}) as rt:
            chat = await rt.session("ann", "chat")
            await chat.run("one", phase_id="p1")
            await chat.run("two", phase_id="p2")
        async with StoreReader(_store(kind, tmp_path)) as reader:
            before = await reader.export("p2")
            last = len(await reader.turns("p2")) - 1
            with pytest.raises(InvalidArgument):
                await reader.fork("p2", turn=last + 1)
            forked = await reader.fork("p2", turn=0, new_phase_id="p2-again")
            assert await reader.export("p2") == before
            [summary] = await reader.phases(status="unfinished")
            assert summary.phase_id == "p2-again" and summary.agent != "sessions/ann"
        async with agentrio.open_runtime(store=_store(kind, tmp_path), specs={"chat": _chat}) as rt:
            assert rt.resumed == (forked,)
            assert (await rt.resumed_result(forked)).final_text == "heard: one | two"
            assert (await (await rt.session("ann", "chat")).run("three")).final_text == (
                "heard: one | two | three"
            )
        async with StoreReader(_store(kind, tmp_path)) as reader:
            assert await reader.export("p2") == before
            # (the fork is listed with the session it came from, on an agent of its own)
            assert [p.session for p in await reader.phases(session="ann")] == ["ann"] * 4

    trio.run(main)


@KINDS
def test_a_fork_of_an_archived_session_stays_out_of_its_conversation(
    kind: str, tmp_path: Path
) -> None:
    """Once archived, a phase forked from a session's was read back as one of the
    session's own: its turns came into the conversation twice."""
    from agentrio.store import Retention

    keep = Retention()

    async def main() -> None:
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"chat": _chat}, retention=keep
        ) as rt:
            chat = await rt.session("ann", "chat")
            await chat.run("one", phase_id="p1")
            await chat.run("two SECRET-FORK", phase_id="p2")
        async with StoreReader(_store(kind, tmp_path)) as reader:
            forked = await reader.fork("p2", turn=0, new_phase_id="p2-again")
        async with agentrio.open_runtime(
            store=_store(kind, tmp_path), specs={"chat": _chat}, retention=keep
        ) as rt:
            assert (await rt.resumed_result(forked)).final_text == "heard: one | two SECRET-FORK"
        for archived in (True, False):
            async with agentrio.open_runtime(
                store=_store(kind, tmp_path), specs={"chat": _chat}, retention=keep
            ) as rt:
                summaries = await rt.store_reader().phases()
                assert {p.archived for p in summaries} == {True}
                chat = await rt.session("ann", "chat")
                said = (await chat.run("three")).final_text
                assert said == "heard: one | two SECRET-FORK | three" + " | three" * (not archived)
                if not archived:
                    assert await rt.delete_session("ann") == 5  # (the fork's too)
            if not archived:
                assert b"SECRET-FORK" not in _bytes(tmp_path)

    trio.run(main)


@KINDS
def test_delete_session_removes_a_live_fork_of_it(kind: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=_store(kind, tmp_path), specs={"chat": _chat}) as rt:
            await (await rt.session("ann", "chat")).run("SECRET-LIVE", phase_id="p1")
        async with StoreReader(_store(kind, tmp_path)) as reader:
            await reader.fork("p1", turn=0, new_phase_id="p1-fork")
        async with agentrio.open_runtime(store=_store(kind, tmp_path), specs={"chat": _chat}) as rt:
            await rt.resumed_result("p1-fork")
            assert await rt.delete_session("ann") == 2
        assert b"SECRET-LIVE" not in _bytes(tmp_path)

    trio.run(main)


@agentrio.tool
async def build(branch: str) -> agentrio.Defer:
    """Start a build."""
    return agentrio.Defer(f"build of {branch}")


def _building(messages: Sequence[agentrio.ChatMessage], tools: object) -> Reply:
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return Reply(tool_calls=(ToolCallRequest("build", {"branch": "main"}),))
    return Reply(text=f"build says: {results[-1].content}")


def _builder() -> agentrio.AgentSpec[str]:
    return agentrio.AgentSpec("builder", FunctionModel(_building), tools=[build])


def test_a_result_given_by_ids_in_a_later_runtime(tmp_path: Path) -> None:
    """PendingCall's docs: pass it, "or the same phase_id and call_id, in another
    process"; give_result's bounds and status."""
    from agentrio.types import PendingCall

    async def first() -> tuple[str, str]:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"builder": _builder}) as rt:
            agent = await rt.spawn_agent(_builder())
            assert (await agent.run("Build.", phase_id="b1")).stop_reason == "deferred"
            [job] = rt.pending_results()
            assert rt.pending_approvals() == []
            return job.phase_id, job.call_id

    async def later(phase_id: str, call_id: str) -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"builder": _builder}) as rt:
            [job] = rt.pending_results()
            assert (job.phase_id, job.call_id, job.note) == (phase_id, call_id, "build of main")
            mine = PendingCall(
                phase_id=phase_id,
                call_id=call_id,
                agent=job.agent,
                tool="build",
                arguments={},
                kind="result",
            )
            with pytest.raises(InvalidArgument):
                await rt.give_result(mine, "x" * 10_000_000)
            with pytest.raises(InvalidArgument):
                await rt.give_result(mine, "ok", status="maybe")
            with pytest.raises(InvalidArgument):
                await rt.approve(mine, "yes")  # (it waits for a result)
            await rt.give_result(mine, "it broke", status="failed")
            result = await rt.resumed_result(phase_id)
            assert result.final_text.startswith("build says:") and "it broke" in result.final_text
            with pytest.raises(UnknownName):
                await rt.give_result(mine, "again")

    ids = trio.run(first)
    trio.run(later, *ids)


def test_a_retention_keeps_a_session_waiting_for_a_decision(tmp_path: Path) -> None:
    async def main() -> None:
        specs = {"clerk": _clerk, "chat": _chat}
        async with agentrio.open_runtime(store=tmp_path / "s", specs=specs) as rt:
            clerk = await rt.session("pay", "clerk")
            assert (await clerk.run("Pay.", phase_id="pp")).stop_reason == "deferred"
            await (await rt.session("idle", "chat")).run("hi")
            assert await rt.prune_sessions(max_age=0) == ("idle",)
            assert len(rt.pending_approvals()) == 1
        async with agentrio.open_runtime(store=tmp_path / "s", specs=specs) as rt:
            assert await rt.prune_sessions(max_count=0) == ()
            [call] = rt.pending_approvals()
            await rt.approve(call, "ok")
            assert (await rt.resumed_result("pp")).final_text == "Done: paid A-7 (4000 EUR)"
            assert await rt.prune_sessions(max_count=0) == ("pay",)

    trio.run(main)


def test_the_events_of_a_phase_that_parks(tmp_path: Path) -> None:
    async def main() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs={"clerk": _clerk}) as rt:
            events = rt.events()
            clerk = await rt.spawn_agent(_clerk())
            await clerk.run("Pay.", phase_id="pp")
        seen = [
            e
            async for e in events
            if isinstance(e, (agentrio.events.PhaseDeferred, agentrio.events.PhaseEnded))
        ]
        deferred, ended = seen
        assert isinstance(deferred, agentrio.events.PhaseDeferred)
        assert (deferred.path, deferred.phase_id, deferred.waiting) == ("clerk", "pp", 1)
        assert isinstance(ended, agentrio.events.PhaseEnded) and ended.stop_reason == "deferred"

    trio.run(main)


@KINDS
def test_phases_by_status_agent_session_spec_and_time(kind: str, tmp_path: Path) -> None:
    import time

    async def main() -> None:
        specs = {"chat": _chat, "clerk": _clerk}
        async with agentrio.open_runtime(store=_store(kind, tmp_path), specs=specs) as rt:
            await (await rt.session("ann", "chat")).run("one", phase_id="a1")
            await trio.sleep(0.01)
            middle = time.time()
            await trio.sleep(0.01)
            await (await rt.session("bob", "chat")).run("two", phase_id="b1")
            clerk = await rt.spawn_agent(_clerk())
            await clerk.run("Pay.", phase_id="pay")
        async with StoreReader(_store(kind, tmp_path)) as reader:

            async def ids(**filters: object) -> list[str]:
                return [p.phase_id for p in await reader.phases(**filters)]  # type: ignore[arg-type]

            assert await ids() == ["a1", "b1", "pay"]
            assert await ids(status="finished") == ["a1", "b1"]
            assert await ids(status="unfinished") == ["pay"]  # (parked: not ended)
            assert await ids(status="abandoned") == []
            assert await ids(agent="sessions/bob") == ["b1"]
            assert await ids(session="ann") == ["a1"]
            assert await ids(spec="clerk") == ["pay"]
            assert await ids(since=middle) == ["b1", "pay"]
            assert await ids(until=middle) == ["a1"]
            assert await ids(spec="chat", since=middle) == ["b1"]
            [pay] = await reader.phases(spec="clerk")
            assert (pay.agent, pay.session, pay.version, pay.archived) == (
                "clerk",
                None,
                None,
                False,
            )

    trio.run(main)


def test_a_shared_memory_named_as_a_session_is_not_the_sessions(tmp_path: Path) -> None:
    """A shared memory (Memory(name=...)) named like an agent's path shared its
    records in the store with that agent's own memory: the session's memory read
    it back in its next life, and delete_session deleted it."""

    def own() -> agentrio.AgentSpec[str]:
        return agentrio.AgentSpec("ann", FunctionModel(_echo), memory=Memory())

    def shared() -> agentrio.AgentSpec[str]:
        return agentrio.AgentSpec("bob", FunctionModel(_echo), memory=Memory(name="sessions/ann"))

    specs = {"ann": own, "bob": shared}

    async def first() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs=specs) as rt:
            bob = await rt.spawn_agent(shared())
            await bob.memory.remember("the team's fact")
            ann = await rt.session("ann", "ann")
            await ann.memory.remember("ann's own fact")

    async def later() -> None:
        async with agentrio.open_runtime(store=tmp_path / "s", specs=specs) as rt:
            ann = await rt.session("ann", "ann")
            assert [i.text for i in await ann.memory.items()] == ["ann's own fact"]
            await rt.delete_session("ann")
            team = rt.memory("sessions/ann")
            assert [i.text for i in await team.items()] == ["the team's fact"]
        assert b"ann's own fact" not in _bytes(tmp_path)

    trio.run(first)
    trio.run(later)
