"""The actor base class, actor references and the serve loop (the mailbox is mailbox.py).

The hot path is ``ActorRef.send`` -> `Mailbox` -> ``serve_cell`` ->
``handle``. A tell puts the message itself in the mailbox (no envelope); an ask
puts a small `_Ask` slot that the serve loop settles by rescheduling the
waiting task directly, so a reply needs no second channel. Statistics are
counted with one attribute increment per message and read on demand. An
[`InlineActor`][agentrio.InlineActor] has no mailbox or task: ``deliver`` runs its ``handle`` in
the sender's task, at send time.

The kernel's primitives for the layers above (see ``agentrio.actors``) are in
primitives.py (``link``, ``interrupt``, ``withdrawn``, ``begin_stop``,
``exit_reason``, ``wait_exited``) and timers.py (``interrupt_after``); here are
``ActorRef.ask(linked=True)`` and [`ActorRef.ask_later`][agentrio.ActorRef.ask_later].
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Generic, Literal, NoReturn, Protocol, TypeVar

import msgspec
import outcome
import trio

from .._checks import check_timeout
from .._handles import NoPublicConstructor, create
from .._log import log_extra
from ..errors import (
    ActorCrashed,
    ActorStopped,
    AskTimeout,
    InvalidArgument,
    MailboxFull,
    NotAMessage,
    SelfAsk,
)
from ..messages import DeadLetter, ExitReason, Message
from .mailbox import Mailbox

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from .bus import EventBus

__all__ = [
    "Actor",
    "ActorRef",
    "ActorStatistics",
    "InlineActor",
    "Parent",
    "PendingAsk",
    "RestartPolicy",
]

MsgT = TypeVar("MsgT", bound=Message)
RestartPolicy = Literal["permanent", "transient", "temporary"]
"""The ``restart`` option of ``spawn`` and ``spawn_supervisor``: ``"permanent"``
(restarted after a crash, and after it stops itself), ``"transient"`` (restarted
after a crash only) or ``"temporary"`` (never restarted). A child stopped or
cancelled from outside is never restarted."""
RESTART_POLICIES: frozenset[str] = frozenset(("permanent", "transient", "temporary"))

# Dead letters among the first LOGGED_DEAD_LETTERS of a runtime (their message's
# type, never its content), the last of them saying the rest are only counted.
_log = logging.getLogger("agentrio.actors.actor")
LOGGED_DEAD_LETTERS = 10

# Cell.serving: where an actor's task is, for interrupt().
OUT = 0  # outside the serve loop: starting, in on_stop, no task (inline, a supervisor)
SERVING = 1  # in the serve loop
INTERRUPTED = 2  # in it, and interrupted: the message in hand is delivered again


class Actor(Generic[MsgT]):
    """Base class for actors: subclass it and implement [`handle`][agentrio.Actor.handle].

    ``MsgT`` is the type of message the actor handles (a subclass of
    [`Message`][agentrio.Message]). The runtime creates the instance
    (``ActorClass(*args)``, with the *args* given to ``spawn``) in the actor's own
    Trio task, sets `ref`, awaits [`on_start`][agentrio.Actor.on_start], then hands it one
    message at a time. A restart makes a fresh instance; the mailbox survives.

    Example:

        class Counter(agentrio.Actor[Add]):
            def __init__(self) -> None:
                self.total = 0

            async def handle(self, msg: Add) -> int:
                self.total += msg.n
                return self.total

    Attributes:
        ref: this actor's own [`ActorRef`][agentrio.ActorRef], set before
            [`on_start`][agentrio.Actor.on_start].
    """

    # Subclasses without __slots__ get a __dict__ as usual; the runtime's own
    # actors declare theirs, which saves a dict for each of 10k live agents.
    __slots__ = ("ref",)

    ref: ActorRef

    async def on_start(self) -> None:
        """Called once per incarnation, before the first message; raising here is a crash."""

    async def handle(self, msg: MsgT) -> object:
        """Handle one message; the return value is the reply to an ``ask``.

        Raising here crashes the actor: the ask of this message, if any, fails
        with [`ActorCrashed`][agentrio.errors.ActorCrashed], the message becomes a
        ``DeadLetter`` with reason ``"crashed_on"`` and the supervisor applies
        its restart policy. Messages still in the mailbox are kept for the
        next incarnation (or, if there is none, become dead letters whose
        askers get ``ActorStopped``). The default implementation raises
        ``NotImplementedError``.

        If the handling is interrupted (``agentrio.actors.interrupt``, an
        alarm of ``agentrio.actors.interrupt_after``, the cancelled asker of
        a linked ask), it sees ``trio.Cancelled``, and this is called again
        with the same message.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    async def on_stop(self) -> None:
        """Called after a graceful stop has drained the mailbox (not on cancel or crash)."""


