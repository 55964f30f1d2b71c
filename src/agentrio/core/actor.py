"""The actor base class, actor references and the serve loop (the mailbox is mailbox.py).

The hot path is ``ActorRef.send`` -> `Mailbox` -> ``_serve`` ->
``handle``. A tell puts the message itself in the mailbox (no envelope); an ask
puts a small `_Ask` slot that the serve loop settles by rescheduling the
waiting task directly, so a reply needs no second channel. Statistics are
counted with one attribute increment per message and read on demand. An
[`InlineActor`][agentrio.InlineActor] has no mailbox or task: ``deliver`` runs its ``handle`` in
the sender's task, at send time.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Generic, Literal, NoReturn, TypeVar

import msgspec
import outcome
import trio

from .._checks import check_timeout
from ..errors import (
    ActorCrashed,
    ActorStopped,
    AskTimeout,
    MailboxFull,
    NotAMessage,
    SelfAsk,
)
from ..messages import DeadLetter, ExitReason, Message
from .mailbox import Mailbox

if TYPE_CHECKING:
    from collections.abc import Callable

    from .supervisor import _Supervisor

__all__ = ["Actor", "ActorRef", "ActorStatistics", "InlineActor", "RestartPolicy"]

MsgT = TypeVar("MsgT", bound=Message)
RestartPolicy = Literal["permanent", "transient", "temporary"]
"""The ``restart`` option of ``spawn`` and ``spawn_supervisor``: ``"permanent"``
(restarted after a crash, and after it stops itself), ``"transient"`` (restarted
after a crash only) or ``"temporary"`` (never restarted). A child stopped or
cancelled from outside is never restarted."""
RESTART_POLICIES: frozenset[str] = frozenset(("permanent", "transient", "temporary"))


class NoPublicConstructor(type):
    """Metaclass for handles that only the runtime may create (``Cls._create(...)``)."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"agentrio.{cls.__qualname__} has no public constructor; "
            "the runtime makes these (spawn, spawn_agent, open_runtime, events)"
        )

    def _create(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]


