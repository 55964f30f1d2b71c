"""What every wire format shares: here, a typed answer read out of a reply."""

from __future__ import annotations

import msgspec
import pytest

from agentrio import ModelReply, ToolCallRequest, Usage
from agentrio.providers.wire import typed_answer
from agentrio.types import OutputSchema


class _Movie(msgspec.Struct):
    title: str


MOVIE = OutputSchema("Movie", msgspec.json.schema(_Movie))
TAGS = OutputSchema("tags", msgspec.json.schema(list[str]))


def test_a_text_answer_of_an_object_schema_is_left_as_it_is() -> None:
    reply = ModelReply(text='{"title": "a"}', usage=Usage(1, 2))
    assert typed_answer(reply, MOVIE) is reply


def test_the_output_tools_input_is_the_answer() -> None:
    reply = ModelReply(
        text="thinking aloud",
        tool_calls=(ToolCallRequest("x", {}), ToolCallRequest("final_result", {"title": "a"})),
        usage=Usage(1, 2),
    )
    assert typed_answer(reply, MOVIE) == ModelReply(text='{"title":"a"}', usage=Usage(1, 2))


def test_unreadable_output_tool_arguments_are_an_empty_answer() -> None:
    broken = ToolCallRequest("final_result", {}, error="arguments are not JSON")
    assert typed_answer(ModelReply(tool_calls=(broken,)), MOVIE) == ModelReply()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"result": ["a"]}', '["a"]'),
        ('{"other": 1}', '{"other":1}'),  # (not wrapped as asked: refused later)
        ("not json", "not json"),
        ("[" * 100_000, "[" * 100_000),  # too deep to read: left for the agent to refuse
    ],
)
def test_a_wrapped_answer_is_unwrapped(text: str, expected: str) -> None:
    assert typed_answer(ModelReply(text=text), TAGS).text == expected
    assert (
        typed_answer(
            ModelReply(tool_calls=(ToolCallRequest("final_result", {"result": ["b"]}),)), TAGS
        ).text
        == '["b"]'
    )


def test_other_tool_calls_are_left_alone() -> None:
    reply = ModelReply(text='{"result": []}', tool_calls=(ToolCallRequest("x", {}),))
    assert typed_answer(reply, TAGS) is reply


def test_only_the_wrapper_itself_is_unwrapped() -> None:
    # A dict answer given bare (the model ignored the wrapper) that has a "result"
    # key among others is the answer, not its "result": the wrapper has one key.
    counts = OutputSchema("counts", msgspec.json.schema(dict[str, int]))
    bare = '{"result": 1, "errors": 0}'
    assert typed_answer(ModelReply(text=bare), counts).text == '{"result":1,"errors":0}'
    assert typed_answer(ModelReply(text='{"result": {"a": 1}}'), counts).text == '{"a":1}'
