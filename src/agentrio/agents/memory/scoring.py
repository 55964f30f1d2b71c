"""Memory items and how they are scored against a query: BM25 by default, embeddings
by a function of the user's.

A scorer is an index: it is told of each item added and removed, and gives the
best *k* for a query. The default, `BM25`, keeps an inverted index (term ->
the items holding it), so a recall costs the items that share a term with
the query, not the memory's size.
"""

from __future__ import annotations

import heapq
import inspect
import math
import re
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from ..._checks import short_repr
from ...errors import InvalidArgument

__all__ = ["BM25", "Embeddings", "MemoryItem", "Scorer", "terms"]


class MemoryItem(msgspec.Struct, frozen=True, gc=False):
    """One remembered item.

    Attributes:
        id: its number in its memory (1, 2, ... in the order items were stored).
        text: what is remembered.
        source: where it came from: a tool's name, or ``"api"``.
        at: when it was stored (``time.time()``).
    """

    id: int
    text: str
    source: str = ""
    at: float = 0.0


_WORD = re.compile(r"\w+")


def terms(text: str) -> list[str]:
    """The lower-cased words of *text* (the default scorer's terms)."""
    return _WORD.findall(text.lower())


class Scorer(Protocol):
    """What ranks a memory's items for a query (`BM25` by default; `Embeddings`).

    A memory makes one scorer for itself (``Memory.scorer`` is a function that
    makes one), tells it of each item added and removed, and asks it for the
    best items. It is called in the memory's actor, never concurrently.
    """

    def add(self, item: MemoryItem) -> None:
        """*item* is now in the memory."""

    def remove(self, item: MemoryItem) -> None:
        """*item* is no longer in the memory."""

    def top(self, query: str, k: int) -> list[tuple[float, int]]:
        """The best *k* items for *query*, best first, as ``(score, item id)``;
        items that do not match at all are left out."""


class BM25:
    """Okapi BM25 over the items' words, with an inverted index.

    Args:
        k1: how fast a term's weight saturates with its count in an item.
        b: how much an item's length discounts its score.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, dict[int, int]] = {}  # term -> item id -> count
        self._lengths: dict[int, int] = {}  # item id -> its word count
        self._total = 0  # the sum of the lengths

    def add(self, item: MemoryItem) -> None:
        """Index *item* (now in the memory)."""
        words = terms(item.text)
        self._lengths[item.id] = len(words)
        self._total += len(words)
        postings = self._postings
        for word in words:
            counts = postings.get(word)
            if counts is None:
                postings[word] = {item.id: 1}
            else:
                counts[item.id] = counts.get(item.id, 0) + 1

    def remove(self, item: MemoryItem) -> None:
        """Forget *item* (no longer in the memory)."""
        length = self._lengths.pop(item.id, None)
        if length is None:
            return
        self._total -= length
        postings = self._postings
        for word in set(terms(item.text)):
            counts = postings.get(word)
            if counts is not None:
                counts.pop(item.id, None)
                if not counts:
                    del postings[word]

    def top(self, query: str, k: int) -> list[tuple[float, int]]:
        """The best *k* items for *query*, best first, as ``(score, item id)``."""
        n = len(self._lengths)
        if n == 0 or k <= 0:
            return []
        average = self._total / n or 1.0
        k1, b, lengths = self.k1, self.b, self._lengths
        scores: dict[int, float] = {}
        for word in set(terms(query)):
            counts = self._postings.get(word)
            if counts is None:
                continue
            idf = math.log(1.0 + (n - len(counts) + 0.5) / (len(counts) + 0.5))
            for item_id, count in counts.items():
                norm = k1 * (1.0 - b + b * lengths[item_id] / average)
                scores[item_id] = scores.get(item_id, 0.0) + idf * count * (k1 + 1) / (count + norm)
        # (ties: the newer item first)
        best = heapq.nlargest(k, scores.items(), key=lambda kv: (kv[1], kv[0]))
        return [(score, item_id) for item_id, score in best]


class Embeddings:
    """Ranks items by the cosine similarity of their embeddings, made by *embed*.

    Args:
        embed: a function of yours (a local embedding model, say) that turns a
            text into a vector; called once per item stored and once per recall,
            in the memory's actor (so it must not block for long; it cannot
            await).
        min_score: items below this similarity are left out.

    Raises:
        InvalidArgument: *embed* is not callable, or is an ``async def``.
    """

    def __init__(self, embed: Callable[[str], Sequence[float]], *, min_score: float = 0.0) -> None:
        if not callable(embed) or inspect.iscoroutinefunction(embed):
            raise InvalidArgument(
                "Embeddings takes a plain function text -> vector (it is called in the "
                f"memory's actor and cannot await), got {short_repr(embed)}"
            )
        self._embed = embed
        self.min_score = min_score
        self._vectors: dict[int, tuple[float, ...]] = {}

    def _unit(self, text: str) -> tuple[float, ...]:
        vector = [float(x) for x in self._embed(text)]
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return tuple(x / norm for x in vector)

    def add(self, item: MemoryItem) -> None:
        """Index *item* (now in the memory)."""
        self._vectors[item.id] = self._unit(item.text)

    def remove(self, item: MemoryItem) -> None:
        """Forget *item* (no longer in the memory)."""
        self._vectors.pop(item.id, None)

    def top(self, query: str, k: int) -> list[tuple[float, int]]:
        """The best *k* items for *query*, best first, as ``(score, item id)``."""
        if not self._vectors or k <= 0:
            return []
        q = self._unit(query)
        scored = (
            (sum(a * b for a, b in zip(q, v, strict=True)), item_id)
            for item_id, v in self._vectors.items()
        )
        best = heapq.nlargest(k, scored)
        return [(s, i) for s, i in best if s > self.min_score]
