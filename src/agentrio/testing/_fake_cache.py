"""The fake server's Anthropic prompt cache: what ``cache_control`` breakpoints buy.

Like the real one, it caches the prefix of a request (tools, then system, then
messages, block by block) that ends at each block marked ``cache_control``, for
that marker's TTL (``"5m"`` unless ``"ttl": "1h"``), once the prefix holds at
least ``MIN_CACHED_TOKENS``; a later request whose breakpoint, or one of the 20
blocks before it, ends a cached prefix reads that prefix from the cache (and
refreshes its TTL). The reply's usage then says so: ``cache_read_input_tokens``
for the prefix read, ``cache_creation_input_tokens`` (split by TTL in
``cache_creation``) for what was written past it, the input total raised to the
request's size if the reply's is smaller. Tokens are counted as one per four
bytes of each block's JSON. Replies that already report cache tokens are sent
as they are.

The cache is the server's (every connection shares it, as an organization's
requests share Anthropic's) and bounded (``MAX_ENTRIES`` prefixes, the oldest
dropped first).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator

import attrs
import msgspec

from ..messages import ModelReply, Usage

__all__ = ["MAX_MARKS", "MIN_CACHED_TOKENS", "PromptCache", "marks_problem"]

MIN_CACHED_TOKENS = 1024  # the API's least cacheable prefix (Sonnet's; Haiku's is more)
MAX_MARKS = 4  # the API's most cache_control blocks in one request
MAX_ENTRIES = 4096  # prefixes remembered
_LOOKBACK = 20  # blocks before a breakpoint where a cached prefix is looked for
_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
_BYTES_PER_TOKEN = 4


@attrs.frozen
class _Unit:
    """One block of a request, as the cache sees it."""

    digest: bytes  # of the prefix that ends with this block
    tokens: int  # of that prefix
    ttl: str | None  # its breakpoint's TTL, if it is marked


def _blocks(body: dict[str, object]) -> Iterator[tuple[object, object]]:
    """(block, its cache_control) in cache order: tools, system, messages."""
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        yield tool, tool.get("cache_control") if isinstance(tool, dict) else None
    system = body.get("system")
    if isinstance(system, str):
        yield {"system": system}, None
    for block in system if isinstance(system, list) else ():
        yield block, block.get("cache_control") if isinstance(block, dict) else None
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        content, role = message.get("content"), message.get("role")
        if isinstance(content, str):
            yield {"role": role, "text": content}, None
        for block in content if isinstance(content, list) else ():
            mark = block.get("cache_control") if isinstance(block, dict) else None
            yield {"role": role, "block": block}, mark


def _ttl(mark: object) -> str | None:
    if not isinstance(mark, dict):
        return None
    ttl = mark.get("ttl", "5m")
    return ttl if isinstance(ttl, str) else None


def marks_problem(body: dict[str, object]) -> str:
    """Why the API would refuse *body*'s ``cache_control`` markers ("" if it would not)."""
    marks = [mark for _, mark in _blocks(body) if mark is not None]
    if len(marks) > MAX_MARKS:
        return (
            f"A maximum of {MAX_MARKS} blocks with cache_control may be provided. "
            f"Found {len(marks)}."
        )
    for mark in marks:
        if not isinstance(mark, dict) or mark.get("type") != "ephemeral":
            return f"cache_control must be {{'type': 'ephemeral'}}, got {mark!r}"
        if _ttl(mark) not in _TTL_SECONDS:
            return f"cache_control.ttl must be '5m' or '1h', got {mark.get('ttl')!r}"
    return ""


def _units(body: dict[str, object]) -> list[_Unit]:
    digest = hashlib.sha256(repr(body.get("model")).encode()).digest()
    tokens = 0
    units = []
    for block, mark in _blocks(body):
        if isinstance(block, dict) and "cache_control" in block:
            block = {k: v for k, v in block.items() if k != "cache_control"}
        elif isinstance(block, dict) and isinstance(block.get("block"), dict):
            inner = {k: v for k, v in block["block"].items() if k != "cache_control"}
            block = {**block, "block": inner}
        data = msgspec.json.encode(block)
        digest = hashlib.sha256(digest + data).digest()
        tokens += -(-len(data) // _BYTES_PER_TOKEN)
        units.append(_Unit(digest, tokens, _ttl(mark) if mark is not None else None))
    return units


class PromptCache:
    """The prefixes cached so far, with when each expires (a server's own)."""

    def __init__(self) -> None:
        # prefix digest -> (when it expires, its TTL in seconds)
        self._entries: OrderedDict[bytes, tuple[float, float]] = OrderedDict()

    def apply(self, body: dict[str, object], reply: ModelReply, now: float) -> ModelReply:
        """*reply* with the usage the cache gives *body* at time *now*; the cache updated."""
        if reply.usage.cached_input_tokens or reply.usage.cache_write_tokens:
            return reply
        units = _units(body)
        marks = [i for i, unit in enumerate(units) if unit.ttl is not None]
        if not marks:
            return reply
        hit = self._hit(units, marks, now)
        read = units[hit].tokens if hit >= 0 else 0
        written = dict.fromkeys(_TTL_SECONDS, 0)
        start = read
        for i in marks:
            unit = units[i]
            if i <= hit or unit.tokens < MIN_CACHED_TOKENS or unit.ttl is None:
                continue
            written[unit.ttl] += unit.tokens - start
            start = unit.tokens
            self._store(unit.digest, now, _TTL_SECONDS[unit.ttl])
        if not read and not start:
            return reply  # nothing cacheable: the usage is the reply's
        return _with_usage(reply, units[-1].tokens, read, written)

    def _hit(self, units: list[_Unit], marks: list[int], now: float) -> int:
        """The last block of the longest cached prefix a breakpoint finds (-1: none)."""
        best = -1
        for mark in marks:
            for i in range(mark, max(-1, mark - _LOOKBACK - 1), -1):
                entry = self._entries.get(units[i].digest)
                if entry is not None and entry[0] > now:
                    best = max(best, i)
                    self._store(units[i].digest, now, entry[1])  # a read refreshes the TTL
                    break
        return best

    def _store(self, digest: bytes, now: float, ttl: float) -> None:
        old = self._entries.get(digest)
        if old is not None:
            ttl = max(ttl, old[1])
        self._entries[digest] = (now + ttl, ttl)
        self._entries.move_to_end(digest)
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)


def _with_usage(reply: ModelReply, prompt: int, read: int, written: dict[str, int]) -> ModelReply:
    usage = reply.usage
    wrote = sum(written.values())
    total = max(usage.input_tokens, prompt, read + wrote)
    cached = Usage(
        total,
        usage.output_tokens,
        usage.cost_usd,
        cached_input_tokens=read,
        cache_write_tokens=wrote,
        reasoning_tokens=usage.reasoning_tokens,
        cache_write_1h_tokens=written["1h"],
    )
    return msgspec.structs.replace(reply, usage=cached)
