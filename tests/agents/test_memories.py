"""Memory (#26): ``AgentSpec(memory=...)``: kept after tool calls, recalled before
model calls, searched and cleared from the API, bounded, kept in the checkpoint
store (across phases, runtimes and a crash), shared by name; its events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

import agentrio
from agentrio import AgentSpec, ChatMessage, ToolCallRequest, ToolResult
from agentrio.events import (
    MemoriesSearched,
    MemoryCleared,
    MemoryRecalled,
    MemoryStored,
)
from agentrio.memory import BM25, Embeddings, Memory, MemoryItem
from agentrio.testing import FakeRequest, FunctionModel, Reply, open_fake_llm

HEAD = "Memories that may help"


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return {"door": "the door code is 4711", "cat": "the cat is called Tom"}.get(key, "nothing")


def recalled(messages: Sequence[ChatMessage]) -> str:
    """The text of the memory message a call was given ("" if none)."""
    return "".join(m.content for m in messages if m.role == "system" and HEAD in m.content)


def looker(seen: list[str]) -> FunctionModel:
    """Looks up the key the user names (once), then answers; records each call's memories."""

    def answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
        seen.append(recalled(messages))
        last = messages[-1]
        if last.role == "user" and last.content.startswith("look up "):
            key = last.content.removeprefix("look up ")
            return Reply(tool_calls=(ToolCallRequest("lookup", {"key": key}),))
        return Reply(text="ok")

    return FunctionModel(answer)


async def events_of(rt: agentrio.Runtime, kinds: tuple[type, ...], body: object) -> list[object]:
    got: list[object] = []
    async with rt.events() as stream:
        assert callable(body)
        await body()
        while True:
            with trio.move_on_after(0.01):
                event = await stream.receive()
                if isinstance(event, kinds):
                    got.append(event)
                continue
            break
    return got


async def test_a_tool_result_is_kept_and_recalled_in_a_later_phase() -> None:
    seen: list[str] = []
    async with agentrio.open_runtime() as rt:
        spec = AgentSpec("a", looker(seen), tools=[lookup], memory=Memory())
        agent = await rt.spawn_agent(spec)
        async with rt.events() as stream:
            await agent.run("look up door")
            # A new conversation: only the memory knows the door code.
            await agent.run("what is the door code?", continue_context=False)
            events = []
            while len(events) < 2:
                event = await stream.receive()
                if isinstance(event, (MemoryStored, MemoryRecalled)):
                    events.append(event)
        items = await agent.memory.items()
    assert seen[0] == ""  # (nothing to recall yet)
    assert "lookup: the door code is 4711" in seen[-1]
    stored, recall = events
    assert isinstance(stored, MemoryStored) and isinstance(recall, MemoryRecalled)
    assert (stored.path, stored.memory, stored.source, stored.item_id) == (
        agent.path,
        agent.path,
        "lookup",
        1,
    )
    assert recall.item_ids == (1,) and recall.tokens > 0
    assert [i.text for i in items] == ["lookup: the door code is 4711"]


async def test_without_memory_nothing_is_recalled_and_memory_is_refused() -> None:
    seen: list[str] = []
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", looker(seen), tools=[lookup]))
        await agent.run("look up door")
        await agent.run("what is the door code?", continue_context=False)
        with pytest.raises(agentrio.InvalidArgument, match="no memory"):
            agent.memory  # noqa: B018
    assert seen == ["", "", ""]


async def test_the_keep_rule_is_pluggable() -> None:
    def only_cats(result: ToolResult) -> str | None:
        return result.content if "cat" in result.content else None

    seen: list[str] = []
    async with agentrio.open_runtime() as rt:
        spec = AgentSpec("a", looker(seen), tools=[lookup], memory=Memory(keep=only_cats))
        agent = await rt.spawn_agent(spec)
        await agent.run("look up door")
        await agent.run("look up cat")
        assert [i.text for i in await agent.memory.items()] == ["the cat is called Tom"]
        nothing = AgentSpec("b", looker(seen), tools=[lookup], memory=Memory(keep=None))
        other = await rt.spawn_agent(nothing)
        await other.run("look up door")
        assert await other.memory.items() == []


