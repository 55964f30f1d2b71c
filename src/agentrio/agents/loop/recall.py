"""An agent's memory and context providers, as its loop uses them.

`Recollection` is made for an agent whose spec has a ``memory`` or
``context_providers`` (``_AgentState.recall``; None for every other agent,
which costs a phase one test per model call and one per batch of tool
calls). Before each model call it recalls the memory's best items for what
the call is about and gathers the providers' context, and the call gets them
as one system message after the system prompt (the history is not changed:
the next call gets the context of its own). After each batch of tool calls it
stores what the memory's ``keep`` rule keeps. `MemoryHandle` is the memory
as the API offers it (``AgentRef.memory``, ``Runtime.memory``).

The memory and the providers themselves are in ``agents/memory``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..._checks import check_int
from ..._handles import NoPublicConstructor, create
from ..._text import PREVIEW_SCAN
from ...actors import exit_reason
from ...actors.actor import ActorRef
from ...errors import InvalidArgument
from ...messages import (
    ChatMessage,
    ContextProvided,
    ContextProviderFailed,
    MemoriesSearched,
    MemoryCleared,
    MemoryRecalled,
    MemoryStored,
    ToolResult,
)
from ..memory.memory import (
    Forget,
    ListItems,
    Memory,
    MemoryActor,
    MemoryState,
    Recall,
    Remember,
    Stored,
)
from ..memory.providers import ContextProviders, fit, gather_context
from ..memory.scoring import MemoryItem
from ..tools.tool_call import hide_env

if TYPE_CHECKING:
    from ...actors.bus import EventBus
    from ...providers.tokens import TokenEstimator
    from ...supervisors.ref import SupervisorRef
    from ..memory.memory import Journal


# What this module reads of the loop's objects (Services, _AgentState, Phase):
# Protocols, not imports, so that it is in no import cycle with them.
class Services(Protocol):
    memories: dict[str, tuple[ActorRef, MemoryState]] | None

    @property
    def bus(self) -> EventBus: ...

    @property
    def checkpoints(self) -> Journal | None: ...

    @property
    def otel(self) -> _Observer | None: ...


class _Info(Protocol):
    @property
    def estimator(self) -> TokenEstimator: ...


class _Spec(Protocol):
    @property
    def env(self) -> Mapping[str, str]: ...


class _Observer(Protocol):
    # (phase: the loop's Phase, which this module names only by the Protocol below)
    def context_added(
        self, phase: Any, source: str, tokens: int, *, cut: bool = False, skipped: str = ""
    ) -> None: ...


class _AgentState(Protocol):
    @property
    def services(self) -> Services: ...

    @property
    def spec(self) -> _Spec: ...

    @property
    def sup(self) -> SupervisorRef: ...

    @property
    def ref(self) -> ActorRef | None: ...

    @property
    def info(self) -> _Info: ...


class _Guard(Protocol):
    def hide(self, text: str) -> str: ...

    def recalled(self, items: Sequence[tuple[int, str, str]]) -> None: ...


class Phase(Protocol):
    @property
    def st(self) -> _AgentState: ...

    @property
    def history(self) -> list[ChatMessage]: ...

    @property
    def bus(self) -> EventBus: ...

    @property
    def path(self) -> str: ...

    @property
    def guard(self) -> _Guard | None: ...


__all__ = ["MemoryHandle", "Recollection", "agent_memory", "shared_memory"]

_QUERY_CHARS = 4000
_RECALL_HEAD = "Memories that may help (kept from earlier work; they may be out of date):"


def shared_memory(services: Services, sup: SupervisorRef, memory: Memory) -> ActorRef:
    """The runtime's shared memory ``memory.name``: spawned under *sup* on first use
    (its items kept in *services*, so that a new actor after a stop goes on with them)."""
    assert memory.name is not None
    table = services.memories
    if table is None:
        table = services.memories = {}
    known = table.get(memory.name)
    if known is not None and exit_reason(known[0]) is None:
        return known[0]
    if known is not None:
        state = known[1]
    else:
        state = MemoryState(memory.name, memory, services.checkpoints, shared=True)
    ref = sup.spawn_nowait(MemoryActor, state, restart="permanent")
    table[memory.name] = (ref, state)
    return ref


def _query(history: Sequence[ChatMessage]) -> str:
    """What a call is about: the last user message and the tool results after it."""
    parts: list[str] = []
    answered = False  # (tool results before the last reply were answered already)
    for m in reversed(history):
        if m.role == "user":
            parts.append(m.content)
            break
        if m.role == "assistant":
            answered = True
        elif m.role == "tool" and not answered:
            parts.append(m.content)
    return "\n".join(reversed(parts))[:_QUERY_CHARS]


class Recollection:
    """One agent's memory (its actor, made on first use) and context providers."""

    __slots__ = ("_ref", "memory", "providers")

    def __init__(self, memory: Memory | None, providers: ContextProviders | None) -> None:
        self.memory = memory
        self.providers = providers
        self._ref: ActorRef | None = None

    def ref(self, st: _AgentState) -> ActorRef:
        """The agent's memory actor (spawned on first use, owned by the agent)."""
        memory = self.memory
        assert memory is not None and st.ref is not None
        if memory.name is not None:
            return shared_memory(st.services, st.sup, memory)
        ref = self._ref
        if ref is None:
            state = MemoryState(st.ref.path, memory, st.services.checkpoints)
            ref = self._ref = st.sup.spawn_nowait(MemoryActor, state, owner=st.ref)
        return ref

    def key(self, st: _AgentState) -> str:
        """The memory's name in events: a shared one's name, else the agent's path."""
        assert self.memory is not None and st.ref is not None
        return self.memory.name or st.ref.path

    async def before_call(
        self, phase: Phase, view: list[ChatMessage], estimate: int
    ) -> tuple[list[ChatMessage], int]:
        """*view* with the recalled items and the providers' context, and its estimate."""
        st = phase.st
        query = _query(phase.history)
        pieces: list[str] = []
        memory = self.memory
        if memory is not None and memory.recall and query:
            found = await self.ref(st).ask(Recall(query, memory.recall, recalled=True))
            assert isinstance(found, list)
            recalled = self._recalled(phase, found, memory)
            if recalled:
                pieces.append(recalled)
        if self.providers is not None:
            pieces += await self._provided(phase, query)
        if not pieces:
            return view, estimate
        text = "\n\n".join(pieces)
        lead = 0
        while lead < len(view) and view[lead].role == "system":
            lead += 1
        added = ChatMessage("system", text)
        return [*view[:lead], added, *view[lead:]], estimate + st.info.estimator(text)

    def _recalled(self, phase: Phase, found: list[MemoryItem], memory: Memory) -> str:
        estimate = phase.st.info.estimator
        left = memory.recall_tokens
        lines: list[str] = []
        ids: list[int] = []
        for item in found:
            line, tokens, cut = fit(f"- {item.text}", left, estimate)
            if not line or (cut and lines):
                break
            lines.append(line)
            ids.append(item.id)
            left -= tokens
            if left <= 0:
                break
        if not lines:
            return ""
        if phase.guard is not None:  # (#26) what untrusted tools gave taints the phase
            phase.guard.recalled([(i.id, i.source, i.text) for i in found[: len(ids)]])
        otel = phase.st.services.otel
        if otel is not None:
            otel.context_added(phase, "memory", memory.recall_tokens - left)
        if phase.bus.active:
            phase.bus.publish(
                MemoryRecalled(
                    path=phase.path,
                    memory=self.key(phase.st),
                    item_ids=tuple(ids),
                    tokens=memory.recall_tokens - left,
                )
            )
        return "\n".join([_RECALL_HEAD, *lines])

    async def _provided(self, phase: Phase, query: str) -> list[str]:
        assert self.providers is not None
        st = phase.st
        outcomes = await gather_context(self.providers, query, phase.path, st.info.estimator)
        pieces: list[str] = []
        env = st.spec.env  # (its values are hidden in events, as in ToolEnded's previews)
        otel = st.services.otel
        for got in outcomes:
            if got.failure is not None:
                if otel is not None:
                    otel.context_added(phase, got.name, 0, skipped=got.failure[0])
                if phase.bus.active:
                    reason, error_type, error = got.failure
                    # (hidden, then cut, as the preview below)
                    if env:
                        error = hide_env(error, env)
                    if phase.guard is not None:
                        error = phase.guard.hide(error)
                    phase.bus.publish(
                        ContextProviderFailed(
                            path=phase.path,
                            provider=got.name,
                            reason=reason,
                            error_type=error_type,
                            error=error[:200],
                        )
                    )
                continue
            if not got.text:
                continue
            pieces.append(f"Context from {got.name}:\n{got.text}")
            if otel is not None:
                otel.context_added(phase, got.name, got.tokens, cut=got.cut)
            if phase.bus.active:
                # (hidden, then cut: a value the cut split would not be found)
                preview = got.text[:PREVIEW_SCAN]
                if env:
                    preview = hide_env(preview, env)
                if phase.guard is not None:  # (#26) and what its security rules redact
                    preview = phase.guard.hide(preview)
                preview = preview[:200]
                phase.bus.publish(
                    ContextProvided(
                        path=phase.path,
                        provider=got.name,
                        tokens=got.tokens,
                        cut=got.cut,
                        preview=preview,
                    )
                )
        return pieces

    async def tools_done(self, phase: Phase, results: Sequence[ToolResult]) -> None:
        """Store what the memory's keep rule keeps of a batch's *results*."""
        memory = self.memory
        if memory is None or memory.keep is None:
            return
        for result in results:
            try:
                text = memory.keep(result)
            except Exception:  # (a rule that raises keeps nothing of this result)
                continue
            if text is None:
                continue
            stored = await self.ref(phase.st).ask(Remember(text, result.name))
            if stored is not None and phase.bus.active:
                assert isinstance(stored, Stored)
                _publish_stored(phase.bus, phase.path, self.key(phase.st), stored, result.name)


