"""``open_runtime()``: the root supervisor, the agents' services, the event bus.

The runtime joins the layers: the kernel's supervision tree (a
[`Tree`][agentrio.supervisors.Tree] of ``supervisors``, whose root's ref is the
[`Runtime`][agentrio.Runtime]), and what the agents of the runtime draw on
(``agents.loop.services.Services``: its budget, tools, tool lanes, modes and
router, and its configuration's models, from ``config``).
[`Runtime`][agentrio.Runtime] spawns agents, helpers and maps, under the root or
under any supervisor of the runtime (``under=``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import trio

if TYPE_CHECKING:
    # The checkpoint store and what reads it (#27) are imported by the calls that
    # use them: a runtime without a store loads none of it (agentrio/_lazy.py).
    from .agents.durability.checkpoint import Checkpoints, Durability
    from .agents.durability.deferred import PendingCall
    from .agents.durability.reader import StoreReader
    from .agents.loop.handles import Helper
    from .agents.loop.ref import AgentRef
    from .agents.loop.spec import AgentSpec
    from .agents.observation.otel import OpenTelemetry
    from .agents.routing.modes import Mode
    from .agents.routing.router import Router
    from .agents.tools.tool import Tool
    from .errors import ActorError
    from .messages import PhaseResult
    from .providers.base import Model
    from .store import CheckpointStore, Retention
    from .tracing.writer import TraceWriter

from . import _lazy
from ._handles import create
from ._version import __version__
from .actors.bus import EventStream
from .agents.budgets.budget import Budget
from .agents.budgets.usage import UsageTotals
from .agents.composition.compose import map_phases
from .agents.composition.composer import COMPOSER
from .agents.composition.helper import infrastructure_helper
from .agents.composition.respond import check_runtime_routing
from .agents.loop.recall import MemoryHandle, shared_memory
from .agents.loop.services import Services
from .agents.loop.spawning import spawn_agent
from .agents.loop.spec import check_spec
from .agents.memory.memory import Memory
from .agents.observation.otel import check_otel
from .agents.tools.lanes import Lanes, ToolLanes
from .config import Config, Models, find_config, found_config, load_config
from .errors import ConfigError, InvalidArgument
from .messages import RuntimeOpened
from .supervisors.ref import SupervisorRef, SupervisorStatistics
from .supervisors.restart import Backoff, Strategy
from .supervisors.tree import Tree

__all__ = ["Runtime", "open_runtime"]

_T = TypeVar("_T")  # an agent's output type


class _Configured:
    """The runtime's configuration, loaded on first use, and the providers made from it."""

    __slots__ = ("_given", "_models")

    def __init__(self, config: Config | str | os.PathLike[str] | None) -> None:
        self._given = config  # a Config, a path to agentrio.toml, or None (search for one)
        self._models: Models | None = None

    def models(self) -> Models:
        """The model resolver, made (and the configuration loaded) on first use."""
        if self._models is None:
            config = self._given
            if config is None:  # no file found: the built-in instances only
                config = found_config()
            elif not isinstance(config, Config):
                config = load_config(config)
            self._models = Models(config)
        return self._models

    def resolve(self, model: str) -> Model:
        """The model of a tier name or an ``"instance:model"`` string."""
        return self.models().resolve(model)

    def configuration(self) -> Config | None:
        """The configuration if the runtime has one: given, or found as for tiers
        (None when none was given and no agentrio.toml is found: the defaults hold)."""
        if self._models is None and self._given is None and find_config() is None:
            return None
        return self.models().config

    async def aclose(self) -> None:
        """Close the providers made here."""
        if self._models is not None:
            await self._models.aclose()


