"""A run's own stream: its text, tool calls and turns as they happen, then its result.

``AgentRef.stream`` makes a `RunStream`; entering it registers a `RunBus` for
the run's ``RunPhase`` (in ``RUN_BUSES``, by the command's id) and starts the
run in a task of the stream's own. The phase finds the RunBus when it is made
(one lookup per phase, only while some run streams) and publishes to it in
place of the runtime's bus: the RunBus passes every event on to the runtime's
bus, as the phase would have, and puts the run's items in the stream's channel.

A typed run's stream (its spec has an ``output_type``) also parses the
answer's JSON as it arrives, leniently, with jiter's partial mode (pydantic's
JSON parser, a well-kept one that reads a cut document; we keep no parser
of our own: jiter's package, else pydantic-core's copy of it), and gives
each new value as a `PartialOutput`; with neither installed, it gives none.
The text is parsed again only once it has grown by 256 characters, or by an
eighth past 2 KiB, so a long answer costs a bounded multiple of its size,
not its square.

Lossless and bounded: an item that does not fit in the channel waits in the
RunBus, and the phase waits for the reader before each model call (and the
stream before its last item), so what waits is at most one turn's items. The
phase's publishing stays synchronous (a model's ``on_text`` is a plain
callback): the wait is at the turn's start, before the call's reservation, so
a cancelled wait holds nothing of the budget.
"""

from __future__ import annotations

import functools
import importlib
from collections import deque
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeAlias

import msgspec
import trio

from ..._handles import NoPublicConstructor
from ...actors.bus import EventBus
from ...errors import UsageError
from ...messages import Event, OutputT, PhaseResult, TextDelta, ToolEnded, ToolStarted, TurnEnded

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ...actors.actor import ActorRef
    from ...messages import RunPhase
    from ..tools.output import OutputType

__all__ = ["RUN_BUSES", "PartialOutput", "RunBus", "RunDone", "RunItem", "RunStream"]


class RunDone(msgspec.Struct, Generic[OutputT], frozen=True, tag=True):
    """The last item of a run's stream: the run's result, as ``run()`` returns it.

    Generic in its result's output type, as ``PhaseResult`` is: the run of
    an ``AgentRef[Movie]`` ends with a ``RunDone[Movie]``.

    Attributes:
        path: the agent's path.
        result: the phase's [`PhaseResult`][agentrio.PhaseResult] (tool and
            model failures are in it, as for ``run()``).
    """

    path: str
    result: PhaseResult[OutputT]


class PartialOutput(msgspec.Struct, frozen=True, tag=True):
    """A typed run's answer so far, parsed from the JSON text that has arrived.

    Only in the stream of a run whose spec has an ``output_type``, after the
    [`TextDelta`][agentrio.events.TextDelta]s it was parsed from, and only
    with jiter or pydantic installed (their parser of cut JSON reads it).

    Attributes:
        path: the agent's path.
        value: the JSON so far, parsed leniently and not validated: dicts,
            lists, strings and numbers (the last one possibly cut), booleans,
            None. A ``{"result": ...}`` wrapper (a provider's, for a type
            that is no JSON object) is taken off. The validated value is the
            [`RunDone`][agentrio.events.RunDone]'s ``result.output``.
    """

    path: str
    value: object


RunItem: TypeAlias = (
    TextDelta | PartialOutput | ToolStarted | ToolEnded | TurnEnded | RunDone[OutputT]
)
"""An item of a run's stream ([`AgentRef.stream`][agentrio.AgentRef.stream]).

Generic in the run's output type: ``RunItem[Movie]`` for an ``AgentRef[Movie]``;
``RunItem`` alone is ``RunItem[str]``, a run of an agent without an ``output_type``."""

# The events a run's stream carries (the others go to the runtime's bus only).
_ITEMS = frozenset((TextDelta, ToolStarted, ToolEnded, TurnEnded))

# Text is parsed again once it has grown by PARSE_STEP characters, or by an
# eighth of its size past 8 * PARSE_STEP: the parses of an answer of n
# characters read O(n) characters in all (about 9n), not O(n^2).
PARSE_STEP = 256

_NOTHING = object()  # (no new partial value)


def _partial_parser() -> Callable[[bytes], object] | None:
    """A parser of cut JSON: jiter's, else pydantic-core's (the same parser, inside
    pydantic), else None (looked up once). Neither is required; each is
    imported by name, so that mypy need not see it."""
    global _FROM_JSON
    if _FROM_JSON is _NOTHING:
        _FROM_JSON = None
        try:
            jiter = importlib.import_module("jiter")
            _FROM_JSON = functools.partial(jiter.from_json, partial_mode="trailing-strings")
        except ImportError:
            try:
                core = importlib.import_module("pydantic_core")
                _FROM_JSON = functools.partial(core.from_json, allow_partial="trailing-strings")
            except ImportError:
                pass
    return _FROM_JSON  # type: ignore[no-any-return]


_FROM_JSON: Any = _NOTHING


