"""Anthropic's server-tool blocks, citations and rich tool results, kept apart from the wire.

An answer that used a server tool (web search, code execution) holds blocks
agentrio does not interpret (``server_tool_use``, ``web_search_tool_result``,
``code_execution_tool_result``, text blocks with ``citations``, and types
yet to come). They are kept, in order, as `RawBlock`s on the assistant turn
and sent back unchanged, as the API wants for a ``pause_turn`` continuation
and for the calls after it. An answer without them pays nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..errors import InvalidArgument
from ..messages import ChatMessage, ContentPart, RawBlock, TextPart
from .guard import loads
from .wire import PartRules, bad, check_parts

__all__ = [
    "READ",
    "PartialBlock",
    "kept_blocks",
    "sent_blocks",
    "server_tool_definitions",
    "streamed_blocks",
    "tool_result_content",
]

# The blocks the wire reads itself; any other is kept as a RawBlock.
READ = frozenset(("tool_use", "thinking", "redacted_thinking"))
_encode = msgspec.json.encode
_decode = msgspec.json.decode


def _plain(block: dict[str, Any]) -> bool:
    """A text block without citations: nothing to keep beyond its text."""
    return block.get("type") == "text" and not block.get("citations")


def _checked(block: dict[str, Any], provider: str, where: str) -> RawBlock:
    """*block* as a RawBlock, its fields the API's own blocks need checked.

    Raises:
        BadResponse: a known block with a field of the wrong shape.
    """
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise bad(provider, f"{where}.text is not a string")
        citations = block.get("citations")
        if citations is not None and not (
            isinstance(citations, list) and all(isinstance(c, dict) for c in citations)
        ):
            raise bad(provider, f"{where}.citations is not a list of objects")
    elif kind == "server_tool_use":
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise bad(provider, f"{where} (server_tool_use) has no id or name")
        if not isinstance(block.get("input"), dict):
            raise bad(provider, f"{where}.input (server_tool_use) is not an object")
    elif kind.endswith("_tool_result") and not isinstance(block.get("tool_use_id"), str):
        raise bad(provider, f"{where} ({kind[:64]}) has no tool_use_id")
    return RawBlock(kind, _encode(block).decode())


def kept_blocks(
    blocks: Sequence[tuple[int, dict[str, Any]]], provider: str
) -> tuple[RawBlock, ...]:
    """The answer's blocks (*blocks*: its blocks but the tool_use and thinking
    ones, with their indexes) to keep: all of them, when any is more than plain
    text; none otherwise (the answer's text says it all)."""
    if all(_plain(block) for _, block in blocks):
        return ()
    return tuple(_checked(block, provider, f"content[{i}]") for i, block in blocks)


def sent_blocks(msg: ChatMessage) -> list[dict[str, object]]:
    """An assistant turn's kept blocks as the request sends them back."""
    return [_decode(block.json) for block in msg.blocks]


def server_tool_definitions(
    server_tools: Sequence[Mapping[str, object]], tools: Sequence[dict[str, object]]
) -> list[dict[str, object]]:
    """The ``tools`` entries of *server_tools*, offered beside the agent's *tools*.

    Raises:
        InvalidArgument: a server tool has the name of one of *tools*.
    """
    names = {t.get("name") for t in tools}
    for server_tool in server_tools:
        if server_tool["name"] in names:
            raise InvalidArgument(
                f"ModelSettings.server_tools: {server_tool['name']!r} is also the name of "
                "one of the agent's tools"
            )
    return [dict(t) for t in server_tools]


def tool_result_content(
    msg: ChatMessage, rules: PartRules, block: Any
) -> str | list[dict[str, object]]:
    """A tool turn's ``tool_result`` content: its text, or its parts as blocks
    (*block* makes one block of a part) when the tool returned parts.

    Raises:
        InvalidArgument: the wire takes no such part (naming the tool).
    """
    if not msg.parts:
        return msg.content
    check_parts(rules, msg.parts, f"tool {msg.name!r} result part")
    return [block(p) for p in msg.parts if not _empty(p)]


def _empty(part: ContentPart) -> bool:
    return isinstance(part, TextPart) and not part.text


class PartialBlock:
    """A kept block as a stream brings it: its start, then text, citations or input."""

    __slots__ = ("citations", "input", "start", "text")

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.text: list[str] = []
        self.citations: list[object] = []
        self.input: list[str] = []

    def block(self, provider: str, where: str) -> dict[str, Any]:
        """The whole block (BadResponse if its streamed input is not a JSON object)."""
        block = dict(self.start)
        if self.text:
            block["text"] = str(block.get("text") or "") + "".join(self.text)
        if self.citations:
            earlier = block.get("citations")
            block["citations"] = (earlier if isinstance(earlier, list) else []) + self.citations
        if self.input:
            try:
                block["input"] = loads("".join(self.input))
            except (ValueError, RecursionError):
                raise bad(provider, f"{where}: its streamed input is not JSON") from None
        return block


def streamed_blocks(partials: dict[int, PartialBlock], provider: str) -> tuple[RawBlock, ...]:
    """`kept_blocks` of a streamed answer's partial blocks."""
    blocks = [(i, p.block(provider, f"content[{i}]")) for i, p in sorted(partials.items())]
    return kept_blocks(blocks, provider)
