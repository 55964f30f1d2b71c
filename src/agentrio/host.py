"""Sync and asyncio hosts: a runtime in a thread of its own, reached through a portal.

`open_runtime_sync` starts a thread, runs Trio in it (anyio's blocking portal with
the Trio backend) and opens a runtime there; the `BlockingRuntime` it returns is
called from any other thread. Its methods block the calling thread until the
runtime's thread has done the work (``rt.spawn_agent(spec)``, ``agent.run(...)``);
their ``a``-twins (``await rt.aspawn_agent(spec)``, ``await agent.arun(...)``) await it
instead, from asyncio, without blocking the loop and without a worker thread
(anyio's ``BlockingPortal.call_async``): cancelling the awaiting task cancels the
work in the runtime and waits for it to end. Trio code has no use for this module:
it opens its runtime with ``open_runtime()``.

Leaving the ``with`` (or ``async with``) block, or ``BlockingRuntime.stop()``, stops
the runtime as ``open_runtime()``'s block does (gracefully, within its
*shutdown_timeout*), then cancels whatever else still runs in the portal and joins
the thread: nothing outlives it. Leaving the block with an exception cancels
everything at once. Any call after that raises ``RuntimeClosed``.

anyio is imported when the first runtime is opened, not with agentrio, so a program
that does not use this module does not pay for it.

The public homes: `open_runtime_sync` and `run_sync` at the top level
(``agentrio.run_sync``), the handles in `agentrio.types`
(``agentrio.types.BlockingRuntime``); this module is private.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypedDict, TypeVar, Unpack, overload

import trio

from ._handles import NoPublicConstructor, create
from .agents.budgets.budget import Budget
from .agents.budgets.usage import UsageTotals
from .agents.loop.ref import AgentRef
from .agents.loop.spec import AgentSpec
from .agents.loop.stream import RunDone, RunItem, RunStream
from .errors import RuntimeClosed, SelfAsk, UsageError
from .messages import (
    ContentPart,
    Event,
    Lane,
    ModelSettings,
    OutputT,
    PhaseResult,
    PlanningMode,
    TextDelta,
    ToolCallRequest,
)
from .runtime import Runtime, open_runtime
from .supervisors.ref import SupervisorRef

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

    from .agents.durability.checkpoint import Durability
    from .agents.durability.deferred import PendingCall
    from .agents.observation.otel import OpenTelemetry
    from .agents.routing.modes import Mode
    from .agents.routing.router import Router
    from .agents.tools.lanes import Lanes
    from .agents.tools.tool import Tool
    from .config import Config
    from .store import CheckpointStore, Retention
    from .supervisors.restart import Backoff, Strategy

__all__ = [
    "BlockingAgent",
    "BlockingRuntime",
    "BlockingRunStream",
    "BlockingStream",
    "open_runtime_sync",
    "run_sync",
]

T = TypeVar("T")
R = TypeVar("R")
_Out = TypeVar("_Out")  # an agent's output type


class _RuntimeOptions(TypedDict, total=False):
    """``open_runtime()``'s keyword arguments (kept equal to it by tests/test_host.py)."""

    strategy: Strategy
    max_restarts: int
    period: float
    backoff: Backoff | None
    shutdown_timeout: float
    budget: Budget | None
    config: Config | str | os.PathLike[str] | None
    tools: Sequence[Tool]
    lanes: Lanes | None
    modes: Sequence[Mode]
    router: Router | None
    otel: OpenTelemetry | None
    trace: str | os.PathLike[str] | None
    store: CheckpointStore | str | os.PathLike[str] | None
    durability: Durability
    specs: Mapping[str, Callable[[], AgentSpec[Any]]] | None
    retention: Retention | None


class _StreamOptions(TypedDict, total=False):
    """``AgentRef.stream()``'s keyword arguments but ``max_buffer_size`` (kept equal to
    it by tests/test_host.py): ``run()``'s, but ``planning`` (a stream is one phase)."""

    tool_names: Sequence[str] | None
    max_iterations: int | None
    continue_context: bool
    context_label: str | None
    direct_tool_calls: Sequence[ToolCallRequest] | None
    timeout: float | None
    mode: str | Mode | None
    model: str | None
    lane: Lane | None
    settings: ModelSettings | None
    phase_id: str | None


class _RunOptions(_StreamOptions, total=False):
    """``AgentRef.run()``'s keyword arguments (kept equal to it by tests/test_host.py)."""

    planning: PlanningMode | None  # (#26: planned runs)


class _RunSyncOptions(_RuntimeOptions, _RunOptions, total=False):
    """``run_sync()``'s keyword arguments: the runtime's and the run's."""


