"""Supervisors: child slots, restart strategies, restart intensity and escalation.

A supervisor is a Trio task that owns a nursery; each child (an actor or a
supervisor) runs in one task of that nursery, and the task itself restarts its
child in place, so a restart costs no new task. A child's exit is judged in
its own task (its outcome is the supervision signal, no message is involved):

* a crash asks the supervisor for a decision: restart (after an optional
  backoff), give up on that child, or fail the whole supervisor when the
  restart intensity is exceeded, which its parent then judges in turn;
* a graceful stop or an own ``cancel()`` ends the child for good;
* a cancellation from further up (the supervisor failed or was cancelled)
  leaves the child *suspended*, with its mailbox; a supervisor restart resumes
  it, and the supervisor's own final exit settles it.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from typing import TYPE_CHECKING, Any, Literal, cast

import trio

from .._checks import check_int, check_name, check_seconds
from .._log import ACTOR_TASKS, log_extra
from ..actors.actor import (
    INTERRUPTED,
    OUT,
    RESTART_POLICIES,
    Actor,
    ActorRef,
    Cell,
    InlineActor,
    cancel_cell,
    cell_of,
    drain,
    fail_item,
    reopen,
    serve_cell,
    stop_cell,
)
from ..errors import (
    ActorStopped,
    DuplicateName,
    InvalidArgument,
    RestartIntensityExceeded,
    RuntimeClosed,
    UnknownName,
)
from ..messages import (
    ActorExited,
    ActorFailed,
    ActorRestarted,
    ActorStarted,
    ExitReason,
    SupervisorEscalated,
)
from .restart import STRATEGIES, Backoff, RestartIntensity, Strategy

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..actors.bus import EventBus
    from ..actors.timers import Timers

__all__: list[str] = []  # the public names are in restart.py and ref.py


def sup_of(cell: Cell) -> _Supervisor:
    """The supervisor a supervisor's cell holds (``cell.sup``: typed as the
    actors' ``Parent``, the kernel's look upward, and always a ``_Supervisor``)."""
    return cast("_Supervisor", cell.sup)


# Restarts after a crash and escalations (the exception's type, never its text:
# it may quote a message's content).
_log = logging.getLogger("agentrio.supervisors.supervisor")


class _RuntimeShared:
    """The kernel's runtime-wide state, shared by every supervisor of one runtime."""

    __slots__ = ("dead_letters", "restarts", "timers")

    def __init__(self) -> None:
        self.timers: Timers | None = None  # set by open_runtime, for its root
        self.dead_letters = 0
        self.restarts = 0  # of every actor and supervisor, exited ones too


_CHECKED_INLINE: set[type] = set()


def _check_inline(actor_class: type[InlineActor[Any]]) -> None:
    """An inline actor's methods run at send time, synchronously: none may be async."""
    for method in ("handle", "on_start", "on_stop"):
        if inspect.iscoroutinefunction(getattr(actor_class, method)):
            raise InvalidArgument(
                f"{actor_class.__qualname__}.{method} is async, but an InlineActor's methods "
                "run at send time and never wait: make it a plain def, or subclass "
                "agentrio.Actor"
            )
    _CHECKED_INLINE.add(actor_class)


def _live_owner(owner: ActorRef, sup: _Supervisor) -> Cell:
    """The cell of *owner*, a child of *sup* that has not exited (for ``spawn(owner=)``)."""
    cell = cell_of(owner)
    if cell.parent is not sup:
        where = repr(sup.path) if sup.path else "the runtime"
        raise InvalidArgument(
            f"owner must be a child of the supervisor that spawns ({where}), got {cell.path!r}: "
            "an owned actor is left to its owner only by the supervisor that holds both"
        )
    if cell.state == "exited":
        raise ActorStopped(
            f"actor {cell.path!r} has {cell.stop_reason}: it cannot own a new actor",
            path=cell.path,
            reason=cell.stop_reason,
        )
    return cell


def _check_choice(arg: str, value: object, choices: frozenset[str]) -> None:
    if value not in choices:
        raise InvalidArgument(f"{arg} must be one of {sorted(choices)}, got {value!r}")


