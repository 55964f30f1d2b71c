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


# -- images and documents ------------------------------------------------------------------


def test_parts_count_by_the_documented_rule() -> None:
    from agentrio import DocumentPart, ImagePart
    from agentrio.providers.tokens import (
        IMAGE_TOKENS,
        PDF_PAGE_TOKENS,
        URL_DOCUMENT_TOKENS,
        parts_tokens,
    )
    from agentrio.types import TextPart

    png = ImagePart(data=b"\x89PNG\r\n\x1a\n" + bytes(100), media_type="image/png")
    three_pages = b"%PDF-1.7\n" + b"<< /Type /Page >>\n<</Type/Page/Parent 1 0 R>>\n" * 1
    three_pages += b"<< /Type /Pages /Count 3 >>\n<< /Type  /Page >>\n"
    packed = b"%PDF-1.5\n" + bytes(120_000)  # page objects compressed: by size
    text = "hello world, " * 30
    assert parts_tokens([TextPart("not counted here: it is the content")]) == 0
    assert parts_tokens([png, ImagePart(url="https://x.com/a.png")]) == 2 * IMAGE_TOKENS == 6000
    assert parts_tokens([DocumentPart(data=three_pages)]) == 3 * PDF_PAGE_TOKENS
    assert parts_tokens([DocumentPart(data=packed)]) == 3 * PDF_PAGE_TOKENS
    assert parts_tokens([DocumentPart(data=b"%PDF-")]) == PDF_PAGE_TOKENS
    assert parts_tokens([DocumentPart(url="https://x.com/a.pdf")]) == URL_DOCUMENT_TOKENS
    plain = DocumentPart(data=text.encode(), media_type="text/plain")
    assert parts_tokens([plain]) == len(text) // 3 + 1
    # Conservative: a text document counts at least what the estimator says of its text.
    assert parts_tokens([plain]) >= estimate_tokens(text)


def test_a_messages_estimate_adds_its_parts_only_when_it_has_some() -> None:
    from agentrio import ImagePart
    from agentrio.providers.tokens import IMAGE_TOKENS, message_tokens

    image = ImagePart(url="https://x.com/a.png")
    with_image = ChatMessage("user", "look", parts=(image,))
    assert message_tokens(estimate_tokens, with_image) == estimate_tokens("look") + IMAGE_TOKENS
    assert message_tokens(estimate_tokens, ChatMessage("user", "look")) == estimate_tokens("look")