async def test_a_keep_rule_that_raises_keeps_nothing_and_the_phase_goes_on() -> None:
    def broken(result: ToolResult) -> str | None:
        raise RuntimeError("a bug in the rule")

    async with agentrio.open_runtime() as rt:
        spec = AgentSpec("a", looker([]), tools=[lookup], memory=Memory(keep=broken))
        agent = await rt.spawn_agent(spec)
        result = await agent.run("look up door")
        assert result.stop_reason == "done"
        assert await agent.memory.items() == []


async def test_each_agent_of_a_spec_has_a_memory_of_its_own() -> None:
    seen: list[str] = []
    async with agentrio.open_runtime() as rt:
        spec = AgentSpec("a", looker(seen), tools=[lookup], memory=Memory())
        first = await rt.spawn_agent(spec, name="first")
        second = await rt.spawn_agent(spec, name="second")
        await first.run("look up door")
        await second.run("what is the door code?")
        assert await second.memory.items() == []
        assert len(await first.memory.items()) == 1
    assert seen[-1] == ""


async def test_search_remember_and_clear_from_the_api() -> None:
    seen: list[str] = []
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", looker(seen), memory=Memory()))
        memory = agent.memory

        async def body() -> None:
            assert await memory.remember("Paris is the capital of France") == 1
            assert await memory.remember("Rome is the capital of Italy") == 2
            assert await memory.remember("   ") is None  # refused: empty
            found = await memory.search("capital of France", limit=5)
            assert [i.id for i in found] == [1, 2]  # best first
            assert await memory.search("nothing matches this") == []
            assert await memory.clear() == 2
            assert await memory.items() == []

        got = await events_of(rt, (MemoryStored, MemoriesSearched, MemoryCleared), body)
        await agent.run("capital of France?")
    kinds = [type(e).__name__ for e in got]
    assert kinds == [
        "MemoryStored",
        "MemoryStored",
        "MemoriesSearched",
        "MemoriesSearched",
        "MemoryCleared",
    ]
    assert [getattr(e, "found", None) for e in got[2:4]] == [2, 0]
    assert getattr(got[4], "items", None) == 2
    assert seen == [""]  # (cleared: nothing recalled)
    with pytest.raises(agentrio.InvalidArgument):
        await memory.search("x", limit=0)


async def test_recall_gives_the_best_items_within_the_token_allowance() -> None:
    seen: list[str] = []
    memory = Memory(recall=2, recall_tokens=40)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", looker(seen), memory=memory))
        for text in ["apples are red", "bananas are yellow", "apples grow on trees", "sky"]:
            await agent.memory.remember(text)
        await agent.memory.remember("apples " + "very long " * 200)
        await agent.run("tell me about apples")
    lines = seen[0].splitlines()[1:]
    assert len(lines) <= 2
    assert all("apples" in line for line in lines)
    assert agentrio.estimate_tokens("\n".join(lines)) <= 40


def test_bm25_ranks_by_term_weight_and_forgets_removed_items() -> None:
    bm25 = BM25()
    items = [
        MemoryItem(1, "the cat sat on the mat"),
        MemoryItem(2, "a dog and a cat"),
        MemoryItem(3, "quantum chromodynamics"),
    ]
    for item in items:
        bm25.add(item)
    assert [i for _, i in bm25.top("quantum", 3)] == [3]
    assert {i for _, i in bm25.top("cat", 3)} == {1, 2}
    bm25.remove(items[2])
    assert bm25.top("quantum", 3) == []


async def test_embeddings_are_pluggable_through_a_function() -> None:
    def embed(text: str) -> list[float]:  # a toy embedding: fruit vs vehicles
        t = text.lower()
        return [float(sum(w in t for w in ("apple", "pear", "fruit"))), float("car" in t)]

    seen: list[str] = []
    memory = Memory(recall=1, scorer=lambda: Embeddings(embed))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", looker(seen), memory=memory))
        await agent.memory.remember("a pear a day")
        await agent.memory.remember("my car is blue")
        found = await agent.memory.search("which fruit?")
        assert [i.text for i in found][:1] == ["a pear a day"]
        await agent.run("a car question")
    assert "my car is blue" in seen[0] and "pear" not in seen[0]