class InlineActor(Generic[MsgT]):
    """Base class for actors that never wait: no task of their own, handled at send time.

    An inline actor's [`handle`][agentrio.InlineActor.handle] is a plain function. The runtime runs
    it in the sender's task when the message is sent, so the actor costs no
    Trio task, cancel scope or mailbox, and a message to it no trip through
    the scheduler. It is still an actor: its state is reached only through
    its [`ActorRef`][agentrio.ActorRef], it handles one message at a time, it is
    supervised (a raise is a crash: the ask fails with
    [`ActorCrashed`][agentrio.errors.ActorCrashed] and the restart policy applies) and it
    stops with its supervisor. Use it for state holders: agentrio's own
    context actors (one conversation history each) are inline actors.

    Unlike an [`Actor`][agentrio.Actor]:

    - ``spawn`` creates the instance, sets ``ref`` and calls ``on_start``
      before it returns.
    - ``send``, ``ask`` and ``send_nowait`` return once the message is
      handled (``send`` and ``ask`` are still checkpoints: if the caller is
      already cancelled, the message is not delivered); ``send_nowait``
      never raises ``MailboxFull``.
    - The mailbox is never used: ``mailbox`` only sets the capacity that
      ``statistics()`` reports, and ``mailbox_size`` is always 0.
    - A restart happens at once, in the task that saw the crash (a
      [`Backoff`][agentrio.Backoff] cannot delay it: there is no task to
      wait in).
    - A tell sent to it from inside its own ``handle`` (directly or through
      other inline actors that send back) is handled right after the
      current message, in order; such an ask raises
      [`SelfAsk`][agentrio.errors.SelfAsk].
    - After a crash that makes its supervisor fail (restart intensity
      exceeded), messages to it raise ``ActorStopped`` with reason
      ``"crashed"`` until the supervisor's restart remakes it; its inline
      siblings go on answering from their old state until then (task
      siblings are suspended instead, their messages kept).
    - Its methods must be plain functions: an ``async def`` ``handle``,
      ``on_start`` or ``on_stop`` is refused at ``spawn`` with
      ``InvalidArgument``.

    Example:

        class Tally(agentrio.InlineActor[Add]):
            def __init__(self) -> None:
                self.total = 0

            def handle(self, msg: Add) -> int:
                self.total += msg.n
                return self.total

    Attributes:
        ref: this actor's own [`ActorRef`][agentrio.ActorRef], set before
            [`on_start`][agentrio.InlineActor.on_start].
    """

    __slots__ = ("ref",)

    ref: ActorRef

    def on_start(self) -> None:
        """Called once per incarnation, before the first message, in the task that
        spawned (or restarted) the actor; raising here is a crash."""

    def handle(self, msg: MsgT) -> object:
        """Handle one message, without waiting; the return value is the reply to an ``ask``.

        Raising here crashes the actor, as for an ``Actor``: the asker of this
        message, if any, gets ``ActorCrashed`` (a ``send`` or ``send_nowait``
        does not raise); the message becomes a ``DeadLetter`` with reason
        ``"crashed_on"``; the supervisor applies the restart policy before
        the send returns. The default implementation raises
        ``NotImplementedError``.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    def on_stop(self) -> None:
        """Called on a graceful stop: ``await ref.stop()``, or its supervisor or the
        runtime stopping (not on cancel or crash). Raising here publishes
        ``ActorFailed`` and ends the actor with reason ``"crashed"``."""


class ActorStatistics(msgspec.Struct, frozen=True):
    """A snapshot of one actor, from [`ActorRef.statistics`][agentrio.ActorRef.statistics].

    Attributes:
        path: the actor's path in the supervision tree.
        state: ``"starting"`` (spawned, not yet running), ``"running"``,
            ``"stopping"``, ``"suspended"`` or ``"exited"``.
        mailbox_size: messages waiting in the mailbox.
        mailbox_capacity: the mailbox's bound.
        messages_handled: messages handled without crashing, over all incarnations.
        restarts: how many times the actor has been restarted (resumes after
            a supervisor restart included).
    """

    path: str
    state: str
    mailbox_size: int
    mailbox_capacity: int
    messages_handled: int
    restarts: int


class _Ask:
    """One pending request: the message, the waiting task and, once known, the outcome.

    It is also the abort function of the waiting task (``__call__``), so an
    ask allocates this one object and no closure.

    A *linked* ask (``ask(linked=True)``) is withdrawn with its asker: if it
    is still queued, the serve loop drops it unhandled; if the actor is
    handling it, the handling is interrupted ([`interrupt`][agentrio.actors.interrupt]) and the
    message delivered again, with [`withdrawn`][agentrio.actors.withdrawn] true, and a cancelled
    asker waits for that handling to end before it sees its
    ``trio.Cancelled``.
    """

    __slots__ = ("abandoned", "cancel", "handling", "linked", "msg", "outcome", "task", "waiting")

    def __init__(self, msg: Message, task: trio.lowlevel.Task, linked: Cell | None = None) -> None:
        self.msg = msg
        self.task = task
        self.outcome: outcome.Outcome[object] | None = None
        self.waiting = False
        self.linked = linked
        self.handling = False  # set by the serve loop when handle() takes it
        self.abandoned = False  # a linked ask withdrawn by its asker
        # The cancelled asker's raise_cancel, while it waits for the handling to end.
        self.cancel: Callable[[], NoReturn] | None = None

    def settle(self, result: outcome.Outcome[object]) -> None:
        if self.outcome is not None:
            return
        self.outcome = result
        if self.waiting:
            self.waiting = False
            if self.cancel is not None:  # the asker was cancelled: that is what it sees
                result = outcome.capture(self.cancel)
            trio.lowlevel.reschedule(self.task, result)

    def withdraw(self) -> None:
        """The asker gives up: a linked ask is dropped, or its handling interrupted."""
        cell = self.linked
        if cell is None:
            return
        self.abandoned = True
        if self.handling and self.outcome is None:
            # Work started for an asker ends with the asker. (The interrupt is
            # refused only for a cancel or a restart under way, which ends the
            # handling all the same.)
            _interrupt(cell)

    def __call__(self, raise_cancel: Callable[[], NoReturn]) -> trio.lowlevel.Abort:
        # The asker was cancelled (or timed out).
        self.withdraw()
        if self.handling and self.linked is not None:
            # It waits for the interrupted handling to end, then sees its Cancelled.
            self.cancel = raise_cancel
            return trio.lowlevel.Abort.FAILED
        # It stops waiting; a reply that comes later is dropped.
        self.waiting = False
        return trio.lowlevel.Abort.SUCCEEDED


class Shared(Protocol):
    """What every supervisor of one tree shares, as an actor sees it."""

    dead_letters: int

    @property
    def timers(self) -> object:
        """The tree's ``timers.Timers`` (None until the tree is made)."""