_RUNTIME_KEYS = frozenset(_RuntimeOptions.__annotations__)
_STOPPED = "this BlockingRuntime was stopped while the call was waiting or running"


def open_runtime_sync(**options: Unpack[_RuntimeOptions]) -> BlockingRuntime:
    """Open a runtime in a thread of its own, for sync code and asyncio.

    Starts a thread, runs Trio in it (anyio's blocking portal, Trio backend)
    and opens a runtime there, as [`open_runtime`][agentrio.open_runtime]
    does. The runtime is open when this returns (a thread's start and the
    runtime's opening: a few milliseconds). Use the
    [`BlockingRuntime`][agentrio.types.BlockingRuntime] as a context manager,
    ``with`` or ``async with``, or call its
    [`stop`][agentrio.types.BlockingRuntime.stop]. See
    [How to host agents in sync code and asyncio][how-to-host-agents-in-sync-code-and-asyncio].

    Example:

        with agentrio.open_runtime_sync() as rt:
            agent = rt.spawn_agent(spec)
            print(agent.run("What is the capital of France?").final_text)

    Args:
        options: [`open_runtime`][agentrio.open_runtime]'s keyword arguments
            (``strategy``, ``max_restarts``, ``period``, ``backoff``,
            ``shutdown_timeout``, ``budget``, ``config``, ``tools``, ``lanes``,
            ``modes``, ``router``).

    Returns:
        The [`BlockingRuntime`][agentrio.types.BlockingRuntime], open.

    Raises:
        InvalidArgument: a bad argument, as ``open_runtime()`` raises it (no thread
            is left behind).
        RuntimeError: called from Trio code (use ``open_runtime()`` there).
    """
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        pass  # not in Trio: good
    else:  # as Trio itself refuses a blocking call from its thread
        raise RuntimeError(
            "open_runtime_sync() blocks: call it from a thread that does not run Trio; "
            "under Trio, use `async with agentrio.open_runtime()`"
        )
    # Imported here, once per runtime, not with agentrio: see the module's docstring.
    import anyio.from_thread

    portal_cm = anyio.from_thread.start_blocking_portal(backend="trio", name="agentrio-runtime")
    portal = portal_cm.__enter__()
    try:
        thread = portal.call(threading.current_thread)
        serving, (runtime, done) = portal.start_task(_serve, options, name="agentrio host")
    except BaseException as exc:
        portal_cm.__exit__(type(exc), exc, exc.__traceback__)
        raise
    return create(BlockingRuntime, portal_cm, portal, thread, serving, runtime, done)


async def _serve(options: _RuntimeOptions, *, task_status: Any) -> None:
    # The runtime's block, as the portal's task: it hands the runtime out, then
    # waits for BlockingRuntime._close() to end it. task_status is anyio's.
    done = trio.Event()
    async with open_runtime(**options) as runtime:
        task_status.started((runtime, done))
        await done.wait()


def run_sync(
    spec: AgentSpec[_Out],
    user_message: str | Sequence[ContentPart | str],
    *,
    name: str | None = None,
    **options: Unpack[_RunSyncOptions],
) -> PhaseResult[_Out]:
    """Run one phase of a new agent in a runtime of its own, and stop it: the simplest case.

    Opens a runtime as [`open_runtime_sync`][agentrio.open_runtime_sync] does,
    spawns an agent from *spec*, runs one phase of *user_message*, stops the
    runtime and returns the phase's result. The errors are those of
    ``open_runtime_sync()``,
    [`BlockingRuntime.spawn_agent`][agentrio.types.BlockingRuntime.spawn_agent]
    and [`BlockingAgent.run`][agentrio.types.BlockingAgent.run].

    Example:

        result = agentrio.run_sync(spec, "What is the capital of France?")
        print(result.final_text)

    Args:
        spec: the agent's [`AgentSpec`][agentrio.AgentSpec].
        user_message: the user's turn that starts the phase: a str or a list
            of content parts, as for [`AgentRef.run`][agentrio.AgentRef.run].
        name: the agent's name (default ``spec.name``).
        options: [`open_runtime`][agentrio.open_runtime]'s keyword arguments
            (``budget``, ``config``, ``shutdown_timeout``...) and
            [`AgentRef.run`][agentrio.AgentRef.run]'s (``timeout``,
            ``max_iterations``, ``mode``...), mixed.

    Returns:
        The phase's [`PhaseResult`][agentrio.PhaseResult].
    """
    runtime_options: dict[str, Any] = {}
    run_options: dict[str, Any] = {}
    for key, value in options.items():
        (runtime_options if key in _RUNTIME_KEYS else run_options)[key] = value
    with open_runtime_sync(**runtime_options) as rt:
        return rt.spawn_agent(spec, name=name).run(user_message, **run_options)


