"""The token estimate: of a text (estimate_tokens) and of a message (message_text)."""

from __future__ import annotations

import pytest

import agentrio
from agentrio import ChatMessage, ToolCallRequest
from agentrio.providers.tokens import arguments_text, estimate_tokens, message_text


def test_estimate_tokens_is_chars_over_3_5_rounded_up() -> None:
    assert agentrio.estimate_tokens is estimate_tokens
    assert estimate_tokens("") == 1
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("x" * 7) == 3
    assert estimate_tokens("x" * 35) == 11
    assert estimate_tokens("x" * 3500) == 1001


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("漢字" * 50, 101),  # one token for each character that is not ASCII
        ("日本語のテキスト", 9),
        ("naïve café", 2 + int(8 / 3.5) + 1),
        ("emoji 🙂 and Ελληνικά", 9 + int(11 / 3.5) + 1),
    ],
)
def test_estimate_tokens_counts_each_non_ascii_character_as_a_token(text: str, tokens: int) -> None:
    # CJK text ran 2.1x over the characters / 3.5 estimate: reservations under-counted it.
    assert estimate_tokens(text) == tokens


def test_message_text_counts_tool_calls() -> None:
    plain = ChatMessage("user", "hello")
    assert message_text(plain) == "hello"
    calls = ChatMessage(
        "assistant", "so", tool_calls=(ToolCallRequest("f", {"a": 1}), ToolCallRequest("g"))
    )
    assert message_text(calls) == 'sof{"a":1}g{}'  # the arguments as JSON
    odd = ChatMessage("assistant", "", tool_calls=(ToolCallRequest("h", {"x": 1 + 2j}),))
    assert message_text(odd) == "h{'x': (1+2j)}"  # not JSON: their repr


def test_arguments_text_is_json_or_the_repr() -> None:
    assert arguments_text({"a": [1, "b"]}) == '{"a":[1,"b"]}'
    assert arguments_text({"x": 1 + 2j}) == "{'x': (1+2j)}"