async def test_bounds_evict_the_oldest_or_least_recalled_and_cut_hostile_items() -> None:
    async with agentrio.open_runtime() as rt:
        spec = AgentSpec("a", looker([]), memory=Memory(max_items=3, max_item_chars=100))
        agent = await rt.spawn_agent(spec)
        for n in range(5):
            await agent.memory.remember(f"fact {n}")
        assert [i.text for i in await agent.memory.items()] == ["fact 2", "fact 3", "fact 4"]
        # A hostile-sized item is cut, with a lone surrogate made valid.
        async with rt.events() as stream:
            await agent.memory.remember("x\ud800" + "y" * 10_000_000)
            event = await stream.receive()
        assert isinstance(event, MemoryStored)
        assert (event.chars, event.cut, event.evicted) == (100, True, 1)
        (last,) = [i.text for i in await agent.memory.items()][-1:]
        assert last.startswith("x\ufffdy") and last.endswith("…") and len(last) == 100

        by_bytes = AgentSpec("b", looker([]), memory=Memory(max_bytes=20))
        small = await rt.spawn_agent(by_bytes)
        await small.memory.remember("0123456789")
        await small.memory.remember("abcdefghij")
        await small.memory.remember("ABCDEFGHIJ")  # 30 bytes: the oldest goes
        assert [i.text for i in await small.memory.items()] == ["abcdefghij", "ABCDEFGHIJ"]
        assert await small.memory.remember("z" * 21) is None  # over max_bytes alone: refused

        lru = AgentSpec("c", looker([]), memory=Memory(max_items=2, evict="least_recalled"))
        kept = await rt.spawn_agent(lru)
        await kept.memory.remember("alpha facts")
        await kept.memory.remember("beta facts")
        await kept.run("alpha")  # recalls "alpha facts": beta is recalled least
        await kept.memory.remember("gamma facts")
        assert [i.text for i in await kept.memory.items()] == ["alpha facts", "gamma facts"]


def test_bad_memory_settings_are_refused() -> None:
    with pytest.raises(agentrio.InvalidArgument, match="max_items"):
        Memory(max_items=0)
    with pytest.raises(agentrio.InvalidArgument, match="evict"):
        Memory(evict="random")  # type: ignore[arg-type]
    with pytest.raises(agentrio.InvalidArgument, match=r"AgentSpec\.memory"):
        AgentSpec("a", looker([]), memory=42)  # type: ignore[arg-type]
    assert AgentSpec("a", looker([]), memory="team").memory == Memory(name="team")


async def test_a_memory_shared_by_name_across_agents() -> None:
    seen: list[str] = []
    async with agentrio.open_runtime() as rt:
        writer = await rt.spawn_agent(AgentSpec("w", looker([]), tools=[lookup], memory="team"))
        reader = await rt.spawn_agent(AgentSpec("r", looker(seen), memory="team"))
        await writer.run("look up cat")
        await reader.run("what is the cat called?")
        assert "the cat is called Tom" in seen[0]
        team = rt.memory("team")
        assert [i.text for i in await team.search("cat")] == ["lookup: the cat is called Tom"]
        assert reader.memory.name == "team"
        await team.clear()
        assert await writer.memory.items() == []


def durable_spec(seen: list[str] | None = None) -> AgentSpec[str]:
    model = looker([] if seen is None else seen)
    return AgentSpec("worker", model, tools=[lookup], memory=Memory())