class Parent(Protocol):
    """A supervisor, as the actors it holds see it (``Cell.parent``, ``Cell.sup``).

    The kernel's one look upward, declared here and met by
    ``supervisors.supervisor._Supervisor`` (as trio's core reaches its runner): an
    actor tells its supervisor of an inline child's crash, restart and stop, and of
    an end, and reads the tree's bus, counts and timer task; it imports nothing of
    ``agentrio.supervisors``.
    """

    path: str
    stopping: bool

    @property
    def bus(self) -> EventBus:
        """The tree's event bus."""

    @property
    def shared(self) -> Shared:
        """What every supervisor of the tree shares."""

    @property
    def nursery(self) -> trio.Nursery | None:
        """Where its children's tasks run (None while it does not run)."""

    def begin_stop(self) -> None:
        """Begin a graceful stop of this supervisor (and so of its children)."""

    def remake_inline(self, cell: Cell) -> None:
        """Restart inline child *cell* now: a fresh instance."""

    def inline_crashed(self, cell: Cell, msg: object, exc: Exception) -> None:
        """Inline child *cell* raised handling *msg*: apply its restart policy."""

    def stop_inline(self, cell: Cell) -> None:
        """Stop inline child *cell* gracefully."""

    def finalize(self, cell: Cell, reason: ExitReason) -> None:
        """End child *cell* for good."""


