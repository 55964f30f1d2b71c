"""The kernel: actors, mailboxes, supervisors, the event bus, timers.

It imports nothing above it (only ``agentrio.errors``, ``agentrio.messages``
and the shared checks). The layers above (the agent layer first) build on
these public operations and nothing private:

Asking:
    ``ActorRef.ask(msg, *, timeout=None, linked=False)``: request/reply. A
    *linked* ask ends with its asker: dropped unhandled if still queued when
    the asker is cancelled, interrupted and delivered again (see
    [`withdrawn`][agentrio.core.withdrawn]) if it is being handled; the asker waits for that
    handling to end before it sees its ``trio.Cancelled``.
    ``ActorRef.ask_later(msg, *, linked=False)`` puts the ask in the mailbox
    now and returns a [`PendingAsk`][agentrio.core.PendingAsk], whose ``reply()`` any one task
    awaits later.

[`link`][agentrio.core.link] ``(owned, owner)``
    The owned actor ends after its owner: stopped when the owner exits,
    cancelled when it is cancelled, ended if it is suspended; a supervisor's
    shutdown leaves it to its owner. Both must be children of one
    supervisor (which alone orders their stop).

[`interrupt`][agentrio.core.interrupt] ``(ref) -> bool``
    Cut the message the actor is handling short and hand it to the same
    incarnation's ``handle()`` again (one cancel of the actor's scope).

[`interrupt_after`][agentrio.core.interrupt_after] ``(ref, seconds) -> Alarm | None``
    [`interrupt`][agentrio.core.interrupt] at a deadline, kept on the runtime's timer heap rather
    than in a cancel scope; [`Alarm.disarm`][agentrio.core.Alarm.disarm] when the wait ends in time.

[`withdrawn`][agentrio.core.withdrawn] ``(ref) -> bool``
    In ``handle()`` of a message delivered again: has its asker withdrawn
    the (linked) ask?

``begin_stop(ref)``, ``exit_reason(ref)``, ``wait_exited(ref)``
    Stop gracefully without waiting; how the actor ended (None while it
    lives); wait until it, and what is linked to it, have exited.

``SupervisorRef.spawn_nowait(cls, *args, name=, mailbox=, restart=, owner=)``
    ``spawn`` without its cancellation point. ``owner=`` (on ``spawn``
    too) links the new actor to its owner (as [`link`][agentrio.core.link]),
    and lets it be spawned while the supervisor drains and take its
    owner's reserved names (``<owner>.context``,
    ``<owner>.context.<label>``: how the agent layer names context actors).
    ``SupervisorRef.closed`` and ``SupervisorRef.shutdown_timeout`` say
    whether it has begun to stop, and its graceful stop's deadline.

[`Tree`][agentrio.core.Tree] ``(ref_class, ...)``
    A supervision tree: its root supervisor (``tree.ref``), event bus and
    timer task; ``await tree.run()``, ``tree.begin_stop()``,
    ``tree.cancel()``. The runtime is built on one.

[`EventBus`][agentrio.core.EventBus] (``tree.bus``)
    The tree's events: ``bus.publish(event)`` (never blocks), guarded by
    ``bus.active`` (anyone listening?) so that an unobserved tree builds no
    event; ``bus.subscribe(capacity)``. The agent layer publishes its
    events on it.

For example, a worker that gives each job five seconds, in its own task (a
job still running then is interrupted and handed to ``handle`` again):

```python
class Worker(agentrio.Actor[Job]):
    def __init__(self) -> None:
        self.alarm: agentrio.core.Alarm | None = None  # the job in hand's

    async def handle(self, job: Job) -> str:
        alarm, self.alarm = self.alarm, None
        if alarm is not None and alarm.rang:  # delivered again: time is up
            return "timed out"
        alarm = self.alarm = agentrio.core.interrupt_after(self.ref, 5.0)
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

from .actor import (
    PendingAsk,
    begin_stop,
    exit_reason,
    interrupt,
    link,
    wait_exited,
    withdrawn,
)
from .bus import EventBus
from .timers import Alarm, interrupt_after
from .tree import Tree

__all__ = [
    "Alarm",
    "EventBus",
    "PendingAsk",
    "Tree",
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
