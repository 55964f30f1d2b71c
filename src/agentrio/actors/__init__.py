"""The kernel's actors: actors and refs, mailboxes, the event bus, timers.

It imports nothing above it (only ``agentrio.errors``, ``agentrio.messages``
and the shared checks); the supervisors (``agentrio.supervisors``) sit on it,
and an actor reaches its supervisor only through the small interface
``actors.actor.Parent`` declares. The layers above (the agent layer first)
build on these public operations and nothing private:

Asking:
    ``ActorRef.ask(msg, *, timeout=None, linked=False)``: request/reply. A
    *linked* ask ends with its asker: dropped unhandled if still queued when
    the asker is cancelled, interrupted and delivered again (see
    [`withdrawn`][agentrio.actors.withdrawn]) if it is being handled; the asker waits for that
    handling to end before it sees its ``trio.Cancelled``.
    ``ActorRef.ask_later(msg, *, linked=False)`` puts the ask in the mailbox
    now and returns a [`PendingAsk`][agentrio.actors.PendingAsk], whose ``reply()`` any one task
    awaits later.

[`link`][agentrio.actors.link] ``(owned, owner)``
    The owned actor ends after its owner: stopped when the owner exits,
    cancelled when it is cancelled, ended if it is suspended; a supervisor's
    shutdown leaves it to its owner. Both must be children of one
    supervisor (which alone orders their stop).

[`interrupt`][agentrio.actors.interrupt] ``(ref) -> bool``
    Cut the message the actor is handling short and hand it to the same
    incarnation's ``handle()`` again (one cancel of the actor's scope).

[`interrupt_after`][agentrio.actors.interrupt_after] ``(ref, seconds) -> Alarm | None``
    [`interrupt`][agentrio.actors.interrupt] at a deadline, kept on the runtime's timer
    heap rather than in a cancel scope; [`Alarm.disarm`][agentrio.actors.Alarm.disarm]
    when the wait ends in time.

[`withdrawn`][agentrio.actors.withdrawn] ``(ref) -> bool``
    In ``handle()`` of a message delivered again: has its asker withdrawn
    the (linked) ask?

``begin_stop(ref)``, ``exit_reason(ref)``, ``wait_exited(ref)``
    Stop gracefully without waiting; how the actor ended (None while it
    lives); wait until it, and what is linked to it, have exited.

[`EventBus`][agentrio.actors.EventBus] (``tree.bus``)
    The tree's events: ``bus.publish(event)`` (never blocks), guarded by
    ``bus.active`` (anyone listening?) so that an unobserved tree builds no
    event; ``bus.subscribe(capacity)``. The agent layer publishes its
    events on it.

For example, a worker that gives each job five seconds, in its own task (a
job still running then is interrupted and handed to ``handle`` again):

```python
class Worker(agentrio.Actor[Job]):
    def __init__(self) -> None:
        self.alarm: agentrio.actors.Alarm | None = None  # the job in hand's

    async def handle(self, job: Job) -> str:
        alarm, self.alarm = self.alarm, None
        if alarm is not None and alarm.rang:  # delivered again: time is up
            return "timed out"
        alarm = self.alarm = agentrio.actors.interrupt_after(self.ref, 5.0)
        assert alarm is not None  # (None only outside a running runtime)
        try:
            await job.run()
        finally:
            alarm.disarm()
        self.alarm = None
        return "done"
```

See docs/concepts.md, "The kernel's primitives".
"""

from __future__ import annotations

from .actor import PendingAsk
from .bus import EventBus
from .primitives import (
    begin_stop,
    exit_reason,
    interrupt,
    link,
    wait_exited,
    withdrawn,
)
from .timers import Alarm, interrupt_after

__all__ = [
    "Alarm",
    "EventBus",
    "PendingAsk",
    "begin_stop",
    "exit_reason",
    "interrupt",
    "interrupt_after",
    "link",
    "wait_exited",
    "withdrawn",
]

# Reprs, tracebacks and the reference name these by their public home.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
