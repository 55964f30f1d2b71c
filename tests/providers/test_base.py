"""The Model protocol: check_model and context_window."""

from __future__ import annotations

import json

import msgspec
import pytest

import agentrio
from agentrio import InvalidArgument
from agentrio import ModelReply as Reply
from agentrio.providers.base import DEFAULT_CONTEXT_WINDOW, check_model, context_window
from agentrio.types import OutputSchema


class Good:
    async def complete(self, messages: object, tools: object, *, max_output_tokens: int) -> Reply:
        return Reply()


class Windowed(Good):
    context_window = 4096


class SyncComplete:
    def complete(self, messages: object, tools: object, *, max_output_tokens: int) -> Reply:
        return Reply()


class AttributeComplete:
    complete = "not a method"


class BadWindow(Good):
    def __init__(self, window: object) -> None:
        self.context_window = window


def test_a_model_with_an_async_complete_passes() -> None:
    good = Good()
    assert check_model(good) is good
    assert isinstance(good, agentrio.Model)


@pytest.mark.parametrize(
    "model", [object(), None, 3, SyncComplete(), AttributeComplete(), Good], ids=repr
)
def test_without_an_async_complete(model: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_model(model, "spec.model")
    message = str(info.value)
    assert message.startswith("spec.model must be a model object with an async complete(")
    assert "ScriptedModel" in message


def test_the_default_argument_name() -> None:
    with pytest.raises(InvalidArgument, match=r"^model must be"):
        check_model(object())


@pytest.mark.parametrize("window", [0, -1, True, 2.5, "big", None])
def test_bad_context_window(window: object) -> None:
    with pytest.raises(InvalidArgument, match=r"m\.context_window must be an int >= 1"):
        check_model(BadWindow(window), "m")


def test_context_window() -> None:
    assert DEFAULT_CONTEXT_WINDOW == 128_000
    assert context_window(Good()) == DEFAULT_CONTEXT_WINDOW
    assert context_window(Windowed()) == 4096
    assert context_window(BadWindow("x")) == DEFAULT_CONTEXT_WINDOW


# -- OutputSchema ----------------------------------------------------------------------


class _Inner(msgspec.Struct):
    n: int | None = None


class _Outer(msgspec.Struct, tag=True):
    name: str
    inner: _Inner
    items: list[_Inner] = []


def _objects(node: object) -> list[dict[str, object]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object":
            found.append(node)
        for value in node.values():
            found += _objects(value)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value)
    return found


def test_output_schema_of_a_class_is_its_definition_in_strict_form() -> None:
    schema = msgspec.json.schema(_Outer)
    out = OutputSchema("Outer", schema)
    assert (out.name, out.schema, out.wrapped) == ("Outer", schema, False)
    assert out.object_schema["type"] == "object"  # (not a $ref: the root is the class)
    assert set(out.object_schema["properties"]) == {"type", "name", "inner", "items"}  # type: ignore[arg-type]
    strict = out.strict_schema
    assert isinstance(strict, dict)
    objects = _objects(strict)
    assert len(objects) == 2  # the root (_Outer, not kept in $defs), and _Inner's definition
    for node in objects:
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])  # type: ignore[call-overload]
    assert "default" not in json.dumps(strict)


@pytest.mark.parametrize(
    ("output_type", "strict"),
    [(list[str], True), (int, True), (dict[str, int], False), (tuple[int, str], False)],
)
def test_output_schema_of_what_is_no_object_is_wrapped(output_type: object, strict: bool) -> None:
    out = OutputSchema("x", msgspec.json.schema(output_type))
    assert out.wrapped
    assert out.object_schema["required"] == ["result"]
    assert (out.strict_schema is not None) == strict


def test_output_schema_name_is_cleaned() -> None:
    assert OutputSchema("list[str] é", {}).name == "liststr"
    assert OutputSchema("???", {}).name == "result"
    assert len(OutputSchema("a" * 100, {}).name) == 64
    assert repr(OutputSchema("M", {})) == "<OutputSchema M>"


class _Node(msgspec.Struct):
    children: list[_Node] = []


def test_a_recursive_class_keeps_its_definition() -> None:
    out = OutputSchema("Node", msgspec.json.schema(_Node))
    assert out.object_schema["$defs"] == {"_Node": msgspec.json.schema(_Node)["$defs"]["_Node"]}  # type: ignore[index]
    assert out.object_schema["properties"] == {  # type: ignore[comparison-overlap]
        "children": {"type": "array", "items": {"$ref": "#/$defs/_Node"}, "default": []}
    }
