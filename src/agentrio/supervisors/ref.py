"""SupervisorRef, the handle to a supervisor, and its statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import msgspec
import trio

from .._handles import NoPublicConstructor, create
from ..actors.actor import (
    Actor,
    ActorRef,
    Cell,
    InlineActor,
    RestartPolicy,
    cancel_cell,
    stop_cell,
)
from ..errors import UnknownName
from .restart import Backoff, Strategy
from .supervisor import sup_of

if TYPE_CHECKING:
    from .supervisor import _Supervisor

__all__ = ["SupervisorRef", "SupervisorStatistics"]


class SupervisorStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a supervisor's subtree, from ``statistics()``; only live children count.

    Attributes:
        path: the supervisor's path (``""`` for the runtime's root).
        state: ``"starting"``, ``"running"``, ``"stopping"``, ``"suspended"``
            or ``"exited"``.
        children: direct children alive now.
        actors: actors alive in the whole subtree.
        supervisors: supervisors alive in the subtree, this one excluded.
        messages_handled: messages handled by the subtree's live actors.
        restarts: restarts of the subtree's live children.
        mailbox_size: messages waiting in the subtree's mailboxes.
        dead_letters: dead letters in the whole runtime so far.
    """

    path: str
    state: str
    children: int
    actors: int
    supervisors: int
    messages_handled: int
    restarts: int
    mailbox_size: int
    dead_letters: int