class BlockingRuntime(metaclass=NoPublicConstructor):
    """A runtime in a thread of its own, from [`open_runtime_sync`][agentrio.open_runtime_sync].

    No public constructor. Every method may be called from any thread, at once
    from many: each call is handed to the runtime's thread and waited for (the
    plain methods block the caller; their ``a``-twins are awaited from asyncio
    and do not block its loop, and cancelling the awaiting task cancels the
    work in the runtime and waits for it to end). From the runtime's own
    thread (a tool, a hook) a call raises
    [`SelfAsk`][agentrio.errors.SelfAsk]: it would wait for itself. The
    agents' tools, hooks, approvers and models run in the runtime's thread,
    under Trio. See [How to host agents in sync code and
    asyncio][how-to-host-agents-in-sync-code-and-asyncio].

    A context manager, ``with`` or ``async with``: leaving the block calls
    [`stop`][agentrio.types.BlockingRuntime.stop] (or, with an exception,
    [`cancel`][agentrio.types.BlockingRuntime.cancel], and the exception comes
    out as it was). After that, every call raises
    [`RuntimeClosed`][agentrio.errors.RuntimeClosed].
    """

    __slots__ = (
        "_closed",
        "_done",
        "_lock",
        "_portal",
        "_portal_cm",
        "_runtime",
        "_serving",
        "_thread",
    )

    def __init__(
        self,
        portal_cm: AbstractContextManager[BlockingPortal],
        portal: BlockingPortal,
        thread: threading.Thread,
        serving: concurrent.futures.Future[None],
        runtime: Runtime,
        done: trio.Event,
    ) -> None:
        self._portal_cm = portal_cm
        self._portal = portal
        self._thread = thread
        self._serving = serving
        self._runtime = runtime
        self._done = done
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<BlockingRuntime {'closed' if self._closed else 'open'} in {self.thread.name}>"

    @property
    def thread(self) -> threading.Thread:
        """The runtime's thread: it has ended once ``stop()`` has returned."""
        return self._thread

    @property
    def runtime(self) -> Runtime:
        """The [`Runtime`][agentrio.Runtime] itself: use it only in the runtime's thread.

        That is, in a function given to ``call()``, or in the tools and hooks
        of its agents: ``rt.call(rt.runtime.spawn, Echo)``.
        """
        return self._runtime

    @property
    def closed(self) -> bool:
        """True once ``stop()`` (or ``cancel()``) has been called."""
        return self._closed

    # -- calls into the runtime's thread -----------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise RuntimeClosed("this BlockingRuntime has been stopped")
        if threading.current_thread() is self._thread:
            raise SelfAsk(
                "a BlockingRuntime was called from its own runtime's thread (a tool, a "
                "hook or a function given to call()): it would wait for itself; there, "
                "use the Trio objects (rt.runtime, agent.agent) and await them"
            )

    @overload
    def _call(self, fn: Callable[..., Awaitable[R]], *args: object) -> R: ...
    @overload
    def _call(self, fn: Callable[..., R], *args: object) -> R: ...
    def _call(self, fn: Callable[..., Any], *args: object) -> Any:
        self._check()
        try:
            future: concurrent.futures.Future[Any] = self._portal.start_task_soon(fn, *args)
        except RuntimeError as exc:
            if self._closed:  # the portal stopped since _check()
                raise RuntimeClosed(_STOPPED) from exc
            raise  # Trio's: a blocking call from a thread that runs Trio
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise RuntimeClosed(_STOPPED) from None
        except BaseException:
            if not future.done():  # KeyboardInterrupt while waiting: the call ends too
                future.cancel()
            raise

    @overload
    async def _acall(self, fn: Callable[..., Awaitable[R]], *args: object) -> R: ...
    @overload
    async def _acall(self, fn: Callable[..., R], *args: object) -> R: ...
    async def _acall(self, fn: Callable[..., Any], *args: object) -> Any:
        self._check()
        try:
            return await self._portal.call_async(fn, *args)
        except concurrent.futures.CancelledError:
            raise RuntimeClosed(_STOPPED) from None
        except RuntimeError as exc:
            if self._closed:  # the portal stopped since _check()
                raise RuntimeClosed(_STOPPED) from exc
            raise

    def _start_soon(self, fn: Callable[[], Awaitable[object]]) -> None:
        """Start ``fn()`` as a task of the portal's, and return at once (from any
        thread, asyncio's too); it ends, cancelled, when the runtime stops."""
        self._check()
        try:
            self._portal.start_task_soon(fn)
        except RuntimeError as exc:
            if self._closed:  # the portal stopped since _check()
                raise RuntimeClosed(_STOPPED) from exc
            raise

    @overload
    def call(self, fn: Callable[..., Awaitable[R]], *args: object) -> R: ...
    @overload
    def call(self, fn: Callable[..., R], *args: object) -> R: ...
    def call(self, fn: Callable[..., Any], *args: object) -> Any:
        """Call ``fn(*args)`` in the runtime's thread (awaited if async); return its result.

        The way to anything of the Trio API this class does not carry:
        ``rt.call(rt.runtime.spawn, Echo)`` (for keyword arguments, give a
        ``functools.partial``; for many small operations, one function that
        does them all: each call is one hop between threads). Still running
        when the runtime has stopped, it is cancelled. Raises whatever *fn*
        raises, and:

        Raises:
            RuntimeClosed: the runtime has been stopped (or was, while the call ran).
            SelfAsk: called from the runtime's own thread.
        """
        return self._call(fn, *args)

    @overload
    async def acall(self, fn: Callable[..., Awaitable[R]], *args: object) -> R: ...
    @overload
    async def acall(self, fn: Callable[..., R], *args: object) -> R: ...
    async def acall(self, fn: Callable[..., Any], *args: object) -> Any:
        """``call()``, awaited: cancelling the caller cancels *fn* and waits for it to end."""
        return await self._acall(fn, *args)

    # -- the runtime's API -------------------------------------------------------------

    def spawn_agent(
        self,
        spec: AgentSpec[_Out],
        *,
        under: SupervisorRef | None = None,
        name: str | None = None,
        budget: Budget | None = None,
    ) -> BlockingAgent[_Out]:
        """Start an agent from *spec*, as a child of the root or of *under*.

        As [`Runtime.spawn_agent`][agentrio.Runtime.spawn_agent] does, with
        its arguments.

        Example:

            team = rt.call(functools.partial(rt.runtime.spawn_supervisor, name="team"))
            agent = rt.spawn_agent(spec, under=team, name="r1")  # at "team/r1"

        Args:
            spec: the [`AgentSpec`][agentrio.AgentSpec].
            under: the supervisor to start it under: a
                [`SupervisorRef`][agentrio.SupervisorRef] of this runtime (from
                ``rt.runtime``'s ``spawn_supervisor``, through ``call()``), or
                ``rt.runtime`` itself (default: the root).
            name: the agent's name (default ``spec.name``), unique in that
                supervisor.
            budget: the budget its model and tool calls draw from (default:
                the runtime's).

        Returns:
            A [`BlockingAgent`][agentrio.types.BlockingAgent].

        Raises:
            InvalidArgument: as ``Runtime.spawn_agent`` raises it (*under* is
                not a supervisor of this runtime, a bad *spec* or *budget*...).
            DuplicateName: *name* is taken in that supervisor.
            RuntimeClosed: the runtime (or *under*) has stopped.
            SelfAsk: called from the runtime's own thread.
        """
        agent = self._call(
            functools.partial(
                self._runtime.spawn_agent, spec, under=under, name=name, budget=budget
            )
        )
        return create(BlockingAgent, self, agent)

    async def aspawn_agent(
        self,
        spec: AgentSpec[_Out],
        *,
        under: SupervisorRef | None = None,
        name: str | None = None,
        budget: Budget | None = None,
    ) -> BlockingAgent[_Out]:
        """``spawn_agent()``, awaited."""
        agent = await self._acall(
            functools.partial(
                self._runtime.spawn_agent, spec, under=under, name=name, budget=budget
            )
        )
        return create(BlockingAgent, self, agent)

    def register_spec(self, name: str, factory: Callable[[], AgentSpec[Any]]) -> None:
        """Register a spec factory for durable agents, as
        [`Runtime.register_spec`][agentrio.Runtime.register_spec] does."""
        self._call(functools.partial(self._runtime.register_spec, name, factory))

    @property
    def resumed(self) -> tuple[str, ...]:
        """The phases resumed from the store, as [`Runtime.resumed`][agentrio.Runtime.resumed]."""
        return self._runtime.resumed

    def resumed_result(self, phase_id: str) -> PhaseResult[Any]:
        """A resumed phase's result, as
        [`Runtime.resumed_result`][agentrio.Runtime.resumed_result] gives it."""
        return self._call(functools.partial(self._runtime.resumed_result, phase_id))

    async def aresumed_result(self, phase_id: str) -> PhaseResult[Any]:
        """``resumed_result()``, awaited."""
        return await self._acall(functools.partial(self._runtime.resumed_result, phase_id))

    # -- sessions and deferred decisions (#27) --------------------------------------

    def session(self, session_id: str, spec: str | AgentSpec[Any]) -> BlockingAgent[Any]:
        """The agent of the session *session_id*, as
        [`Runtime.session`][agentrio.Runtime.session] gives it."""
        agent = self._call(functools.partial(self._runtime.session, session_id, spec))
        return create(BlockingAgent, self, agent)

    def sessions(self) -> dict[str, float]:
        """The sessions, as [`Runtime.sessions`][agentrio.Runtime.sessions]."""
        sessions: dict[str, float] = self._call(self._runtime.sessions)
        return sessions

    def delete_session(self, session_id: str) -> int:
        """As [`Runtime.delete_session`][agentrio.Runtime.delete_session]."""
        return self._call(functools.partial(self._runtime.delete_session, session_id))

    def prune_sessions(
        self, *, max_age: float | None = None, max_count: int | None = None
    ) -> tuple[str, ...]:
        """As [`Runtime.prune_sessions`][agentrio.Runtime.prune_sessions]."""
        prune = self._runtime.prune_sessions
        return self._call(functools.partial(prune, max_age=max_age, max_count=max_count))

    def pending_approvals(self) -> list[PendingCall]:
        """As [`Runtime.pending_approvals`][agentrio.Runtime.pending_approvals]."""
        return self._call(self._runtime.pending_approvals)

    def pending_results(self) -> list[PendingCall]:
        """As [`Runtime.pending_results`][agentrio.Runtime.pending_results]."""
        return self._call(self._runtime.pending_results)

    def approve(self, call: PendingCall, message: str = "") -> None:
        """As [`Runtime.approve`][agentrio.Runtime.approve]."""
        self._call(functools.partial(self._runtime.approve, call, message))

    def deny(self, call: PendingCall, message: str = "") -> None:
        """As [`Runtime.deny`][agentrio.Runtime.deny]."""
        self._call(functools.partial(self._runtime.deny, call, message))

    def give_result(self, call: PendingCall, result: str, *, status: str = "ok") -> None:
        """As [`Runtime.give_result`][agentrio.Runtime.give_result]."""
        self._call(functools.partial(self._runtime.give_result, call, result, status=status))

    def usage(self) -> UsageTotals:
        """What every agent of the runtime has spent.

        As [`Runtime.usage`][agentrio.Runtime.usage] says it: tokens, model
        calls, tool calls, cost and overruns.
        """
        return self._call(self._runtime.usage)

    async def ausage(self) -> UsageTotals:
        """``usage()``, awaited."""
        return await self._acall(self._runtime.usage)

    def events(self, *, capacity: int = 1000) -> BlockingStream[Event]:
        """Subscribe to the runtime's events, as ``Runtime.events()`` does.

        See [`Runtime.events`][agentrio.Runtime.events]. The subscription
        starts at once and is lossy as the bus is: when *capacity* events are
        unread, new ones are dropped for it and an
        [`EventsLost`][agentrio.events.EventsLost] takes their place. Read it
        with ``for`` (or ``async for``), in a ``with`` (or ``async with``) block
        that ends it.

        Args:
            capacity: the subscriber's buffer, in events.

        Returns:
            A [`BlockingStream`][agentrio.types.BlockingStream] of events.

        Raises:
            InvalidArgument: *capacity* is not an int >= 1.
            RuntimeClosed: the runtime has been stopped.
        """
        stream = self._call(functools.partial(self._runtime.events, capacity=capacity))
        return create(BlockingStream, self, stream, stream.__aexit__)

    async def aevents(self, *, capacity: int = 1000) -> BlockingStream[Event]:
        """``events()``, awaited (the subscription starts when it returns)."""
        stream = await self._acall(functools.partial(self._runtime.events, capacity=capacity))
        return create(BlockingStream, self, stream, stream.__aexit__)

    # -- stopping ----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the runtime gracefully, wait for it, and end its thread.

        As at the end of an ``open_runtime()`` block: every actor drains its mailbox
        and runs ``on_stop`` (queued phases run), within the runtime's
        *shutdown_timeout*, after which what still runs is cancelled. Then anything
        still running in the runtime's thread (a ``call()``, an event stream's
        read) is cancelled, its caller gets ``RuntimeClosed``, and the thread is
        joined. Calling it again does nothing.

        Raises:
            ExceptionGroup: the runtime's own failure, if it failed (holding a
                [`RestartIntensityExceeded`][agentrio.errors.RestartIntensityExceeded]),
                as ``open_runtime()`` raises it.
            SelfAsk: called from the runtime's own thread.
        """
        self._close(cancel=False)

    async def astop(self) -> None:
        """``stop()``, awaited: the waiting is done in a worker thread of the event loop."""
        import anyio.to_thread

        await anyio.to_thread.run_sync(self._close, False)

    def cancel(self) -> None:
        """Cancel everything in the runtime now, wait for it to end, and end its thread.

        What leaving the ``with`` block with an exception does.
        """
        self._close(cancel=True)

    def _close(self, cancel: bool) -> None:
        if threading.current_thread() is self._thread:
            raise SelfAsk(
                "a BlockingRuntime was stopped from its own thread: it would wait for itself"
            )
        with self._lock:  # one closer; another waits for it, then returns
            if self._closed:
                return
            self._closed = True
            try:
                if cancel:
                    self._portal.call(self._runtime.cancel)
                self._portal.call(self._done.set)
                concurrent.futures.wait([self._serving])
                self._portal.call(self._portal.stop, True)
            finally:
                self._portal_cm.__exit__(None, None, None)  # joins the thread
            error = self._serving.exception()
        if error is not None:
            raise error

    def __enter__(self) -> BlockingRuntime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close(cancel=exc is not None)

    async def __aenter__(self) -> BlockingRuntime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self._close, exc is not None)


class BlockingAgent(Generic[OutputT], metaclass=NoPublicConstructor):
    """An agent of a [`BlockingRuntime`][agentrio.types.BlockingRuntime], from its ``spawn_agent``.

    No public constructor. Its methods are
    [`AgentRef`][agentrio.AgentRef]'s, called from other threads as the
    runtime's are: ``run`` blocks, ``arun`` is awaited. Its ``name``, ``path``
    and ``spec`` are the ``AgentRef``'s; ``agent`` is the ``AgentRef`` itself,
    for use in the runtime's thread only.

    ``stream`` gives a run's own stream, read with ``for`` (``astream``: with
    ``async for``).
    """

    __slots__ = ("_agent", "_host")

    def __init__(self, host: BlockingRuntime, agent: AgentRef[OutputT]) -> None:
        self._host = host
        self._agent = agent

    @property
    def agent(self) -> AgentRef[OutputT]:
        """The [`AgentRef`][agentrio.AgentRef] itself: use it only in the runtime's thread."""
        return self._agent

    @property
    def name(self) -> str:
        """The agent's name, unique within its supervisor."""
        return self._agent.name

    @property
    def path(self) -> str:
        """The agent's path from the root (its events' ``path``)."""
        return self._agent.path

    @property
    def spec(self) -> AgentSpec[OutputT]:
        """The spec it was spawned from."""
        return self._agent.spec

    def __repr__(self) -> str:
        return f"<BlockingAgent {self._agent.path!r}>"

    def run(
        self, user_message: str | Sequence[ContentPart | str], **options: Unpack[_RunOptions]
    ) -> PhaseResult[OutputT]:
        """Run one phase and return its result, as [`AgentRef.run`][agentrio.AgentRef.run] does.

        Phases of one agent run one at a time, in the order they were asked for,
        whatever thread asked. Raises what ``AgentRef.run`` raises, and:

        Args:
            user_message: the user's turn that starts the phase: a str or a
                list of content parts, as for ``AgentRef.run``.
            options: ``AgentRef.run``'s keyword arguments (``tool_names``,
                ``max_iterations``, ``continue_context``, ``context_label``,
                ``direct_tool_calls``, ``timeout``, ``mode``, ``model``, ``lane``,
                ``settings``).

        Returns:
            The phase's [`PhaseResult`][agentrio.PhaseResult].

        Raises:
            RuntimeClosed: the runtime has been stopped (or was, while the phase ran).
            SelfAsk: called from the runtime's own thread.
        """
        return self._host._call(functools.partial(self._agent.run, user_message, **options))

    async def arun(
        self, user_message: str | Sequence[ContentPart | str], **options: Unpack[_RunOptions]
    ) -> PhaseResult[OutputT]:
        """``run()``, awaited: cancelling the caller cancels the phase and waits for it."""
        return await self._host._acall(functools.partial(self._agent.run, user_message, **options))

    def stream(
        self,
        user_message: str | Sequence[ContentPart | str],
        *,
        max_buffer_size: int = 64,
        **options: Unpack[_StreamOptions],
    ) -> BlockingRunStream[OutputT]:
        """Run one phase and stream it, as [`AgentRef.stream`][agentrio.AgentRef.stream] does.

        The run starts when this returns. Read its items with ``for``, in a
        ``with`` block: a [`RunItem`][agentrio.events.RunItem] each, in order,
        and last a [`RunDone`][agentrio.events.RunDone] with the result. Each
        item is one hop to the runtime's thread, so the stream's backpressure
        reaches the run: a reader that falls behind slows this run and no
        other. Leaving the block (or ``close()``) before the end cancels the
        run and waits for it to end. Iteration raises what ``run()`` would
        (``ActorStopped``...) after the items before it.

        Args:
            user_message: the user's turn that starts the phase.
            max_buffer_size: the items held unread before the run waits for
                its reader, an int >= 1.
            options: ``AgentRef.run``'s keyword arguments.

        Returns:
            A [`BlockingRunStream`][agentrio.types.BlockingRunStream] of the run's
            items (with ``result()`` and ``text()``, as a ``RunStream`` has).

        Raises:
            InvalidArgument: as ``AgentRef.stream`` raises it.
            RuntimeClosed: the runtime has been stopped.
            SelfAsk: called from the runtime's own thread.
        """
        hosted = _HostedRun(self._agent, user_message, max_buffer_size, options)
        self._host._start_soon(hosted.serve)
        try:
            self._host._call(hosted.opened)
        except BaseException:
            hosted.abandon(self._host)
            raise
        return create(BlockingRunStream, self._host, hosted, hosted.close)

    async def astream(
        self,
        user_message: str | Sequence[ContentPart | str],
        *,
        max_buffer_size: int = 64,
        **options: Unpack[_StreamOptions],
    ) -> BlockingRunStream[OutputT]:
        """``stream()``, awaited (the run starts when it returns); read it with
        ``async for``, in an ``async with`` block."""
        hosted = _HostedRun(self._agent, user_message, max_buffer_size, options)
        self._host._start_soon(hosted.serve)
        try:
            await self._host._acall(hosted.opened)
        except BaseException:  # (a cancelled caller too: nobody could close it)
            hosted.abandon(self._host)
            raise
        return create(BlockingRunStream, self._host, hosted, hosted.close)

    def usage(self) -> UsageTotals:
        """What this agent (with its session helpers) has spent.

        As [`AgentRef.usage`][agentrio.AgentRef.usage] says it.
        """
        return self._host._call(self._agent.usage)

    async def ausage(self) -> UsageTotals:
        """``usage()``, awaited."""
        return await self._host._acall(self._agent.usage)

    def stop(self) -> None:
        """Stop the agent gracefully after its queued phases, and wait for it.

        As [`AgentRef.stop`][agentrio.AgentRef.stop] does.
        """
        self._host._call(self._agent.stop)

    async def astop(self) -> None:
        """``stop()``, awaited."""
        await self._host._acall(self._agent.stop)

    def cancel(self) -> None:
        """Cancel the agent now, as [`AgentRef.cancel`][agentrio.AgentRef.cancel] does.

        A running phase is abandoned and its ``run()`` fails.
        """
        self._host._call(self._agent.cancel)


