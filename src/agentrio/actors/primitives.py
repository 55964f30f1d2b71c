"""The kernel's primitives for the layers above (exported by ``agentrio.actors``):
``link``, ``interrupt``, ``withdrawn``, ``begin_stop``, ``exit_reason``,
``wait_exited``; ``timers.interrupt_after`` is in timers.py. Each reads or acts
on an actor's cell (actor.py) through its ``ActorRef``."""

from __future__ import annotations

from typing import NoReturn

import trio

from ..errors import ActorStopped, InvalidArgument
from ..messages import ExitReason
from .actor import ActorRef, Cell, _Ask, _close, _interrupt, stop_cell

__all__ = [
    "begin_stop",
    "exit_reason",
    "interrupt",
    "link",
    "not_a_ref",
    "wait_exited",
    "withdrawn",
]


def not_a_ref(func: str, arg: str, value: object) -> NoReturn:
    """Raise ``InvalidArgument``: *func*'s *arg* is not an actor's ``ActorRef``.

    The primitives test ``type(ref) is ActorRef`` themselves (one identity
    comparison, on the hot path of tool calls) and call this only to raise.
    """
    hint = ""
    if type(value).__name__ == "AgentRef":  # (the agent layer's: not imported here)
        hint = " (an AgentRef is an agent's handle, not an actor's ref)"
    elif type(value).__name__ == "SupervisorRef" or hasattr(value, "spawn_supervisor"):
        hint = " (a supervisor, or the runtime, is not an actor)"
    raise InvalidArgument(
        f"{func}()'s {arg} must be an agentrio.ActorRef, got {type(value).__name__}{hint}"
    )


def link(owned: ActorRef, owner: ActorRef) -> None:
    """Link *owned* to *owner*: the owned actor ends after its owner.

    When *owner* exits, *owned* is stopped gracefully (cancelled, if *owner*
    was cancelled; ended at once, if it is suspended, waiting for its
    supervisor's restart). A supervisor's shutdown leaves an owned child to
    its owner, so the owner can still use it while it drains, and cancels
    it only after its owner. Both must be children of one supervisor: a
    supervisor orders the stop of its own children only (another one's
    shutdown, or an owner in another subtree that never stops, could not
    keep that promise), so a link across supervisors is refused. An owner
    keeps what it owns in a list that drops the exited ones now and then
    (at each power of two from 64 entries): a long-lived owner does not
    keep every actor it ever owned.

    For example (an agent owns its context actors and its subagents so),
    with *owner* a child of *sup*:

    ```python
    sub = await sup.spawn(Worker)
    agentrio.actors.link(sub, owner)
    # or at once, with the owner's privileges (a draining supervisor,
    # its reserved names): sup.spawn_nowait(Worker, owner=owner)
    ```

    Raises:
        InvalidArgument: *owned* or *owner* is not an
            [`ActorRef`][agentrio.ActorRef] (each is named); they are not
            children of one supervisor; the same actor; *owned* is
            linked to another owner already; or *owner* is (through its
            owners) owned by *owned*.
        ActorStopped: *owner* has exited (nothing would end *owned*).
    """
    if type(owned) is not ActorRef:  # (no subclasses)
        not_a_ref("link", "owned", owned)
    if type(owner) is not ActorRef:
        not_a_ref("link", "owner", owner)
    child, cell = owned._cell, owner._cell
    if child.owner is cell:
        return
    if child.parent is not cell.parent:
        raise InvalidArgument(
            f"link takes two actors of one supervisor: {child.path!r} and {cell.path!r} "
            "are not (a supervisor's shutdown leaves an owned actor to its owner only "
            "when it holds both)"
        )
    if child.owner is not None:
        raise InvalidArgument(f"{child.path!r} is linked to {child.owner.path!r} already")
    above: Cell | None = cell
    while above is not None:
        if above is child:
            raise InvalidArgument(f"linking {child.path!r} to {cell.path!r} would make a cycle")
        above = above.owner
    if cell.state == "exited":
        raise ActorStopped(
            f"actor {cell.path!r} has {cell.stop_reason}: nothing would end {child.path!r}",
            path=cell.path,
            reason=cell.stop_reason,
        )
    cell.own(child)