class _Supervisor:
    """The state of one supervisor; its task runs `serve`."""

    def __init__(
        self,
        path: str,
        *,
        bus: EventBus,
        shared: _RuntimeShared,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        shutdown_timeout: float = 5.0,
    ) -> None:
        _check_choice("strategy", strategy, STRATEGIES)
        intensity = RestartIntensity(max_restarts, period)  # (checks both)
        if period == 0:
            raise InvalidArgument("period must be > 0 seconds (0 would never count a restart)")
        check_seconds("shutdown_timeout", shutdown_timeout)
        if backoff is not None and not isinstance(backoff, Backoff):
            raise InvalidArgument(f"backoff must be an agentrio.Backoff or None, got {backoff!r}")
        self.path = path
        self.bus = bus
        self.shared = shared
        self.strategy = strategy
        self.intensity = intensity
        self.backoff = backoff
        self.shutdown_timeout = shutdown_timeout
        self.children: dict[str, Cell] = {}
        self.nursery: trio.Nursery | None = None
        self.failure: RestartIntensityExceeded | None = None
        self.wake: trio.Event | None = None
        self.stopping = False
        self.closed = False
        self.served = False  # has serve() run before (is this a restart)?
        self._names = itertools.count(1)
        # Its handle (a SupervisorRef, or the tree's root ref class), made by
        # supervisors.ref, the layer above this state: set by whoever makes it.
        self.ref: object = None

    # -- the supervisor's task -------------------------------------------------

    async def serve(self) -> None:
        """Run the children until a graceful stop, a cancel, or a failure."""
        # A first run keeps a failure from before it began (an inline child
        # that crashed too often at once); a restart starts clean.
        if self.served:
            self.failure = None
        # Each incarnation gets a fresh restart intensity (as in OTP): the
        # restarts that made the last one fail were already judged by the parent.
        self.intensity.reset()
        self.wake = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                for cell in list(self.children.values()):
                    if cell.inline:
                        self._resume_inline(cell)
                    elif cell.state == "suspended" and cell.restart == "temporary":
                        self.finalize(cell, "cancelled")
                    else:
                        self._start(cell)
                self.served = True
                if self.stopping or self.failure is not None:
                    self.wake.set()
                await self.wake.wait()
                if self.failure is None:
                    await self._stop_children()
                nursery.cancel_scope.cancel()
        finally:
            self.nursery = None
        if self.failure is not None:
            raise self.failure

    async def _stop_children(self) -> None:
        # Stop in reverse order of start, one at a time, as OTP does: a child
        # may still use the siblings started before it while it drains. But
        # shutdown_timeout is one deadline for them all, not one per child as
        # in OTP: whatever still runs when it passes is cancelled, so a stop
        # takes at most that long however many children are stuck.
        with trio.move_on_after(self.shutdown_timeout):
            await self._stop_in_turn()
        await self._cancel_rest()

    async def _stop_in_turn(self) -> None:
        # An owned child (an agent's context) is left to its owner, whose exit
        # stops it: the owner may still need it while the owner drains. Its
        # owner is a sibling (link and spawn(owner=) refuse any other), so the
        # first pass stops it, or its owner's exit does, before the second.
        for cell in reversed(list(self.children.values())):
            if cell.owner is not None and cell.owner.state != "exited":
                continue
            if not self._stop_idle(cell):
                stop_cell(cell)
                await cell.wait_exited()
        for cell in reversed(list(self.children.values())):
            if not self._stop_idle(cell):
                stop_cell(cell)
                await cell.wait_exited()

    async def _cancel_rest(self) -> None:
        """Cancel every child still running (the deadline passed), all at once.

        The cancels go out last spawned first, in rounds: a child owned by a
        sibling is left to its owner, whose exit cancels it (an inline
        context right there), so what is owned still ends after its owner.
        """
        while True:
            rest = [
                cell
                for cell in reversed(list(self.children.values()))
                if cell.state != "exited" and not self._owned_here(cell)
            ]
            if not rest:
                return
            for cell in rest:
                cancel_cell(cell)
            for cell in rest:
                if cell.state != "exited":
                    await cell.wait_exited()

    def _owned_here(self, cell: Cell) -> bool:
        """Is *cell* owned by a live sibling (which is to end before it)?"""
        owner = cell.owner
        return owner is not None and owner.state != "exited" and owner.parent is self

    def _stop_idle(self, cell: Cell) -> bool:
        """Stop *cell* here and now if it is idle and has nothing to do on the way out.

        An actor parked on an empty mailbox, whose ``on_stop`` is the default
        no-op, would wake only to exit: it is finalized at once, in its turn
        of the stop order, and its task ends when it next runs (the nursery
        still waits for it). This spares a trip through the scheduler per idle
        child, which is most of the cost of closing 10k agents.
        """
        if cell.state == "exited":
            return True
        if cell.inline:
            stop_cell(cell)
            return True
        mailbox = cell.mailbox
        if (
            cell.state != "running"
            or mailbox is None
            or not mailbox.idle
            or type(cell.instance).on_stop is not Actor.on_stop  # type: ignore[union-attr]
        ):
            return False
        stop_cell(cell)
        self.finalize(cell, "stopped")
        return True

    def begin_stop(self) -> None:
        """Begin a graceful stop: the children are stopped in turn (see serve)."""
        self.stopping = True
        if self.wake is not None:
            self.wake.set()

    def _start(self, cell: Cell) -> None:
        assert self.nursery is not None
        self.nursery.start_soon(self._child_main, cell, name=cell.path)

    async def _child_main(self, cell: Cell) -> None:
        cell.task = trio.lowlevel.current_task()
        reason: ExitReason | None = None
        if cell.state == "suspended":
            self._restarted(cell, 0.0)
        delay = 0.0
        actor: Actor[Any] | None = None
        again = False
        try:
            while True:
                exc: Exception | None = None
                # (The scope entered by hand, not with `with`: a `with` keeps a
                # bound __exit__ on the frame of each of 10k live actors.)
                scope = trio.CancelScope()
                scope.__enter__()
                try:
                    cell.scope = scope
                    if cell.cancel_requested:
                        # Cancelled before it started: end here, or an actor
                        # whose start reaches no checkpoint would run on_start
                        # and on_stop and exit as if stopped.
                        scope.cancel()
                        await trio.lowlevel.checkpoint_if_cancelled()
                    try:
                        if again:
                            # Interrupted: the same incarnation goes on, with
                            # the message it was handling (cell.held) first.
                            assert actor is not None
                            again = False
                            await serve_cell(cell, actor)
                            await actor.on_stop()
                        else:
                            if delay:
                                await trio.sleep(delay)
                            # The incarnation is inlined: one coroutine frame less
                            # for each of 100k idle actors.
                            actor = cast("Actor[Any] | None", self._make(cell))
                            if actor is None:
                                self._started(cell)
                                await sup_of(cell).serve()
                            else:
                                await actor.on_start()
                                self._started(cell)
                                await serve_cell(cell, actor)
                                await actor.on_stop()
                    except Exception as e:
                        exc = e
                except BaseException as err:
                    if not scope.__exit__(type(err), err, err.__traceback__):
                        raise
                else:
                    scope.__exit__(None, None, None)
                cell.scope = None
                serving, cell.serving = cell.serving, OUT
                if (
                    serving == INTERRUPTED
                    and exc is None
                    and scope.cancelled_caught
                    and not cell.cancel_requested
                    and not cell.restart_pending
                ):
                    # Cancelled only by interrupt() (not also by cancel() or a
                    # one_for_all restart). If it landed only as the handling
                    # ended, nothing is held, and the actor just goes on.
                    again = True
                    continue
                if exc is None and scope.cancelled_caught:
                    if cell.restart_pending and not cell.cancel_requested:
                        cell.restart_pending = False
                        # one_for_all cut short the message it was handling:
                        # settle it now, or its asker would wait forever.
                        item, cell.held = cell.held, None
                        fail_item(cell, item, "cancelled", None)
                        delay = 0.0
                        self._restarted(cell, delay)
                        continue
                    reason = "cancelled"
                    break
                if exc is None:
                    if cell.self_stopped and cell.restart == "permanent" and not self.stopping:
                        cell.self_stopped = False
                        reopen(cell)
                        delay = 0.0
                        self._restarted(cell, delay)
                        continue
                    reason = "stopped"
                    break
                decision = self._on_crash(cell, exc)
                if decision == "exit":
                    reason = "crashed"
                    break
                if decision == "suspend":
                    break
                delay = decision
                self._restarted(cell, delay)
        except trio.Cancelled:
            # A cancel from above (the cell's own scope caught its own): the
            # supervisor is ending, and the child with it. The task ends
            # quietly; raised, the Cancelled would only be collected by the
            # nursery (a repr of the task and of the exception for its
            # CancelReason, the traceback with every frame of the child's
            # stack kept alive in an exception group) and dropped by the
            # cancelled scope: most of the teardown of 10k children.
            # Safe only because this is the task's top frame: nothing runs
            # after it but the finally below, and the cancel still reaches the
            # supervisor's nursery and every scope above it (the scope is still
            # cancelled). Swallowed anywhere deeper, the task would go on.
            # (tests/test_runtime.py checks the cancel gets through.)
            pass
        finally:
            cell.serving = OUT
            if cell.held is not None:
                fail_item(cell, cell.held, "cancelled", None)
                cell.held = None
            if reason is None:
                if cell.state != "exited":
                    cell.state = "suspended"
            else:
                self.finalize(cell, reason)

    def _make(self, cell: Cell) -> Actor[Any] | InlineActor[Any] | None:
        """The child's next incarnation: a fresh actor, its ref set (None for a supervisor)."""
        if cell.state != "stopping":
            cell.state = "running"
        cell.mark = cell.handled
        if cell.factory is None:
            return None
        actor = cell.factory(*cell.args)
        actor.ref = cell.ref
        cell.instance = actor
        return actor

    # -- inline actors (no task: everything happens in the caller's) ---------------

    def _resume_inline(self, cell: Cell) -> None:
        """Start an inline child as `serve` begins: remake it only on a restart.

        An inline child is made at spawn; a restart of this supervisor (or a
        crash it waited on) remakes it, as it would start a task child again,
        and ends a temporary one instead.
        """
        if self.failure is not None or not (self.served or cell.instance is None):
            return
        if cell.restart == "temporary":
            self.finalize(cell, "cancelled")
            return
        self.remake_inline(cell)

    def _incarnate_inline(self, cell: Cell) -> None:
        """Make (or remake) an inline actor; if ``on_start`` raises, that is a crash."""
        while True:
            try:
                actor = cast("InlineActor[Any]", self._make(cell))
                actor.on_start()
            except Exception as exc:  # (a raising constructor too, as for a task actor)
                if not self._inline_failed(cell, exc):
                    return
                continue
            self._started(cell)
            return

    def remake_inline(self, cell: Cell) -> None:
        """Restart an inline actor now: a fresh instance, as a restart makes."""
        self._restarted(cell, 0.0)
        self._incarnate_inline(cell)

    def inline_crashed(self, cell: Cell, msg: object, exc: Exception) -> None:
        """Inline actor *cell* raised handling *msg*: apply its restart policy now."""
        cell.held = msg
        if self._inline_failed(cell, exc):
            self._incarnate_inline(cell)

    def _inline_failed(self, cell: Cell, exc: Exception) -> bool:
        """Judge an inline actor's crash; True if it is to be remade at once."""
        cell.instance = None
        decision = self._on_crash(cell, exc)
        if decision == "exit":
            self.finalize(cell, "crashed")
            return False
        if decision == "suspend":  # this supervisor is failing: its restart remakes it
            cell.state = "suspended"
            return False
        self._restarted(cell, 0.0)
        return True

    def stop_inline(self, cell: Cell) -> None:
        """Stop an inline actor gracefully: ``on_stop``, then exit (a raise is a crash)."""
        actor = cell.instance
        if isinstance(actor, InlineActor):
            try:
                actor.on_stop()
            except Exception as exc:
                self._failed(cell, exc)
                self.finalize(cell, "crashed")
                return
        self.finalize(cell, "stopped")

    def _started(self, cell: Cell) -> None:
        if self.bus.active:
            self.bus.publish(ActorStarted(path=cell.path, restarts=cell.restarts))

    def _failed(self, cell: Cell, exc: Exception) -> None:
        if self.bus.active:
            self.bus.publish(
                ActorFailed(path=cell.path, error_type=type(exc).__name__, error=str(exc))
            )

    def _restarted(self, cell: Cell, delay: float) -> None:
        cell.restarts += 1
        self.shared.restarts += 1
        if self.bus.active:
            self.bus.publish(ActorRestarted(path=cell.path, restarts=cell.restarts, delay=delay))

    def _on_crash(self, cell: Cell, exc: Exception) -> float | Literal["exit", "suspend"]:
        item, cell.held = cell.held, None
        fail_item(cell, item, "crashed_on", exc)
        self._failed(cell, exc)
        if cell.handled > cell.mark:
            cell.streak = 0
        cell.streak += 1
        if cell.restart == "temporary" or cell.state == "stopping" or self.stopping:
            if cell.restart == "temporary" and cell.state != "stopping" and not self.stopping:
                _log.warning(
                    "child %r crashed (%s); it is temporary: not restarted",
                    *(cell.path, type(exc).__name__),
                    extra=log_extra(cell.path),
                )
            return "exit"
        if self.failure is not None:
            return "suspend"
        if not self.intensity.record(trio.current_time()):
            self._fail(cell, exc)
            return "suspend"
        if self.strategy == "one_for_all":
            for other in list(self.children.values()):
                if other is cell:
                    continue
                if other.inline:
                    if other.restart == "temporary":
                        cancel_cell(other)
                    elif other.task is not None:
                        # It is handling a message (this crash came from inside
                        # that handle): remade when the handle returns.
                        other.restart_pending = True
                    elif other.instance is not None:
                        self.remake_inline(other)
                    continue
                if other.scope is None:
                    continue
                if other.restart == "temporary":
                    cancel_cell(other)
                else:
                    other.restart_pending = True
                    other.scope.cancel()
        delay = self.backoff.delay(cell.streak) if self.backoff is not None else 0.0
        _log.warning(
            "child %r crashed (%s); restart %d%s in %g s",
            *(cell.path, type(exc).__name__, cell.restarts + 1),
            " with all its siblings (one_for_all)" if self.strategy == "one_for_all" else "",
            delay,
            extra=log_extra(cell.path),
        )
        return delay

    def _fail(self, cell: Cell, exc: Exception) -> None:
        where = f"supervisor {self.path!r}" if self.path else "the root supervisor"
        self.failure = RestartIntensityExceeded(
            f"{where} gave up: more than {self.intensity.max_restarts} restarts "
            f"within {self.intensity.period} s; the last was {cell.path!r}, which raised {exc!r}",
            path=self.path,
            child=cell.path,
            cause=exc,
        )
        _log.warning(
            "%s escalates: more than %d restarts within %g s (the last: %r, %s)",
            *(where, self.intensity.max_restarts, self.intensity.period, cell.path),
            type(exc).__name__,
            extra=log_extra(cell.path),
        )
        if self.bus.active:
            self.bus.publish(SupervisorEscalated(path=self.path, child=cell.path, error=str(exc)))
        if self.wake is not None:  # (None: an inline child failed before serve() began)
            self.wake.set()

    # -- final exits -------------------------------------------------------------

    def finalize(self, cell: Cell, reason: ExitReason) -> None:
        """End *cell* for good: settle its mailbox, free its name, tell the waiters."""
        if cell.state == "exited":
            return
        cell.stop_reason = reason
        cell.state = "exited"
        cell.instance = None
        if cell.sup is not None:
            sup_of(cell).finalize_all(reason)
        else:
            drain(cell, reason)
        if self.children.get(cell.name) is cell:
            del self.children[cell.name]
        if self.bus.active:
            self.bus.publish(ActorExited(path=cell.path, reason=reason))
        if cell.dependents:
            # After the owner's ActorExited: what it owns stops after it (an
            # inline context actor stops right here, in this call).
            for dependent in cell.dependents:
                if dependent.state == "suspended":
                    dependent.parent.finalize(dependent, "stopped")
                elif reason == "cancelled":  # cancelling an agent reaches its subagents
                    cancel_cell(dependent)
                else:
                    stop_cell(dependent)
        if cell.exited is not None:
            cell.exited.set()

    def finalize_all(self, reason: ExitReason) -> None:
        """This supervisor has ended for good: so has every child it still holds."""
        self.closed = True
        for cell in reversed(list(self.children.values())):
            self.finalize(cell, "cancelled" if reason == "stopped" else reason)

    # -- spawning ------------------------------------------------------------------

    def _new_name(self, prefix: str, name: object, owner: str | None = None) -> str:
        checked = check_name("name", name, optional=True, owner=owner)
        if checked is None:
            checked = f"{prefix}-{next(self._names)}"
            while checked in self.children:
                checked = f"{prefix}-{next(self._names)}"
        elif checked in self.children:
            raise DuplicateName(f"name {checked!r} is already taken in {self.ref!r}")
        return checked

    def check_open(self, *, stopping_ok: bool = False) -> None:
        """Raise ``RuntimeClosed`` if this supervisor takes no new child.

        It takes none once it has begun to stop, but a child with an owner
        (*stopping_ok*) while it drains.
        """
        if self.closed or (self.stopping and not stopping_ok):
            where = repr(self.path) if self.path else "the runtime"
            raise RuntimeClosed(f"cannot spawn: {where} has stopped")

    def spawn_actor(
        self,
        actor_class: type[Actor[Any]] | type[InlineActor[Any]],
        args: tuple[object, ...],
        name: object,
        mailbox: object,
        restart: object,
        owner: object = None,
    ) -> Cell:
        """Make and start a child actor (``SupervisorRef.spawn``); with an *owner*
        (an ActorRef), linked to it, and allowed while this supervisor drains and
        to take the owner's reserved names (``<owner>.context[.<label>]``)."""
        if not (isinstance(actor_class, type) and issubclass(actor_class, (Actor, InlineActor))):
            raise InvalidArgument(
                f"actor_class must be a subclass of agentrio.Actor or agentrio.InlineActor, "
                f"got {actor_class!r}"
            )
        if issubclass(actor_class, InlineActor) and actor_class not in _CHECKED_INLINE:
            _check_inline(actor_class)
        capacity = check_int("mailbox", mailbox, 0)
        _check_choice("restart", restart, RESTART_POLICIES)
        if owner is None:
            self.check_open()
            checked = self._new_name(actor_class.__name__, name)
            cell = Cell(self, checked, actor_class, args, capacity, restart)  # type: ignore[arg-type]
            self._adopt(cell)
            return cell
        if not isinstance(owner, ActorRef):
            raise InvalidArgument(f"owner must be an agentrio.ActorRef or None, got {owner!r}")
        self.check_open(stopping_ok=True)
        owning = _live_owner(owner, self)
        checked = self._new_name(actor_class.__name__, name, owning.name)
        cell = Cell(self, checked, actor_class, args, capacity, restart)  # type: ignore[arg-type]
        # Owned before it starts: an inline actor's on_start runs in _adopt, and
        # what it owns must already end after its owner.
        owning.own(cell)
        self._adopt(cell)
        return cell

    def spawn_supervisor(
        self,
        name: object,
        restart: object,
        make_ref: Callable[[_Supervisor, Cell], object],
        **options: Any,
    ) -> _Supervisor:
        """Make and start a child supervisor; *make_ref* makes its handle (before it starts)."""
        _check_choice("restart", restart, RESTART_POLICIES)
        self.check_open()
        checked = self._new_name("supervisor", name)
        path = f"{self.path}/{checked}" if self.path else checked
        sup = _Supervisor(path, bus=self.bus, shared=self.shared, **options)
        cell = Cell(self, checked, None, (), 0, restart, sup)  # type: ignore[arg-type]
        sup.ref = make_ref(sup, cell)
        self._adopt(cell)
        return sup

    def _adopt(self, cell: Cell) -> None:
        cell.state = "starting"
        self.children[cell.name] = cell
        if cell.inline:
            self._incarnate_inline(cell)
        elif self.nursery is not None:
            self._start(cell)

    def find(self, name: str) -> Cell:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name must be a non-empty str, got {name!r}")
        sup = self
        parts = name.split("/")
        for i, part in enumerate(parts):
            cell = sup.children.get(part)
            if cell is None or cell.state == "exited":
                where = repr(sup.path) if sup.path else "the runtime"
                raise UnknownName(f"no live child named {part!r} in {where} (looking up {name!r})")
            if i == len(parts) - 1:
                return cell
            if cell.sup is None:
                raise UnknownName(f"{cell.path!r} is an actor, not a supervisor: cannot look in it")
            sup = sup_of(cell)
        raise AssertionError("unreachable")


# A child's task runs _child_main, named by the child's path: whose task a log
# record is made in (agentrio._log.actor_path).
ACTOR_TASKS.add(_Supervisor._child_main.__code__)
