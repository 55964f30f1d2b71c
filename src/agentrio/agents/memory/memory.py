"""Memory: what an agent keeps of its tool results, and recalls before its model calls.

``AgentSpec(memory=Memory(...))`` gives each agent of the spec a memory of its
own; ``Memory(name="team")`` (or ``memory="team"``) one memory shared by every
agent of the runtime whose spec names it. A memory is an inline actor
(`MemoryActor`) under the agent's supervisor: its items live in a
`MemoryState` that outlives the actor's incarnations (a crash of the actor,
which only a broken scorer or keep rule can cause, loses nothing).

Bounds: at most ``max_items`` items and ``max_bytes`` bytes of text (UTF-8);
storing past either evicts the oldest item (``evict="oldest"``) or the one
recalled least (``evict="least_recalled"``, the oldest of those on a tie).
An item longer than ``max_item_chars`` is cut to that many characters (its
``MemoryStored`` event says so); an empty one, or one still over
``max_bytes`` once cut, is refused (not stored, no event).

With a checkpoint store (``open_runtime(store=...)``), each item stored and
each clear is also a record of the store (the runtime's ``Journal``), and a
memory made in a later runtime on the same store starts with what the
records hold: across phases, restarts and crashes alike.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import attrs
import msgspec

from ..._checks import check_int, short_repr
from ..._text import scrub
from ...actors.actor import InlineActor
from ...errors import InvalidArgument, StoreCorrupt
from ...messages import Message, ToolResult
from .scoring import BM25, MemoryItem, Scorer

__all__ = [
    "Journal",
    "KeepRule",
    "Memory",
    "MemoryActor",
    "MemoryState",
    "Stored",
    "keep_ok_results",
]

KeepRule = Callable[[ToolResult], "str | None"]
"""Which tool results a memory keeps: the text to remember of a result, or None."""

Evict = Literal["oldest", "least_recalled"]


def keep_ok_results(result: ToolResult) -> str | None:
    """The default keep rule: each result with status ``"ok"`` and some text, as
    ``"<tool>: <content>"``."""
    if result.status != "ok" or not result.content.strip():
        return None
    return f"{result.name}: {result.content}"


def _check_memory(memory: Memory) -> None:
    if memory.name is not None and (not isinstance(memory.name, str) or not memory.name):
        raise InvalidArgument(f"Memory.name must be a non-empty str or None, got {memory.name!r}")
    check_int("Memory.max_items", memory.max_items, 1)
    check_int("Memory.max_bytes", memory.max_bytes, 1)
    check_int("Memory.max_item_chars", memory.max_item_chars, 1)
    check_int("Memory.recall", memory.recall, 0)
    check_int("Memory.recall_tokens", memory.recall_tokens, 1)
    if memory.keep is not None and not callable(memory.keep):
        raise InvalidArgument(
            f"Memory.keep must be callable or None, got {short_repr(memory.keep)}"
        )
    if not callable(memory.scorer):
        raise InvalidArgument(
            f"Memory.scorer must be a function that makes a Scorer, got {short_repr(memory.scorer)}"
        )
    if memory.evict not in ("oldest", "least_recalled"):
        raise InvalidArgument(
            f"Memory.evict must be 'oldest' or 'least_recalled', got {memory.evict!r}"
        )


@attrs.frozen
class Memory:
    """What an agent remembers, and how (``AgentSpec(memory=...)``).

    Attributes:
        name: None: each agent has a memory of its own. A name: one memory,
            shared by every agent of the runtime whose spec names it.
        max_items: the most items it holds.
        max_bytes: the most bytes of text (UTF-8) it holds.
        max_item_chars: a longer item is cut to this many characters.
        recall: how many items are recalled before each model call (0: none;
            the memory is then filled and searched only).
        recall_tokens: the most tokens the recalled items may take in a call
            (as the spec's token estimator counts): the items past it are left
            out, and one that does not fit alone is cut.
        keep: which tool results are remembered (`keep_ok_results` by
            default; None: none, the memory is filled by ``remember()`` only).
        scorer: makes the memory's scorer (`BM25` by default; an
            ``Embeddings`` with your function for embeddings).
        evict: which item goes when the memory is full: ``"oldest"`` or
            ``"least_recalled"``.
    """

    name: str | None = None
    max_items: int = 1000
    max_bytes: int = 1_000_000
    max_item_chars: int = 2000
    recall: int = 3
    recall_tokens: int = 500
    keep: Callable[[ToolResult], str | None] | None = keep_ok_results
    scorer: Callable[[], Scorer] = BM25
    evict: Evict = "oldest"

    def __attrs_post_init__(self) -> None:
        _check_memory(self)


class Journal(Protocol):
    """Where a memory keeps its records: the runtime's checkpoint store, when it has one."""

    def memory_records(self, name: str) -> Sequence[bytes]:
        """The records the store holds for the memory *name*, oldest first."""

    def keep_memory(self, name: str, data: bytes) -> None:
        """Append one record of the memory *name* (never waits)."""


class _Kept(msgspec.Struct, frozen=True, tag=True, array_like=True):
    item: MemoryItem


class _Wiped(msgspec.Struct, frozen=True, tag=True, array_like=True):
    pass


_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(_Kept | _Wiped).decode


