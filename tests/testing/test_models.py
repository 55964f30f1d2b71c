"""ScriptedModel and FunctionModel: models whose answers the test decides."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import pytest
import trio
import trio.testing

import agentrio
from agentrio import ChatMessage, InvalidArgument, ModelReply, ToolCallRequest, Usage
from agentrio.providers.base import DEFAULT_CONTEXT_WINDOW, check_model
from agentrio.testing import FunctionModel, Reply, ScriptedModel, ScriptExhausted
from agentrio.types import ToolSchema

HELLO = (ChatMessage("user", "hello"),)
LOOKUP = ToolSchema("lookup", "Look up.", {"type": "object", "properties": {}})


def test_reply_is_model_reply() -> None:
    assert Reply is ModelReply
    reply = Reply(
        text="hi",
        tool_calls=(ToolCallRequest("lookup", {"key": "a"}),),
        usage=Usage(input_tokens=3, output_tokens=4),
    )
    assert reply.usage.total_tokens == 7
    assert Reply() == Reply(text="", tool_calls=(), usage=Usage())


async def test_scripted_model_answers_in_order_and_records_calls() -> None:
    first, second = Reply(text="one"), Reply(text="two")
    model = ScriptedModel([first, second])
    assert model.remaining == 2
    assert model.context_window == DEFAULT_CONTEXT_WINDOW
    assert await model.complete(HELLO, [LOOKUP], max_output_tokens=10) is first
    history = [*HELLO, ChatMessage("assistant", "one"), ChatMessage("user", "again")]
    assert await model.complete(history, [], max_output_tokens=10) is second
    assert model.remaining == 0
    assert model.calls == [HELLO, tuple(history)]
    assert all(isinstance(c, tuple) for c in model.calls)


async def test_scripted_model_runs_out_with_a_clear_error() -> None:
    model = ScriptedModel([Reply(text="only")])
    await model.complete(HELLO, [], max_output_tokens=1)
    with pytest.raises(ScriptExhausted, match="ran out of replies after 1 calls"):
        await model.complete(HELLO, [], max_output_tokens=1)
    assert len(model.calls) == 1  # the failed call is not recorded
    assert issubclass(ScriptExhausted, agentrio.AgentrioError)


async def test_scripted_model_takes_any_iterable() -> None:
    model = ScriptedModel(Reply(text=str(i)) for i in range(3))
    assert model.remaining == 3
    assert (await model.complete(HELLO, [], max_output_tokens=1)).text == "0"


async def test_model_calls_are_checkpoints() -> None:
    with trio.testing.assert_checkpoints():
        await ScriptedModel([Reply()]).complete(HELLO, [], max_output_tokens=1)
    with trio.testing.assert_checkpoints():
        await FunctionModel(lambda m, t: Reply()).complete(HELLO, [], max_output_tokens=1)


def test_scripted_model_checks_its_replies() -> None:
    with pytest.raises(InvalidArgument, match=r"replies\[1\]"):
        ScriptedModel([Reply(), "text"])  # type: ignore[list-item]


@pytest.mark.parametrize("window", [0, -5, True, 1.5, "big"])
def test_context_window_is_checked(window: object) -> None:
    with pytest.raises(InvalidArgument, match="context_window"):
        ScriptedModel([], context_window=window)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="context_window"):
        FunctionModel(lambda m, t: Reply(), context_window=window)  # type: ignore[arg-type]


def test_context_window_is_kept() -> None:
    assert ScriptedModel([], context_window=8).context_window == 8
    assert FunctionModel(lambda m, t: Reply(), context_window=9).context_window == 9


async def test_function_model_sync() -> None:
    seen: list[tuple[Sequence[ChatMessage], Sequence[ToolSchema]]] = []

    def fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        seen.append((messages, tools))
        return Reply(text=f"{len(messages)} messages, {len(tools)} tools")

    model = FunctionModel(fn)
    reply = await model.complete(HELLO, [LOOKUP], max_output_tokens=5)
    assert reply.text == "1 messages, 1 tools"
    assert seen == [(HELLO, [LOOKUP])]


async def test_function_model_async(autojump_clock: trio.testing.MockClock) -> None:
    async def fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        await trio.sleep(3)
        return Reply(text=messages[-1].content.upper())

    model = FunctionModel(fn)
    t0 = trio.current_time()
    assert (await model.complete(HELLO, [], max_output_tokens=5)).text == "HELLO"
    assert trio.current_time() - t0 == pytest.approx(3)


async def test_function_model_must_return_a_reply() -> None:
    model = FunctionModel(lambda m, t: "plain text")  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidArgument, match=r"must return an agentrio\.testing\.Reply"):
        await model.complete(HELLO, [], max_output_tokens=5)


async def test_function_model_exceptions_come_through() -> None:
    def fn(messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> Reply:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError, match="down"):
        await FunctionModel(fn).complete(HELLO, [], max_output_tokens=5)


def test_function_model_needs_a_callable() -> None:
    with pytest.raises(InvalidArgument, match="fn must be callable"):
        FunctionModel("reply")  # type: ignore[arg-type]


def test_both_satisfy_the_model_protocol() -> None:
    scripted = ScriptedModel([])
    function = FunctionModel(lambda m, t: Reply())
    assert check_model(scripted) is scripted
    assert check_model(function) is function
    assert isinstance(scripted, agentrio.Model)
    assert isinstance(function, agentrio.Model)


async def test_function_model_with_an_async_callable_object() -> None:
    class Answerer:
        async def __call__(
            self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]
        ) -> Reply:
            await trio.lowlevel.checkpoint()
            return Reply(text="from an object")

    reply = await FunctionModel(Answerer()).complete(HELLO, [], max_output_tokens=5)
    assert reply.text == "from an object"


@pytest.mark.parametrize("chunk_size", [1, 3, 100])
async def test_both_stream_a_replys_text_in_chunks(chunk_size: int) -> None:
    text = "streamed in pieces"
    for model in (
        ScriptedModel([Reply(text=text)], chunk_size=chunk_size),
        FunctionModel(lambda m, t: Reply(text=text), chunk_size=chunk_size),
    ):
        pieces: list[str] = []
        reply = await model.complete(HELLO, [], max_output_tokens=5, on_text=pieces.append)
        assert reply.text == text == "".join(pieces)
        assert [len(p) for p in pieces[:-1]] == [chunk_size] * (len(pieces) - 1)
        assert len(pieces) == -(-len(text) // chunk_size)


def test_without_a_chunk_size_they_do_not_stream() -> None:
    # No on_text keyword: an agent passes none, and its calls pay nothing for streaming.
    for model in (ScriptedModel([Reply(text="x")]), FunctionModel(lambda m, t: Reply(text="x"))):
        assert "on_text" not in inspect.signature(model.complete).parameters
    for model in (
        ScriptedModel([], chunk_size=1),
        FunctionModel(lambda m, t: Reply(), chunk_size=1),
    ):
        assert "on_text" in inspect.signature(model.complete).parameters


@pytest.mark.parametrize("chunk_size", [0, -1, 1.5, True, "3"])
def test_a_bad_chunk_size_is_refused(chunk_size: object) -> None:
    with pytest.raises(InvalidArgument, match="chunk_size must be an int >= 1 or None"):
        ScriptedModel([], chunk_size=chunk_size)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="chunk_size"):
        FunctionModel(lambda m, t: Reply(), chunk_size=chunk_size)  # type: ignore[arg-type]