_T = TypeVar("_T")


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
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement handle()")

    async def on_stop(self) -> None:
        """Called after a graceful stop has drained the mailbox (not on cancel or crash)."""

    async def _resume(self, msg: MsgT, *, abandoned: bool) -> object:
        # The runtime's: finish *msg*, whose handling was cut short: by a timer
        # (Timers), or, *abandoned*, because the asker of a linked ask was
        # cancelled. Only agents arm such timers and take linked asks; see
        # AgentActor.
        raise NotImplementedError(f"{type(self).__qualname__} cannot resume {msg!r}")


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

    A *linked* ask (``AgentRef.run``'s) is cancelled with its asker: if it is
    still queued, the serve loop drops it unhandled; if the actor is handling
    it, the actor's task is cut short (``_Cell.interrupted``) and resumes the
    message with ``actor._resume(msg, abandoned=True)``, and the asker waits
    for that to end before it sees its ``trio.Cancelled``.
    """

    __slots__ = ("abandoned", "cancel", "handling", "linked", "msg", "outcome", "task", "waiting")

    def __init__(self, msg: Message, task: trio.lowlevel.Task, linked: _Cell | None = None) -> None:
        self.msg = msg
        self.task = task
        self.outcome: outcome.Outcome[object] | None = None
        self.waiting = False
        self.linked = linked
        self.handling = False  # set by the serve loop when handle() takes it
        self.abandoned = False  # a linked ask whose asker was cancelled
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

    def __call__(self, raise_cancel: Callable[[], NoReturn]) -> trio.lowlevel.Abort:
        # The asker was cancelled (or timed out).
        cell = self.linked
        if cell is not None:
            self.abandoned = True
            if self.handling and cell.scope is not None:
                # Its handling stops now, and the asker waits for it to end:
                # work started for a caller ends with the caller.
                self.cancel = raise_cancel
                cell.interrupted = True
                cell.scope.cancel()
                return trio.lowlevel.Abort.FAILED
        # It stops waiting; a reply that comes later is dropped.
        self.waiting = False
        return trio.lowlevel.Abort.SUCCEEDED


class _Cell:
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
        "failed_item",
        "handled",
        "inline",
        "instance",
        "interrupted",
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
        "state",
        "stop_reason",
        "streak",
        "sup",
        "task",
    )

    def __init__(
        self,
        parent: _Supervisor,
        name: str,
        factory: Callable[..., Actor[Any] | InlineActor[Any]] | None,
        args: tuple[object, ...],
        capacity: int,
        restart: RestartPolicy,
        sup: _Supervisor | None = None,
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
        # Set when a timer (Timers) cancelled the task to cut its handler short:
        # the same incarnation then resumes the message (``actor._resume``).
        self.interrupted = False
        self.restart_pending = False
        self.self_stopped = False
        self.failed_item: object = None
        self.exited: trio.Event | None = None
        # An owned cell (an agent's context) is stopped by its owner's exit,
        # not by its supervisor's shutdown, so it outlives its owner's last use.
        self.owner: _Cell | None = None
        self.dependents: list[_Cell] | None = None
        # The Trio task running this child: a self-ask (which could never be
        # answered) is an ask from this task.
        self.task: trio.lowlevel.Task | None = None
        # (Not ActorRef._create: the metaclass's call path costs more than the
        # two steps it takes, and a cell is made for every actor and context.)
        self.ref: ActorRef = object.__new__(ActorRef)
        self.ref._cell = self

    def own(self, child: _Cell) -> None:
        """Make *child* (a context, a subagent) this cell's: it stops after this one."""
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
        self.parent.shared.dead_letters += 1

    async def wait_exited(self) -> None:
        if self.state == "exited":
            await trio.lowlevel.checkpoint()
            return
        if self.exited is None:
            self.exited = trio.Event()
        await self.exited.wait()


async def _serve(cell: _Cell, actor: Actor[Any], *, resume: bool = False) -> None:
    """The actor loop: one message at a time until the mailbox is closed and drained.

    With *resume*, the message in ``cell.failed_item`` was cut short (by a
    timer, or by its asker's cancellation): ``actor._resume`` finishes it
    before the loop goes on. (None there: the cut came as the handling ended,
    and there is nothing to finish.)
    """
    mailbox = cell.mailbox
    assert mailbox is not None
    # (No locals for mailbox.receive or actor.handle: a bound method kept on
    # each idle actor's frame is one more object for the cyclic GC to walk.)
    item: object = None
    try:
        if resume:
            item, cell.failed_item = cell.failed_item, None
            if type(item) is _Ask:
                abandoned = item.cancel is not None
                item.settle(outcome.Value(await actor._resume(item.msg, abandoned=abandoned)))
                cell.handled += 1
            elif item is not None:
                await actor._resume(item, abandoned=False)
                cell.handled += 1
            item = None
        # The task's start was this actor's schedule point: a message already
        # waiting is taken without another trip to the scheduler (not so after
        # a resume, which has run a while since).
        first = not resume
        while True:
            # Mailbox.receive, inlined: one coroutine frame less per idle actor.
            if not first:
                await trio.lowlevel.checkpoint_if_cancelled()
            try:
                item = mailbox.receive_nowait()
            except trio.WouldBlock:
                item = None
            if item is None:
                # Parked outside the except clause, so that the WouldBlock (its
                # traceback and frame) is not kept alive while the actor idles.
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
            return
        cell.failed_item = item
        raise
    except BaseException:
        # Kept for the supervisor: the message that was being handled becomes
        # a dead letter, and if it was an ask, its asker is told.
        cell.failed_item = item
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

    def __init__(self, cell: _Cell) -> None:
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

    async def ask(self, msg: Message, *, timeout: float | None = None) -> object:
        """Send *msg* and wait for what ``handle`` returns.

        If the ask is cancelled or times out after the message was delivered,
        the actor still handles it; the reply is dropped.
        ([`AgentRef.run`][agentrio.AgentRef.run] is different: its phase ends
        with its caller.)

        Args:
            msg: the request.
            timeout: seconds to wait for the reply; ``None`` waits as long as
                the caller's own cancel scopes allow.

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
            return await _ask(cell, msg, task)
        check_timeout("timeout", timeout)
        with trio.move_on_after(timeout):
            return await _ask(cell, msg, task)
        raise AskTimeout(f"no reply from {cell.path!r} within {timeout} s", path=cell.path)

    async def stop(self) -> None:
        """Stop gracefully: no new messages; drain the mailbox, run ``on_stop``, exit.

        Waits until the actor has exited. Called by the actor on itself, it
        returns at once; the actor handles what is already queued, then exits;
        a ``permanent`` actor that stops itself is restarted. Stopping a stopped
        actor does nothing.
        """
        cell = self._cell
        if cell.state != "exited":
            if cell.task is trio.lowlevel.current_task():
                cell.self_stopped = True
                _close(cell)
                await trio.lowlevel.checkpoint()
                return
            request_stop(cell)
        await cell.wait_exited()

    def cancel(self) -> None:
        """Stop now: cancel the actor's task (an inline actor just ends).

        ``on_stop`` does not run. The message being handled and those queued
        become dead letters; their askers get ``ActorStopped`` with reason
        ``"cancelled"``. The actor is not restarted. Does not wait;
        ``await ref.stop()`` afterwards waits for the exit.
        """
        request_cancel(self._cell)

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


async def _ask(
    cell: _Cell, msg: Message, task: trio.lowlevel.Task, *, linked: bool = False
) -> object:
    """Ask *cell* (see [`ActorRef.ask`][agentrio.ActorRef.ask]); *linked*: cancelled with the asker
    (see _Ask)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    if cell.inline:
        reply = deliver(cell, msg, asked=True)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return reply
    ask = _Ask(msg, task, cell if linked else None)
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


def deliver(cell: _Cell, msg: Message, *, asked: bool) -> object:
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


def _handle_inline(cell: _Cell, msg: Message, asked: bool) -> object:
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


def _crashed(cell: _Cell, msg: Message, exc: BaseException) -> ActorCrashed:
    return ActorCrashed(
        f"actor {cell.path!r} crashed handling {type(msg).__name__}: {exc!r}",
        path=cell.path,
        cause=exc,
    )


def _refuse(cell: _Cell, msg: Message) -> NoReturn:
    if cell.state != "exited":  # crashed, and left for its supervisor's restart
        cell.dead_letter(msg, "crashed")
        raise ActorStopped(
            f"actor {cell.path!r} has crashed and waits for its supervisor's restart; "
            f"{type(msg).__name__} was not delivered",
            path=cell.path,
            reason="crashed",
        )
    raise cell.stopped_error(msg)


def _close(cell: _Cell) -> None:
    if cell.mailbox is not None:
        cell.mailbox.close()


def request_stop(cell: _Cell) -> None:
    """Begin a graceful stop of *cell* (an actor or a supervisor)."""
    if cell.state in ("exited", "stopping"):
        return
    cell.state = "stopping"
    if cell.sup is not None:
        cell.sup.request_stop()
    elif cell.inline:
        cell.parent.stop_inline(cell)
    else:
        _close(cell)


def request_cancel(cell: _Cell) -> None:
    """Cancel *cell* now (an actor or a supervisor); it is not restarted."""
    if cell.state == "exited":
        return
    cell.cancel_requested = True
    if cell.inline:
        cell.parent.finalize(cell, "cancelled")
        return
    if cell.scope is not None:
        cell.scope.cancel()
    _close(cell)


def fail_item(cell: _Cell, item: object, reason: str, exc: BaseException | None) -> None:
    """Settle one undelivered or crashing mailbox item: dead letter, and fail its asker."""
    if item is None:
        return
    if type(item) is _Ask and item.abandoned and item.cancel is None:
        return  # withdrawn by its asker, who has gone: not a dead letter
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


def drain(cell: _Cell, reason: str) -> None:
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


def reopen(cell: _Cell) -> None:
    """Give a restarted actor that had closed its own mailbox a fresh one."""
    drain(cell, "stopped")
    cell.mailbox = Mailbox(cell.capacity)