class SupervisorRef(metaclass=NoPublicConstructor):
    """The handle to a supervisor: spawn children under it, look them up, stop it.

    Made by [`spawn_supervisor`][agentrio.SupervisorRef.spawn_supervisor], and returned by
    ``lookup_supervisor`` and ``children``; the runtime itself is the root
    supervisor (a [`Tree`][agentrio.supervisors.Tree]'s root). Agents, helpers and maps
    are spawned through the runtime, under a supervisor of choice:
    ``rt.spawn_agent(spec, under=team)``. No public constructor.
    """

    __slots__ = ("_cell", "_sup")

    def __init__(self, sup: _Supervisor, cell: Cell | None) -> None:
        self._sup = sup
        self._cell = cell

    @property
    def name(self) -> str:
        """The supervisor's name, unique among its parent's children (``""`` for the root)."""
        return self._cell.name if self._cell is not None else ""

    @property
    def path(self) -> str:
        """The supervisor's path from the root, ``"/"``-separated (``""`` for the root)."""
        return self._sup.path

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._sup.path!r}>"

    async def spawn(
        self,
        actor_class: type[Actor[Any]] | type[InlineActor[Any]],
        *args: object,
        name: str | None = None,
        mailbox: int = 100,
        restart: RestartPolicy = "transient",
        owner: ActorRef | None = None,
    ) -> ActorRef:
        """Start ``actor_class(*args)`` as a child of this supervisor.

        An [`Actor`][agentrio.Actor] is created in its own task; messages sent
        before it has started wait in its mailbox. An
        [`InlineActor`][agentrio.InlineActor] has no task: ``spawn`` itself
        creates it and calls its ``on_start``.

        Args:
            actor_class: an [`agentrio.Actor`][agentrio.Actor] subclass, or an
                [`agentrio.InlineActor`][agentrio.InlineActor] one (no task; handled at send time).
            *args: passed to its constructor at every (re)start.
            name: unique among this supervisor's live children, without
                ``/``, not ending with ``.context`` nor containing
                ``.context.`` (the form reserved for agents' context actors,
                but see *owner*); default ``"<ClassName>-<n>"``.
            mailbox: the mailbox's capacity (0 means every send waits for
                the actor to take the message).
            restart: ``"permanent"`` (restarted after a crash, and after it
                stops itself), ``"transient"`` (restarted after a crash only)
                or ``"temporary"`` (never restarted).
            owner: an actor to [`link`][agentrio.actors.link] the new one to
                (it then ends after its owner), a child of this supervisor
                (as for ``link``). An owned actor may also be
                spawned while this supervisor stops gracefully (its owner may
                still need it while it drains), and it may take its owner's
                reserved names: with an owner named ``"a"``, ``"a.context"``
                and ``"a.context.<label>"``. That is how the agent layer
                names an agent's context actors, with names no other child
                can take.

        Returns:
            The new actor's ref; messages sent before it has started wait in
            its mailbox.

        Raises:
            InvalidArgument: a bad argument, named in the message; *owner*
                is not a child of this supervisor.
            DuplicateName: *name* is taken.
            RuntimeClosed: this supervisor has stopped or is stopping (with
                an *owner*: has stopped).
            ActorStopped: *owner* has exited (nothing would end the new actor).
        """
        # A cancellation point but not a schedule point: spawning 100k actors
        # in a loop would otherwise run the scheduler 100k times.
        await trio.lowlevel.checkpoint_if_cancelled()
        return self._sup.spawn_actor(actor_class, args, name, mailbox, restart, owner).ref

    def spawn_nowait(
        self,
        actor_class: type[Actor[Any]] | type[InlineActor[Any]],
        *args: object,
        name: str | None = None,
        mailbox: int = 100,
        restart: RestartPolicy = "transient",
        owner: ActorRef | None = None,
    ) -> ActorRef:
        """[`spawn`][agentrio.SupervisorRef.spawn], synchronously: no cancellation point.

        For code that cannot await, or must not let another task run
        between the check and the spawn (the agent layer spawns its agents
        and their context actors this way). The arguments, the result and
        the errors are [`spawn`][agentrio.SupervisorRef.spawn]'s.

        For example, an actor named ``"a"`` and one it owns, under its
        reserved name (``team`` a ``SupervisorRef``, ``Echo`` an actor
        class):

        ```python
        a = team.spawn_nowait(Echo, name="a")
        context = team.spawn_nowait(Echo, name="a.context", owner=a)
        await a.stop()
        await agentrio.actors.wait_exited(a)  # and what it owns: context stops after it
        assert agentrio.actors.exit_reason(context) == "stopped"
        ```
        """
        return self._sup.spawn_actor(actor_class, args, name, mailbox, restart, owner).ref

    @property
    def closed(self) -> bool:
        """True once this supervisor has begun to stop (a graceful stop, or a
        [`cancel`][agentrio.SupervisorRef.cancel], from the call on), or has
        stopped, or failed for good; spawning under it then raises
        ``RuntimeClosed`` (but see ``owner``)."""
        sup = self._sup
        return sup.closed or sup.stopping

    @property
    def shutdown_timeout(self) -> float:
        """The deadline, in seconds, of this supervisor's graceful stop (see
        [`stop`][agentrio.SupervisorRef.stop]), as given when it was made."""
        return self._sup.shutdown_timeout

    async def spawn_supervisor(
        self,
        *,
        name: str | None = None,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        shutdown_timeout: float = 5.0,
        restart: RestartPolicy = "permanent",
    ) -> SupervisorRef:
        """Start a child supervisor and return its ref.

        Args:
            name: unique among this supervisor's children (the rules of
                [`spawn`][agentrio.SupervisorRef.spawn]); default ``"supervisor-<n>"``.
            strategy: ``"one_for_one"`` restarts only the crashed child;
                ``"one_for_all"`` restarts every child (temporary ones are
                cancelled, not restarted).
            max_restarts: restarts allowed within *period* seconds; one more
                and the supervisor fails, cancelling its children, and its
                parent applies its own policy to it.
            period: the window of the restart intensity, in seconds.
            backoff: delay restarts exponentially (see [`Backoff`][agentrio.Backoff]);
                ``None`` restarts at once.
            shutdown_timeout: one deadline, in seconds, for the whole of a
                graceful stop (children stop one at a time, last spawned
                first): when it passes, every child still running is
                cancelled. See [`stop`][agentrio.SupervisorRef.stop].
            restart: this supervisor's own policy under its parent.

        Returns:
            The new supervisor's ref.

        Raises:
            InvalidArgument: a bad argument, named in the message.
            DuplicateName: *name* is taken.
            RuntimeClosed: this supervisor has stopped or is stopping.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        sup = self._sup.spawn_supervisor(
            name,
            restart,
            _make_ref,
            strategy=strategy,
            max_restarts=max_restarts,
            period=period,
            backoff=backoff,
            shutdown_timeout=shutdown_timeout,
        )
        return _ref_of(sup)

    def lookup(self, name: str) -> ActorRef:
        """Return the live actor called *name* (a ``"/"``-separated path below this one).

        For example ``"pool/worker-1"``.

        Raises:
            UnknownName: no live actor has that name or path (or it names a
                supervisor, or the path goes through an actor).
            InvalidArgument: *name* is not a non-empty string.
        """
        cell = self._sup.find(name)
        if cell.sup is not None:
            raise UnknownName(f"{cell.path!r} is a supervisor: use lookup_supervisor()")
        return cell.ref

    def lookup_supervisor(self, name: str) -> SupervisorRef:
        """Return the live supervisor called *name* (a path below this one).

        Raises:
            UnknownName: no live supervisor has that name or path (or it
                names an actor).
            InvalidArgument: *name* is not a non-empty string.
        """
        cell = self._sup.find(name)
        if cell.sup is None:
            raise UnknownName(f"{cell.path!r} is an actor: use lookup()")
        return _ref_of(sup_of(cell))

    def children(self) -> list[ActorRef | SupervisorRef]:
        """The live direct children, in the order they were spawned.

        Suspended children are included; children that have ended are not.
        """
        return [
            _ref_of(sup_of(c)) if c.sup is not None else c.ref
            for c in self._sup.children.values()
            if c.state != "exited"
        ]

    async def stop(self) -> None:
        """Stop gracefully: stop every child (last spawned first), then exit; waits for it.

        The children are asked to stop one at a time, each once the one
        before it has exited (an owned child, such as an agent's context
        actor or subagent, stops after its owner). ``shutdown_timeout`` is
        one deadline for all of it, counted from the call: when it passes,
        the child being waited for and every child not yet stopped are
        cancelled at once (reason ``"cancelled"``, no ``on_stop``; an owner
        still ends before what it owns). A child supervisor stops within its
        own ``shutdown_timeout``, and is cancelled with its subtree if this
        one's deadline passes first. So the stop takes at most about
        ``shutdown_timeout`` seconds, however many children are stuck.
        Stopping a stopped supervisor does nothing. On a tree's root (the
        [`Runtime`][agentrio.Runtime]) it only starts the stop.
        """
        if self._cell is None:  # a tree's root: its Tree.run returns once it has stopped
            self._sup.begin_stop()
            await trio.lowlevel.checkpoint()
            return
        stop_cell(self._cell)
        await self._cell.wait_exited()

    def cancel(self) -> None:
        """Cancel this supervisor and its whole subtree now, without waiting.

        Its children end with reason ``"cancelled"``; it is not restarted.
        It is [`closed`][agentrio.SupervisorRef.closed] from the call on.
        On a tree's root, the whole tree is cancelled (see
        [`Tree.cancel`][agentrio.supervisors.Tree.cancel]).
        """
        if self._cell is None:
            cancel_root(self._sup)
            return
        cancel_cell(self._cell)

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of this supervisor's subtree."""
        if self._cell is None:
            return _statistics(self._sup, root_state(self._sup))
        return _statistics(self._sup, self._cell.state)


