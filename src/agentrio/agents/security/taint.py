"""Taint: which text came from an untrusted tool, and whether a call's arguments carry it.

A phase's taint is a set of fragments of the untrusted results it has seen
(its history's and its own): every ``min_match``-character slice of a result
that starts at a multiple of ``stride``, casefolded. An argument carries
taint when one of its own ``min_match``-character slices (at every offset)
is such a fragment. So a copy of at least ``min_match + stride - 1``
characters of an untrusted result is always found, a copy of ``min_match``
to that many may be, and a shorter one never is. What the model changed
(translated, re-encoded, reworded, spelled with other case rules than
``str.casefold``'s) is not seen: taint tracking follows copies, not meaning.

Memory is bounded: past ``max_chars`` characters of untrusted text in one
phase, the taint is *saturated*: every argument of a sensitive call counts
as tainted (it fails closed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

__all__ = ["Taint", "leaves"]

# The deepest nesting of arguments looked into, and the most strings read per call.
_MAX_DEPTH = 16
_MAX_LEAVES = 10_000
# What `leaves` gives for a value nested deeper than _MAX_DEPTH (told by identity):
# not looked into, so it counts as tainted (fails closed), as too many strings do.
_TOO_DEEP = "(nested too deeply to check)"


def _shown(place: str) -> str:
    """*place*, made of the model's argument names, cut to 100 characters for events."""
    return place if len(place) <= 100 else place[:99] + "…"


def leaves(value: object, where: str = "", depth: int = 0) -> Iterator[tuple[str, str]]:
    """The strings in *value* (a call's arguments: JSON values), each with its place
    (``"to"``, ``"items[2]"``, ``"query.text"``); keys count as strings too."""
    if depth > _MAX_DEPTH:
        if isinstance(value, (str, Mapping, list, tuple)):
            yield where, _TOO_DEEP
        return
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            place = f"{where}.{key}" if where else str(key)
            if isinstance(key, str):
                yield place, key
            yield from leaves(item, place, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from leaves(item, f"{where}[{i}]", depth + 1)


class Taint:
    """The tainted text of one phase, and where it came from.

    Adding a result only keeps its text (casefolded); the fragments are cut
    when a sensitive call is first judged after it (most phases judge none).
    """

    __slots__ = (
        "chars",
        "fragments",
        "max_chars",
        "min_match",
        "pending",
        "saturated_by",
        "stride",
    )

    def __init__(self, *, min_match: int, stride: int, max_chars: int) -> None:
        self.min_match = min_match
        self.stride = stride
        self.max_chars = max_chars
        self.fragments: dict[str, str] = {}  # fragment -> an untrusted tool it came from
        self.pending: list[tuple[str, str]] = []  # (tool, casefolded text) not cut yet
        self.chars = 0
        self.saturated_by: list[str] = []  # the tools whose text went past max_chars

    def add(self, tool: str, text: str) -> None:
        """Taint *text*, a result of the untrusted *tool*."""
        if self.saturated_by:
            if tool not in self.saturated_by:
                self.saturated_by.append(tool)
            return
        self.chars += len(text)
        if self.chars > self.max_chars:
            self.saturated_by.append(tool)
            self.fragments.clear()
            self.pending.clear()
            return
        if len(text) >= self.min_match:
            self.pending.append((tool, text.casefold()))

    def _cut(self) -> None:
        """Cut the pending texts into fragments."""
        n, step = self.min_match, self.stride
        # The slices at multiples of step, by the regex engine: n-character chunks
        # from each offset below step that is a multiple of it.
        chunk = re.compile(f".{{{n}}}", re.S)
        for tool, folded in self.pending:
            for offset in range(0, n, step):
                self.fragments.update(dict.fromkeys(chunk.findall(folded, offset), tool))
        self.pending.clear()

    def find(self, arguments: Mapping[str, object]) -> tuple[str, tuple[str, ...]] | None:
        """Where *arguments* carry tainted text, and the tools it came from (None: nowhere)."""
        if self.pending:
            self._cut()
        if not self.fragments and not self.saturated_by:
            return None
        n = self.min_match
        fragments = self.fragments
        for count, (place, text) in enumerate(leaves(arguments)):
            if count >= _MAX_LEAVES:
                return _shown(place), ("(too many arguments to check)",)
            if text is _TOO_DEEP:
                return _shown(place), ("(arguments nested too deeply to check)",)
            if self.saturated_by:
                return _shown(place) or "(arguments)", tuple(self.saturated_by)
            if len(text) < n:
                continue
            folded = text.casefold()
            sources = {
                fragments[piece]
                for piece in (folded[i : i + n] for i in range(len(folded) - n + 1))
                if piece in fragments
            }
            if sources:
                return self._named(place), tuple(sorted(sources))
        return None

    def _named(self, place: str) -> str:
        """*place* for an event, unless its names (the model's keys) hold tainted
        text themselves: the event never holds the text."""
        n, folded, fragments = self.min_match, place.casefold(), self.fragments
        if any(folded[i : i + n] in fragments for i in range(len(folded) - n + 1)):
            return "(an argument whose name holds the text)"
        return _shown(place)