class Runtime(SupervisorRef):
    """The root of a supervision tree, from [`open_runtime`][agentrio.open_runtime].

    It is a [`SupervisorRef`][agentrio.SupervisorRef] with path and name ``""``
    (the root's ref of the runtime's [`Tree`][agentrio.supervisors.Tree]: ``spawn``,
    ``spawn_nowait``, ``spawn_supervisor``, ``lookup``, ``lookup_supervisor``,
    ``children``, ``closed`` and ``shutdown_timeout`` work as documented
    there) with the runtime-wide services on top: agents, helpers and maps
    (spawned under the root, or under any supervisor of the runtime given as
    ``under=``), registered tools, the budget, events and statistics. Two
    inherited methods behave differently on the root:
    [`stop`][agentrio.Runtime.stop] only starts the stop, and
    [`cancel`][agentrio.Runtime.cancel] leaves the body of the ``async with``
    block running. After either, `closed` is true and spawning raises
    ``RuntimeClosed``. No public constructor.
    """

    # The root's ref of its Tree (the Tree makes it; open_runtime sets these two).
    __slots__ = ("_services", "_tree")
    _services: Services
    _tree: Tree[Runtime]

    def _under(self, under: object) -> SupervisorRef:
        """*under* (None: the root), a supervisor of this runtime."""
        if under is None:
            return self
        if not isinstance(under, SupervisorRef):
            raise InvalidArgument(
                f"under must be a SupervisorRef (from spawn_supervisor or lookup_supervisor) "
                f"or None, got {type(under).__name__}: {under!r}"
            )
        if not self._tree.holds(under):
            raise InvalidArgument(
                f"under={under!r} is a supervisor of another runtime: spawn it with that "
                "runtime, or under one of this runtime's supervisors"
            )
        return under

    async def spawn_agent(
        self,
        spec: AgentSpec[_T],
        *,
        under: SupervisorRef | None = None,
        name: str | None = None,
        budget: Budget | None = None,
    ) -> AgentRef[_T]:
        """Start an agent from *spec*, as a child of the root or of *under*.

        It is a transient child; its context actors are spawned beside it,
        in the same supervisor, when first used.

        Example:

            team = await rt.spawn_supervisor(name="team")
            agent = await rt.spawn_agent(spec, under=team, name="r1")

        Args:
            spec: the [`agentrio.AgentSpec`][agentrio.AgentSpec].
            under: the supervisor to start it under: a ``SupervisorRef`` of
                this runtime (from ``spawn_supervisor``, ``lookup_supervisor``
                or ``children``), or the runtime itself (default: the root;
                ``team`` puts it at ``team/<name>``). The agent stops, or is
                cancelled, with that supervisor.
            name: the agent's name (default ``spec.name``), unique in that
                supervisor (the rules of `spawn`). With a workspace,
                another name than ``spec.name`` is the agent's subfolder of
                it, which must not be one of its own entries (``artifacts``,
                ``logs``, ``memory``, ``run_summary.json``, ignoring case). The
                agent's folder (the workspace, or that subfolder) must be a
                folder or not exist yet.
            budget: the budget its model and tool calls draw from (default:
                the runtime's). A budget with no parent is made a child of
                the runtime's, so the runtime's totals include it.

        Returns:
            An [`agentrio.AgentRef`][agentrio.AgentRef].

        Raises:
            InvalidArgument: *spec* is not an AgentSpec; a bad argument, named
                in the message (a name of the reserved form, a workspace
                subfolder of those names, a file where the agent's folder
                would be); *under* is not a ``SupervisorRef`` of this runtime
                (an ``AgentRef``, an ``ActorRef``, a supervisor of another
                runtime: the message shows it).
            DuplicateName: the name is taken.
            RuntimeClosed: the supervisor has stopped or is stopping.
            ConfigError: ``spec.model`` is a string that names no tier or
                provider instance of the configuration (or, without one, no
                built-in instance); or the environment variables of the
                instance it names cannot be used (its ``api_key_env`` is
                unset, empty or holds whitespace; a built-in instance's base
                URL variable is not a URL), naming the variable, never its
                value. The same for a
                ``spec.compaction.model`` string (and for the configuration
                found when ``spec.compaction.model`` is ``None``, if it cannot
                be read or its ``fast`` tier cannot be resolved).

        On a runtime with a checkpoint store (``open_runtime(store=...)``),
        the agent is durable (its phases are recorded, and resumed after a
        crash), and its spec's name must be registered
        ([`register_spec`][agentrio.Runtime.register_spec]): else
        ``InvalidArgument``, and nothing is spawned. A spec with a
        ``compaction`` is refused there too (not supported yet).
        """
        sup = self if under is None else self._under(under)
        await trio.lowlevel.checkpoint_if_cancelled()
        checkpoints = _held_checkpoints(self._services)
        if checkpoints is None:
            return spawn_agent(self._services, sup, spec, name, budget)
        check_spec(spec)
        checkpoints.check_spec(spec)
        agent = spawn_agent(self._services, sup, spec, name, budget)
        checkpoints.adopt(agent)
        return agent

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
        under: SupervisorRef | None = None,
    ) -> Helper:
        """An infrastructure helper: call an LLM like a function, with a tool whitelist.

        Only *tools* can run (a call to any other is a ``denied`` result the
        model sees) and no approval is asked. The helper is an agent actor
        under the root, or under *under*; see [`Helper`][agentrio.Helper].

        Example:

            h = rt.helper("fast", tools=["read_file"])
            res = await h.execute("Summarise README.md")

        Args:
            model: a model object, a tier name or an ``"instance:model"`` string.
            tools: Tool objects, or names registered with
                [`register_tool`][agentrio.Runtime.register_tool].
            instructions: the system prompt.
            workspace: a folder for its artifacts, and the working folder its
                tools are told of (``ToolContext.workspace``): Lace's
                ``workingDirectory``.
            max_turns: model calls per execute; past them HelperTurnsExceeded...
            final_answer: ...unless True: then a last call without tools answers.
            budget: what it draws from (default: the runtime's).
            name: its name (default ``helper-<n>``; the rules of
                ``AgentSpec.name``).
            env: environment variables its tools are told of
                (``ToolContext.env``), as ``AgentSpec.env``: Lace's
                ``processEnv``.
            under: the supervisor to start it under, one of this runtime's
                (default: the root).

        Raises:
            InvalidArgument: a bad argument, named in the message: a tool name
                nobody registered; *max_turns* is not an int >= 1; an *env*
                that is not a mapping of str to str.
            ConfigError: *model* is a string that cannot be resolved.
            RuntimeClosed: the supervisor has stopped.
        """
        sup = self._under(under)
        resolved = [self._services.tool(t) for t in tools]
        return infrastructure_helper(
            self._services,
            sup,
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

    def register_spec(self, name: str, factory: Callable[[], AgentSpec[Any]]) -> None:
        """Register *factory*, a function that makes the spec named *name*, for
        durable agents (``open_runtime(store=...)``).

        An agent spawned from a spec of that name is recorded in the store; after
        a crash, a runtime opened on the same store calls *factory* to spawn it
        again (specs hold code: tools, hooks, models). Registering the same
        factory again does nothing. See [Surviving a crash][surviving-a-crash].

        Raises:
            InvalidArgument: *name* is not a non-empty str, *factory* is not
                callable (an ``AgentSpec`` itself is refused: pass a function
                that returns it), another factory is registered as *name*, or
                the runtime has no checkpoint store.
        """
        checkpoints = _held_checkpoints(self._services)
        if checkpoints is None:
            raise InvalidArgument(
                "register_spec: this runtime has no checkpoint store (open_runtime(store=...))"
            )
        checkpoints.register(name, factory)

    @property
    def resumed(self) -> tuple[str, ...]:
        """The ids of the phases this runtime resumed from its checkpoint store when it
        opened (phases a crash had cut short), in the order they were begun; ``()``
        without a store. Each one's result: [`resumed_result`][agentrio.Runtime.resumed_result]."""
        checkpoints = _held_checkpoints(self._services)
        return () if checkpoints is None else checkpoints.resumed

    async def resumed_result(self, phase_id: str) -> PhaseResult[Any]:
        """The result of the phase *phase_id* of the checkpoint store: one this runtime
        resumed (waits until it ends), or one that ended before the crash (at once).

        A resumed phase's ``run()`` caller is gone with the process that crashed;
        this is how its result is had (or from a
        [`ResumedPhaseEnded`][agentrio.events.ResumedPhaseEnded] event). A typed
        output (``AgentSpec.output_type``) of a phase that ended before the crash
        is not kept in the store: its ``output`` is ``None``.

        Raises:
            InvalidArgument: the runtime has no checkpoint store, or *phase_id* is
                not a str.
            UnknownName: no such phase was resumed, or ended, in the store.
            ActorStopped, ActorCrashed: the resumed phase's agent stopped (the
                runtime closed) or crashed past its restarts before it ended.
        """
        checkpoints = _held_checkpoints(self._services)
        if checkpoints is None:
            raise InvalidArgument(
                "resumed_result: this runtime has no checkpoint store (open_runtime(store=...))"
            )
        return await checkpoints.result(phase_id)

    def memory(self, name: str | Memory) -> MemoryHandle:
        """The shared memory *name* (``AgentSpec(memory=Memory(name=...))``; #26), to
        search, fill or clear from outside its agents. Made here if no agent has
        used it yet: with the defaults, or as *name* says when it is a ``Memory``
        (an agent that uses it later shares it as it is). See [Memory][agent-memory].

        Raises:
            InvalidArgument: *name* is neither a non-empty str nor a ``Memory``
                with a name.
        """
        memory = name if isinstance(name, Memory) else Memory(name=name)
        if memory.name is None:
            raise InvalidArgument("Runtime.memory: the Memory must have a name (a shared memory)")
        services = self._services
        return create(
            MemoryHandle,
            memory.name,
            self.path,
            services.bus,
            lambda: shared_memory(services, self, memory),
        )

    # -- sessions and deferred decisions (#27) --------------------------------------

    def _store_checkpoints(self, what: str) -> Checkpoints:
        checkpoints = _held_checkpoints(self._services)
        if checkpoints is None:
            raise InvalidArgument(
                f"{what}: this runtime has no checkpoint store (open_runtime(store=...))"
            )
        return checkpoints

    async def session(self, session_id: str, spec: str | AgentSpec[Any]) -> AgentRef[Any]:
        """The agent of the conversation *session_id*, kept in the checkpoint store.

        A session is one durable agent (``sessions/<session_id>``): every context
        label of it is the session's. The first call spawns it from *spec*; a
        later one gives the same agent while it lives; a runtime opened later on
        the same store (in any process) spawns it again with its contexts as the
        store left them. Its ``run()`` calls are served one at a time, in order.
        See [Sessions][sessions].

        Args:
            session_id: the session's key: a str of 1 to 200 printable characters,
                without ``/`` (an actor's name).
            spec: the name of a registered spec
                ([`register_spec`][agentrio.Runtime.register_spec]), or an
                ``AgentSpec`` whose name is registered. A session is continued
                with the spec it began with.

        Raises:
            InvalidArgument: no checkpoint store; a bad *session_id*; a spec not
                registered, or not the one the session began with.
        """
        from .agents.durability.sessions import open_session

        return await open_session(self._store_checkpoints("session"), session_id, spec)

    async def sessions(self) -> dict[str, float]:
        """The sessions of the store (its archive too) and of this runtime: each id,
        and when it last began a phase (``time.time()``; 0.0 if never). ``{}``
        without a store."""
        checkpoints = _held_checkpoints(self._services)
        if checkpoints is None:
            return {}
        from .agents.durability.sessions import known

        return await known(checkpoints)

    async def delete_session(self, session_id: str) -> int:
        """Delete every record of the session *session_id* from the checkpoint
        store (its phases' and its agent's own memory's), and cancel its agent if
        it lives; the number of phases deleted.

        Raises:
            InvalidArgument: no checkpoint store, a bad *session_id*, or a store
                that cannot delete records.
            UnknownName: no such session.
        """
        from .agents.durability.sessions import delete

        return await delete(self._store_checkpoints("delete_session"), session_id)

    async def prune_sessions(
        self, *, max_age: float | None = None, max_count: int | None = None
    ) -> tuple[str, ...]:
        """Retention: delete (as [`delete_session`][agentrio.Runtime.delete_session])
        the sessions that began no phase for *max_age* seconds, then the least
        recently used past *max_count*. A session with a phase under way, or
        parked (waiting for a decision or a result), is kept.
        Returns the ids deleted.

        Raises:
            InvalidArgument: no checkpoint store, *max_age* not a number >= 0, or
                *max_count* not an int >= 0.
        """
        from .agents.durability.sessions import prune

        checkpoints = self._store_checkpoints("prune_sessions")
        return await prune(checkpoints, max_age, max_count)

    def pending_approvals(self) -> list[PendingCall]:
        """The tool calls of parked phases whose approver deferred its decision
        ([`Defer`][agentrio.Defer]), oldest first; ``[]`` without a store.
        See [Deferred decisions][deferred-decisions]."""
        return _pending(self._services, "approval")

    def pending_results(self) -> list[PendingCall]:
        """The tool calls of parked phases whose tool deferred its result, oldest
        first; ``[]`` without a store."""
        return _pending(self._services, "result")

    async def approve(self, call: PendingCall, message: str = "") -> None:
        """Approve a deferred *call*: the decision is recorded (synced), and once
        its phase waits for nothing else, the phase goes on (its result:
        [`resumed_result`][agentrio.Runtime.resumed_result]).

        Raises:
            InvalidArgument: no store; *call* is not a ``PendingCall``, waits for a
                result, or *message* is not a str (at most 100,000 characters).
            UnknownName: *call* waits no more (decided already).
        """
        from .agents.durability.deferred import decide

        await decide(self._store_checkpoints("approve"), call, approved=True, message=message)

    async def deny(self, call: PendingCall, message: str = "") -> None:
        """Refuse a deferred *call*: the model sees ``the approver refused
        '<tool>': <message>``; otherwise as [`approve`][agentrio.Runtime.approve]."""
        from .agents.durability.deferred import decide

        await decide(self._store_checkpoints("deny"), call, approved=False, message=message)

    async def give_result(self, call: PendingCall, result: str, *, status: str = "ok") -> None:
        """Give the result of a tool call whose tool deferred it: the model sees
        *result* (``status`` ``"ok"`` or ``"failed"``); otherwise as
        [`approve`][agentrio.Runtime.approve]."""
        from .agents.durability.deferred import decide

        checkpoints = self._store_checkpoints("give_result")
        await decide(checkpoints, call, result=result, status=status)

    def store_reader(self) -> StoreReader:
        """A [`StoreReader`][agentrio.types.StoreReader] of this runtime's checkpoint store:
        its phases, live and archived, as they are on disk once this runtime's
        records so far are written out (each read waits for that); its ``fork`` records
        the new phase and starts it at once (its result:
        [`resumed_result`][agentrio.Runtime.resumed_result]).

        Raises:
            InvalidArgument: the runtime has no checkpoint store, or one that is
                not an [`ArchivingStore`][agentrio.store.ArchivingStore].
        """
        checkpoints = _held_checkpoints(self._services)
        if checkpoints is None:
            raise InvalidArgument(
                "store_reader: this runtime has no checkpoint store (open_runtime(store=...))"
            )
        return checkpoints.reader()

    def register_tool(self, *tools: Tool) -> None:
        """Make *tools* available by name to ``helper(tools=[...])`` across the runtime.

        Raises:
            InvalidArgument: not a Tool, or a name already registered for another tool.
        """
        for t in tools:
            self._services.register_tool(t)

    async def map(
        self,
        spec: AgentSpec[_T],
        inputs: Sequence[str],
        *,
        under: SupervisorRef | None = None,
        concurrency: int = 10,
        budget: Budget | None = None,
    ) -> list[PhaseResult[_T] | ActorError]:
        """Run one phase per input, each on a fresh agent from *spec*, *concurrency* at once.

        The agents are spawned under the root, or under *under*, named
        ``"<spec.name>.map<n>-<i>"``; each stops after its phase.

        If the caller gives up (it is cancelled or times out), every phase
        under way ends with ``"cancelled"`` (as for
        [`AgentRef.run`][agentrio.AgentRef.run]: its turns kept, its reservation
        settled, a ``PhaseEnded`` published), the inputs not started yet
        never start, the agents are cancelled, and ``map`` raises
        ``trio.Cancelled`` once those phases have ended and those agents
        (and what they own: their contexts, their subagents) have exited, so
        ``statistics().actors`` no longer counts them. That wait is shielded
        and lasts at most the supervisor's ``shutdown_timeout`` (an agent
        still in shielded cleanup then is left to finish on its own). The
        same holds when a spawn fails.

        Returns:
            The results in input order. An input whose agent failed
            (crashed, was cancelled) has its ``ActorError`` in its place; the
            others' results are kept.

        Raises:
            InvalidArgument: *spec* is not an AgentSpec (checked first, even
                for no inputs; the message names the type given), *inputs* is
                not a list of str, *concurrency* is not an int >= 1, or
                *under* is not a SupervisorRef of this runtime.
            Exception: whatever a spawn raises (``RuntimeClosed``,
                ``PermissionEscalation``...), after cancelling the phases
                under way.
        """
        check_spec(spec)  # (first, whatever else is wrong)
        sup = self._under(under)
        return await map_phases(
            self._services, sup, spec, inputs, concurrency=concurrency, budget=budget, parent=None
        )

    def events(self, *, capacity: int = 1000) -> EventStream:
        """Subscribe to the runtime's events.

        Use as ``async with rt.events() as stream: async for event in stream``.
        The subscription starts at once (before the ``async with``), holds at
        most *capacity* unread events, and never slows the actors: when it is
        full, events are dropped for it and an [`EventsLost`][agentrio.events.EventsLost]
        with their count takes their place. The stream ends when the runtime
        stops, after what it has buffered.

        Args:
            capacity: the subscriber's buffer, in events.

        Returns:
            A new [`EventStream`][agentrio.events.EventStream].

        Raises:
            InvalidArgument: *capacity* is not an int >= 1.
        """
        return self._tree.bus.subscribe(capacity)

    @property
    def budget(self) -> Budget:
        """The runtime's root budget: its limits, and what has been spent and reserved."""
        return self._services.budget

    def usage(self) -> UsageTotals:
        """What every agent of the runtime has spent: tokens, model calls, tool calls,
        cost and overruns; the same as ``rt.budget.usage()``."""
        return self.budget.usage()

    async def stop(self) -> None:
        """Begin a graceful stop of the whole tree and return at once.

        The stop completes while the block goes on; the ``open_runtime()``
        block's end waits for it.
        """
        self._tree.begin_stop()
        await trio.lowlevel.checkpoint()

    def cancel(self) -> None:
        """Cancel every actor and supervisor in the tree now.

        The body of the ``async with`` block is not cancelled.
        """
        self._tree.cancel()

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of the whole tree: live actors, mailboxes, restarts, dead letters.

        Its ``state`` is ``"running"``, ``"stopping"`` once a stop has begun,
        or ``"exited"`` once the root has stopped.
        """
        return super().statistics()


@asynccontextmanager
async def open_runtime(
    *,
    strategy: Strategy = "one_for_one",
    max_restarts: int = 3,
    period: float = 5.0,
    backoff: Backoff | None = None,
    shutdown_timeout: float = 5.0,
    budget: Budget | None = None,
    config: Config | str | os.PathLike[str] | None = None,
    tools: Sequence[Tool] = (),
    lanes: Lanes | None = None,
    modes: Sequence[Mode] = (),
    router: Router | None = None,
    otel: OpenTelemetry | None = None,
    trace: str | os.PathLike[str] | None = None,
    store: CheckpointStore | str | os.PathLike[str] | None = None,
    durability: Durability = "batch",
    specs: Mapping[str, Callable[[], AgentSpec[Any]]] | None = None,
    retention: Retention | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime: the root supervisor of everything spawned in the block.

    Leaving the block stops everything gracefully (every actor drains its
    mailbox and runs ``on_stop``, last spawned first); whatever still runs
    *shutdown_timeout* seconds after the stop began is cancelled. Leaving it
    with an exception cancels everything, and the exception comes out as it
    was raised (a ``ConfigError`` from ``spawn_agent`` is caught by ``except
    ConfigError``), not in an exception group. Nothing outlives the block. If
    the root supervisor exceeds its restart intensity, the block is cancelled
    and an exception group holding a
    [`RestartIntensityExceeded`][agentrio.errors.RestartIntensityExceeded] (naming the actor and its
    error) is raised; the block's own exception, if it raised one as well,
    is in that group beside it.

    Example:

        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Echo, name="echo")
            print(await ref.ask(Ping(text="hi"), timeout=1.0))

    Args:
        strategy: the root's strategy, ``"one_for_one"`` or ``"one_for_all"``.
        max_restarts: restarts the root allows within *period* seconds.
        period: the restart-intensity window, in seconds.
        backoff: delay root-level restarts (see [`Backoff`][agentrio.Backoff]).
        shutdown_timeout: one deadline, in seconds, for the whole graceful
            stop (not one per child); then what still runs is cancelled. It
            bounds how long leaving the block takes, however many children
            there are (see [`SupervisorRef.stop`][agentrio.SupervisorRef.stop]).
        budget: the root [`Budget`][agentrio.Budget] every agent draws from
            (default: no limits, usage still counted).
        config: for agents whose model is a tier or an ``"instance:model"``
            string: a [`Config`][agentrio.Config], or the path of an
            agentrio.toml (default: found as [`load_config`][agentrio.load_config]
            does, when first needed; with none found, only the built-in
            instances ``openai``, ``anthropic`` and ``ollama`` are known, set
            by their environment variables: see [No
            configuration][no-configuration]). The providers it makes are
            closed when the block ends.
        tools: tools to register by name (see ``Runtime.register_tool``).
        lanes: how the lanes' tool calls are limited and retried (see
            [`Lanes`][agentrio.Lanes]); default: the ``[lanes]`` of *config*
            when it is given, else of the agentrio.toml found as
            `find_config` finds one (read when the runtime
            opens; a file that cannot be read or is wrong is an error only
            where a tier or mode first needs it), else ``Lanes()``, which
            limits and retries nothing.
        modes: [`Mode`][agentrio.Mode] objects, each the runtime's mode of
            its name (``run(mode="inline")``, ``respond()``), over the
            configuration's ``[modes.NAME]`` tables, which are over the
            presets ``inline`` and ``background``.
        router: the default router of ``AgentRef.respond``: any callable
            ``(request) -> Route`` (or async); default: the configuration's
            ``[router]`` (a [`RuleRouter`][agentrio.RuleRouter]), else
            ``RuleRouter()``. For modes and the router, the configuration
            is *config*, or the agentrio.toml found as by ``load_config()``
            when a mode or the router is first needed; without one, the
            defaults hold (no error).
        otel: record the runtime's phases, model calls and tool calls with
            OpenTelemetry (see [`OpenTelemetry`][agentrio.otel.OpenTelemetry]);
            default: nothing is recorded, at no cost.
        trace: a file to write every event to, one JSON line each, read
            back by [`read_trace`][agentrio.tracing.read_trace] (see
            [`TraceWriter`][agentrio.tracing.TraceWriter] and the how-to
            "Tracing a run"); default: no trace, and nothing is spent on one.
            The file is opened in a worker thread (a FIFO waits for its
            reader; cancelling the open works). A write that fails never
            reaches the agents: the trace stops, a
            [`TraceWriteFailed`][agentrio.events.TraceWriteFailed] event says
            why, and ``TraceError`` is raised when the block ends.
        store: a checkpoint store, for durable agents: a folder's path (a
            [`DirectoryStore`][agentrio.store.DirectoryStore]) or any
            [`CheckpointStore`][agentrio.store.CheckpointStore] object. It is read
            once, when the runtime opens: the phases a crash cut short are
            resumed (see [`resumed`][agentrio.Runtime.resumed] and
            [Surviving a crash][surviving-a-crash]); then every agent spawned
            with ``spawn_agent`` records its phases in it. The runtime owns
            the store until its block ends: another runtime opened on it
            meanwhile raises ``StoreLocked`` (a ``DirectoryStore`` or
            ``SQLiteStore`` given with ``lock_timeout=`` waits instead; see
            [One runtime per store][one-runtime-per-store]), and closes it
            then: give the next runtime the path again, or a new store object
            (a ``MemoryStore`` may be given again; a closed ``DirectoryStore``
            or ``SQLiteStore`` raises ``StoreError``). Default: none, and
            nothing is recorded, at no cost.
        durability: when a phase's records are on disk: ``"batch"`` (the
            default: the store's writer syncs each batch it writes, and the
            agents never wait for it) or ``"turn"`` (each turn's records are
            synced before the phase's next model call). Either way, the start
            of a call to a tool not declared idempotent is synced before the
            tool runs.
        specs: spec factories by name (``{"researcher": make_researcher}``),
            as [`register_spec`][agentrio.Runtime.register_spec] registers them.
        retention: which finished phases the store keeps
            ([`Retention`][agentrio.store.Retention]): when given, the runtime
            compacts the store as it closes (finished phases moved out of the
            live area into the archive, which a runtime opening the store does
            not read) and drops the archived phases it says. Without it
            nothing is moved or dropped. See
            [Reading and pruning a store][reading-and-pruning-a-store].

    Raises:
        InvalidArgument: a bad argument, named in the message: *lanes* that
            is not a ``Lanes``, a *tools* entry that is not a ``Tool``
            (raised on entering the block), *modes* that is not a list of
            ``Mode`` or has two of one name, a *router* that is not callable,
            *otel* that is not an ``OpenTelemetry``; *store* that is neither a
            path nor a ``CheckpointStore``, a bad *durability*, *specs* that is
            not a mapping of names to functions, or *specs* or *durability*
            without a *store*; unfinished phases in the store of a spec that
            *specs* does not register (raised on entering the block).
        StoreError: the store cannot be read.
        StoreLocked: another runtime owns the store (raised on entering the
            block, naming the holder).
        TraceError: the *trace* file cannot be opened (on entering the block),
            or could not be written (when the block ends normally, after
            everything has stopped: every result the block got stands).
        StoreCorrupt: a record of the store, other than a torn last one, is
            damaged or of an unknown type (raised on entering the block, naming
            the file and offset); a torn last record is left out, with a
            [`CheckpointTorn`][agentrio.events.CheckpointTorn] event.
    """
    check_runtime_routing(modes, router)
    if budget is None:
        budget = Budget()
    elif not isinstance(budget, Budget):
        raise InvalidArgument(f"budget must be an agentrio.Budget or None, got {budget!r}")
    if lanes is not None and not isinstance(lanes, Lanes):
        raise InvalidArgument(f"lanes must be an agentrio.Lanes or None, got {lanes!r}")
    tree = Tree(
        Runtime,
        strategy=strategy,
        max_restarts=max_restarts,
        period=period,
        backoff=backoff,
        shutdown_timeout=shutdown_timeout,
    )
    configured = _Configured(config)
    services = Services(
        budget=budget,
        bus=tree.bus,
        resolve=configured.resolve,
        configuration=configured.configuration,
        composer=COMPOSER,
        modes=modes,
        router=router,
    )
    rt = tree.ref
    rt._tree = tree
    services.otel = check_otel(otel)
    rt._services = services
    rt.register_tool(*tools)
    if config is not None:
        models = configured.models()  # a bad config is an error here, not at first use
        if lanes is None:
            lanes = models.config.lanes
    elif lanes is None:
        lanes = _found_lanes(configured)
    if lanes is not None and lanes.active:
        services.tool_lanes = ToolLanes(lanes)
    checkpoints = _checkpoints(store, durability, specs, budget, tree, retention)
    if checkpoints is not None:
        # Read once, before anything runs (its errors raised as they are, not
        # in a group); the writer closes after the tree.
        try:
            await checkpoints.open()
        except BaseException:
            with trio.CancelScope(shield=True):
                await checkpoints.store.aclose()
            raise
    writer = await _trace_writer(trace, checkpoints)
    body_error: BaseException | None = None  # what the block raised
    try:
        async with trio.open_nursery() as nursery:
            if writer is not None:
                await nursery.start(writer.run, tree.bus)
            if tree.bus.active:  # (a trace's first record: the budget the run had)
                tree.bus.publish(_opened(services.budget))
            if services.otel is not None:  # (its counters and gauges read this runtime's)
                services.otel.observe(tree, budget)
            if checkpoints is not None:
                await nursery.start(checkpoints.writer.run)
            await nursery.start(
                _run_root, tree, configured, checkpoints, name="agentrio root supervisor"
            )
            try:
                if checkpoints is not None:
                    services.checkpoints = checkpoints
                    await checkpoints.resume(rt, services, nursery)
                yield rt
            except BaseException as exc:
                body_error = exc
                rt.cancel()
                raise
            else:
                tree.begin_stop()
    except BaseExceptionGroup as group:
        # The block's own exception, alone in the nursery's group, comes out as
        # itself (``except ConfigError`` catches it); a group holding anything
        # else (the runtime's own failure beside it) stays a group.
        if body_error is None or not _alone(group, body_error):
            raise
    if body_error is not None:  # (raised outside the except: no group as its context)
        raise body_error
    if writer is not None and writer.error is not None:
        # The agents never saw it (every phase ran on); the caller learns it here.
        raise writer.error


def _alone(group: BaseExceptionGroup[BaseException], error: BaseException) -> bool:
    """Is *error* all that the nursery's *group* holds? (A group the block raised
    comes back as Trio's copy of it: the same exceptions, in a new group.)"""
    if len(group.exceptions) != 1:
        return False
    only = group.exceptions[0]
    if only is error:
        return True
    return (
        isinstance(only, BaseExceptionGroup)
        and isinstance(error, BaseExceptionGroup)
        and _leaves(only) == _leaves(error)
    )


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[int]:
    """The ids of the exceptions in *group* and in the groups it holds, in order."""
    found: list[int] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found += _leaves(exc)
        else:
            found.append(id(exc))
    return found


async def _trace_writer(
    trace: str | os.PathLike[str] | None, checkpoints: Checkpoints | None
) -> TraceWriter | None:
    """The trace writer, its file open (None: no *trace*). The file is opened in a
    worker thread, cancellably (a FIFO with no reader waits for one); if that
    fails, the store read before is closed."""
    if trace is None:
        return None
    from .tracing.writer import TraceWriter  # (imported only when a trace is asked for)

    writer = TraceWriter(trace)
    try:
        await writer.open()
    except BaseException:
        if checkpoints is not None:
            with trio.CancelScope(shield=True):
                await checkpoints.store.aclose()
        raise
    return writer


def _held_checkpoints(services: Services) -> Checkpoints | None:
    """The runtime's checkpoints (its services hold them as the loop's Checkpointing)."""
    held = services.checkpoints
    if held is None:
        return None
    from .agents.durability.checkpoint import Checkpoints  # (loaded with the store)

    assert isinstance(held, Checkpoints)
    return held


def _pending(services: Services, kind: str) -> list[PendingCall]:
    """The calls of *kind* that parked phases wait for ([] without a store)."""
    checkpoints = _held_checkpoints(services)
    if checkpoints is None:
        return []
    from .agents.durability.deferred import pending

    return pending(checkpoints, kind)


def _opened(budget: Budget) -> RuntimeOpened:
    return RuntimeOpened(
        path="",
        version=__version__,
        max_total_tokens=budget.max_total_tokens,
        max_input_tokens=budget.max_input_tokens,
        max_output_tokens=budget.max_output_tokens,
        max_requests=budget.max_requests,
        max_tool_calls=budget.max_tool_calls,
        max_cost_usd=budget.max_cost_usd,
    )


def _found_lanes(configured: _Configured) -> Lanes | None:
    """The ``[lanes]`` of an agentrio.toml found as `find_config` finds
    one (read now: the lanes are set up when the runtime opens), or None.

    No file found, nothing is read. A file that cannot be used is not an
    error here but where the runtime first needs it (a tier, a mode), as
    before: its lanes are then the defaults.
    """
    if find_config() is None:
        return None
    try:
        return configured.models().config.lanes
    except ConfigError:
        return None


def _checkpoints(
    store: object,
    durability: object,
    specs: object,
    budget: Budget,
    tree: Tree[Runtime],
    retention: object = None,
) -> Checkpoints | None:
    """The runtime's checkpoints for *store* (None: it has no store)."""
    if durability not in ("batch", "turn"):
        raise InvalidArgument(f'durability must be "batch" or "turn", got {durability!r}')
    if specs is not None and not isinstance(specs, Mapping):
        raise InvalidArgument(
            f"specs must be a mapping of spec names to functions that make them, got {specs!r}"
        )
    if retention is not None:
        from .store import Retention

        if not isinstance(retention, Retention):
            raise InvalidArgument(
                f"retention must be an agentrio.store.Retention, got {retention!r}"
            )
    if store is None:
        if specs or durability != "batch" or retention is not None:
            raise InvalidArgument("specs, durability and retention are for a runtime with a store=")
        return None
    # (The store and the checkpoints' room: imported only for a runtime that has one;
    # the public names among them get their public home now, agentrio/_lazy.py.)
    from .agents.durability.checkpoint import Checkpoints
    from .store import CheckpointStore, CheckpointWriter, DirectoryStore

    _lazy.settle()
    if isinstance(store, (str, os.PathLike)):
        store = DirectoryStore(store)
    elif not isinstance(store, CheckpointStore):
        raise InvalidArgument(
            f"store must be a folder's path or an agentrio.store.CheckpointStore, got {store!r}"
        )
    return Checkpoints(
        store,
        CheckpointWriter(store),
        budget=budget,
        bus=tree.bus,
        durability=durability,
        specs=specs or {},
        retention=retention,
    )


async def _run_root(
    tree: Tree[Runtime],
    configured: _Configured,
    checkpoints: Checkpoints | None,
    task_status: trio.TaskStatus[None],
) -> None:
    task_status.started()
    try:
        await tree.run()
    finally:
        with trio.CancelScope(shield=True):
            await configured.aclose()
            if checkpoints is not None:  # (every record put by the agents: on disk)
                await checkpoints.writer.aclose()
