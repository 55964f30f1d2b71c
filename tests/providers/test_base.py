"""The Model protocol: check_model and context_window."""

from __future__ import annotations

import pytest

import agentrio
from agentrio import InvalidArgument
from agentrio import ModelReply as Reply
from agentrio.providers.base import DEFAULT_CONTEXT_WINDOW, check_model, context_window


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
