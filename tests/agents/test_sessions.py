"""Sessions (#27): a conversation keyed by a session id, kept in the checkpoint store,
continued by a later runtime with the same spec, its requests served one at a time;
retention and deletion."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

import agentrio
from agentrio import AgentSpec, ChatMessage, ModelReply, Usage
from agentrio.errors import InvalidArgument, UnknownName
from agentrio.providers.provider import Provider, ProviderConfig
from agentrio.store import DirectoryStore
from agentrio.testing import FakeRequest, FunctionModel, Reply, open_fake_llm

IN_FLIGHT = [0, 0]  # (now, most at once)


async def echo(messages: Sequence[ChatMessage], tools: object) -> Reply:
    IN_FLIGHT[0] += 1
    IN_FLIGHT[1] = max(IN_FLIGHT)
    await trio.sleep(0.01)  # (a model call takes a while: the others queue meanwhile)
    IN_FLIGHT[0] -= 1
    said = [m.content for m in messages if m.role == "user"]
    return Reply(text="heard: " + " | ".join(said), usage=Usage(5, 5))


def make_echo() -> AgentSpec[str]:
    return AgentSpec("echo", FunctionModel(echo), instructions="Repeat.")


def make_other() -> AgentSpec[str]:
    return AgentSpec("other", FunctionModel(echo))


SPECS = {"echo": make_echo, "other": make_other}


async def test_a_session_is_continued_by_a_later_runtime(tmp_path: Path) -> None:
    store = tmp_path / "s"
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        agent = await rt.session("user-42", "echo")
        assert agent.path == "sessions/user-42"
        assert (await agent.run("a")).final_text == "heard: a"
        assert (await agent.run("x", context_label="side")).final_text == "heard: x"
        assert await rt.session("user-42", "echo") is not None
        assert (await (await rt.session("user-42", "echo")).run("b")).final_text == "heard: a | b"
        other = await rt.session("user-7", make_echo())
        assert (await other.run("z")).final_text == "heard: z"
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        assert set(await rt.sessions()) == {"user-42", "user-7"}
        agent = await rt.session("user-42", "echo")
        assert (await agent.run("c")).final_text == "heard: a | b | c"
        side = await agent.run("y", context_label="side")
        assert side.final_text == "heard: x | y"  # (every context label is the session's)
        with pytest.raises(InvalidArgument, match="spec 'echo', not 'other'"):
            await rt.session("user-42", "other")
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        agent = await rt.session("user-42", "echo")
        assert (await agent.run("d")).final_text == "heard: a | b | c | d"


async def test_concurrent_requests_to_a_session_are_served_one_at_a_time(tmp_path: Path) -> None:
    IN_FLIGHT[:] = [0, 0]
    async with agentrio.open_runtime(store=tmp_path / "s", specs=SPECS) as rt:
        texts: list[str] = []

        async def ask(word: str) -> None:
            agent = await rt.session("shared", "echo")
            texts.append((await agent.run(word)).final_text)

        async with trio.open_nursery() as nursery:
            for word in ("one", "two", "three", "four"):
                nursery.start_soon(ask, word)
    assert IN_FLIGHT[1] == 1
    # Each request saw the ones served before it: a single conversation, in order.
    assert sorted(texts, key=len) == texts or len({t.count("|") for t in texts}) == 4
    assert {t.count("|") for t in texts} == {0, 1, 2, 3}


async def test_bad_session_ids_and_specs_are_refused(tmp_path: Path) -> None:
    async with agentrio.open_runtime(store=tmp_path / "s", specs=SPECS) as rt:
        for bad in ("", "a/b", "x" * 201, "tab\there", 42):
            with pytest.raises(InvalidArgument):
                await rt.session(bad, "echo")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="not registered"):
            await rt.session("s", "nobody")
        with pytest.raises(UnknownName):
            await rt.delete_session("never-was")
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match="no checkpoint store"):
            await rt.session("s", "echo")
        assert (await rt.sessions()) == {}


async def test_a_session_over_the_fake_server(tmp_path: Path) -> None:
    """The session's model is a real provider over HTTP (the fake server on
    127.0.0.1): the second runtime's request carries the first one's turns."""

    def reply(request: FakeRequest) -> ModelReply:
        said = [m.content for m in request.messages if m.role == "user"]
        return ModelReply(text=" | ".join(said), usage=Usage(10, 2))

    async with open_fake_llm(reply) as server:
        config = ProviderConfig(name="fake", kind="openai", base_url=server.base_url + "/v1")
        async with Provider(config) as provider:
            model = provider.model("m")

            def make() -> AgentSpec[str]:
                return AgentSpec("chat", model, instructions="Be brief.")

            for word in ("hello", "again"):
                async with agentrio.open_runtime(store=tmp_path / "s", specs={"chat": make}) as rt:
                    agent = await rt.session("web-1", "chat")
                    await agent.run(word)
        last = server.requests[-1]
    assert [m.content for m in last.messages if m.role == "user"] == ["hello", "again"]
    assert last.messages[0].role == "system"


async def test_retention_by_age_and_count(tmp_path: Path) -> None:
    store = tmp_path / "s"
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        for sid in ("old", "mid", "new"):
            await (await rt.session(sid, "echo")).run(f"I am {sid}")
            await trio.sleep(0.2)
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        seen = await rt.sessions()
        assert seen["old"] < seen["mid"] < seen["new"] <= time.time()
        with pytest.raises(InvalidArgument):
            await rt.prune_sessions(max_age=-1)
        with pytest.raises(InvalidArgument):
            await rt.prune_sessions(max_count=True)  # type: ignore[arg-type]
        assert await rt.prune_sessions(max_age=3600, max_count=2) == ("old",)
        age = time.time() - (seen["mid"] + seen["new"]) / 2  # (mid is older, new is not)
        assert await rt.prune_sessions(max_age=age) == ("mid",)
        assert set(await rt.sessions()) == {"new"}
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        assert set(await rt.sessions()) == {"new"}
        fresh = await rt.session("old", "echo")
        assert (await fresh.run("again")).final_text == "heard: again"  # (forgotten)


def _bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


async def test_a_deleted_session_is_gone_from_the_stores_bytes(tmp_path: Path) -> None:
    store = tmp_path / "s"
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        await (await rt.session("secret-session", "echo")).run("my PIN is 8513")
        await (await rt.session("kept", "echo")).run("keep me")
    async with agentrio.open_runtime(store=DirectoryStore(store), specs=SPECS) as rt:
        live = await rt.session("secret-session", "echo")
        await live.run("and my password is hunter2")
        assert await rt.delete_session("secret-session") == 2
        assert "secret-session" not in (await rt.sessions())
        with pytest.raises(agentrio.ActorStopped):
            await live.run("still there?")
    data = _bytes(store)
    for secret in (b"8513", b"hunter2", b"secret-session"):
        assert secret not in data
    assert b"keep me" in data
    async with agentrio.open_runtime(store=store, specs=SPECS) as rt:
        assert set(await rt.sessions()) == {"kept"}
        again = await rt.session("secret-session", "echo")
        assert (await again.run("hi")).final_text == "heard: hi"


async def test_a_session_whose_agent_stopped_is_continued_in_the_same_runtime(
    tmp_path: Path,
) -> None:
    async with agentrio.open_runtime(store=tmp_path / "s", specs=SPECS) as rt:
        agent = await rt.session("u", "echo")
        await agent.run("a")
        await agent.stop()
        again = await rt.session("u", "echo")
        assert again is not agent
        assert (await again.run("b")).final_text == "heard: a | b"
        again.cancel()
        await again.stop()  # (waits until it has exited)
        third = await rt.session("u", "echo")
        assert (await third.run("c")).final_text == "heard: a | b | c"


async def test_a_session_whose_oldest_phases_a_retention_deleted_keeps_its_instructions(
    tmp_path: Path,
) -> None:
    from agentrio.store import Retention

    seen: list[list[str]] = []

    def model(messages: Sequence[ChatMessage], tools: object) -> Reply:
        seen.append([f"{m.role}:{m.content}" for m in messages])
        return Reply(text="ok")

    def make() -> AgentSpec[str]:
        return AgentSpec("keeper", FunctionModel(model), instructions="Be kind.")

    store = tmp_path / "s"
    for word in ("one", "two", "three"):
        async with agentrio.open_runtime(
            store=store, specs={"keeper": make}, retention=Retention(max_count=1)
        ) as rt:
            await (await rt.session("k", "keeper")).run(word)
    # (each runtime kept the newest finished phase only: "one" is gone)
    assert seen[-1] == ["system:Be kind.", "user:two", "assistant:ok", "user:three"]
