"""A run's own stream (AgentRef.stream): its items in order, lossless, with backpressure."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import msgspec
import pytest
import trio
import trio.testing

import agentrio
import agentrio.agents.loop.stream
from agentrio import AgentSpec, ChatMessage, Provider, ProviderConfig, ToolCallRequest, Usage
from agentrio.agents.loop.stream import _NOTHING, _Partials
from agentrio.errors import ActorStopped, InvalidArgument, SelfAsk, UsageError
from agentrio.events import (
    PartialOutput,
    PhaseEnded,
    RunDone,
    RunItem,
    TextDelta,
    ToolEnded,
    ToolStarted,
    TurnEnded,
)
from agentrio.providers.provider import Kind
from agentrio.testing import FunctionModel, Reply, ScriptedModel, open_fake_llm
from agentrio.types import RunStream


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


def calling(key: str) -> Reply:
    return Reply(tool_calls=[ToolCallRequest("lookup", {"key": key})], usage=Usage(5, 2))


def kinds(items: Sequence[RunItem]) -> list[str]:
    return [type(item).__name__ for item in items]


async def read_all(stream: RunStream) -> list[RunItem]:
    return [item async for item in stream]


async def test_items_come_in_order_and_the_result_last(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([calling("a"), Reply(text="a is A", usage=Usage(9, 3))], chunk_size=2)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, tools=[lookup]))
        async with agent.stream("what is a?") as stream:
            items = await read_all(stream)
    assert kinds(items) == [
        "TurnEnded",
        "ToolStarted",
        "ToolEnded",
        "TextDelta",
        "TextDelta",
        "TextDelta",
        "TurnEnded",
        "RunDone",
    ]
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["a ", "is", " A"]
    assert {i.path for i in items} == {"a"}
    turn1, started, ended, *_, turn2, done = items
    assert isinstance(turn1, TurnEnded) and turn1.tool_calls == 1
    assert isinstance(started, ToolStarted) and started.tool == "lookup"
    assert isinstance(ended, ToolEnded) and ended.output_preview == "A"
    assert isinstance(turn2, TurnEnded) and turn2.iteration == 2
    assert isinstance(done, RunDone)
    assert done.result.final_text == "a is A" and done.result.stop_reason == "done"


async def test_a_model_that_does_not_stream_gives_each_replys_text_whole(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    model = ScriptedModel([Reply(text="thinking", tool_calls=calling("a").tool_calls), Reply("ok")])
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(AgentSpec("a", model, tools=[lookup]))
        async with agent.stream("go") as stream:
            items = await read_all(stream)
        await trio.testing.wait_all_tasks_blocked()
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["thinking", "ok"]
    assert kinds(items)[:2] == ["TextDelta", "TurnEnded"]
    # The runtime's bus still gets the run's events, and no TextDelta a model did not send.
    assert kinds([e for e in events if e.path == "a"])[1:-1] == [
        "PhaseStarted",
        "TurnStarted",
        "TurnEnded",
        "ToolStarted",
        "ToolEnded",
        "TurnStarted",
        "TurnEnded",
        "PhaseEnded",
    ]


async def test_the_stream_loses_nothing_with_many_deltas_and_a_small_buffer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    text = "".join(chr(ord("a") + n % 26) for n in range(2000))
    model = ScriptedModel([calling("x"), Reply(text=text), Reply(text=text)], chunk_size=1)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, tools=[lookup]))
        async with agent.stream("go", max_buffer_size=1) as stream:
            items = []
            async for item in stream:
                items.append(item)
                await trio.sleep(0.001)  # a slow reader
        # The same, read only at the end: the run waited for its reader.
        async with agent.stream("again", max_buffer_size=1) as stream:
            await trio.sleep(10)
            late = await read_all(stream)
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    assert len(deltas) == 2000 and "".join(deltas) == text
    assert kinds(items)[-2:] == ["TurnEnded", "RunDone"]
    assert "".join(i.text for i in late if isinstance(i, TextDelta)) == text
    assert kinds(late)[-2:] == ["TurnEnded", "RunDone"]


async def test_a_slow_reader_slows_its_own_run_and_no_other(
    autojump_clock: trio.testing.MockClock,
) -> None:
    turns = 8
    called = {"slow": 0, "fast": 0}

    def counting(name: str) -> FunctionModel:
        def answer(messages: Sequence[ChatMessage], tools: object) -> Reply:
            called[name] += 1
            if called[name] < turns:
                key = f"{name}{called[name]}"
                return Reply(text="step " * 10, tool_calls=calling(key).tool_calls)
            return Reply(text="done")

        return FunctionModel(answer, chunk_size=5)

    async with agentrio.open_runtime() as rt:
        slow = await rt.spawn_agent(AgentSpec("slow", counting("slow"), tools=[lookup]))
        fast = await rt.spawn_agent(AgentSpec("fast", counting("fast"), tools=[lookup]))
        async with slow.stream("go", max_buffer_size=4) as stream:
            # Nobody reads the slow run's stream while the other agent runs to its end.
            result = await fast.run("go")
            await trio.testing.wait_all_tasks_blocked()
            assert result.stop_reason == "done" and called["fast"] == turns
            # The slow run waits for its reader: a turn, held, past its buffer.
            assert called["slow"] <= 2
            items = await read_all(stream)
    assert called["slow"] == turns
    done = items[-1]
    assert isinstance(done, RunDone) and done.result.final_text == "done"


async def test_leaving_the_block_early_cancels_the_run(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    calls = 0

    def endless(messages: Sequence[ChatMessage], tools: object) -> Reply:
        nonlocal calls
        calls += 1
        return Reply(text="more", tool_calls=calling(f"k{calls}").tool_calls)

    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(
            AgentSpec("a", FunctionModel(endless), tools=[lookup], limits=agentrio.Limits())
        )
        async with agent.stream("go", max_buffer_size=1) as stream:
            async for item in stream:
                if isinstance(item, ToolEnded):
                    break
        assert not isinstance(item, RunDone)
        await trio.testing.wait_all_tasks_blocked()
        ended = [e for e in events if isinstance(e, PhaseEnded)]
        assert [e.stop_reason for e in ended] == ["cancelled"]
        made = calls
        await trio.sleep(10)
        assert calls == made <= 2  # nothing goes on with it
        # Its completed turns stay, and the agent takes its next phase as usual.
        assert len(await agent.history()) > 1
        assert agent.ref.statistics().state == "running"


async def test_a_body_that_raises_ends_the_run_and_its_error_comes_out_as_it_was(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Reply(text="slow answer")] * 2, chunk_size=1)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model))
        with pytest.raises(KeyError, match="boom"):  # not in an ExceptionGroup
            async with agent.stream("go") as stream:
                await stream.__anext__()
                raise KeyError("boom")
        result = await agent.run("again")
    assert result.final_text == "slow answer"


async def test_failures_of_the_run_are_in_its_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def failing(messages: Sequence[ChatMessage], tools: object) -> Reply:
        raise RuntimeError("model down")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", FunctionModel(failing)))
        async with agent.stream("go") as stream:
            items = await read_all(stream)
    (done,) = items
    assert isinstance(done, RunDone)
    assert done.result.stop_reason == "error" and done.result.error == "model down"


async def test_what_run_would_raise_comes_out_of_the_iteration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", ScriptedModel([])))
        await agent.stop()
        async with agent.stream("go") as stream:
            with pytest.raises(ActorStopped):
                await stream.__anext__()
            with pytest.raises(StopAsyncIteration):  # then it has ended
                await stream.__anext__()


async def test_bad_arguments_are_refused_at_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", ScriptedModel([Reply("hi")]), tools=[lookup]))
        for bad in (0, 1.5, True):
            with pytest.raises(InvalidArgument, match="max_buffer_size"):
                agent.stream("go", max_buffer_size=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="nope"):
            agent.stream("go", tool_names=["nope"])
        stream = agent.stream("go")
        assert repr(stream) == "<RunStream 'a' new>"
        async with stream:
            assert [type(i) for i in await read_all(stream)][-1] is RunDone
            with pytest.raises(UsageError, match="entered once"):
                await stream.__aenter__()
        assert repr(stream) == "<RunStream 'a' closed>"
        with pytest.raises(StopAsyncIteration):  # read after the block
            await stream.__anext__()


async def test_reading_a_stream_not_entered_is_refused_not_a_hang(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", ScriptedModel([Reply("hi")])))
        stream = agent.stream("go")
        with trio.fail_after(60), pytest.raises(UsageError, match="async with"):
            async for _ in stream:  # (without the block, nothing runs: it would wait forever)
                pass
        async with stream:  # the stream is still usable the right way
            assert [type(i) for i in await read_all(stream)][-1] is RunDone


async def test_streaming_its_own_agent_from_its_phase_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    refused: list[BaseException] = []
    agents: list[agentrio.AgentRef] = []

    @agentrio.tool
    async def again() -> str:
        """Stream my own agent."""
        try:
            agents[0].stream("loop")
        except SelfAsk as exc:
            refused.append(exc)
        return "ok"

    model = ScriptedModel([Reply(tool_calls=[ToolCallRequest("again", {})]), Reply("done")])
    async with agentrio.open_runtime() as rt:
        agents.append(await rt.spawn_agent(AgentSpec("a", model, tools=[again])))
        await agents[0].run("go")
    (exc,) = refused
    assert "stream a phase from inside its own phase" in str(exc)


async def test_a_phase_that_is_not_streamed_does_not_see_another_runs_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Reply("one")] * 3, chunk_size=1)
    async with agentrio.open_runtime() as rt:
        a = await rt.spawn_agent(AgentSpec("a", model))
        b = await rt.spawn_agent(AgentSpec("b", model))
        async with a.stream("go") as stream:
            await b.run("go")
            items = await read_all(stream)
    assert {i.path for i in items} == {"a"}
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "one"


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_over_http_the_stream_carries_the_providers_deltas(
    autojump_clock: trio.testing.MockClock, kind: Kind
) -> None:
    text = "a fairly long answer, streamed by the server in pieces"
    reply = Reply(text=text, usage=Usage(4, 9))
    base = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}[kind]
    async with open_fake_llm(lambda _: reply) as server:
        config = ProviderConfig(
            name="p", kind=kind, base_url=server.base_url + base, stream=True, max_retries=0
        )
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(AgentSpec("a", provider.model("m")))
            async with agent.stream("hi", max_buffer_size=1) as stream:
                items = await read_all(stream)
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == text
    assert kinds(items)[-2:] == ["TurnEnded", "RunDone"]


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


async def test_a_streamed_run_takes_content_parts_as_run_does() -> None:
    from agentrio import ImagePart

    model = ScriptedModel([Reply(text="a cat", usage=Usage(9, 3))], chunk_size=2)
    image = ImagePart(data=PNG, media_type="image/png")
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model))
        async with agent.stream(["what is this?", image]) as stream:
            items = await read_all(stream)
    done = items[-1]
    assert isinstance(done, RunDone) and done.result.final_text == "a cat"
    (seen,) = model.calls
    assert seen[-1].parts[-1] == image


async def test_a_streamed_run_refuses_a_part_the_wire_cannot_take_at_the_call() -> None:
    from agentrio import ImagePart

    async with open_fake_llm([Reply(text="never")]) as server:
        config = ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
        async with Provider(config) as provider, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(AgentSpec("a", provider.model("llava")))
            image = ImagePart(url="https://example.com/cat.png")
            with pytest.raises(InvalidArgument, match="takes images as data only"):
                agent.stream(["what is this?", image])
        assert server.statistics().http_requests == 0


# -- result(), text() -------------------------------------------------------------------


async def test_result_reads_the_rest_and_returns_the_result() -> None:
    model = ScriptedModel([calling("a"), Reply(text="a is A")], chunk_size=2)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, tools=[lookup]))
        async with agent.stream("what is a?") as stream:
            first = await stream.__anext__()
            result = await stream.result()
            assert await stream.result() is result  # (again: at once)
        with pytest.raises(UsageError, match="inside its block"):
            await agent.stream("again").result()  # (not entered: nothing runs)
        async with agent.stream("again") as left:
            pass
        with pytest.raises(UsageError, match="inside its async with block"):
            await left.result()  # (left before its end: the run was cancelled)
    assert type(first) is TurnEnded
    assert (result.stop_reason, result.final_text) == ("done", "a is A")


async def test_text_gives_the_text_alone_then_result_gives_the_result() -> None:
    model = ScriptedModel([calling("a"), Reply(text="a is A, as said")], chunk_size=4)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model, tools=[lookup]))
        async with agent.stream("what is a?") as stream:
            texts = [text async for text in stream.text()]
            result = await stream.result()
    assert texts == ["a is", " A, ", "as s", "aid"]
    assert result.final_text == "a is A, as said"


# -- typed partial output -----------------------------------------------------------------


class Movie(msgspec.Struct):
    title: str
    year: int
    genres: list[str] = []


MOVIE = '{"title": "Alien", "year": 1979, "genres": ["horror", "sf"]}'


async def stream_items(spec: AgentSpec[object]) -> list[RunItem]:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        async with agent.stream("go") as stream:
            return await read_all(stream)


def partial_parser() -> Callable[[bytes], object]:
    """The parser of cut JSON a typed stream uses (jiter's, else pydantic-core's)."""
    parse = agentrio.agents.loop.stream._partial_parser()
    if parse is None:
        pytest.skip("neither jiter nor pydantic-core is installed")
    return parse


def partials(items: Sequence[RunItem]) -> list[object]:
    return [item.value for item in items if isinstance(item, PartialOutput)]


async def test_a_typed_run_streams_its_answer_as_partial_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    partial_parser()
    monkeypatch.setattr(agentrio.agents.loop.stream, "PARSE_STEP", 1)  # (parse at each piece)
    model = ScriptedModel([Reply(text=MOVIE)], chunk_size=12)
    items = await stream_items(AgentSpec("critic", model, output_type=Movie))
    assert partials(items) == [
        {"title": "A"},  # (a string cut short: "A" of "Alien")
        {"title": "Alien"},
        {"title": "Alien", "year": 1979},
        {"title": "Alien", "year": 1979, "genres": ["hor"]},
        {"title": "Alien", "year": 1979, "genres": ["horror", "sf"]},
    ]
    # Each after the text it was parsed from, all before the turn's end.
    assert kinds(items)[:4] == ["TextDelta", "PartialOutput", "TextDelta", "PartialOutput"]
    assert kinds(items)[-2:] == ["TurnEnded", "RunDone"]
    done = items[-1]
    assert isinstance(done, RunDone)
    assert done.result.output == Movie("Alien", 1979, ["horror", "sf"])


async def test_a_short_answer_is_parsed_once_at_the_turns_end() -> None:
    partial_parser()
    model = ScriptedModel([Reply(text=MOVIE)], chunk_size=5)
    items = await stream_items(AgentSpec("critic", model, output_type=Movie))
    assert partials(items) == [{"title": "Alien", "year": 1979, "genres": ["horror", "sf"]}]
    assert kinds(items)[-3:] == ["PartialOutput", "TurnEnded", "RunDone"]


async def test_a_long_answer_is_not_parsed_again_at_every_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parse = partial_parser()
    parsed: list[int] = []

    def counting(data: bytes) -> object:
        parsed.append(len(data))
        return parse(data)

    monkeypatch.setattr(agentrio.agents.loop.stream, "_FROM_JSON", counting)
    words = [f"word{i}" for i in range(5000)]
    text = msgspec.json.encode(words).decode()  # ~50k characters, in 10-character pieces
    model = ScriptedModel([Reply(text=text)], chunk_size=10)
    items = await stream_items(AgentSpec("lister", model, output_type=list[str]))
    assert partials(items)[-1] == words
    assert len(parsed) < 40  # (at every piece: 5000 parses)
    assert sum(parsed) < 10 * len(text)  # (at every piece: ~2500 times the text)


async def test_no_partial_values_for_plain_text_nor_without_jiter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = await stream_items(AgentSpec("plain", ScriptedModel([Reply(text='{"a": 1}')])))
    assert partials(items) == []
    monkeypatch.setattr(agentrio.agents.loop.stream, "_FROM_JSON", None)  # (jiter not installed)
    model = ScriptedModel([Reply(text=MOVIE)], chunk_size=5)
    items = await stream_items(AgentSpec("critic", model, output_type=Movie))
    assert partials(items) == []
    assert kinds(items)[-2:] == ["TurnEnded", "RunDone"]


def test_a_wrapped_answer_is_unwrapped_and_text_that_is_no_json_gives_nothing() -> None:
    wrapped = _Partials(partial_parser(), wrapped=True)
    assert wrapped.flush() is _NOTHING
    wrapped.feed('{"res')
    assert wrapped.flush() is _NOTHING  # (the wrapper's key not read yet)
    wrapped.feed('{"result": ["a", "b')
    assert wrapped.flush() == ["a", "b"]
    plain = _Partials(partial_parser(), wrapped=False)
    plain.feed("Let me look that up first.")
    assert plain.flush() is _NOTHING


def test_without_jiter_pydantic_cores_parser_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pydantic_core")
    monkeypatch.setitem(sys.modules, "jiter", None)  # (an import of it raises ImportError)
    monkeypatch.setattr(agentrio.agents.loop.stream, "_FROM_JSON", _NOTHING)
    parse = agentrio.agents.loop.stream._partial_parser()
    assert parse is not None
    assert parse(b'{"title": "Ali') == {"title": "Ali"}
    monkeypatch.setitem(sys.modules, "pydantic_core", None)
    monkeypatch.setattr(agentrio.agents.loop.stream, "_FROM_JSON", _NOTHING)
    assert agentrio.agents.loop.stream._partial_parser() is None