async def test_memory_is_kept_in_the_store_across_runtimes() -> None:
    store = agentrio.store.MemoryStore()
    async with agentrio.open_runtime(store=store, specs={"worker": durable_spec}) as rt:
        agent = await rt.spawn_agent(durable_spec(), name="w")
        await agent.run("look up door")
        await agent.memory.remember("the lift is out of order")
        await agent.memory.remember("forget me")
    seen: list[str] = []
    async with agentrio.open_runtime(store=store, specs={"worker": durable_spec}) as rt:
        agent = await rt.spawn_agent(durable_spec(seen), name="w")
        await agent.run("door code and lift?")
        texts = [i.text for i in await agent.memory.items()]
        assert texts == ["lookup: the door code is 4711", "the lift is out of order", "forget me"]
        await agent.memory.clear()
        await agent.memory.remember("after the clear")
    assert "4711" in seen[0] and "lift" in seen[0]
    async with agentrio.open_runtime(store=store, specs={"worker": durable_spec}) as rt:
        agent = await rt.spawn_agent(durable_spec(), name="w")
        assert [i.text for i in await agent.memory.items()] == ["after the clear"]


async def test_a_damaged_memory_record_is_store_corrupt() -> None:
    import msgspec

    from agentrio.agents.durability.records import MemoryKept

    store = agentrio.store.MemoryStore()
    store.records.append(msgspec.msgpack.encode(MemoryKept("w", b"\xc1 not msgpack")))
    async with agentrio.open_runtime(store=store, specs={"worker": durable_spec}) as rt:
        agent = await rt.spawn_agent(durable_spec(), name="w")
        with pytest.raises(agentrio.errors.StoreCorrupt, match="memory 'w'"):
            await agent.memory.items()


CRASHING = textwrap.dedent(
    """
    import sys, trio, agentrio
    from agentrio import AgentSpec, ToolCallRequest
    from agentrio.testing import FunctionModel, Reply

    @agentrio.tool
    async def lookup(key: str) -> str:
        '''Look a key up.'''
        return "the vault code is 9931"

    async def answer(messages, tools):
        if not any(m.role == "tool" for m in messages):
            return Reply(tool_calls=(ToolCallRequest("lookup", {"key": "vault"}),))
        print("READY", flush=True)  # (durability="turn": the records are on disk)
        await trio.sleep_forever()  # ... killed here

    def spec():
        return AgentSpec("worker", FunctionModel(answer), tools=[lookup], memory="team")

    async def main():
        async with agentrio.open_runtime(
            store=sys.argv[1], specs={"worker": spec}, durability="turn"
        ) as rt:
            agent = await rt.spawn_agent(spec(), name="w")
            await agent.run("look up the vault")

    trio.run(main)
    """
)


async def test_memory_survives_a_crash_of_the_process(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING, str(store)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line == b"READY\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL

    def answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
        return Reply(text="done")

    def spec() -> AgentSpec[str]:
        return AgentSpec("worker", FunctionModel(answer), tools=[lookup], memory="team")

    async with agentrio.open_runtime(store=store, specs={"worker": spec}) as rt:
        found = await rt.memory("team").search("vault code")
        assert [i.text for i in found] == ["lookup: the vault code is 9931"]


async def test_memory_over_the_fake_server() -> None:
    requests: list[FakeRequest] = []

    def handler(request: FakeRequest) -> Reply:
        requests.append(request)
        if request.messages[-1].role == "user" and "look up" in request.messages[-1].content:
            return Reply(tool_calls=(ToolCallRequest("lookup", {"key": "door"}),))
        return Reply(text="ok")

    async with open_fake_llm(handler) as server:
        config = agentrio.ProviderConfig(name="oa", kind="openai", base_url=server.base_url + "/v1")
        async with agentrio.Provider(config) as provider, agentrio.open_runtime() as rt:
            model = provider.model("gpt")
            spec = AgentSpec("a", model, instructions="Be brief.", tools=[lookup], memory=Memory())
            agent = await rt.spawn_agent(spec)
            await agent.run("look up door")
            await agent.run("and the code?", continue_context=False)
    last = requests[-1].messages
    assert [m.role for m in last] == ["system", "system", "user"]
    assert last[0].content == "Be brief."
    assert HEAD in last[1].content and "4711" in last[1].content