def _publish_stored(bus: EventBus, path: str, key: str, stored: Stored, source: str) -> None:
    bus.publish(
        MemoryStored(
            path=path,
            memory=key,
            item_id=stored.item_id,
            source=source,
            chars=stored.chars,
            cut=stored.cut,
            evicted=stored.evicted,
        )
    )


class MemoryHandle(metaclass=NoPublicConstructor):
    """A memory, as the API reaches it: ``agent.memory`` (the agent's own, or the
    shared one its spec names) or ``rt.memory(name)`` (a shared one).

    Made by those two (it has no public constructor); its methods ask the
    memory's actor, and publish the memory's events with the agent's (or the
    runtime's) path.

    Attributes:
        name: the memory's name: a shared one's, else the agent's path.
    """

    __slots__ = ("_bus", "_open", "_path", "name")

    def __init__(self, name: str, path: str, bus: EventBus, open: Callable[[], ActorRef]) -> None:
        self.name = name
        self._path = path
        self._bus = bus
        self._open = open

    def __repr__(self) -> str:
        return f"<MemoryHandle {self.name!r}>"

    async def remember(self, text: str, *, source: str = "api") -> int | None:
        """Store *text*; its item id, or None if it was refused (empty, or over
        ``max_bytes`` once cut to ``max_item_chars``).

        Raises:
            InvalidArgument: *text* or *source* is not a str.
        """
        if not isinstance(text, str) or not isinstance(source, str):
            raise InvalidArgument("remember(text, source=...) takes str values")
        stored = await self._open().ask(Remember(text, source))
        if stored is None:
            return None
        assert isinstance(stored, Stored)
        if self._bus.active:
            _publish_stored(self._bus, self._path, self.name, stored, source)
        return stored.item_id

    async def search(self, query: str, *, limit: int = 5) -> list[MemoryItem]:
        """The best *limit* items for *query* (by the memory's scorer), best first.

        Raises:
            InvalidArgument: *query* is not a str, or *limit* not an int >= 1.
        """
        if not isinstance(query, str):
            raise InvalidArgument(f"search's query must be a str, got {type(query).__name__}")
        check_int("limit", limit, 1)
        found = await self._open().ask(Recall(query, limit))
        assert isinstance(found, list)
        if self._bus.active:
            self._bus.publish(MemoriesSearched(path=self._path, memory=self.name, found=len(found)))
        return found

    async def items(self) -> list[MemoryItem]:
        """Every item, oldest first."""
        items = await self._open().ask(ListItems())
        assert isinstance(items, list)
        return items

    async def clear(self) -> int:
        """Forget every item (kept as a clear in the checkpoint store, if there is
        one); how many there were."""
        count = await self._open().ask(Forget())
        assert isinstance(count, int)
        if self._bus.active:
            self._bus.publish(MemoryCleared(path=self._path, memory=self.name, items=count))
        return count


def agent_memory(st: _AgentState) -> MemoryHandle:
    """The memory of the agent of *st*, as the API reaches it (``AgentRef.memory``).

    Raises:
        InvalidArgument: its spec has no memory.
    """
    recall = getattr(st, "recall", None)
    if not isinstance(recall, Recollection) or recall.memory is None:
        raise InvalidArgument("this agent's spec has no memory (AgentSpec(memory=...))")
    assert st.ref is not None
    bus = st.services.bus
    return create(MemoryHandle, recall.key(st), st.ref.path, bus, lambda: recall.ref(st))