class Cell:
    """Everything the runtime holds for one child slot (an actor or a supervisor).

    The cell outlives incarnations: restarts swap `instance` but keep the
    mailbox, so every [`ActorRef`][agentrio.ActorRef] stays valid.
    """

    __slots__ = (
        "args",
        "backlog",
        "cancel_requested",
        "capacity",
        "dependents",
        "exited",
        "factory",
        "handled",
        "held",
        "inline",
        "instance",
        "mailbox",
        "mark",
        "name",
        "owner",
        "parent",
        "path",
        "ref",
        "restart",
        "restart_pending",
        "restarts",
        "scope",
        "self_stopped",
        "serving",
        "state",
        "stop_reason",
        "streak",
        "sup",
        "task",
    )

    def __init__(
        self,
        parent: Parent,
        name: str,
        factory: Callable[..., Actor[Any] | InlineActor[Any]] | None,
        args: tuple[object, ...],
        capacity: int,
        restart: RestartPolicy,
        sup: Parent | None = None,
    ) -> None:
        self.parent = parent
        self.name = name
        self.path = f"{parent.path}/{name}" if parent.path else name
        self.factory = factory
        self.args = args
        self.capacity = capacity
        self.restart = restart
        self.sup = sup
        # An inline actor is handled at send time; a supervisor is never sent
        # anything: neither has a mailbox.
        self.inline = isinstance(factory, type) and issubclass(factory, InlineActor)
        # An inline actor's tells that arrive while it handles a message (sent
        # from inside that very handle, through a cycle): handled right after.
        self.backlog: deque[Message] | None = None
        self.mailbox: Mailbox | None = (
            Mailbox(capacity) if sup is None and not self.inline else None
        )
        self.instance: Actor[Any] | InlineActor[Any] | None = None
        self.scope: trio.CancelScope | None = None
        self.handled = 0
        self.restarts = 0
        self.streak = 0
        self.mark = 0
        self.state = "running"
        self.stop_reason: ExitReason = "stopped"
        self.cancel_requested = False
        # Where the task is, for interrupt(): outside the serve loop (OUT:
        # starting, stopping, or no task at all), in it (SERVING), or in it and
        # interrupted (INTERRUPTED: the message in hand is delivered again).
        self.serving = OUT
        self.restart_pending = False
        self.self_stopped = False
        # The message whose handling was cut short: by an interrupt (it is
        # kept here while it is delivered again), a crash or a cancel (the
        # supervisor settles it: a dead letter, its asker told).
        self.held: object = None
        self.exited: trio.Event | None = None
        # A linked cell (an agent's context, a subagent: see link()) is stopped
        # by its owner's exit, not by its supervisor's shutdown, so it outlives
        # its owner's last use.
        self.owner: Cell | None = None
        self.dependents: list[Cell] | None = None
        # The Trio task running this child: a self-ask (which could never be
        # answered) is an ask from this task.
        self.task: trio.lowlevel.Task | None = None
        # (Not create(ActorRef, ...): a call costs more than the
        # two steps it takes, and a cell is made for every actor and context.)
        self.ref: ActorRef = object.__new__(ActorRef)
        self.ref._cell = self

    def own(self, child: Cell) -> None:
        """Make *child* this cell's: it ends after this one (see [`link`][agentrio.actors.link])."""
        child.owner = self
        deps = self.dependents
        if deps is None:
            deps = self.dependents = []
        elif len(deps) >= 64 and not len(deps) & (len(deps) - 1):
            # Drop the children that have exited now and then (at each power of
            # two): a long-lived owner must not keep every child it ever had.
            deps[:] = [d for d in deps if d.state != "exited"]
        deps.append(child)

    def stopped_error(self, msg: object) -> ActorStopped:
        if self.state == "exited":
            reason = self.stop_reason
        else:
            # Still on its way out: say how it is going, not just that it is.
            reason = "cancelled" if self.cancel_requested else "stopped"
        self.dead_letter(msg, reason)
        return ActorStopped(
            f"actor {self.path!r} has {reason}; {type(msg).__name__} was not delivered",
            path=self.path,
            reason=reason,
        )

    def dead_letter(self, msg: object, reason: str) -> None:
        bus = self.parent.bus
        if bus.active:
            if type(msg) is _Ask:
                msg = msg.msg
            text = repr(msg)
            bus.publish(
                DeadLetter(
                    path=self.path,
                    reason=reason,
                    message_type=type(msg).__name__,
                    message=text if len(text) <= 200 else text[:197] + "...",
                )
            )
        shared = self.parent.shared
        shared.dead_letters += 1
        # (Not one that crashed its actor: the supervisor logs the crash.)
        if shared.dead_letters <= LOGGED_DEAD_LETTERS and reason != "crashed_on":
            _dead_letter_logged(self.path, msg, reason, shared.dead_letters)

    async def wait_exited(self) -> None:
        if self.state == "exited":
            await trio.lowlevel.checkpoint()
            return
        if self.exited is None:
            self.exited = trio.Event()
        await self.exited.wait()


def cell_of(ref: ActorRef) -> Cell:
    """The cell behind *ref* (for the supervisors, which hold the cells)."""
    return ref._cell


