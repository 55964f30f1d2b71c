"""agentrio._text.scrub: lone surrogates become U+FFFD, valid text is untouched."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from agentrio._text import scrub


def test_a_file_name_that_is_not_utf8_becomes_encodable() -> None:
    name = os.fsdecode(b"report-\xff.txt")
    assert scrub(name) == "report-\ufffd.txt"
    scrub(name).encode("utf-8")


def test_lone_high_and_low_surrogates_are_replaced() -> None:
    assert scrub("a\ud800b") == "a\ufffdb"
    assert scrub("a\udfffb") == "a\ufffdb"
    assert scrub("\udc80\udc80") == "\ufffd\ufffd"


def test_a_surrogate_pair_is_joined_into_its_character() -> None:
    assert scrub("x\ud83d\ude00y") == "x\U0001f600y"


def test_valid_text_is_returned_as_the_same_object() -> None:
    for text in ("", "plain ascii", "h\u00e9llo \U0001f600"):
        assert scrub(text) is text


@given(st.text())
def test_valid_text_is_unchanged(text: str) -> None:
    assert scrub(text) == text


@given(st.lists(st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))).map("".join))
def test_every_string_comes_out_encodable(text: str) -> None:
    scrub(text).encode("utf-8")