class _Partials:
    """The values a turn's text gives as it arrives (see `PartialOutput`)."""

    __slots__ = ("chunks", "from_json", "last", "parsed", "size", "wrapped")

    def __init__(self, from_json: Callable[[bytes], object], wrapped: bool) -> None:
        self.from_json = from_json
        self.wrapped = wrapped  # the schema's: a {"result": ...} may wrap the answer
        self.chunks: list[str] = []
        self.size = 0  # characters in chunks
        self.parsed = 0  # characters at the last parse
        self.last: object = _NOTHING

    def feed(self, text: str) -> object:
        """Take *text*: a new value if it is time to parse and one came, else _NOTHING."""
        self.chunks.append(text)
        self.size += len(text)
        if self.size - self.parsed < max(PARSE_STEP, self.parsed >> 3):
            return _NOTHING
        return self._parse()

    def flush(self) -> object:
        """The turn's end: its last new value (else _NOTHING); then a new turn."""
        value = self._parse() if self.size > self.parsed else _NOTHING
        self.chunks.clear()
        self.size = self.parsed = 0
        self.last = _NOTHING
        return value

    def _parse(self) -> object:
        text = "".join(self.chunks)
        self.chunks[:] = (text,)
        self.parsed = self.size
        try:
            value = self.from_json(text.encode())
        except (ValueError, UnicodeEncodeError):  # not JSON (yet): no value
            return _NOTHING
        if self.wrapped and type(value) is dict:
            if len(value) == 1 and "result" in value:
                value = value["result"]
            elif not value:  # (the wrapper's key not read yet)
                return _NOTHING
        if value == self.last:
            return _NOTHING
        self.last = value
        return value


# The RunBus of each streamed run in progress, by id() of its RunPhase (the
# stream holds the command, so the id is not reused while it is here).
RUN_BUSES: dict[int, RunBus] = {}


