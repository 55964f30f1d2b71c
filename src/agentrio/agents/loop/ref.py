"""AgentRef: the handle to an agent, and spawn_agent, which makes one."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import trio

from ..._checks import check_int
from ..._handles import NoPublicConstructor, create
from ...actors import exit_reason
from ...actors.actor import ActorRef, ActorStatistics
from ...errors import (
    ActorError,
    ActorStopped,
    InvalidArgument,
    SelfAsk,
)
from ...messages import (
    ContentPart,
    ContextReadTurns,
    Lane,
    ModelSettings,
    OutputT,
    PhaseResult,
    PlanningMode,
    ToolCallRequest,
    Turn,
)
from ...providers.base import (
    Model,
)
from ...workspace import Workspace
from ..budgets.budget import Budget
from ..budgets.usage import UsageTotals
from ..routing.modes import Mode
from .agent import _request_stop_tree
from .recall import MemoryHandle, agent_memory
from .runs import _asked, _check_phase_parts, _driven, _phase, _phase_command, _run_command
from .spec import AgentSpec, check_spec
from .state import _AgentState
from .stream import RunStream

if TYPE_CHECKING:
    from ..routing.router import Router
    from .handles import BackgroundRun, Helper, Response

__all__ = ["AgentRef"]

_T = TypeVar("_T")  # an agent's output type


class AgentRef(Generic[OutputT], metaclass=NoPublicConstructor):
    """The handle to an agent, from ``spawn_agent``; no public constructor.

    It is generic in the type of its phases' ``output``: the agent of an
    ``AgentSpec[T]`` is an ``AgentRef[T]``, whose ``run()`` returns a
    ``PhaseResult[T]`` (``str``, plain text, for a spec without an
    ``output_type``).
    """

    __slots__ = ("_state",)

    def __init__(self, state: _AgentState) -> None:
        self._state = state

    @property
    def name(self) -> str:
        """The agent's name, unique within its supervisor."""
        return self.ref.name

    @property
    def path(self) -> str:
        """The agent's path from the root."""
        return self.ref.path

    @property
    def spec(self) -> AgentSpec[OutputT]:
        """The spec it was spawned from."""
        return self._state.spec  # type: ignore[return-value]  # (of its own type)

    @property
    def ref(self) -> ActorRef:
        """The [`ActorRef`][agentrio.ActorRef] of the agent's actor (the one ``lookup``
        returns): it accepts [`RunPhase`][agentrio.RunPhase] messages and replies with a
        [`PhaseResult`][agentrio.PhaseResult]."""
        ref = self._state.ref
        assert ref is not None
        return ref

    @property
    def workspace(self) -> Workspace | None:
        """The agent's workspace, or ``None`` if its spec has none."""
        return self._state.workspace

    @property
    def memory(self) -> MemoryHandle:
        """The agent's memory (``AgentSpec.memory``; #26): its own, or the shared one
        its spec names. See [Memory][agent-memory].

        Raises:
            InvalidArgument: its spec has no memory.
        """
        return agent_memory(self._state)

    def __repr__(self) -> str:
        ref = self.ref
        return f"<AgentRef {ref.path!r} {ref.statistics().state}>"

    def run(
        self,
        user_message: str | Sequence[ContentPart | str],
        *,
        tool_names: Sequence[str] | None = None,
        max_iterations: int | None = None,
        continue_context: bool = True,
        context_label: str | None = None,
        direct_tool_calls: Sequence[ToolCallRequest] | None = None,
        timeout: float | None = None,
        mode: str | Mode | None = None,
        model: str | None = None,
        lane: Lane | None = None,
        settings: ModelSettings | None = None,
        phase_id: str | None = None,
        planning: PlanningMode | None = None,
    ) -> Coroutine[Any, Any, PhaseResult[OutputT]]:
        """Run one phase: model calls and tool calls until done or a limit is hit.

        Phases of one agent run one at a time, in the order they were asked for.
        This phase's limits are, for each: the argument given here, else the
        mode's (if one is given and sets it), else the spec's ``limits``; the
        spec is not changed.

        The phase is the caller's work: if the task awaiting ``run()`` is
        cancelled (a ``trio.move_on_after`` around it, a cancelled nursery),
        the phase stops at once. A model call in flight is cancelled and its
        reservation settled; running tool calls are cancelled (each recorded
        with status ``"timeout"`` and the content ``"the phase was cancelled
        while the tool ran"``; a sync tool's thread is abandoned); the turns
        completed so far are written to the context; the phase ends with stop
        reason ``"cancelled"``, published in a ``PhaseEnded`` event and
        counted in the run summary. ``run()`` then raises ``trio.Cancelled``,
        once the phase has ended. The agent is not cancelled: it takes its
        next phase as usual. A phase still queued whose caller is cancelled
        never starts. See [A cancelled caller cancels its
        phase][a-cancelled-caller-cancels-its-phase].

        Args:
            user_message: the user's turn that starts the phase: a str, or
                a list of content parts ([`TextPart`][agentrio.types.TextPart] (or
                a plain str), [`ImagePart`][agentrio.ImagePart],
                [`DocumentPart`][agentrio.DocumentPart]) for a model that
                takes images or documents; see [Images and
                documents][images-and-documents]. A lone surrogate in its
                text becomes U+FFFD (see [Text that is not valid
                Unicode][text-that-is-not-valid-unicode]).
            tool_names: restrict this phase to these of the agent's tools
                (``[]``: the model is still called but every tool call is
                denied; ``None``: all of them). A child agent started while
                the phase runs (a subagent, an agent tool's agent, ``map``'s
                agents, a session helper) may use only those of its own
                tools named here, for as long as it lives, and so may its own
                children.
            max_iterations: model calls allowed (default: the mode's, else
                ``spec.limits.max_iterations``).
            continue_context: False empties this context label's history first.
            context_label: the conversation to continue; ``None`` is the
                primary one. Any str is a label, with a history of its own
                that no other label sees, held by the context actor
                ``"<agent>.context.<label>"`` (with ``%`` written ``%25``,
                then ``/`` written ``%2F``); see [Context
                labels][context-labels].
            direct_tool_calls: run these tool calls and no model: not gated
                by the budget, but by the stop request and the allowlist.
            timeout: seconds this phase may take, > 0 (default: the mode's,
                else ``spec.limits.timeout``); ``math.inf``: no deadline,
                whatever the spec says.
            mode: a [`agentrio.Mode`][agentrio.Mode], used as it is, or the name of
                one of the runtime's modes (``"inline"``, ``"background"``, or
                one of ``open_runtime(modes=...)`` or of ``[modes.NAME]``):
                its ``max_iterations``, ``timeout`` and
                ``max_continuation_turns``, each unless ``None``.
            model: this phase's model, a tier name or an ``"instance:model"``
                string, resolved through the runtime's configuration as the
                spec's is (default: the agent's own); the agent goes back to
                its own model after the phase, and the spec's
                ``escalate_on_stall`` does not apply to it. See [A phase on
                another tier][a-phase-on-another-tier].
            lane: the priority lane of this phase's model calls and tool
                calls (default ``spec.lane``): ``"interactive"`` (or
                ``"control"``), ``"query"``, ``"execute"``, ``"background"``.
                While a provider's limit, or the runtime's tool limit, is
                full, the calls of a higher lane go first.
            settings: request settings for this phase's model calls
                ([`agentrio.ModelSettings`][agentrio.ModelSettings]), laid over the spec's
                (fields set here win; ``options``, ``extra_headers`` and
                ``extra_body`` merge by key).
            phase_id: the phase's id in the runtime's checkpoint store (a str
                of 1 to 200 characters; default: one made up), by which a
                phase resumed after a crash of the process is found:
                [`Runtime.resumed_result`][agentrio.Runtime.resumed_result]. For
                a durable agent (see [Surviving a crash][surviving-a-crash]);
                unused without a store. It names one phase at a time: the id
                of a phase under way, or resumed and not ended, is refused.
            planning: for an agent whose spec has a
                [`Planning`][agentrio.Planning]: ``"on"``, ``"off"`` or
                ``"auto"`` for this run instead of its ``mode`` (``None``: its
                mode). A planned run is several phases (a planning call, the
                steps, the final answer: see [Planning][planning]), under this
                run's budget, ``timeout`` (for the whole run) and cancellation.
                An agent whose spec has a [`Delegation`][agentrio.Delegation]
                may hand the request to a child (see
                [Delegation][delegation]).

        The argument checks are made when this is called (``InvalidArgument``,
        ``ConfigError`` and ``SelfAsk`` are raised then); the phase is the
        coroutine it returns, asked for by the task that awaits it (so
        ``nursery.start_soon(agent.run, ...)`` works as ``await agent.run(...)``).

        Returns:
            The [`PhaseResult`][agentrio.PhaseResult]. Tool and model failures are in
            it, not raised. For a durable agent whose actor crashed during the
            phase and was restarted, the result of the phase gone on from its
            last completed turn (not ``ActorCrashed``).

        Raises:
            InvalidArgument: a bad argument, named in the message, including a
                part of *user_message* that is not a part, or that the
                phase's model cannot take (a provider's wire format checks
                each: an image URL for Ollama, a document for a wire that
                takes none), a tool name the agent does not have, an unknown
                *lane*, a *planning* that is not a mode or is given to an
                agent without an ``AgentSpec.planning``, or a mode name the
                runtime does not have (the message lists its modes);
                *settings* that is not a ``ModelSettings``, names in
                ``tool_choice`` a tool the agent does not have, holds a
                setting the phase's model (*model*'s, else the agent's)
                cannot send (the message names it), or is given to a model
                that takes no settings; a *phase_id* in use.
            ConfigError: *model* is neither a tier nor a model of the
                runtime's configuration (or there is none); the runtime's
                agentrio.toml, read for a mode's name, is wrong.
            SelfAsk: called from inside the agent's own phase (a tool running
                its own agent: it would deadlock).
            ActorStopped: the agent has stopped (or was cancelled mid-phase).
            ActorCrashed: the agent crashed (a bug; tool and model failures
                are results, not crashes).
            trio.Cancelled: the caller was cancelled (the phase ended with
                ``"cancelled"``, or never started).
        """
        state = self._state
        cmd = _run_command(
            state,
            user_message,
            tool_names,
            max_iterations,
            continue_context,
            context_label,
            direct_tool_calls,
            timeout,
            mode,
            model,
            lane,
            settings,
            phase_id,
        )
        driver = state.info.driver
        if driver is not None or planning is not None:  # (#26: a planned or delegated run)
            return _driven(self, cmd, driver, planning)
        # The checks are made when this is called; the phase is the coroutine it
        # returns: without OpenTelemetry or checkpoints, the ask itself (no frame
        # of this method's, nor of another, waits on each of 10k agents' callers).
        asked = _asked(state, cmd)
        services = state.services
        if services.otel is None and services.checkpoints is None:
            return cast("Coroutine[Any, Any, PhaseResult[OutputT]]", asked)
        return _phase(self, cmd, asked)

    def stream(
        self,
        user_message: str | Sequence[ContentPart | str],
        *,
        tool_names: Sequence[str] | None = None,
        max_iterations: int | None = None,
        continue_context: bool = True,
        context_label: str | None = None,
        direct_tool_calls: Sequence[ToolCallRequest] | None = None,
        timeout: float | None = None,
        mode: str | Mode | None = None,
        model: str | None = None,
        lane: Lane | None = None,
        settings: ModelSettings | None = None,
        phase_id: str | None = None,
        max_buffer_size: int = 64,
    ) -> RunStream[OutputT]:
        """Run one phase as ``run()`` does, and stream it: its own items, as they happen.

        Use it as ``async with agent.stream(...) as stream: async for item in
        stream``; entering the block starts the run. The items, each a
        [`RunItem`][agentrio.events.RunItem], are this run's
        [`TextDelta`][agentrio.events.TextDelta] (the pieces of the model's
        text as they arrive, from a model that streams; the whole text of a
        reply, once it is made, from one that does not),
        [`ToolStarted`][agentrio.events.ToolStarted],
        [`ToolEnded`][agentrio.events.ToolEnded] and
        [`TurnEnded`][agentrio.events.TurnEnded] events, in the order they
        happened, and last a [`RunDone`][agentrio.events.RunDone] with the
        [`PhaseResult`][agentrio.PhaseResult]. The runtime's event bus still
        gets its events as usual.

        Unlike the bus, the stream loses nothing and has backpressure: a
        reader that falls behind makes the run wait before its next model
        call, once *max_buffer_size* items (and at most one turn's more) are
        unread. It slows its own run, and no other. Leaving the block early
        cancels the run, as cancelling ``run()``'s caller does (it ends with
        ``"cancelled"``, its completed turns kept), and waits for it to end.
        See [How to stream a run][how-to-stream-a-run].

        Args:
            user_message: the user's turn that starts the phase.
            tool_names: as for ``run()``; so are the other arguments but the last.
            max_iterations: as for ``run()``.
            continue_context: as for ``run()``.
            context_label: as for ``run()``.
            direct_tool_calls: as for ``run()``.
            timeout: as for ``run()``.
            mode: as for ``run()``.
            model: as for ``run()``.
            lane: as for ``run()``.
            settings: as for ``run()``.
            phase_id: as for ``run()``.
            max_buffer_size: the items the stream holds unread before the run
                waits for its reader, an int >= 1.

        Returns:
            A [`RunStream`][agentrio.types.RunStream] (the run starts when it
            is entered).

        Raises:
            InvalidArgument: as for ``run()``; *max_buffer_size* is not an int >= 1.
            ConfigError: as for ``run()``.
            SelfAsk: called from inside the agent's own phase (it would deadlock).

        The iteration raises what ``run()`` would (``ActorStopped``,
        ``ActorCrashed``) once the items before it are read; tool and model
        failures are in the result, not raised.
        """
        state = self._state
        check_int("max_buffer_size", max_buffer_size, 1)
        cmd = _run_command(
            state,
            user_message,
            tool_names,
            max_iterations,
            continue_context,
            context_label,
            direct_tool_calls,
            timeout,
            mode,
            model,
            lane,
            settings,
            phase_id,
        )
        ref = state.ref
        assert ref is not None
        try:
            # (The ask's own checks, now: it is made, and awaited, in the stream's task.)
            ref.ask(cmd, linked=True).close()
        except SelfAsk:
            raise SelfAsk(
                f"agent {ref.path!r} was asked to stream a phase from inside its own "
                "phase (a tool running its own agent): it would deadlock"
            ) from None
        return create(RunStream, ref, cmd, state.services.bus, max_buffer_size, state.info.output)

    async def respond(
        self,
        request: str,
        *,
        router: Router | None = None,
        context_label: str | None = None,
        escalate: bool = True,
    ) -> Response:
        """Route a user's *request*, run it in the chosen mode on the chosen tier.

        The router (*router*, else the runtime's: ``open_runtime(router=...)``,
        else the ``[router]`` of agentrio.toml, else ``RuleRouter()``) picks a
        mode and a tier; the mode is looked up in the runtime's modes and the
        tier checked; a ``Routed`` event says which and why, with the agent's
        path; the request then runs as ``run(request, mode=..., model=tier)``
        in the context *context_label*. If that run stalls on the route's tier
        and the configuration's ``escalation`` lists a tier after it, the
        request runs once more on that tier, in the same context (unless
        *escalate* is False). A route whose tier is ``None`` runs on the
        agent's own model, where the spec's ``escalate_on_stall`` applies as
        for ``run()``.

        Returns:
            A [`agentrio.types.Response`][agentrio.types.Response]: the route, the mode, the tier,
            the [`PhaseResult`][agentrio.PhaseResult], and ``can_continue`` (the run hit a cap,
            ``"max_iterations"`` or ``"timeout"``, outside the background
            mode: see [`continue_in_background`][agentrio.AgentRef.continue_in_background]).

        Raises:
            InvalidArgument: *request* is not a str, *router* not callable,
                *escalate* not a bool, *context_label* not a str or None; the
                router returned something that is not a
                [`agentrio.Route`][agentrio.Route], or a mode the runtime does not
                have (nothing has run).
            ConfigError: the route's tier is not in the configuration
                (nothing has run).
            ActorStopped, ActorCrashed: as for [`run`][agentrio.AgentRef.run], and
                whatever the router raises, as it is.
        """
        return cast(
            "Response",
            await self._state.services.composer.respond(
                self, request, router=router, context_label=context_label, escalate=escalate
            ),
        )

    async def continue_in_background(
        self, response: Response, *, message: str | None = None
    ) -> BackgroundRun:
        """Go on, in the background mode, with a run of [`respond`][agentrio.AgentRef.respond] that
        hit its cap.

        The new phase continues the same context (the response's label), on
        the same tier, in the runtime's ``background`` mode, starting with
        *message* (default: ``"Continue working on my request from where you
        stopped, then give your final answer."``). It is queued on the agent
        now, after the phases queued before it; this returns at once.

        Returns:
            A [`agentrio.types.BackgroundRun`][agentrio.types.BackgroundRun]: ``await bg.wait()``
            for its result.

        Raises:
            InvalidArgument: *response* is not a ``Response``, is another
                agent's, or cannot be continued (``response.can_continue`` is
                False); *message* is not a str or None.
            RuntimeClosed: the agent's supervisor has stopped.
            ActorStopped: the agent has stopped.
        """
        return cast(
            "BackgroundRun",
            await self._state.services.composer.continue_in_background(self, response, message),
        )

    async def start_background(
        self,
        user_message: str | Sequence[ContentPart | str],
        *,
        mode: str | Mode | None = "background",
        tool_names: Sequence[str] | None = None,
        max_iterations: int | None = None,
        timeout: float | None = None,
        continue_context: bool = True,
        context_label: str | None = None,
        model: str | None = None,
    ) -> BackgroundRun:
        """Start a phase in the background (by default in the ``background`` mode).

        The arguments are [`run`][agentrio.AgentRef.run]'s (``mode=None``: the spec's
        limits). The phase is queued on the agent now (after the phases queued
        before it, waiting for room, as ``run()`` does, if the agent's mailbox
        is full) and this returns at once; it is run for a small actor,
        ``<agent>.background-<n>``, a temporary child of the agent's
        supervisor, which keeps its result for
        [`BackgroundRun.wait`][agentrio.types.BackgroundRun.wait] and then stops. It stops with
        that supervisor (the phase gets what is left of its
        ``shutdown_timeout``, then ends with ``"cancelled"``), so it never
        outlives the runtime.

        Returns:
            A [`agentrio.types.BackgroundRun`][agentrio.types.BackgroundRun]: ``await bg.wait()``
            for its result.

        Raises:
            InvalidArgument, ConfigError: as for [`run`][agentrio.AgentRef.run].
            RuntimeClosed: the agent's supervisor has stopped.
            ActorStopped: the agent has stopped.
        """
        cmd, chosen = _phase_command(
            self._state,
            user_message,
            tool_names,
            max_iterations,
            continue_context,
            context_label,
            None,
            timeout,
            mode,
            model,
        )
        if cmd.parts:
            _check_phase_parts(self._state, cmd)
        return cast(
            "BackgroundRun", await self._state.services.composer.start_background(self, cmd, chosen)
        )

    async def request_stop(self) -> None:
        """Ask the agent to stop at the start of its next iteration (``stop_requested``).

        The running phase ends with ``stop_requested`` before its next model
        call; if no phase is running, the next phase ends at once with
        ``stop_requested``. The request is used up by the phase that sees it.
        It reaches the agent's live subagents and helpers too.
        """
        _request_stop_tree(self._state)
        await trio.lowlevel.checkpoint()

    def cancel(self) -> None:
        """Cancel the agent now: a running phase is abandoned (its turns are not saved)
        and its ``run()`` raises ``ActorStopped``; the agent is not restarted."""
        self.ref.cancel()

    async def stop(self) -> None:
        """Stop gracefully: the queued phases run, then the agent and its context actors
        stop; waits until the agent has exited."""
        await self.ref.stop()

    def statistics(self) -> ActorStatistics:
        """The agent actor's mailbox and counters (``messages_handled`` counts phases)."""
        return self.ref.statistics()

    def usage(self) -> UsageTotals:
        """Tokens, model calls and model-driven tool calls of this agent and its session
        helpers, over all their phases; its ``cost_usd`` and ``overruns`` are
        always 0 (the budget has those)."""
        return self._state.usage()

    async def history(self, context_label: str | None = None) -> tuple[Turn, ...]:
        """The conversation of *context_label*, each turn with the time it was made.

        The system prompt and the user's turn are timed when their phase
        began, a model's reply when it arrived, a tool result when the last
        call of its turn ended. A phase writes its turns to its context when
        it ends: during a phase, this is the history as it stood before it.
        It asks the label's context actor with
        [`ContextReadTurns`][agentrio.types.ContextReadTurns]; see [Reading a
        history][reading-a-history].

        Args:
            context_label: the conversation (``None``: the primary one).

        Returns:
            Its turns, oldest first (the system prompt, if any, first): each a
            [`Turn`][agentrio.types.Turn] with its ``message`` and ``timestamp`` (``time.time()``
            when it was made); ``()`` if no phase has written to it yet.

        Raises:
            InvalidArgument: *context_label* is not a str or None.
            ActorStopped: the agent has exited (its contexts stopped with it).
        """
        if context_label is not None and not isinstance(context_label, str):
            raise InvalidArgument(f"context_label must be a str or None, got {context_label!r}")
        ctx = self._state.context(context_label)
        if ctx is None:
            await trio.lowlevel.checkpoint()
            ref = self.ref
            reason = exit_reason(ref)
            if reason is not None:
                raise ActorStopped(
                    f"agent {ref.path!r} has {reason}: its history is gone with it",
                    path=ref.path,
                    reason=reason,
                )
            return ()
        turns = await ctx.ask(ContextReadTurns())
        assert isinstance(turns, tuple)
        return turns

    def helper(
        self,
        model: Model | str | None = None,
        *,
        instructions: str = "",
        max_turns: int = 10,
        final_answer: bool = False,
        name: str | None = None,
    ) -> Helper:
        """A session helper: this agent's tools, rules, approver, hooks, workspace, env and budget.

        Its tools' [`ToolContext`][agentrio.ToolContext] has this agent's workspace and
        ``env``, and the helper's own path. It asks the approver about any
        call that no rule of this agent's (or of its parents') matches, even
        when this agent's default is ``"allow"``; a default of ``"deny"``
        still denies. Made during a phase with ``tool_names``, it may use
        only the tools that phase names. Its usage counts in this agent's
        ``usage()``.

        Args:
            model: the helper's model (default: this agent's).
            instructions: its system prompt (default: this agent's).
            max_turns: model calls per execute; past them
                [`HelperTurnsExceeded`][agentrio.errors.HelperTurnsExceeded]...
            final_answer: ...unless True: then one last call without tools answers.
            name: its name (default ``<agent>.helper-<n>``); its agent is
                named ``<agent>.<the last .-part of name>``, which must not be
                the agent's context actor ``<agent>.context``: a name that is
                ``"context"`` or ends with ``.context`` is refused.

        Raises:
            InvalidArgument: *max_turns* is not an int >= 1; a *name* against
                these rules or those of ``AgentSpec.name``.
        """
        return cast(
            "Helper",
            self._state.services.composer.session_helper(
                self._state,
                model,
                instructions=instructions,
                max_turns=max_turns,
                final_answer=final_answer,
                name=name,
            ),
        )

    async def spawn_subagent(
        self, spec: AgentSpec[_T], *, budget: Budget | None = None, name: str | None = None
    ) -> AgentRef[_T]:
        """Spawn *spec* as this agent's subagent, under the same supervisor.

        Its allowlist must be a subset of this agent's, the same ``Tool``
        functions (and, spawned during a phase with ``tool_names``, it may use
        only the tools that phase names). This agent's permission policy
        applies as well as the subagent's own (the stricter decision wins),
        its approver answers for its own ``ask`` rules, and its hooks run
        before the subagent's own. It is owned by this agent: stopping or
        cancelling this agent reaches it.

        Args:
            spec: the subagent's spec.
            budget: this agent's budget (the default), a budget below it, or
                one with no parent, which is then made a child of this
                agent's.
            name: default ``"<agent>.<spec.name>-<n>"``; the rules of
                ``spawn_agent``'s *name*.

        Raises:
            PermissionEscalation: *spec* has tools this agent does not.
            InvalidArgument: *spec* is not an AgentSpec (checked first);
                *budget* is none of the above; a bad *name*.
            ActorStopped: this agent has exited.
            DuplicateName, RuntimeClosed: as for ``spawn_agent``.
        """
        check_spec(spec)
        await trio.lowlevel.checkpoint_if_cancelled()
        return cast(
            "AgentRef[_T]",
            self._state.services.composer.spawn_child(self._state, spec, name=name, budget=budget),
        )

    async def map(
        self,
        spec: AgentSpec[_T],
        inputs: Sequence[str],
        *,
        concurrency: int = 10,
        budget: Budget | None = None,
    ) -> list[PhaseResult[_T] | ActorError]:
        """One phase per input, each on a fresh subagent of this agent.

        As [`Runtime.map`][agentrio.Runtime.map], with each agent a subagent
        of this one (the rules of [`spawn_subagent`][agentrio.AgentRef.spawn_subagent]
        apply). Cancelling its caller ends the phases under way with
        ``"cancelled"``, as there.
        """
        return await self._state.services.composer.map_phases(
            self._state.services,
            self._state.sup,
            spec,
            inputs,
            concurrency=concurrency,
            budget=budget,
            parent=self._state,
        )
