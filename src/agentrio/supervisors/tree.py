"""Tree: a supervision tree's root, its event bus and its timer task, made and run
by the layer above (the runtime)."""

from __future__ import annotations

from typing import Generic, TypeVar

from .._handles import create
from ..actors.bus import EventBus
from ..actors.timers import Timers
from ..errors import InvalidArgument, RuntimeClosed
from .ref import SupervisorRef, cancel_root, root_state
from .restart import Backoff, Strategy
from .supervisor import _RuntimeShared, _Supervisor

__all__ = ["Tree"]

R = TypeVar("R", bound=SupervisorRef)


class Tree(Generic[R]):
    """A supervision tree: its root supervisor, its event bus and its timer task.

    The kernel's way in for the layer above it:
    [`open_runtime`][agentrio.open_runtime] makes one, with the
    [`Runtime`][agentrio.Runtime] as its root's ref, runs it in a task of its
    own, and stops it when its block ends. Code that wants the kernel alone
    can do the same:

    Example:

        tree = agentrio.supervisors.Tree(agentrio.SupervisorRef)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tree.run)
            echo = await tree.ref.spawn(Echo, name="echo")
            print(await echo.ask(Ping(text="hi")))
            tree.begin_stop()  # run() returns once everything has stopped

    Args:
        ref_class: the class of the root's ref:
            [`SupervisorRef`][agentrio.SupervisorRef], or a subclass of it
            that adds no constructor argument (the runtime's
            [`Runtime`][agentrio.Runtime]: its maker sets its own attributes
            after).
        strategy: the root's strategy, ``"one_for_one"`` or ``"one_for_all"``.
        max_restarts: restarts the root allows within *period* seconds; one
            more and [`run`][agentrio.supervisors.Tree.run] raises
            [`RestartIntensityExceeded`][agentrio.errors.RestartIntensityExceeded].
        period: the restart-intensity window, in seconds.
        backoff: delay root-level restarts (see [`Backoff`][agentrio.Backoff]).
        shutdown_timeout: one deadline, in seconds, for the whole graceful
            stop (see [`SupervisorRef.stop`][agentrio.SupervisorRef.stop]).

    Attributes:
        ref: the root supervisor's ref (path and name ``""``), an instance
            of *ref_class*: spawn the tree's children with it.
        bus: the tree's [`EventBus`][agentrio.actors.EventBus]
            (``bus.subscribe(capacity)``, ``bus.publish(event)``; closed
            when the tree has stopped).

    Raises:
        InvalidArgument: a bad argument, named in the message.
    """

    __slots__ = ("_ended", "_ran", "_sup", "bus", "ref")

    def __init__(
        self,
        ref_class: type[R],
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        shutdown_timeout: float = 5.0,
    ) -> None:
        if not (isinstance(ref_class, type) and issubclass(ref_class, SupervisorRef)):
            raise InvalidArgument(
                f"ref_class must be agentrio.SupervisorRef or a subclass of it, got {ref_class!r}"
            )
        self.bus = EventBus()
        sup = self._sup = _Supervisor(
            "",
            bus=self.bus,
            shared=_RuntimeShared(),
            strategy=strategy,
            max_restarts=max_restarts,
            period=period,
            backoff=backoff,
            shutdown_timeout=shutdown_timeout,
        )
        sup.shared.timers = Timers(sup)
        self.ref: R = create(ref_class, sup, None)
        sup.ref = self.ref
        self._ran = False
        self._ended = False

    def __repr__(self) -> str:
        return f"<Tree {self.ref!r} {root_state(self._sup)}>"

    async def run(self) -> None:
        """Run the tree until it has stopped, in a task of its own (it runs once).

        Children spawned before it runs start when it does. It returns once
        a graceful stop ([`begin_stop`][agentrio.supervisors.Tree.begin_stop], or
        ``ref.stop()``) has stopped every child, or a
        [`cancel`][agentrio.supervisors.Tree.cancel] has ended them; if the task
        running it is cancelled, so is every actor of the tree. When it
        returns or raises, every actor of the tree has ended (a child still
        held, or suspended, is finalized ``"cancelled"``) and the event bus
        is closed.

        Raises:
            RestartIntensityExceeded: the root exceeded its restart intensity
                (after cancelling its children).
            RuntimeClosed: the tree has run already.
        """
        if self._ran:
            raise RuntimeClosed("this Tree has run already: a tree runs once")
        self._ran = True
        sup = self._sup
        try:
            await sup.serve()
        finally:
            sup.finalize_all("stopped")
            sup.bus.close()
            self._ended = True

    @property
    def restarts(self) -> int:
        """Restarts of the tree's actors and supervisors so far (those that have
        exited since included)."""
        return self._sup.shared.restarts

    @property
    def closed(self) -> bool:
        """Has the tree stopped (its [`run`][agentrio.supervisors.Tree.run] ended)?"""
        return self._ended

    def begin_stop(self) -> None:
        """Begin a graceful stop of the whole tree, and return at once.

        Every child is stopped in turn, last spawned first, within the
        root's ``shutdown_timeout``; [`run`][agentrio.supervisors.Tree.run] returns
        once they have. From now on the root takes no new child (but an
        owned one: see ``SupervisorRef.spawn``'s ``owner``).
        """
        self._sup.begin_stop()

    def cancel(self) -> None:
        """Cancel every actor and supervisor of the tree now, without waiting.

        The task that awaits [`run`][agentrio.supervisors.Tree.run] is not cancelled:
        ``run`` returns once the tree has ended. (Before ``run`` has begun,
        nothing runs yet to be cancelled: this is then
        [`begin_stop`][agentrio.supervisors.Tree.begin_stop].)
        """
        cancel_root(self._sup)

    def holds(self, ref: SupervisorRef) -> bool:
        """Is *ref* a supervisor of this tree (its root included), live or not?"""
        return isinstance(ref, SupervisorRef) and ref._sup.shared is self._sup.shared
