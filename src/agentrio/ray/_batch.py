"""Messages across hosts: frames, batches per host pair, de-duplication, pending calls.

Every message that crosses a host boundary is a *frame* (a tagged msgspec Struct),
wrapped in an `Envelope` that carries its sender and sequence number. An `Outbox`
holds the envelopes bound for one destination and flushes them as one batch (msgpack
of a list of envelopes) every `FLUSH_SECONDS` or every `BATCH_MESSAGES` messages,
whichever comes first, one batch in flight at a time (so a pair's messages arrive in
the order they were sent). A batch whose delivery failed in a way Ray calls
ambiguous is sent again, the same bytes; the receiver's `Dedupe` applies each
``(sender, seq)`` once.

An application message (an ask, a tell, a reply) travels as the msgpack of the same
Struct, with its class named (``module:qualname``): the receiving host imports it
(every host runs the same code) and decodes the bytes as that class, which must be
an ``agentrio.Message``.

Nothing here knows Ray: the outbox's ``send`` is a function given to it. That keeps
the batching and de-duplication testable without a cluster.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from .. import errors
from .._text import scrub
from ..errors import InvalidArgument
from ..messages import Message

__all__ = [
    "BATCH_MESSAGES",
    "FLUSH_SECONDS",
    "Dedupe",
    "Envelope",
    "Outbox",
    "Pending",
    "decode_batch",
    "encode_batch",
    "message_from_wire",
    "message_to_wire",
]

FLUSH_SECONDS = 0.001  # the longest a message waits for its batch to fill
BATCH_MESSAGES = 256  # a batch this full is flushed at once
MAX_PENDING = 100_000  # envelopes an outbox holds before `send` waits for room
MAX_BATCH_BYTES = 64 * 1024 * 1024  # a batch larger than this is refused on arrival
DEDUPE_WINDOW = 65_536  # out-of-order sequence numbers remembered per sender


class Frame(msgspec.Struct, frozen=True, tag=True, array_like=True, gc=False):
    """Base of what crosses between hosts (and the driver)."""


class Run(Frame, frozen=True):
    """Run (or stream) one phase of the agent *agent* of the receiving host."""

    call: int
    reply_to: str
    agent: str
    message: str
    options: dict[str, Any] = {}
    stream: bool = False
    carrier: dict[str, str] = {}  # the caller's OpenTelemetry context
    window: int = 64  # a stream's items sent ahead of the caller's credits


class MapRun(Frame, frozen=True):
    """``Runtime.map`` of the spec named *spec* over *inputs*, on the receiving host."""

    call: int
    reply_to: str
    spec: str
    inputs: list[str]
    concurrency: int
    carrier: dict[str, str] = {}


class Cancel(Frame, frozen=True):
    """The caller of *call* gave up: cancel it (its phase ends ``"cancelled"``)."""

    call: int
    reply_to: str


class StopAgent(Frame, frozen=True):
    """Stop the agent *agent* of the receiving host: gracefully, or cancel it now."""

    call: int
    reply_to: str
    agent: str
    cancel: bool = False


class Credit(Frame, frozen=True):
    """The caller of the streamed run *call* has read *items* more of its items."""

    call: int
    reply_to: str
    items: int


class Ask(Frame, frozen=True):
    """Ask the actor at *path* of the receiving host; reply to *reply_to*."""

    call: int
    reply_to: str
    path: str
    kind: str  # the message's class, "module:qualname"
    body: bytes
    timeout: float | None = None


class Tell(Frame, frozen=True):
    """Send (no reply) to the actor at *path* of the receiving host."""

    path: str
    kind: str
    body: bytes


class Reply(Frame, frozen=True):
    """The answer to *call*: a value (an ask's reply, a phase's result, a list)."""

    call: int
    kind: str  # "module:qualname" of a Message, or "" for plain data
    body: bytes


class Item(Frame, frozen=True):
    """One item of a streamed run *call* (an event, msgpack)."""

    call: int
    body: bytes


class Failed(Frame, frozen=True):
    """*call* raised: its exception's class name, message and what rebuilds it."""

    call: int
    error_type: str
    message: str
    path: str = ""
    reason: str = ""


