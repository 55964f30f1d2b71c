"""Every message and event type of agentrio.

Messages are frozen, tagged :class:`msgspec.Struct` subclasses: together they
form one tagged union that encodes to msgpack and JSON, so the same messages
can later cross a process boundary. They hold data only: no callables, locks
or handles. New fields get defaults (msgspec's schema-evolution rules).
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "ActorExited",
    "ActorFailed",
    "ActorRestarted",
    "ActorStarted",
    "DeadLetter",
    "Event",
    "EventsLost",
    "Message",
    "SupervisorEscalated",
]


class Message(msgspec.Struct, frozen=True, tag=True):
    """Base class of everything an actor can be sent.

    Subclasses are frozen and tagged with their class name, so any message
    round-trips through ``msgspec.msgpack`` and ``msgspec.json``::

        class Greet(agentrio.Message):
            who: str
    """


class Event(Message, frozen=True, tag=True):
    """Base class of the events published on ``rt.events()``.

    Attributes:
        path: the path of the actor or supervisor the event is about.
    """

    path: str


ExitReason = Literal["stopped", "cancelled", "crashed"]


class ActorStarted(Event, frozen=True, tag=True):
    """An actor (or supervisor) started; ``restarts`` counts earlier incarnations."""

    restarts: int = 0


class ActorExited(Event, frozen=True, tag=True):
    """An actor (or supervisor) ended for good and will not be restarted."""

    reason: ExitReason = "stopped"


class ActorFailed(Event, frozen=True, tag=True):
    """An actor's ``handle`` or ``on_start`` raised; its supervisor decides what next.

    Attributes:
        error_type: the exception's class name.
        error: ``str()`` of the exception.
    """

    error_type: str = ""
    error: str = ""


class ActorRestarted(Event, frozen=True, tag=True):
    """A supervisor restarted an actor after ``delay`` seconds of backoff."""

    restarts: int = 0
    delay: float = 0.0


class DeadLetter(Event, frozen=True, tag=True):
    """A message that was never handled: sent to a stopped actor, or the one that crashed it.

    Attributes:
        reason: ``"stopped"``, ``"cancelled"``, ``"crashed"`` or ``"crashed_on"``
            (this message crashed the actor).
        message_type: the tag of the message.
        message: a short ``repr`` of the message, for logs.
    """

    reason: str = "stopped"
    message_type: str = ""
    message: str = ""


class SupervisorEscalated(Event, frozen=True, tag=True):
    """A supervisor exceeded its restart intensity and failed to its parent.

    Attributes:
        child: the child whose crash went over the limit.
        error: ``str()`` of that child's exception.
    """

    child: str = ""
    error: str = ""


class EventsLost(Event, frozen=True, tag=True):
    """This subscriber fell behind and ``count`` events were dropped for it."""

    count: int = 0
