"""The runtime's event bus: bounded subscribers that never slow the actors.

Publishing is synchronous and O(subscribers): each subscriber has a bounded
buffer; when it is full the event is dropped for that subscriber only and
counted, and the subscriber later receives one [`EventsLost`][agentrio.events.EventsLost] with the
count, in the place where the events went missing.

Drops are logged on the ``agentrio.actors.bus`` logger: a WARNING when a
subscriber starts dropping events, then none for it until it has gone
``QUIET`` seconds without a drop (a subscriber always behind logs once, not
once per event); each ``EventsLost`` at DEBUG, with its count.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from types import TracebackType

import trio

from .._checks import check_int
from .._handles import NoPublicConstructor, create
from .._log import log_extra
from ..messages import Event, EventsLost

__all__ = ["EventBus", "EventStream"]

_log = logging.getLogger("agentrio.actors.bus")
QUIET = 10.0  # seconds without a drop before a subscriber's next drop is logged again


def _caught_up(lost: int) -> EventsLost:
    """The ``EventsLost`` that ends a streak of drops (logged at DEBUG)."""
    _log.debug(
        "an event subscriber is told %d event(s) were dropped for it", lost, extra=log_extra()
    )
    return EventsLost(path="", count=lost)


class EventStream(metaclass=NoPublicConstructor):
    """An async iterator over the runtime's events, from ``rt.events()``.

    Iteration ends when the runtime stops (after what was buffered) or the
    ``async with`` block is left; leaving the block unsubscribes. No public
    constructor.
    """

    __slots__ = ("_buffer", "_bus", "_capacity", "_closed", "_lost", "_lot", "_quiet_until")

    def __init__(self, bus: EventBus, capacity: int) -> None:
        self._bus = bus
        self._capacity = capacity
        self._buffer: deque[Event] = deque()
        self._lost = 0
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self._quiet_until = -math.inf  # no drop is logged before this time

    def _offer(self, event: Event) -> None:
        buffer = self._buffer
        if self._lost and len(buffer) < self._capacity:
            buffer.append(_caught_up(self._lost))
            self._lost = 0
        if len(buffer) < self._capacity:
            buffer.append(event)
            if self._lot:
                self._lot.unpark_all()
        else:
            if not self._lost:  # the first drop of a streak
                self._dropping()
            self._lost += 1
            self._bus.dropped += 1

    def _dropping(self) -> None:
        now = trio.current_time()
        if now >= self._quiet_until:
            _log.warning(
                "an event subscriber fell behind (its buffer of %d events is full): events "
                "are dropped for it (counted in EventsLost) until it catches up",
                self._capacity,
                extra=log_extra(),
            )
        self._quiet_until = now + QUIET

    def _close(self) -> None:
        self._closed = True
        self._lot.unpark_all()

    @property
    def lost(self) -> int:
        """Events dropped for this subscriber and not yet reported by an ``EventsLost``."""
        return self._lost

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        while not self._buffer:
            if self._lost:
                lost, self._lost = self._lost, 0
                await trio.lowlevel.checkpoint()
                return _caught_up(lost)
            if self._closed:
                raise StopAsyncIteration
            await self._lot.park()
        await trio.lowlevel.checkpoint()
        if not self._buffer:  # taken while we were at the checkpoint: look again
            return await self.__anext__()
        return self._buffer.popleft()

    async def receive(self) -> Event:
        """Return the next event, waiting for one.

        Raises:
            trio.EndOfChannel: the stream has ended.
        """
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise trio.EndOfChannel from None

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bus.unsubscribe(self)


class _Sink:
    """A callback among the bus's subscribers (see ``EventBus.attach``)."""

    __slots__ = ("_offer", "_on_close")

    def __init__(
        self, callback: Callable[[Event], None], on_close: Callable[[], None] | None
    ) -> None:
        self._offer = callback
        self._on_close = on_close

    def _close(self) -> None:
        if self._on_close is not None:
            self._on_close()


class EventBus:
    """Fans events out to bounded subscribers: a tree's bus
    ([`Tree.bus`][agentrio.supervisors.Tree]; the runtime's is its tree's).

    The kernel publishes its events on it (actors started, exited,
    restarted, dead letters...), and the layers above publish theirs on
    the same bus (the agent layer's turns, tool calls, phases), which
    [`Runtime.events`][agentrio.Runtime.events] subscribes to. A publisher
    tests ``active`` before it builds an event, so a runtime no one
    observes builds none:

    ```python
    if bus.active:
        bus.publish(MyEvent(path=self.ref.path))
    ```

    Publishing never blocks and never raises for a slow subscriber: each
    has a bounded buffer, and what does not fit is counted and reported to
    it as an [`EventsLost`][agentrio.events.EventsLost], in place. A bus of
    one's own (for a test) is ``EventBus()``.

    Attributes:
        active: True while anyone subscribes (a plain attribute: one load
            per event for a bus no one observes).
        dropped: the events dropped so far, for all the subscribers (one
            count per subscriber that lost one; what
            [`OpenTelemetry`][agentrio.otel.OpenTelemetry] reports as
            ``agentrio.events.dropped``).
    """

    __slots__ = ("_closed", "_subscribers", "active", "dropped")

    def __init__(self) -> None:
        self._subscribers: list[EventStream | _Sink] = []
        self._closed = False
        # True while anyone listens: publishers test it before they build an
        # event, so an unobserved runtime pays one attribute load per event.
        self.active = False
        self.dropped = 0

    def subscribe(self, capacity: int = 1000) -> EventStream:
        """Add a subscriber with a buffer of *capacity* events.

        Returns:
            Its [`EventStream`][agentrio.events.EventStream] (already ended
            if the bus is closed).

        Raises:
            InvalidArgument: *capacity* is not an int >= 1.
        """
        check_int("capacity", capacity, 1)
        stream = create(EventStream, self, capacity)
        if self._closed:
            stream._close()
        else:
            self._subscribers.append(stream)
            self.active = True
        return stream

    def attach(
        self, callback: Callable[[Event], None], on_close: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Call *callback* with each event, in the publisher's task, as it is published.

        For a consumer that only stores the event (the trace writer): the
        callback must be quick and must not raise or block, since it runs
        on the publisher's path. Makes the bus ``active``. *on_close* is
        called when the bus closes (at once if it is closed already).

        Returns:
            A function that detaches the callback.
        """
        sink = _Sink(callback, on_close)
        if self._closed:
            sink._close()
        else:
            self._subscribers.append(sink)
            self.active = True

        def detach() -> None:
            if sink in self._subscribers:
                self._subscribers.remove(sink)
            self.active = bool(self._subscribers)

        return detach

    def unsubscribe(self, stream: EventStream) -> None:
        """Remove *stream*; it ends after what it has buffered."""
        if stream in self._subscribers:
            self._subscribers.remove(stream)
        self.active = bool(self._subscribers)
        stream._close()

    def publish(self, event: Event) -> None:
        """Offer *event* (an [`Event`][agentrio.events.Event]) to every
        subscriber, in the caller's task; never blocks.

        A subscriber whose buffer is full loses it (counted, and reported
        by an ``EventsLost``). Test ``active`` first to build no event when
        no one listens.
        """
        for stream in self._subscribers:
            stream._offer(event)

    def close(self) -> None:
        """End every subscription (the runtime has stopped)."""
        self._closed = True
        for stream in self._subscribers:
            stream._close()
        self._subscribers.clear()
        self.active = False