class EventOut(Frame, frozen=True):
    """One event of the sending host's runtime (msgpack of the tagged Event)."""

    body: bytes


class UsageReport(Frame, frozen=True):
    """The sending host's root budget's usage now (msgpack of a ``UsageTotals``)."""

    body: bytes


class WatchEvents(Frame, frozen=True):
    """From the driver: send (or stop sending) every event of the runtime."""

    on: bool


AnyFrame = Run | MapRun | Cancel | Credit | Ask | Tell | Reply | Item | Failed | EventOut
AnyFrame |= UsageReport | WatchEvents | StopAgent


class Envelope(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One frame, from *sender*, numbered *seq* (from 1, per sender and destination)."""

    sender: str
    seq: int
    frame: AnyFrame


_encoder = msgspec.msgpack.Encoder()
_batch_decoder = msgspec.msgpack.Decoder(list[Envelope])


def encode_value(value: object) -> bytes:
    """The msgpack of *value* (a phase's result, an event, a list of outcomes).

    Raises:
        InvalidArgument: it is not msgpack data (a typed output of a class
            msgspec cannot encode).
    """
    try:
        return _encoder.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidArgument(f"{type(value).__name__} cannot cross hosts: {exc}") from exc


class MapOutcome(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One input's outcome of a `MapRun`: its result's msgpack, or its error."""

    result: bytes | None = None
    error: Failed | None = None


def encode_batch(envelopes: list[Envelope]) -> bytes:
    """One batch's bytes."""
    return _encoder.encode(envelopes)


def decode_batch(data: bytes) -> list[Envelope]:
    """The envelopes of a batch.

    Raises:
        InvalidArgument: not bytes, over `MAX_BATCH_BYTES`, or not a batch.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"a batch must be bytes, got {type(data).__name__}")
    if len(data) > MAX_BATCH_BYTES:
        raise InvalidArgument(f"a batch of {len(data)} bytes is over {MAX_BATCH_BYTES}")
    try:
        return _batch_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"not a batch of envelopes: {exc}") from exc


# --- application messages -------------------------------------------------------

_decoders: dict[str, msgspec.msgpack.Decoder[Any]] = {}
_kinds: dict[type, str] = {}  # a message class's "module:qualname"
_any_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder()


def message_to_wire(value: object) -> tuple[str, bytes]:
    """*value*'s class name (``""`` for plain data) and its msgpack."""
    kind = ""
    if isinstance(value, Message):
        cls = type(value)
        kind = _kinds.get(cls) or _kinds.setdefault(cls, f"{cls.__module__}:{cls.__qualname__}")
    try:
        return kind, _encoder.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidArgument(
            f"{type(value).__name__} cannot cross hosts: it is not msgpack data ({exc})"
        ) from exc


def message_from_wire(kind: str, body: bytes) -> Any:
    """The value *message_to_wire* made *kind* and *body* from.

    Raises:
        InvalidArgument: *kind* names no ``agentrio.Message`` class this process can
            import, or *body* is not one.
    """
    decoder = _any_decoder if kind == "" else _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(_message_class(kind))
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"a {kind or 'value'} that does not decode: {exc}") from exc


def _message_class(kind: str) -> type[Message]:
    module_name, _, qualname = kind.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidArgument(f"no message class {kind!r} on this host: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, Message)):
        raise InvalidArgument(f"{kind!r} is not an agentrio.Message class")
    return found


# --- de-duplication ---------------------------------------------------------------


class Dedupe:
    """Which ``(sender, seq)`` were applied: each is applied once.

    Per sender: every seq up to ``floor`` was seen, and the seen ones above it are
    in a set (batches of one pair arrive in order, so the set stays near empty;
    past `DEDUPE_WINDOW` of them, the floor moves up to the lowest, forgetting the
    gaps below it, which are then taken as seen).
    """

    __slots__ = ("_above", "_floor", "duplicates")

    def __init__(self) -> None:
        self._floor: dict[str, int] = {}
        self._above: dict[str, set[int]] = {}
        self.duplicates = 0  # envelopes refused as already applied

    def fresh(self, sender: str, seq: int) -> bool:
        """True the first time *(sender, seq)* is seen, False afterwards."""
        floor = self._floor.get(sender, 0)
        above = self._above.get(sender)
        if seq == floor + 1 and not above:  # (the common case: the next one, in order)
            self._floor[sender] = seq
            return True
        if above is None:
            above = self._above[sender] = set()
        if seq <= floor or seq in above:
            self.duplicates += 1
            return False
        if seq == floor + 1:
            floor = seq
            while floor + 1 in above:
                floor += 1
                above.discard(floor)
            self._floor[sender] = floor
        else:
            above.add(seq)
            if len(above) > DEDUPE_WINDOW:
                lowest = min(above)
                above.discard(lowest)
                self._floor[sender] = lowest
        return True


# --- the outbox -----------------------------------------------------------------

Send = Callable[[bytes], Awaitable[None]]


class Outbox:
    """The envelopes bound for one destination, flushed as batches by `run`.

    *send* delivers one batch's bytes (it raises to say the batch may not have
    arrived: it is sent again, the same bytes, after *retry_delay*, up to
    *attempts* times in all; then `run` raises what it raised). One batch is in
    flight at a time.
    """

    def __init__(
        self,
        sender: str,
        send: Send,
        *,
        batch_messages: int = BATCH_MESSAGES,
        flush_seconds: float = FLUSH_SECONDS,
        max_pending: int = MAX_PENDING,
        attempts: int = 5,
        retry_delay: float = 0.05,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.sender = sender
        self._send = send
        self._batch_messages = batch_messages
        self._flush_seconds = flush_seconds
        self._max_pending = max_pending
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._retry_on = retry_on
        self._pending: list[Envelope] = []
        self._seq = 0
        self._wakeup = trio.Event()  # set when the first envelope arrives
        self._full = trio.Event()  # set when a batch is full
        self._room = trio.Event()  # set when a flush has made room
        self.batches = 0  # batches sent (a retry is not counted again)
        self.messages = 0  # envelopes sent
        self.retries = 0  # batches sent again

    def put(self, frame: Frame) -> Envelope:
        """Queue *frame* now (never waits: for replies and cancels, which are
        bounded by the calls that caused them)."""
        self._seq += 1
        envelope = Envelope(self.sender, self._seq, frame)  # type: ignore[arg-type]
        self._pending.append(envelope)
        if len(self._pending) == 1:
            self._wakeup.set()
        if len(self._pending) >= self._batch_messages:
            self._full.set()
        return envelope

    async def send(self, frame: Frame) -> Envelope:
        """Queue *frame*, waiting while `MAX_PENDING` envelopes wait already."""
        while len(self._pending) >= self._max_pending:
            await self._room.wait()
        await trio.lowlevel.checkpoint()
        return self.put(frame)

    @property
    def has_room(self) -> bool:
        """Would `send` queue at once (fewer than its maximum wait)?"""
        return len(self._pending) < self._max_pending

    @property
    def pending(self) -> int:
        """Envelopes queued and not yet sent."""
        return len(self._pending)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush batches until cancelled."""
        task_status.started()
        while True:
            if not self._pending:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
            if len(self._pending) < self._batch_messages:
                with trio.move_on_after(self._flush_seconds):
                    self._full = trio.Event()
                    await self._full.wait()
            await self._flush()

    async def _flush(self) -> None:
        envelopes = self._pending[: self._batch_messages]
        del self._pending[: self._batch_messages]
        self._room.set()
        self._room = trio.Event()
        data = encode_batch(envelopes)
        for attempt in range(1, self._attempts + 1):
            try:
                await self._send(data)
                break
            except self._retry_on:
                if attempt == self._attempts:
                    raise
                self.retries += 1
                await trio.sleep(self._retry_delay * attempt)
        self.batches += 1
        self.messages += len(envelopes)


# --- pending calls ----------------------------------------------------------------


_Channel = tuple[trio.MemorySendChannel[bytes], trio.MemoryReceiveChannel[bytes]]


class _Call:
    __slots__ = ("done", "error", "items", "value")

    def __init__(self, stream: bool) -> None:
        self.done = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        # A streamed call's items, as they come (unbounded in count only by the
        # run's own events: the remote run is a phase of bounded turns).
        self.items: _Channel | None = (
            trio.open_memory_channel[bytes](float("inf")) if stream else None
        )


class Pending:
    """The calls this endpoint made and waits on, by number."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}
        self._next = 0

    def open(self, *, stream: bool = False) -> int:
        """A new call's number."""
        self._next += 1
        self._calls[self._next] = _Call(stream)
        return self._next

    def close(self, call: int) -> None:
        """Forget *call* (a late answer to it is dropped)."""
        found = self._calls.pop(call, None)
        if found is not None and found.items is not None:
            found.items[0].close()

    def __len__(self) -> int:
        return len(self._calls)

    def resolve(self, call: int, value: Any) -> None:
        """*call* returned *value*."""
        found = self._calls.get(call)
        if found is not None and not found.done.is_set():
            found.value = value
            found.done.set()
            if found.items is not None:
                found.items[0].close()

    def fail(self, call: int, error: BaseException) -> None:
        """*call* raised *error*."""
        found = self._calls.get(call)
        if found is not None and not found.done.is_set():
            found.error = error
            found.done.set()
            if found.items is not None:
                found.items[0].close()

    def fail_all(self, error: Callable[[], BaseException], calls: set[int] | None = None) -> None:
        """Fail every call (or those of *calls*) with a new *error()* each."""
        for call in list(self._calls if calls is None else calls):
            self.fail(call, error())

    def item(self, call: int, body: bytes) -> None:
        """One streamed item of *call*."""
        found = self._calls.get(call)
        if found is not None and found.items is not None and not found.done.is_set():
            found.items[0].send_nowait(body)

    def items(self, call: int) -> trio.MemoryReceiveChannel[bytes]:
        """The streamed items of *call*, as they come (closed when it ends)."""
        found = self._calls[call]
        assert found.items is not None
        return found.items[1]

    async def wait(self, call: int) -> Any:
        """*call*'s value, or raise its error."""
        found = self._calls[call]
        await found.done.wait()
        if found.error is not None:
            raise found.error
        return found.value

    async def wait_done(self, call: int) -> None:
        """Until *call* has an answer, whatever it is."""
        await self._calls[call].done.wait()


# --- errors across hosts ------------------------------------------------------------


def failed(call: int, error: BaseException) -> Failed:
    """The frame that tells *call*'s caller it raised *error* (its message scrubbed
    of lone surrogates; agentrio's errors keep their path and reason)."""
    return Failed(
        call,
        type(error).__name__,
        scrub(str(error)),
        path=str(getattr(error, "path", "")),
        reason=str(getattr(error, "reason", "")),
    )


def rebuild(frame: Failed, host: int) -> BaseException:
    """The exception *frame* describes, as the caller raises it: agentrio's
    errors as themselves (``ActorStopped``, ``InvalidArgument``...), a cancelled
    call as ``trio.Cancelled``'s stand-in (``HostCancelled``, never raised to
    users), anything else as ``RemoteError``."""
    cls = getattr(errors, frame.error_type, None)
    where = f" (on host {host})"
    message = frame.message + where
    if frame.error_type == "Cancelled":
        return CallCancelled(message)
    if cls is errors.ActorStopped:
        return errors.ActorStopped(message, path=frame.path, reason=frame.reason or "stopped")
    if cls is errors.ActorCrashed:
        cause = errors.RemoteError(message, error_type="unknown", host=host)
        return errors.ActorCrashed(message, path=frame.path, cause=cause)
    if cls is errors.HostLost:
        return errors.HostLost(message, path=frame.path, host=host)
    if isinstance(cls, type) and issubclass(cls, errors.ActorError):
        return cls(message, path=frame.path)
    if isinstance(cls, type) and issubclass(cls, errors.AgentrioError):
        try:
            return cls(message)
        except TypeError:  # (one whose constructor wants more: a RemoteError below)
            pass
    return errors.RemoteError(
        f"{frame.error_type}: {message}", error_type=frame.error_type, host=host
    )


class CallCancelled(Exception):
    """The remote end of a call was cancelled (the caller, who asked for it, then
    raises ``trio.Cancelled`` itself)."""