class RunBus(EventBus):
    """What a streamed run's phase publishes to: the runtime's bus, and the run's stream.

    Always ``active`` (the phase builds its events for the stream); each event
    goes on to the runtime's bus if anyone listens there.
    """

    __slots__ = ("bus", "held", "partials", "send", "streamed")

    def __init__(
        self,
        bus: EventBus,
        send: trio.MemorySendChannel[RunItem[Any]],
        partials: _Partials | None = None,
    ) -> None:
        super().__init__()
        self.active = True
        self.bus = bus
        self.send = send
        self.held: deque[RunItem[Any]] = deque()  # items past the channel's buffer, in order
        self.streamed = False  # a TextDelta came in the turn under way
        self.partials = partials  # a typed run's (with jiter): its answer's values so far

    def publish(self, event: Event) -> None:
        """Pass *event* on to the runtime's bus, and put it in the stream if it is an item."""
        bus = self.bus
        if bus.active:
            bus.publish(event)
        kind = type(event)
        if kind in _ITEMS:
            if kind is TextDelta:
                self.streamed = True
                self.put(event)  # type: ignore[arg-type]
                if self.partials is not None:
                    self._partial(event.path, self.partials.feed(event.text))  # type: ignore[attr-defined]
                return
            if kind is TurnEnded and self.partials is not None:
                self._partial(event.path, self.partials.flush())
            self.put(event)  # type: ignore[arg-type]  # (one of _ITEMS)

    def reply_text(self, path: str, text: str) -> None:
        """The turn's reply was *text*: an item of it all if none of it streamed."""
        if text and not self.streamed:
            self.put(TextDelta(path=path, text=text))
            if self.partials is not None:
                self._partial(path, self.partials.feed(text))
        self.streamed = False

    def _partial(self, path: str, value: object) -> None:
        if value is not _NOTHING:
            self.put(PartialOutput(path=path, value=value))

    def put(self, item: RunItem[Any]) -> None:
        """Put *item* in the stream, or hold it (in order) while the channel is full."""
        held = self.held
        if held:
            held.append(item)
            return
        try:
            self.send.send_nowait(item)
        except trio.WouldBlock:
            held.append(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the reader has left: its stream is cancelling the run

    async def drain(self) -> None:
        """Wait until the held items are in the channel (the reader's backpressure)."""
        held = self.held
        while held:
            try:
                await self.send.send(held[0])
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                held.clear()  # the reader has left
                return
            held.popleft()  # (after the send: a cancelled send keeps its item)


class RunStream(Generic[OutputT], metaclass=NoPublicConstructor):
    """A run's own stream, from [`AgentRef.stream`][agentrio.AgentRef.stream].

    An async context manager and an async iterator: entering it starts the
    run; ``async for`` gives its items, a
    [`RunItem`][agentrio.events.RunItem] each, in the order they happened,
    and a [`RunDone`][agentrio.events.RunDone] with the result last (read
    before the block is entered, it raises
    [`UsageError`][agentrio.errors.UsageError]: nothing runs yet). No public
    constructor.

    The stream is lossless: every item of the run is given, however slow
    the reader. It is bounded: at most ``max_buffer_size`` items wait in it,
    and at most one more turn's (the items of a model call and of its tool
    calls) while the reader is behind; the run waits for the reader before
    its next model call. A slow reader slows its own run, and nothing else.

    Leaving the ``async with`` block before the end cancels the run, as a
    cancelled ``run()`` does (the phase ends with ``"cancelled"``, its
    completed turns kept), and waits for it to end: no task is left running.
    """

    __slots__ = (
        "_bus",
        "_cmd",
        "_error",
        "_nursery",
        "_receive",
        "_ref",
        "_result",
        "_scope",
        "_state",
    )

    def __init__(
        self,
        ref: ActorRef,
        cmd: RunPhase,
        bus: EventBus,
        max_buffer_size: int,
        output: OutputType | None = None,
    ) -> None:
        self._ref = ref
        self._cmd = cmd
        send, receive = trio.open_memory_channel[RunItem[Any]](max_buffer_size)
        self._receive = receive
        from_json = None if output is None else _partial_parser()
        partials = None if from_json is None else _Partials(from_json, output.schema.wrapped)  # type: ignore[union-attr]
        self._bus = RunBus(bus, send, partials)
        self._result: PhaseResult[OutputT] | None = None  # the RunDone's, once read
        self._error: Exception | None = None  # what the run raised, for the reader
        self._nursery: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._scope: trio.CancelScope | None = None  # the nursery's: cancels the run
        self._state = "new"  # -> "open" -> "closed"

    def __repr__(self) -> str:
        return f"<RunStream {self._ref.path!r} {self._state}>"

    async def __aenter__(self) -> RunStream[OutputT]:
        if self._state != "new":
            raise UsageError("a RunStream is entered once")
        self._state = "open"
        manager = self._nursery = trio.open_nursery()
        nursery = await manager.__aenter__()
        RUN_BUSES[id(self._cmd)] = self._bus
        self._scope = nursery.cancel_scope
        nursery.start_soon(self._run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state = "closed"
        # The reader leaves: a phase waiting for it goes on, to be cancelled.
        self._receive.close()
        manager = self._nursery
        assert manager is not None and self._scope is not None
        self._scope.cancel()  # the run, if it is still going: it ends "cancelled"
        # The nursery is told nothing of the block's exception: it comes out as
        # it was, not in an exception group (the run's task raises nothing).
        await manager.__aexit__(None, None, None)

    async def _run(self) -> None:
        send = self._bus.send
        cmd = self._cmd
        try:
            try:
                # Linked: cancelling this task (leaving the block) cancels the phase.
                result = await self._ref.ask(cmd, linked=True)
            finally:
                RUN_BUSES.pop(id(cmd), None)
            assert isinstance(result, PhaseResult)
            await self._bus.drain()
            await send.send(RunDone(path=self._ref.path, result=result))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the reader left
        except Exception as exc:  # ActorStopped, ActorCrashed: the reader's, as run()'s
            self._error = exc
        finally:
            send.close()

    def __aiter__(self) -> RunStream[OutputT]:
        return self

    async def __anext__(self) -> RunItem[OutputT]:
        """The next item; raises what the run raised (as ``run()`` would) after the
        items before it."""
        if self._state == "new":  # (nothing runs yet: the read would wait forever)
            raise UsageError(
                "a RunStream is read inside its block: "
                "async with agent.stream(...) as stream: async for item in stream"
            )
        try:
            item = await self._receive.receive()
        except trio.EndOfChannel:
            error, self._error = self._error, None
            if error is not None:
                raise error from None
            raise StopAsyncIteration from None
        except trio.ClosedResourceError:  # read after the block was left
            raise StopAsyncIteration from None
        if type(item) is RunDone:
            self._result = item.result
        return item

    async def result(self) -> PhaseResult[OutputT]:
        """Read the rest of the stream, its items left unread, and return the run's
        result (the [`RunDone`][agentrio.events.RunDone]'s; at once if it was read).

        Returns:
            The run's [`PhaseResult`][agentrio.PhaseResult], as ``run()`` returns it.

        Raises:
            UsageError: called before the block is entered, or after it was left
                without the result having been read.
            ActorStopped: as ``run()`` raises it (and ``ActorCrashed``).
        """
        async for _ in self:
            pass
        if self._result is None:  # (the block was left: the run was cancelled)
            raise UsageError("RunStream.result() is awaited inside its async with block")
        return self._result

    def text(self) -> AsyncIterator[str]:
        """An async iterator over the run's text alone: each
        [`TextDelta`][agentrio.events.TextDelta]'s ``text``, in order.

        The other items are passed over, and the iteration ends with the run;
        ``await stream.result()`` then gives its result at once. Read inside
        the block, as the stream itself is.

        Example:

            async with agent.stream("Tell me a story") as stream:
                async for text in stream.text():
                    print(text, end="")
                result = await stream.result()
        """
        return _Texts(self)


class _Texts:
    """`RunStream.text`'s iterator: the text of the stream's items, the rest passed over."""

    __slots__ = ("_stream",)

    def __init__(self, stream: RunStream[Any]) -> None:
        self._stream = stream

    def __aiter__(self) -> _Texts:
        return self

    async def __anext__(self) -> str:
        async for item in self._stream:
            if type(item) is TextDelta:
                return item.text
        raise StopAsyncIteration