async def serve_cell(cell: Cell, actor: Actor[Any]) -> None:
    """The actor loop: one message at a time until the mailbox is closed and drained.

    A message in ``cell.held`` was interrupted (see [`interrupt`][agentrio.actors.interrupt]): it is
    handed to ``handle`` again first, and kept there while it is (for
    [`withdrawn`][agentrio.actors.withdrawn]).
    """
    mailbox = cell.mailbox
    assert mailbox is not None
    cell.serving = SERVING
    # (No locals for mailbox.receive or actor.handle: a bound method kept on
    # each idle actor's frame is one more object for the cyclic GC to walk.)
    item: object = cell.held
    # The task's start was this actor's schedule point: a message already
    # waiting is taken without another trip to the scheduler. Not so after an
    # interrupt (this incarnation has handled messages, or has one in hand):
    # it has run a while since.
    first = item is None and cell.handled == cell.mark
    try:
        if item is not None:
            if type(item) is _Ask:
                item.settle(outcome.Value(await actor.handle(item.msg)))
            else:
                await actor.handle(item)
            cell.handled += 1
            cell.held = item = None
        while True:
            # Mailbox.receive, inlined: one coroutine frame less per idle actor.
            if not first:
                await trio.lowlevel.checkpoint_if_cancelled()
            # (take(), not receive_nowait(): an exception raised through this
            # frame would make Python keep a frame object for the actor's life.)
            item = mailbox.take()
            if item is None:
                mailbox.park()
                item = await trio.lowlevel.wait_task_rescheduled(mailbox)
            elif not first:
                await trio.lowlevel.cancel_shielded_checkpoint()
            first = False
            if type(item) is _Ask:
                if item.abandoned:  # a linked ask whose asker gave up while it was queued
                    item = None
                    continue
                item.handling = True
                item.settle(outcome.Value(await actor.handle(item.msg)))
            else:
                await actor.handle(item)
            cell.handled += 1
            item = None
    except trio.EndOfChannel:
        if item is None:  # from receive: closed and drained, a graceful stop
            cell.serving = OUT
            return
        cell.held = item
        raise
    except BaseException:
        # Kept: the message that was being handled is delivered again (an
        # interrupt), or, for the supervisor, becomes a dead letter, and if it
        # was an ask, its asker is told.
        cell.held = item
        raise


def _check_message(msg: object) -> None:
    if not isinstance(msg, Message):
        raise NotAMessage(
            f"expected an agentrio.Message (a msgspec Struct subclass), got {type(msg).__name__}"
        )