class Stored(msgspec.Struct, frozen=True, gc=False):
    """What storing an item did: its id, its length as kept, whether it was cut,
    how many items were evicted for it."""

    item_id: int
    chars: int
    cut: bool
    evicted: int


class MemoryState:
    """A memory's items, its scorer and its bounds; what `MemoryActor` works on.

    Attributes:
        key: the memory's name in events and in the store (an agent's own
            memory: the agent's path).
        items: by id, oldest first.
        bytes: the UTF-8 size of the items' text.
    """

    def __init__(
        self, key: str, memory: Memory, journal: Journal | None = None, *, shared: bool = False
    ) -> None:
        self.key = key
        # (its records' name in the store: an agent's own memory's is the agent's path;
        # a shared one's begins with "/", which no path does, so that a shared memory
        # named as an agent's path is not that agent's memory, nor deleted with it)
        self.store_key = "/" + key if shared else key
        self.memory = memory
        self.items: dict[int, MemoryItem] = {}
        self.hits: dict[int, int] = {}
        self.bytes = 0
        self.next_id = 1
        self.scorer = memory.scorer()
        self.journal: Journal | None = None  # (not while its records are replayed)
        if journal is not None:
            self._replay(journal.memory_records(self.store_key))
        self.journal = journal

    def _replay(self, records: Sequence[bytes]) -> None:
        for n, data in enumerate(records):
            try:
                record = _DECODE(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise StoreCorrupt(
                    f"memory {self.key!r}: its record {n} in the checkpoint store is damaged",
                    source=f"memory {self.key!r}",
                    offset=n,
                ) from None
            if type(record) is _Wiped:
                self.clear()
            else:
                item = record.item
                self.store(item.text, item.source, at=item.at)

    def store(self, text: object, source: str, *, at: float | None = None) -> Stored | None:
        """Store *text*; what was stored, or None if it was refused."""
        if not isinstance(text, str):
            return None
        text = scrub(text[: self.memory.max_item_chars * 2]).strip()
        if not text:
            return None
        source = scrub(source[:100])
        most = self.memory.max_item_chars
        cut = len(text) > most
        if cut:
            text = text[: most - 1] + "…"
        size = len(text.encode())
        if size > self.memory.max_bytes:
            return None
        item = MemoryItem(self.next_id, text, source, time.time() if at is None else at)
        try:
            self.scorer.add(item)
        except Exception:  # (a scorer, or its embedding function, that raises: refused)
            return None
        evicted = 0
        while self.items and (
            len(self.items) >= self.memory.max_items or self.bytes + size > self.memory.max_bytes
        ):
            self._evict()
            evicted += 1
        self.next_id += 1
        self.items[item.id] = item
        self.bytes += size
        if self.journal is not None:
            self.journal.keep_memory(self.store_key, _ENCODE(_Kept(item)))
        return Stored(item.id, len(text), cut, evicted)

    def _evict(self) -> None:
        if self.memory.evict == "oldest":
            item_id = next(iter(self.items))
        else:
            hits = self.hits
            item_id = min(self.items, key=lambda i: (hits.get(i, 0), i))
        self._drop(item_id)

    def _drop(self, item_id: int) -> None:
        item = self.items.pop(item_id)
        self.hits.pop(item_id, None)
        self.bytes -= len(item.text.encode())
        # (a scorer that raises here may still name it: search skips ids not held)
        with contextlib.suppress(Exception):
            self.scorer.remove(item)

    def search(self, query: str, k: int, *, recalled: bool = False) -> list[MemoryItem]:
        """The best *k* items for *query*, best first (*recalled*: count it as a recall)."""
        try:
            top = self.scorer.top(query, k)
        except Exception:  # (a scorer, or its embedding function, that raises: nothing)
            return []
        found = [self.items[i] for _, i in top if i in self.items]
        if recalled:
            for item in found:
                self.hits[item.id] = self.hits.get(item.id, 0) + 1
        return found

    def clear(self) -> int:
        """Forget everything; how many items there were."""
        count = len(self.items)
        self.items.clear()
        self.hits.clear()
        self.bytes = 0
        self.scorer = self.memory.scorer()
        if self.journal is not None:
            self.journal.keep_memory(self.store_key, _ENCODE(_Wiped()))
        return count


class Remember(Message, frozen=True):
    """Store *text* (from *source*) in a memory; the reply is a `Stored` or None."""

    text: str
    source: str = "api"


class Recall(Message, frozen=True):
    """The best *k* items for *query*; *recalled*: counted as a recall."""

    query: str
    k: int = 5
    recalled: bool = False


class Forget(Message, frozen=True):
    """Empty the memory; the reply is how many items it held."""


class ListItems(Message, frozen=True):
    """Every item, oldest first."""


class MemoryActor(InlineActor[Message]):
    """A memory: handles `Remember`, `Recall`, `Forget` and `ListItems` on its
    `MemoryState`, in the asker's task (it never waits)."""

    __slots__ = ("state",)

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def handle(self, msg: Message) -> object:
        state = self.state
        if type(msg) is Recall:
            return state.search(msg.query, msg.k, recalled=msg.recalled)
        if type(msg) is Remember:
            return state.store(msg.text, msg.source)
        if type(msg) is Forget:
            return state.clear()
        if type(msg) is ListItems:
            return list(state.items.values())
        raise TypeError(f"MemoryActor cannot handle {type(msg).__name__}")
