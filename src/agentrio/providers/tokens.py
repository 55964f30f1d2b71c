"""The token estimate: how many tokens a text, or a message, is taken to cost.

A provider reserves a request's estimate before it sends it; the agent layer
uses the same estimate to fit a context window and to reserve from a budget.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ..messages import ChatMessage

__all__ = ["TokenEstimator", "arguments_text", "estimate_tokens", "message_text"]

TokenEstimator = Callable[[str], int]

_encode = msgspec.json.encode


def estimate_tokens(text: str) -> int:
    """The default token estimate: ASCII characters / 3.5, plus one token for
    each other character, plus one.

    Reservations rest on it, so it leans high for English (about 4
    characters a token) and CJK text (usually 1 to 2 characters a token),
    which characters / 3.5 under-counted about 2x. It counts each non-ASCII
    character as one token, which is not always enough: a byte-fallback
    tokenizer may spend 2 or 3 tokens on a rare character, and an emoji may
    take several. A call whose reported usage then passes its reservation
    is an overrun: charged in full, and counted in ``UsageTotals.overruns``.

    That is ``int(len(text) / 3.5) + 1`` for ASCII text, else
    ``int(ascii_characters / 3.5) + other_characters + 1``. Used for the
    context window and for budget reservations unless the spec has a
    ``token_estimator``.
    """
    # (n * 2 // 7 is int(n / 3.5), exactly, without the int() call.)
    if text.isascii():  # (a C scan: the common case costs what it did)
        return len(text) * 2 // 7 + 1
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars * 2 // 7 + (len(text) - ascii_chars) + 1


def message_text(msg: ChatMessage) -> str:
    """The text of *msg* that a model reads, tool calls included, for estimating.

    A tool call counts as its name and its arguments as JSON (their ``repr``
    if they are not JSON, as in a direct call with arbitrary objects).
    """
    calls = msg.tool_calls
    if not calls:
        return msg.content
    return msg.content + "".join(c.name + arguments_text(c.arguments) for c in calls)


def arguments_text(arguments: object) -> str:
    """A tool call's *arguments* as JSON text, or their ``repr`` if they are not JSON."""
    try:
        return _encode(arguments).decode()
    except (TypeError, ValueError):  # (msgspec.EncodeError is a ValueError)
        return repr(arguments)