class ActorRef(metaclass=NoPublicConstructor):
    """The handle to an actor: the only way code talks to it.

    Refs are made by ``spawn`` and returned by ``lookup``; no public
    constructor. A ref stays valid across restarts, and each actor has one
    ref object, so refs to the same actor are the same object.
    """

    __slots__ = ("_cell",)

    def __init__(self, cell: Cell) -> None:
        self._cell = cell

    @property
    def name(self) -> str:
        """The actor's name, unique within its supervisor."""
        return self._cell.name

    @property
    def path(self) -> str:
        """The actor's path from the root, ``"/"``-separated."""
        return self._cell.path

    def __repr__(self) -> str:
        return f"<ActorRef {self._cell.path!r} {self._cell.state}>"

    async def send(self, msg: Message) -> None:
        """Put *msg* in the actor's mailbox, waiting while it is full (backpressure).

        For an [`InlineActor`][agentrio.InlineActor], the message is handled before this returns.

        Raises:
            NotAMessage: *msg* is not an [`agentrio.Message`][agentrio.Message].
            ActorStopped: the actor has stopped or is stopping; a ``DeadLetter``
                event is published.
        """
        if not isinstance(msg, Message):
            _check_message(msg)
        cell = self._cell
        if cell.inline:
            await trio.lowlevel.checkpoint_if_cancelled()
            deliver(cell, msg, asked=False)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        try:
            await cell.mailbox.send(msg)  # type: ignore[union-attr]
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise cell.stopped_error(msg) from None

    def send_nowait(self, msg: Message) -> None:
        """Put *msg* in the mailbox now, or raise.

        For an [`InlineActor`][agentrio.InlineActor], the message is handled before this returns.

        Raises:
            NotAMessage: *msg* is not an [`agentrio.Message`][agentrio.Message].
            MailboxFull: the mailbox is at its capacity (never for an inline actor).
            ActorStopped: the actor has stopped or is stopping; a ``DeadLetter``
                event is published.
        """
        if not isinstance(msg, Message):
            _check_message(msg)
        cell = self._cell
        if cell.inline:
            deliver(cell, msg, asked=False)
            return
        try:
            cell.mailbox.send_nowait(msg)  # type: ignore[union-attr]
        except trio.WouldBlock:
            raise MailboxFull(
                f"mailbox of {cell.path!r} is full ({cell.capacity} messages)", path=cell.path
            ) from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise cell.stopped_error(msg) from None

    def ask(
        self, msg: Message, *, timeout: float | None = None, linked: bool = False
    ) -> Coroutine[Any, Any, object]:
        """Send *msg* and wait for what ``handle`` returns: ``await ref.ask(msg)``.

        An ask that is cancelled or times out after the message was delivered
        is *withdrawn*: by default the actor still handles the message and
        the reply is dropped. A *linked* ask is work done for its asker and
        ends with it: withdrawn while queued, it is dropped unhandled (not a
        dead letter); withdrawn while it is handled, the handling is
        interrupted ([`interrupt`][agentrio.actors.interrupt]) and the message handed
        to ``handle`` again, where [`withdrawn`][agentrio.actors.withdrawn] is true
        (the actor winds it up, its reply is dropped), and the cancelled
        asker waits for that handling to end before it sees its
        ``trio.Cancelled``.

        The argument checks are made when this is called; the ask itself is
        the coroutine it returns (one frame on the waiting stack, not two).

        Args:
            msg: the request.
            timeout: seconds to wait for the reply; ``None`` waits as long as
                the caller's own cancel scopes allow.
            linked: withdrawn with its asker, as above.

        Returns:
            The value ``handle`` returned.

        Raises:
            NotAMessage: *msg* is not an [`agentrio.Message`][agentrio.Message].
            InvalidArgument: *timeout* is not ``None`` or a number >= 0.
            SelfAsk: called from the actor's own task (inside its ``handle``).
            AskTimeout: no reply within *timeout*.
            ActorCrashed: the actor raised while handling *msg*.
            ActorStopped: the actor stopped, or was cancelled, before it
                finished *msg*.
        """
        if not isinstance(msg, Message):
            _check_message(msg)
        cell = self._cell
        task = trio.lowlevel.current_task()
        if cell.task is task:
            raise SelfAsk(
                f"actor {cell.path!r} asked itself from inside handle(): it would deadlock; "
                "use send() to message yourself"
            )
        if timeout is None:
            return _ask(cell, msg, linked)
        check_timeout("timeout", timeout)
        return _ask_within(cell, msg, linked, timeout)

    async def ask_later(self, msg: Message, *, linked: bool = False) -> PendingAsk:
        """Put an ask of *msg* in the mailbox now; its reply is awaited later.

        The message takes its place in the mailbox when this returns (it
        waits for room as ``send`` does), ahead of anything asked after
        it; [`PendingAsk.reply`][agentrio.actors.PendingAsk.reply] then waits for the reply,
        in whichever
        task awaits it, as ``ask`` would (*linked* as there: the task
        awaiting the reply is the asker).

        Raises:
            NotAMessage: *msg* is not an [`Message`][agentrio.Message].
            InvalidArgument: the actor is an [`InlineActor`][agentrio.InlineActor] (use ``ask``).
            SelfAsk: called from inside this actor's own ``handle``.
            ActorStopped: the actor has stopped.
        """
        if not isinstance(msg, Message):
            _check_message(msg)
        cell = self._cell
        if cell.inline:
            raise InvalidArgument(
                f"{cell.path!r} is an inline actor: it has no mailbox to hold an ask; ask() it"
            )
        task = trio.lowlevel.current_task()
        if cell.task is task:
            raise SelfAsk(
                f"actor {cell.path!r} asked itself from inside handle(): it would deadlock; "
                "use send() to message yourself"
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        # (Its task is this one until reply() takes it over; nothing wakes a
        # task while the ask is not ``waiting``.)
        ask = _Ask(msg, task, cell if linked else None)
        await _put(cell, ask)
        return create(PendingAsk, ask)

    async def stop(self) -> None:
        """Stop gracefully: no new messages; drain the mailbox, run ``on_stop``, exit.

        Waits until the actor has exited. Called by the actor on itself, it
        returns at once; the actor handles what is already queued, then exits;
        a ``permanent`` actor that stops itself is restarted. Stopping a stopped
        actor does nothing. ([`begin_stop`][agentrio.actors.begin_stop] stops it without
        waiting.)
        """
        cell = self._cell
        if cell.state != "exited":
            if cell.task is trio.lowlevel.current_task():
                cell.self_stopped = True
                _close(cell)
                await trio.lowlevel.checkpoint()
                return
            stop_cell(cell)
        await cell.wait_exited()

    def cancel(self) -> None:
        """Stop now: cancel the actor's task (an inline actor just ends).

        ``on_stop`` does not run. The message being handled and those queued
        become dead letters; their askers get ``ActorStopped`` with reason
        ``"cancelled"``. The actor is not restarted. Does not wait;
        ``await ref.stop()`` afterwards waits for the exit.
        """
        cancel_cell(self._cell)

    def statistics(self) -> ActorStatistics:
        """Return a snapshot of this actor's mailbox and counters."""
        cell = self._cell
        size = 0
        if cell.mailbox is not None and cell.state != "exited":
            size = len(cell.mailbox)
        return ActorStatistics(
            path=cell.path,
            state=cell.state,
            mailbox_size=size,
            mailbox_capacity=cell.capacity,
            messages_handled=cell.handled,
            restarts=cell.restarts,
        )


async def _ask(cell: Cell, msg: Message, linked: bool) -> object:
    """Ask *cell* (see [`ActorRef.ask`][agentrio.ActorRef.ask]) from the task that
    awaits this: the asker is that task, not the one that made the coroutine (one
    made for ``nursery.start_soon`` is made in the parent's)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    if cell.inline:
        reply = deliver(cell, msg, asked=True)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return reply
    ask = _Ask(msg, trio.lowlevel.current_task(), cell if linked else None)
    mailbox = cell.mailbox
    try:
        try:
            mailbox.send_nowait(ask)  # type: ignore[union-attr]
        except trio.WouldBlock:
            await mailbox.send(ask)  # type: ignore[union-attr]
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        raise cell.stopped_error(msg) from None
    if ask.outcome is not None:
        return ask.outcome.unwrap()
    ask.waiting = True
    return await trio.lowlevel.wait_task_rescheduled(ask)


async def _ask_within(cell: Cell, msg: Message, linked: bool, timeout: float) -> object:
    with trio.move_on_after(timeout):
        return await _ask(cell, msg, linked)
    raise AskTimeout(f"no reply from {cell.path!r} within {timeout} s", path=cell.path)


async def _put(cell: Cell, ask: _Ask) -> None:
    """Put *ask* in *cell*'s mailbox, waiting for room."""
    mailbox = cell.mailbox
    assert mailbox is not None
    try:
        try:
            mailbox.send_nowait(ask)
        except trio.WouldBlock:
            await mailbox.send(ask)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        raise cell.stopped_error(ask.msg) from None


class PendingAsk(metaclass=NoPublicConstructor):
    """An ask already in an actor's mailbox, from
    [`ActorRef.ask_later`][agentrio.ActorRef.ask_later].

    Await ``reply`` once, in any task: that task is then the asker (for
    a linked ask, the one whose cancellation withdraws it). Or give the
    reply up with ``withdraw``.
    """

    __slots__ = ("_ask", "_taken")

    def __init__(self, ask: _Ask) -> None:
        # None once withdrawn: the reply, when it comes, is nobody's to keep.
        self._ask: _Ask | None = ask
        self._taken = False

    @property
    def done(self) -> bool:
        """True once ``reply`` would not wait: the actor has replied (or failed
        to), or the ask was withdrawn."""
        ask = self._ask
        return ask is None or ask.outcome is not None

    async def reply(self) -> object:
        """Wait for the reply, as [`ActorRef.ask`][agentrio.ActorRef.ask] does.

        Raises:
            ActorCrashed: the actor raised while handling the message.
            ActorStopped: the actor stopped before it handled the message.
            InvalidArgument: the reply was awaited already; or the ask was
                withdrawn ([`withdraw`][agentrio.actors.PendingAsk.withdraw]),
                before this call or while it waited (from another task).
        """
        ask = self._ask
        if ask is None:
            raise _withdrawn_error()
        if self._taken:
            raise InvalidArgument("a PendingAsk's reply can be awaited once")
        self._taken = True
        ask.task = trio.lowlevel.current_task()
        if ask.outcome is not None:  # answered, or refused, already
            return ask.outcome.unwrap()
        ask.waiting = True
        return await trio.lowlevel.wait_task_rescheduled(ask)

    def withdraw(self) -> None:
        """Give up on the reply without waiting for it; the reply is dropped.

        A linked ask still queued is then dropped unhandled; one being
        handled is interrupted and delivered again, with
        [`withdrawn`][agentrio.actors.withdrawn] true. (Not linked, the
        message is handled all the same.) Whatever the actor replies is
        dropped, even if it has replied already: ``reply`` raises
        ``InvalidArgument`` from now on, and a ``reply`` waiting in another
        task raises it at once. Withdrawing again does nothing.
        """
        ask = self._ask
        if ask is None:
            return
        self._ask = None
        ask.withdraw()
        if ask.waiting and ask.cancel is None:
            # A reply() waits in another task (not a cancelled one, which
            # waits for the interrupted handling to end): it is told now, and
            # the reply that comes later finds no one waiting.
            ask.waiting = False
            trio.lowlevel.reschedule(ask.task, outcome.Error(_withdrawn_error()))


def _withdrawn_error() -> InvalidArgument:
    return InvalidArgument(
        "this PendingAsk was withdrawn: its reply is dropped, there is none to await"
    )


def deliver(cell: Cell, msg: Message, *, asked: bool) -> object:
    """Have inline actor *cell* handle *msg* now; its reply (None for a tell).

    A crash is handed to the supervisor; the asker (not a teller) is told.
    A tell that arrives while the actor is handling a message (sent from
    inside that handle, directly or through other inline actors) waits and
    is handled right after it; an ask then raises [`SelfAsk`][agentrio.errors.SelfAsk].
    """
    if cell.instance is None:
        _refuse(cell, msg)
    if cell.task is not None:
        if asked:
            raise SelfAsk(
                f"inline actor {cell.path!r} was asked {type(msg).__name__} while it handles "
                "a message (an ask to itself, or through a cycle of inline actors): "
                "it would deadlock; send() it instead"
            )
        if cell.backlog is None:
            cell.backlog = deque()
        cell.backlog.append(msg)
        return None
    cell.task = trio.lowlevel.current_task()
    crashed: ActorCrashed | None = None
    reply: object = None
    try:
        try:
            reply = _handle_inline(cell, msg, asked)
        except ActorCrashed as exc:  # told to the asker once the backlog is done
            crashed = exc
        backlog = cell.backlog
        while backlog:
            if cell.instance is None:  # it crashed for good, or stopped: the rest is undelivered
                for item in backlog:
                    cell.dead_letter(item, "stopped" if cell.state == "exited" else "crashed")
                backlog.clear()
                break
            _handle_inline(cell, backlog.popleft(), False)
    finally:
        cell.task = None
    if cell.restart_pending:  # its supervisor's one_for_all came while it handled
        cell.restart_pending = False
        cell.parent.remake_inline(cell)
    if crashed is not None:
        raise crashed
    return reply


def _handle_inline(cell: Cell, msg: Message, asked: bool) -> object:
    actor = cell.instance
    assert isinstance(actor, InlineActor)
    try:
        reply = actor.handle(msg)
    except Exception as exc:
        cell.parent.inline_crashed(cell, msg, exc)
        if asked:
            raise _crashed(cell, msg, exc) from exc
        return None
    cell.handled += 1
    return reply


def _crashed(cell: Cell, msg: Message, exc: BaseException) -> ActorCrashed:
    return ActorCrashed(
        f"actor {cell.path!r} crashed handling {type(msg).__name__}: {exc!r}",
        path=cell.path,
        cause=exc,
    )


def _refuse(cell: Cell, msg: Message) -> NoReturn:
    if cell.state != "exited":  # crashed, and left for its supervisor's restart
        cell.dead_letter(msg, "crashed")
        raise ActorStopped(
            f"actor {cell.path!r} has crashed and waits for its supervisor's restart; "
            f"{type(msg).__name__} was not delivered",
            path=cell.path,
            reason="crashed",
        )
    raise cell.stopped_error(msg)


def _close(cell: Cell) -> None:
    if cell.mailbox is not None:
        cell.mailbox.close()


def stop_cell(cell: Cell) -> None:
    """Begin a graceful stop of *cell* (an actor or a supervisor)."""
    if cell.state in ("exited", "stopping"):
        return
    cell.state = "stopping"
    if cell.sup is not None:
        cell.sup.begin_stop()
    elif cell.inline:
        cell.parent.stop_inline(cell)
    else:
        _close(cell)


def cancel_cell(cell: Cell) -> None:
    """Cancel *cell* now (an actor or a supervisor); it is not restarted."""
    if cell.state == "exited":
        return
    cell.cancel_requested = True
    if cell.sup is not None:
        # Closed from now on (SupervisorRef.closed; a spawn raises), not only
        # once its task has ended: it is never restarted.
        cell.sup.stopping = True
    if cell.inline:
        cell.parent.finalize(cell, "cancelled")
        return
    if cell.scope is not None:
        cell.scope.cancel()
    _close(cell)


def _interrupt(cell: Cell) -> bool:
    serving = cell.serving
    if serving != SERVING:
        return serving == INTERRUPTED
    scope = cell.scope
    mailbox = cell.mailbox
    if (
        scope is None
        or mailbox is None
        or mailbox.idle
        or cell.cancel_requested
        or cell.restart_pending
    ):
        return False
    cell.serving = INTERRUPTED
    scope.cancel()
    return True


def fail_item(cell: Cell, item: object, reason: str, exc: BaseException | None) -> None:
    """Settle one undelivered or crashing mailbox item: dead letter, and fail its asker."""
    if item is None:
        return
    if type(item) is _Ask and item.abandoned and item.cancel is None:
        return  # withdrawn by its asker, who is not waiting: not a dead letter
    cell.dead_letter(item, reason)
    if type(item) is _Ask:
        if exc is not None:
            err: Exception = _crashed(cell, item.msg, exc)
        else:
            err = ActorStopped(
                f"actor {cell.path!r} {reason} before it replied to {type(item.msg).__name__}",
                path=cell.path,
                reason=reason,
            )
        item.settle(outcome.Error(err))


def _dead_letter_logged(path: str, msg: object, reason: str, count: int) -> None:
    shown = msg.msg if type(msg) is _Ask else msg
    _log.warning(
        "dead letter: a %s for %r was not handled (%s)%s",
        *(type(shown).__name__, path, reason),
        "; further dead letters are only counted (statistics().dead_letters)"
        if count == LOGGED_DEAD_LETTERS
        else "",
        extra=log_extra(path),
    )


def drain(cell: Cell, reason: str) -> None:
    """Close *cell*'s mailbox for good and settle everything still in it."""
    mailbox = cell.mailbox
    if mailbox is None:
        return
    mailbox.close()
    while True:
        try:
            item = mailbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            break
        fail_item(cell, item, reason, None)


def reopen(cell: Cell) -> None:
    """Give a restarted actor that had closed its own mailbox a fresh one."""
    drain(cell, "stopped")
    cell.mailbox = Mailbox(cell.capacity)
