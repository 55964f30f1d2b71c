"""The token estimate: how many tokens a text, or a message, is taken to cost.

A provider reserves a request's estimate before it sends it; the agent layer
uses the same estimate to fit a context window and to reserve from a budget.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import msgspec

from ..messages import ChatMessage, ContentPart, DocumentPart, ImagePart

__all__ = [
    "IMAGE_TOKENS",
    "PDF_PAGE_TOKENS",
    "URL_DOCUMENT_TOKENS",
    "TokenEstimator",
    "arguments_text",
    "estimate_tokens",
    "message_text",
    "message_tokens",
    "parts_tokens",
]

IMAGE_TOKENS = 3_000
"""What one image counts, whatever its size or source: more than any of
OpenAI's (high detail: at most 1,445 tokens for GPT-4o; patch-based models at
most 1,536 patches x 1.72 = 2,642) or Anthropic's (about 1,600 at the largest
size it keeps) charge. (GPT-4o mini counts images at many times that: an
overrun, charged in full.)"""
PDF_PAGE_TOKENS = 4_800
"""What one PDF page counts: 3,000 for its text (the top of Anthropic's
1,500 to 3,000) and 1,800 for the image of the page the providers add."""
_PDF_BYTES_PER_PAGE = 50_000  # when the pages cannot be counted (compressed streams)
URL_DOCUMENT_TOKENS = 10 * PDF_PAGE_TOKENS
"""What a document given by URL counts (its size is unknown until the
provider fetches it): ten PDF pages."""
# A page object of a PDF ("/Type /Page", not "/Type /Pages").
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")

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

    The images and documents of a user turn given as parts are counted
    apart, by a fixed rule that no ``token_estimator`` replaces (see
    [Images and documents][images-and-documents]).
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
    # (kept server-tool blocks are sent in place of the text: search results and all)
    content = "".join(b.json for b in msg.blocks) if msg.blocks else msg.content
    if not calls:
        return content
    return content + "".join(c.name + arguments_text(c.arguments) for c in calls)


def arguments_text(arguments: object) -> str:
    """A tool call's *arguments* as JSON text, or their ``repr`` if they are not JSON."""
    try:
        return _encode(arguments).decode()
    except (TypeError, ValueError):  # (msgspec.EncodeError is a ValueError)
        return repr(arguments)


def parts_tokens(parts: Sequence[ContentPart]) -> int:
    """The tokens the images and documents of a user turn count (its text is counted
    as ``content``, by the estimator).

    The rule: each image ``IMAGE_TOKENS`` (3,000); a
    PDF ``PDF_PAGE_TOKENS`` (4,800) per page (its
    ``/Type /Page`` objects; when none is seen, their dictionaries being
    compressed, a page per 50,000 bytes, at least one); a text document its
    bytes / 3, plus one; a document given by URL
    ``URL_DOCUMENT_TOKENS`` (48,000).
    """
    total = 0
    for part in parts:
        if isinstance(part, ImagePart):
            total += IMAGE_TOKENS
        elif isinstance(part, DocumentPart):
            total += _document_tokens(part)
    return total


def _document_tokens(part: DocumentPart) -> int:
    data = part.data
    if data is None:
        return URL_DOCUMENT_TOKENS
    if part.media_type == "text/plain":
        return len(data) // 3 + 1
    pages = len(_PDF_PAGE.findall(data)) or max(1, math.ceil(len(data) / _PDF_BYTES_PER_PAGE))
    return pages * PDF_PAGE_TOKENS


def message_tokens(estimate: TokenEstimator, msg: ChatMessage) -> int:
    """*msg*'s estimate: *estimate* of its text, plus its parts' tokens."""
    size = estimate(message_text(msg))
    return size + parts_tokens(msg.parts) if msg.parts else size