def interrupt(ref: ActorRef) -> bool:
    """Cut the message *ref*'s actor is handling short, and hand it to ``handle`` again.

    The actor's task is cancelled (one cancel of its scope, no new scope),
    which unwinds the handler; the same incarnation then calls ``handle``
    again with the same message, before any other (an ask's reply still
    goes to its asker; the message counts as handled once). Nothing is
    restarted and no event is published. As a Trio deadline calls
    ``cancel()``, a timer calls this: see [`interrupt_after`][agentrio.actors.interrupt_after].

    The handler sees ``trio.Cancelled`` at its next checkpoint; one that
    returns before reaching one is not handled again. A handler that
    interrupts itself is handed its message again, and again.

    Returns:
        True if the message will be delivered again (or already is to be);
        False if there is nothing to interrupt: the actor is idle (waiting
        on an empty mailbox), starting, stopping (in ``on_stop``), being
        cancelled or restarted, exited, or an [`InlineActor`][agentrio.InlineActor].
    Raises:
        InvalidArgument: *ref* is not an [`ActorRef`][agentrio.ActorRef].
    """
    if type(ref) is not ActorRef:  # (one identity test: this is on tool calls' hot path)
        not_a_ref("interrupt", "ref", ref)
    return _interrupt(ref._cell)


def withdrawn(ref: ActorRef) -> bool:
    """Has the asker of the message *ref*'s actor is handling again withdrawn it?

    True in ``handle`` of a linked ask delivered again because its asker
    was cancelled (or withdrew it:
    [`PendingAsk.withdraw`][agentrio.actors.PendingAsk.withdraw]): no one
    waits for the reply, and the actor should wind the work up. False for
    everything else (a tell, an ask whose asker still waits, a first
    delivery). See [`ActorRef.ask`][agentrio.ActorRef.ask].

    Raises:
        InvalidArgument: *ref* is not an [`ActorRef`][agentrio.ActorRef].
    """
    if type(ref) is not ActorRef:
        not_a_ref("withdrawn", "ref", ref)
    item = ref._cell.held
    return type(item) is _Ask and item.abandoned


def begin_stop(ref: ActorRef) -> None:
    """Begin a graceful stop of *ref*'s actor, as
    [`ActorRef.stop`][agentrio.ActorRef.stop] does, without waiting.

    Its mailbox takes nothing more; it handles what is queued, runs
    ``on_stop`` and exits. ([`wait_exited`][agentrio.actors.wait_exited] waits for that.)

    Raises:
        InvalidArgument: *ref* is not an [`ActorRef`][agentrio.ActorRef].
    """
    if type(ref) is not ActorRef:
        not_a_ref("begin_stop", "ref", ref)
    cell = ref._cell
    if cell.state == "exited":
        return
    if cell.task is not None and cell.task is trio.lowlevel.current_task():
        cell.self_stopped = True
        _close(cell)
        return
    stop_cell(cell)


def exit_reason(ref: ActorRef) -> ExitReason | None:
    """How *ref*'s actor ended (``"stopped"``, ``"cancelled"``, ``"crashed"``), or
    None while it has not exited.

    Raises:
        InvalidArgument: *ref* is not an [`ActorRef`][agentrio.ActorRef].
    """
    if type(ref) is not ActorRef:
        not_a_ref("exit_reason", "ref", ref)
    cell = ref._cell
    return cell.stop_reason if cell.state == "exited" else None


async def wait_exited(ref: ActorRef) -> None:
    """Wait until *ref*'s actor has exited, and every actor linked to it
    ([`link`][agentrio.actors.link]).

    It is a checkpoint; cancelling it stops the waiting, not the actors.

    Raises:
        InvalidArgument: *ref* is not an [`ActorRef`][agentrio.ActorRef].
    """
    if type(ref) is not ActorRef:
        not_a_ref("wait_exited", "ref", ref)
    await _gone(ref._cell)


async def _gone(cell: Cell) -> None:
    await cell.wait_exited()
    for dependent in cell.dependents or ():
        await _gone(dependent)