class _HostedRun:
    """A run's stream held open in the runtime's thread, for a BlockingStream.

    ``serve`` is a task of the portal's: it enters the stream (which starts the
    run) and holds it open until ``close()`` or the end of the items; the
    reader's ``__anext__`` calls are other tasks of the same Trio run.
    """

    __slots__ = ("_agent", "_closed", "_ended", "_error", "_options", "_stream", "_up")

    def __init__(
        self,
        agent: AgentRef[Any],
        user_message: str | Sequence[ContentPart | str],
        max_buffer_size: int,
        options: _StreamOptions,
    ) -> None:
        self._agent = agent
        self._options = (user_message, max_buffer_size, options)
        self._stream: RunStream[Any] | None = None
        self._error: BaseException | None = None  # the stream's, at its start
        # (trio.Event needs no running Trio to be made: these are made in the
        # caller's thread, and used only in the runtime's.)
        self._up = trio.Event()  # the stream is open, or could not be
        self._closed = trio.Event()  # the reader is done with it
        self._ended = trio.Event()  # serve() has returned

    async def serve(self) -> None:
        user_message, max_buffer_size, options = self._options
        try:
            stream = self._agent.stream(user_message, max_buffer_size=max_buffer_size, **options)
            async with stream:
                self._stream = stream
                self._up.set()
                await self._closed.wait()
        except Exception as exc:  # the arguments' checks: opened() raises it
            self._error = exc
        finally:
            self._up.set()
            self._ended.set()

    async def opened(self) -> None:
        await self._up.wait()
        if self._error is not None:
            raise self._error

    def __aiter__(self) -> _HostedRun:
        return self

    async def __anext__(self) -> RunItem[Any]:
        stream = self._stream
        if stream is None or self._closed.is_set():
            raise StopAsyncIteration
        try:
            return await stream.__anext__()
        except BaseException:
            # Its end (or the run's error): the stream has nothing more to give.
            self._closed.set()
            raise

    async def close(self, *exc_info: object) -> None:
        self._closed.set()
        await self._ended.wait()  # the run, if it was going, ended "cancelled"

    def abandon(self, host: BlockingRuntime) -> None:
        """The caller gave up before it got its stream (an exception, a cancelled
        await): close it, in the runtime's thread, so that its run is cancelled
        rather than left waiting for a reader that never comes."""
        with contextlib.suppress(RuntimeClosed):
            host._start_soon(self.close)


