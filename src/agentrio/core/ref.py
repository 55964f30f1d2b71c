"""SupervisorRef, the handle to a supervisor, and its statistics."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..errors import UnknownName
from .actor import (
    Actor,
    ActorRef,
    InlineActor,
    NoPublicConstructor,
    RestartPolicy,
    _Cell,
    cancel_cell,
    stop_cell,
)
from .restart import Backoff, Strategy

if TYPE_CHECKING:
    from ..agents.agent import AgentRef, AgentSpec
    from ..agents.budget import Budget
    from ..agents.helper import Helper
    from ..agents.tool import Tool
    from ..errors import ActorError
    from ..messages import PhaseResult
    from ..providers.base import Model
    from .supervisor import _Supervisor

__all__ = ["SupervisorRef", "SupervisorStatistics"]


class SupervisorStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a supervisor's subtree, from ``statistics()``.

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

    Made by :meth:`spawn_supervisor`; the runtime itself is the root supervisor.
    """

    __slots__ = ("_cell", "_sup")

    def __init__(self, sup: _Supervisor, cell: _Cell | None) -> None:
        self._sup = sup
        self._cell = cell

    @property
    def name(self) -> str:
        """The supervisor's name (``""`` for the root)."""
        return self._cell.name if self._cell is not None else ""

    @property
    def path(self) -> str:
        """The supervisor's path from the root (``""`` for the root)."""
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
    ) -> ActorRef:
        """Start ``actor_class(*args)`` as a child of this supervisor.

        Args:
            actor_class: an :class:`agentrio.Actor` subclass, or an
                :class:`agentrio.InlineActor` one (no task; handled at send time).
            *args: passed to its constructor at every (re)start.
            name: unique among this supervisor's children, without ``/``,
                not ending with ``.context`` nor containing ``.context.``
                (reserved for agents' context actors); default
                ``"<ClassName>-<n>"``.
            mailbox: the mailbox's capacity (0 means every send waits for
                the actor to take the message).
            restart: ``"permanent"`` (restarted after a crash, and after it
                stops itself), ``"transient"`` (restarted after a crash only)
                or ``"temporary"`` (never restarted).

        Returns:
            The new actor's ref; messages sent before it has started wait in
            its mailbox.

        Raises:
            InvalidArgument: a bad argument, named in the message.
            DuplicateName: *name* is taken.
            RuntimeClosed: this supervisor has stopped.
        """
        # A cancellation point but not a schedule point: spawning 100k actors
        # in a loop would otherwise run the scheduler 100k times.
        await trio.lowlevel.checkpoint_if_cancelled()
        cell = self._sup.spawn_actor(actor_class, args, name, mailbox, restart)
        return cell.ref

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
                :meth:`spawn`).
            strategy: ``"one_for_one"`` restarts only the crashed child;
                ``"one_for_all"`` restarts every child (temporary ones are
                cancelled, not restarted).
            max_restarts: restarts allowed within *period* seconds; one more
                and the supervisor fails, cancelling its children, and its
                parent applies its own policy to it.
            period: the window of the restart intensity, in seconds.
            backoff: delay restarts exponentially (see :class:`Backoff`).
            shutdown_timeout: one deadline, in seconds, for the whole of a
                graceful stop (children stop one at a time, last spawned
                first): when it passes, every child still running is
                cancelled.
            restart: this supervisor's own policy under its parent.

        Raises:
            InvalidArgument: a bad argument, named in the message.
            DuplicateName: *name* is taken.
            RuntimeClosed: this supervisor has stopped.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        sup = self._sup.spawn_supervisor(
            name,
            restart,
            strategy=strategy,
            max_restarts=max_restarts,
            period=period,
            backoff=backoff,
            shutdown_timeout=shutdown_timeout,
        )
        return sup.ref

    async def spawn_agent(
        self, spec: AgentSpec, *, name: str | None = None, budget: Budget | None = None
    ) -> AgentRef:
        """Start an agent from *spec* as a child of this supervisor.

        Args:
            spec: the :class:`agentrio.AgentSpec`.
            name: the agent's name (default ``spec.name``), unique here (the
                rules of :meth:`spawn`). With a workspace, another name than
                ``spec.name`` is the agent's subfolder of it, which must not
                be one of its own entries (``artifacts``, ``logs``,
                ``memory``, ``run_summary.json``, ignoring case).
            budget: the budget its model and tool calls draw from (default:
                the runtime's). A budget with no parent is made a child of
                the runtime's, so the runtime's totals include it.

        Returns:
            An :class:`agentrio.AgentRef`.

        Raises:
            InvalidArgument: a bad argument, named in the message.
            DuplicateName: the name is taken.
            RuntimeClosed: this supervisor has stopped.
        """
        # Imported here (the core does not depend on the agent layer), and
        # absolutely: a relative import in a function resolves its package on
        # every call, a cost paid per agent when spawning 10k of them.
        import agentrio.agents.agent

        await trio.lowlevel.checkpoint_if_cancelled()
        return agentrio.agents.agent.spawn_agent(self._sup, spec, name, budget)

    def helper(
        self,
        model: Model | str,
        tools: Sequence[Tool | str] = (),
        *,
        instructions: str = "",
        workspace: str | os.PathLike[str] | None = None,
        max_turns: int = 10,
        final_answer: bool = False,
        budget: Budget | None = None,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Helper:
        """An infrastructure helper: call an LLM like a function, with a tool whitelist.

        Only *tools* can run (a call to any other is a ``denied`` result the
        model sees) and no approval is asked. The helper is an agent actor
        under this supervisor.

        Example::

            h = rt.helper("fast", tools=["read_file"])
            res = await h.execute("Summarise README.md")

        Args:
            model: a model object, a tier name or an ``"instance:model"`` string.
            tools: Tool objects, or names registered with :meth:`register_tool`.
            instructions: the system prompt.
            workspace: a folder for its artifacts, and the working folder its
                tools are told of (``ToolContext.workspace``).
            max_turns: model calls per execute; past them HelperTurnsExceeded...
            final_answer: ...unless True: then a last call without tools answers.
            budget: what it draws from (default: the runtime's).
            name: its name (default ``helper-<n>``).
            env: environment variables its tools are told of (``ToolContext.env``).
        """
        from ..agents.helper import infrastructure_helper

        resolved = [self._sup.shared.tool(t) for t in tools]
        return infrastructure_helper(
            self._sup,
            model,
            resolved,
            instructions=instructions,
            workspace=workspace,
            max_turns=max_turns,
            final_answer=final_answer,
            budget=budget,
            name=name,
            env=env,
        )

    def register_tool(self, *tools: Tool) -> None:
        """Make *tools* available by name to ``helper(tools=[...])`` across the runtime.

        Raises:
            InvalidArgument: not a Tool, or a name already registered for another tool.
        """
        for t in tools:
            self._sup.shared.register_tool(t)

    async def map(
        self,
        spec: AgentSpec,
        inputs: Sequence[str],
        *,
        concurrency: int = 10,
        budget: Budget | None = None,
    ) -> list[PhaseResult | ActorError]:
        """Run one phase per input, each on a fresh agent from *spec*, *concurrency* at once.

        Results come back in input order. An input whose agent fails (crashes,
        is cancelled) has its error in its place; the others' results are kept.
        Each agent stops after its phase.

        Raises:
            InvalidArgument: *spec* is not an AgentSpec (checked first, even
                for no inputs), *inputs* is not a list of str, or
                *concurrency* < 1.
        """
        from ..agents.compose import map_phases

        return await map_phases(
            self._sup, spec, inputs, concurrency=concurrency, budget=budget, parent=None
        )

    def lookup(self, name: str) -> ActorRef:
        """Return the live actor called *name* (a ``"/"``-separated path below this one).

        Raises:
            UnknownName: no live actor has that name or path.
        """
        cell = self._sup.find(name)
        if cell.sup is not None:
            raise UnknownName(f"{cell.path!r} is a supervisor: use lookup_supervisor()")
        return cell.ref

    def lookup_supervisor(self, name: str) -> SupervisorRef:
        """Return the live supervisor called *name* (a path below this one).

        Raises:
            UnknownName: no live supervisor has that name or path.
        """
        cell = self._sup.find(name)
        if cell.sup is None:
            raise UnknownName(f"{cell.path!r} is an actor: use lookup()")
        return cell.sup.ref

    def children(self) -> list[ActorRef | SupervisorRef]:
        """The live direct children, in the order they were spawned."""
        return [
            c.sup.ref if c.sup is not None else c.ref
            for c in self._sup.children.values()
            if c.state != "exited"
        ]

    async def stop(self) -> None:
        """Stop gracefully: stop every child (last spawned first), then exit; waits for it.

        ``shutdown_timeout`` after the call, whatever is still running is
        cancelled.
        """
        assert self._cell is not None  # (the runtime, the only root, has its own)
        stop_cell(self._cell)
        await self._cell.wait_exited()

    def cancel(self) -> None:
        """Cancel this supervisor and its whole subtree now."""
        assert self._cell is not None
        cancel_cell(self._cell)

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of this supervisor's subtree."""
        assert self._cell is not None  # (the runtime, the only root, has its own)
        return self._sup.statistics(self._cell.state)