def _make_ref(sup: _Supervisor, cell: Cell) -> SupervisorRef:
    """A child supervisor's handle."""
    return create(SupervisorRef, sup, cell)


def _ref_of(sup: _Supervisor) -> SupervisorRef:
    """The handle of *sup* (made with it: by ``_make_ref``, or by its tree)."""
    return cast(SupervisorRef, sup.ref)


def _statistics(sup: _Supervisor, state: str) -> SupervisorStatistics:
    """A snapshot of *sup*'s subtree, its own state being *state*."""
    children = actors = supervisors = handled = restarts = waiting = 0
    for cell in sup.children.values():
        children += 1
        restarts += cell.restarts
        if cell.sup is not None:
            sub = _statistics(sup_of(cell), cell.state)
            supervisors += 1 + sub.supervisors
            actors += sub.actors
            handled += sub.messages_handled
            restarts += sub.restarts
            waiting += sub.mailbox_size
        else:
            actors += 1
            handled += cell.handled
            if cell.mailbox is not None and cell.state != "exited":
                waiting += len(cell.mailbox)
    return SupervisorStatistics(
        path=sup.path,
        state=state,
        children=children,
        actors=actors,
        supervisors=supervisors,
        messages_handled=handled,
        restarts=restarts,
        mailbox_size=waiting,
        dead_letters=sup.shared.dead_letters,
    )


def root_state(sup: _Supervisor) -> str:
    """A tree's root supervisor's state: ``"running"``, ``"stopping"`` once a stop
    has begun, ``"exited"`` once it has stopped."""
    return "exited" if sup.closed else "stopping" if sup.stopping else "running"


def cancel_root(sup: _Supervisor) -> None:
    """Cancel a tree's root supervisor and everything under it, now."""
    sup.begin_stop()
    if sup.nursery is not None:
        sup.nursery.cancel_scope.cancel()