class BlockingStream(Generic[T], metaclass=NoPublicConstructor):
    """Items made in the runtime's thread, read from another: ``for`` or ``async for``.

    From [`BlockingRuntime.events`][agentrio.types.BlockingRuntime.events] and
    [`BlockingAgent.stream`][agentrio.types.BlockingAgent.stream]. No public
    constructor. Each item is one hop to the runtime's thread. Iteration
    ends when the source ends: for events, when the stream is closed (after the
    events it had buffered) or the runtime stops; for a run, after its
    ``RunDone``, or when it is closed (which cancels the run, if it was still
    going) or the runtime stops. Use it in a ``with`` (or
    ``async with``) block, which closes it, or call ``close()``. Read it from
    one thread (or task) at a time; ``close()`` may be called from another
    while one reads.
    """

    __slots__ = ("_close", "_closed", "_host", "_source")

    def __init__(
        self,
        host: BlockingRuntime,
        source: AsyncIterator[T],
        close: Callable[[None, None, None], Awaitable[object]],
    ) -> None:
        self._host = host
        self._source = source
        self._close = close
        self._closed = False

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> T:
        try:
            return self._host._call(self._source.__anext__)
        except (StopAsyncIteration, RuntimeClosed):
            raise StopIteration from None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self._host._acall(self._source.__anext__)
        except RuntimeClosed:
            raise StopAsyncIteration from None

    def close(self) -> None:
        """End the stream (for events: unsubscribe). Calling it again does nothing."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(RuntimeClosed):  # the runtime's stop ended it
                self._host._call(self._close, None, None, None)

    async def aclose(self) -> None:
        """``close()``, awaited."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(RuntimeClosed):
                await self._host._acall(self._close, None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class BlockingRunStream(BlockingStream["RunItem[OutputT]"], Generic[OutputT]):
    """A run's items, read from another thread: a
    [`BlockingStream`][agentrio.types.BlockingStream] with what a
    [`RunStream`][agentrio.types.RunStream] offers beside its items.

    From [`BlockingAgent.stream`][agentrio.types.BlockingAgent.stream] (and
    ``astream``). ``result()`` reads what is left of the stream and returns the
    run's [`PhaseResult`][agentrio.PhaseResult] (at once once the
    [`RunDone`][agentrio.events.RunDone] was read); ``text()`` iterates over
    the text alone. Each has an ``a``-twin for asyncio. No public constructor.

    Example:

        with agent.stream("Tell me a story") as stream:
            for text in stream.text():
                print(text, end="")
            result = stream.result()
    """

    __slots__ = ("_result",)

    def __init__(
        self,
        host: BlockingRuntime,
        source: AsyncIterator[RunItem[OutputT]],
        close: Callable[[None, None, None], Awaitable[object]],
    ) -> None:
        super().__init__(host, source, close)
        self._result: PhaseResult[OutputT] | None = None  # the RunDone's, once read

    def __next__(self) -> RunItem[OutputT]:
        item = super().__next__()
        if isinstance(item, RunDone):
            self._result = item.result
        return item

    async def __anext__(self) -> RunItem[OutputT]:
        item = await super().__anext__()
        if isinstance(item, RunDone):
            self._result = item.result
        return item

    def result(self) -> PhaseResult[OutputT]:
        """Read the rest of the stream, its items left unread, and return the run's
        result (the ``RunDone``'s; at once if it was read).

        Returns:
            The run's [`PhaseResult`][agentrio.PhaseResult], as ``run()`` returns it.

        Raises:
            UsageError: the stream was closed (its block left) before its result
                was read.
            ActorStopped: as ``run()`` raises it (and ``ActorCrashed``).
        """
        for _ in self:
            pass
        return self._done()

    async def aresult(self) -> PhaseResult[OutputT]:
        """``result()``, awaited (the stream read with ``async for``)."""
        async for _ in self:
            pass
        return self._done()

    def text(self) -> Iterator[str]:
        """An iterator over the run's text alone: each
        [`TextDelta`][agentrio.events.TextDelta]'s ``text``, in order; the other
        items are passed over, and ``result()`` then gives the result at once."""
        for item in self:
            if isinstance(item, TextDelta):
                yield item.text

    async def atext(self) -> AsyncIterator[str]:
        """``text()``, for ``async for``."""
        async for item in self:
            if isinstance(item, TextDelta):
                yield item.text

    def _done(self) -> PhaseResult[OutputT]:
        if self._result is None:
            raise UsageError("the stream was closed before its result was read")
        return self._result
