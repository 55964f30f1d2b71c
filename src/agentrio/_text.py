"""The one rule for text that is not valid Unicode: lone surrogates become U+FFFD.

Text that enters agentrio from outside (a tool's result, a model's answer, an MCP
server's output) can hold lone surrogates: ``os.fsdecode(b"report-\\xff.txt")`` gives
``"report-\\udcff.txt"``, and a JSON ``"\\ud800"`` escape decodes to one. Such a string
cannot be encoded as UTF-8, so it would fail later, far from where it came in: in
the trace writer, on the next request's body, in a checkpoint record. It is made
valid where it enters, once, by `scrub`.
"""

from __future__ import annotations

__all__ = ["scrub"]


def scrub(text: str) -> str:
    """*text* with each lone surrogate replaced by U+FFFD (REPLACEMENT CHARACTER).

    A high surrogate followed by a low one is joined into the character they spell
    (what a UTF-16 reader would make of it). Valid text is returned as is (the same
    object): ASCII is checked at C speed, the rest by one UTF-8 encode.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
