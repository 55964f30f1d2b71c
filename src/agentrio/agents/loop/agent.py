"""AgentActor: an LLM agent as a supervised actor; one phase is one ``RunPhase`` message.

An agent is one actor (its phases run one at a time, in order) plus one
ContextActor per context label it has used, owned by it: they stop after it.
What must survive a restart of the agent actor (its contexts, its usage, a
pending stop request) lives in an ``_AgentState`` shared by its incarnations.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING

import trio

from ..._checks import check_int, short_repr
from ..._text import scrub
from ...actors import exit_reason, withdrawn
from ...actors.actor import Actor, ActorRef
from ...errors import (
    AgentrioError,
    InvalidArgument,
)
from ...messages import (
    ContentPart,
    DocumentPart,
    ImagePart,
    ModelSettings,
    PhaseResult,
    RunPhase,
    TextPart,
    ToolCallRequest,
    Usage,
    WorkspaceWriteFailed,
)
from ...providers.base import (
    Model,
    context_window,
    model_pricing,
)
from ...workspace import Workspace, agent_workspace
from ..budgets.budget import Budget
from ..budgets.usage import UsageTotals
from ..routing.modes import Mode, check_mode_timeout
from ..tools.lanes import check_lane
from ..tools.tool_call import ToolGate
from .compaction import Compaction, Summariser
from .context import ContextActor
from .phase import Phase
from .recall import Recollection
from .services import Services
from .spec import (
    AgentSpec,
    _check_settings,
    _spec_info,
    _SpecInfo,
    _takes,
    check_model_settings,
    context_name,
)

if TYPE_CHECKING:
    from ...actors.bus import EventBus
    from ...supervisors.ref import SupervisorRef

__all__ = ["AgentActor", "new_phase_id"]


class _AgentState:
    """An agent's state that outlives the incarnations of its actor."""

    __slots__ = (
        "attempts",
        "budget",
        "ceiling",
        "children",
        "compact_at",
        "contexts",
        "details",
        "escalation",
        "gate",
        "info",
        "input_tokens",
        "laned",
        "metered",
        "model",
        "output_tokens",
        "phase",
        "phases",
        "pricing",
        "primary",
        "recall",
        "ref",
        "requests",
        "services",
        "spec",
        "stop_reasons",
        "stop_requested",
        "streams",
        "summariser",
        "sup",
        "tool_calls",
        "usage_parent",
        "window",
        "workspace",
    )

    def __init__(
        self,
        spec: AgentSpec[object],
        services: Services,
        sup: SupervisorRef,
        budget: Budget,
        name: str,
        model: Model,
        escalation: Model | None,
        summariser: Summariser | None = None,
    ) -> None:
        self.spec = spec
        self.info = _spec_info(spec)
        self.summariser = summariser
        self.use_model(model)
        self.escalation = escalation
        self.gate: ToolGate | None = None
        # A session helper's spending is its parent agent's too.
        self.usage_parent: _AgentState | None = None
        # The runtime's services (one object for all its agents), and the
        # supervisor the agent (and what it spawns) lives under.
        self.services = services
        self.sup = sup
        self.budget = budget
        self.ref: ActorRef | None = None  # the agent actor's
        # The context actors: the primary one, and the named labels' (a dict
        # made on first use: most agents never name one, and one object
        # fewer on each of 10k agents is work saved for the cyclic GC).
        self.primary: ActorRef | None = None
        self.contexts: dict[str, ActorRef] | None = None
        # The phase under way (Phase.run sets it, Phase._ended clears it): an
        # interrupted one is found here when its message is delivered again,
        # and its allowlist, when narrower than the spec's, binds the children
        # it starts (compose.spawn_child).
        self.phase: Phase | None = None
        # The most its phases may use, when its parent started it during a
        # phase narrowed by tool_names (None: its spec's tools).
        self.ceiling: frozenset[str] | None = None
        # The agents it started (subagents, helpers), for request_stop (made
        # on first use; see compose.spawn_child).
        self.children: list[_AgentState] | None = None
        self.stop_requested = False
        self.phases = 0
        self.input_tokens = self.output_tokens = self.requests = self.tool_calls = 0
        self.attempts = 0
        # Cached input, cache writes, reasoning: made once a call reports one.
        self.details: list[int] | None = None
        self.stop_reasons: dict[str, int] | None = None  # kept only for a workspace
        # Its memory and context providers (#26; None: none, one test per model call).
        self.recall: Recollection | None = None
        if spec.memory is not None or spec.context_providers is not None:
            self.recall = Recollection(spec.memory, spec.context_providers)
        self.workspace: Workspace | None = None
        if spec.workspace is not None:
            self.workspace = agent_workspace(spec.workspace, spec.name, name)

    def use_model(self, model: Model) -> None:
        """Call *model* from now on (a resolved one, or the next tier's)."""
        self.model = model
        # The estimate past which a phase compacts the history (None: never).
        compaction = self.spec.compaction
        self.compact_at = (
            None
            if compaction is None
            else max(1, int(context_window(model) * compaction.threshold))
        )
        facts = self.info.model_facts
        if facts is not None and facts[0]() is model:
            self.window, self.streams, self.metered, self.laned, self.pricing = facts[1:]
            return
        self.window = max(1, int(context_window(model) * self.spec.limits.context_fill))
        self.streams = _takes(model, "on_text")
        self.metered = _takes(model, "meter")
        self.laned = _takes(model, "lane")
        self.pricing = model_pricing(model)
        try:
            held = weakref.ref(model)
        except TypeError:  # a model without weak references is not cached
            return
        self.info.model_facts = (
            held,
            self.window,
            self.streams,
            self.metered,
            self.laned,
            self.pricing,
        )

    def context(self, label: str | None) -> ActorRef | None:
        """The live ContextActor of *label*, or None if there is none yet."""
        if label is None:
            ref = self.primary
        else:
            ref = self.contexts.get(label) if self.contexts is not None else None
        if ref is None or exit_reason(ref) is not None:
            return None
        return ref

    def new_context(self, label: str | None) -> ActorRef:
        """Spawn the ContextActor of *label*, linked to the agent (it stops after it)."""
        assert self.ref is not None
        # Owned by the agent: so it may be spawned while the supervisor stops
        # (the agent may be draining its queued phases, which the graceful
        # stop promises to run), and take the agent's reserved name, which no
        # other child can take (see SupervisorRef.spawn's owner).
        ref = self.sup.spawn_nowait(
            ContextActor, name=context_name(self.ref.name, label), mailbox=64, owner=self.ref
        )
        if label is None:
            self.primary = ref
        else:
            if self.contexts is None:
                self.contexts = {}
            self.contexts[label] = ref
        return ref

    def count(self, usage: Usage | None, requests: int = 1, attempts: int = 0) -> None:
        """Count a model call (None: it failed; *requests* 0: a failed attempt of
        one) and its HTTP *attempts* here and in the agents above."""
        state: _AgentState | None = self
        while state is not None:
            if usage is not None:
                state.input_tokens += usage.input_tokens
                state.output_tokens += usage.output_tokens
                if usage.cached_input_tokens or usage.cache_write_tokens or usage.reasoning_tokens:
                    state.count_details(usage)
            state.requests += requests
            state.attempts += attempts
            state = state.usage_parent

    def count_details(self, usage: Usage) -> None:
        """Add *usage*'s cached input, cache writes and reasoning here."""
        details = self.details
        if details is None:
            details = self.details = [0, 0, 0]
        details[0] += usage.cached_input_tokens
        details[1] += usage.cache_write_tokens
        details[2] += usage.reasoning_tokens

    def count_tool_call(self) -> None:
        """Count one model-driven tool call here and in the agents above."""
        state: _AgentState | None = self
        while state is not None:
            state.tool_calls += 1
            state = state.usage_parent

    def usage(self) -> UsageTotals:
        cached, written, reasoning = self.details or (0, 0, 0)
        return UsageTotals(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
            requests=self.requests,
            tool_calls=self.tool_calls,
            attempts=self.attempts,
            cached_input_tokens=cached,
            cache_write_tokens=written,
            reasoning_tokens=reasoning,
        )

    def phase_done(self, reason: str) -> Coroutine[object, None, None] | None:
        """Count a finished phase; with a workspace, the summary write to await."""
        self.phases += 1
        if self.workspace is None or self.usage_parent is not None:
            # (A session helper's spending is in its parent's summary.)
            return None
        return self._write_summary(reason)

    async def _write_summary(self, reason: str) -> None:
        assert self.workspace is not None
        if self.stop_reasons is None:
            self.stop_reasons = {}
        self.stop_reasons[reason] = self.stop_reasons.get(reason, 0) + 1
        assert self.ref is not None
        summary: dict[str, object] = {
            "agent": self.ref.path,
            "phases": self.phases,
            "stop_reasons": dict(self.stop_reasons),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "requests": self.requests,
            "tool_calls": self.tool_calls,
        }
        if self.details is not None:
            cached, written, reasoning = self.details
            summary |= {
                "cached_input_tokens": cached,
                "cache_write_tokens": written,
                "reasoning_tokens": reasoning,
                "cache_hit_ratio": cached / self.input_tokens if self.input_tokens else 0.0,
            }
        # The write runs shielded (the phase has ended): a deadline keeps a
        # write that hangs (a stuck network disk) from holding a cancelled
        # caller of run() for ever; its thread is then abandoned. The deadline
        # is in real time: a MockClock's autojump would end every write at once.
        seconds = self.sup.shutdown_timeout
        with trio.CancelScope() as scope:
            timer = threading.Timer(
                seconds, trio.lowlevel.current_trio_token().run_sync_soon, (scope.cancel,)
            )
            timer.start()
            try:
                await trio.to_thread.run_sync(
                    self.workspace.write_summary, summary, abandon_on_cancel=True
                )
            except Exception as exc:
                # The phase is over and its calls were spent: a summary that could
                # not be written (the disk full, a file where its folder should
                # be) is said, and the result stands.
                self._write_failed(type(exc).__name__, str(exc))
            finally:
                timer.cancel()
        if scope.cancelled_caught:
            self._write_failed(
                "TimeoutError",
                f"the write took longer than {seconds:g} s (the supervisor's "
                "shutdown_timeout); it was abandoned",
            )

    def _write_failed(self, error_type: str, error: str) -> None:
        """Publish a ``WorkspaceWriteFailed`` for the summary that was not written."""
        bus = self.services.bus
        if bus.active:
            assert self.workspace is not None and self.ref is not None
            file = str(self.workspace.root / "run_summary.json")
            bus.publish(
                WorkspaceWriteFailed(
                    path=self.ref.path, file=file, error_type=error_type, error=error
                )
            )


class AgentActor(Actor[RunPhase]):
    """The actor behind an [`AgentRef`][agentrio.AgentRef]: runs one phase per ``RunPhase``."""

    __slots__ = ("state",)

    def __init__(self, state: _AgentState) -> None:
        self.state = state
        phase = state.phase
        if phase is not None:  # left over from a phase that ended in a crash
            if phase.rec is not None:  # a durable agent's: it goes on when asked again
                phase.rec.crashed(phase)
            state.phase = None

    def handle(self, msg: RunPhase) -> Coroutine[object, None, PhaseResult[object]]:
        # Returns the phase's coroutine rather than awaiting it: one frame less
        # on each of 10k live agents' stacks (and for the cyclic GC to walk).
        state = self.state
        phase = state.phase
        if phase is not None and phase.cmd is msg:
            # Delivered again: its phase was interrupted (agentrio.actors.interrupt).
            return self._again(msg, phase)
        if msg.model is not None:
            return self._on_model(msg, Phase(state, msg))
        if state.escalation is not None:
            return self._escalating(msg, Phase(state, msg))
        return Phase(state, msg).run()

    def _again(self, msg: RunPhase, phase: Phase) -> Coroutine[object, None, PhaseResult[object]]:
        """Go on with the interrupted *phase*: interrupted by its lone tool call's
        alarm, it goes on from that call, a timeout; by the cancelled caller of
        its ``run()`` (a linked ask: ``withdrawn``), or by anything else, it ends
        with ``"cancelled"``."""
        if withdrawn(self.ref) or not phase.lone_expired():
            return phase.cancelled()
        if msg.model is not None:
            return self._on_model(msg, phase)
        if phase.escalating:
            return self._escalating(msg, phase)
        return phase.run()

    async def _on_model(self, msg: RunPhase, phase: Phase) -> PhaseResult[object]:
        """Run *phase* on ``msg.model`` (``run(model=...)``), then go back to the
        agent's own model. (Not escalated by ``escalate_on_stall``, which is
        about the agent's own model; ``respond()`` escalates its runs itself.)"""
        state = self.state
        own = state.model
        assert msg.model is not None
        try:
            lower = state.services.fallback(msg.model)
            model = state.services.resolve(msg.model)
        except AgentrioError as exc:  # (a RunPhase sent without run()'s checks)
            phase._error(exc)
            return phase._ended()
        if lower is not None and phase.lone is None:  # (said once, not when going on)
            state.services.fell_back(phase.path, msg.model, lower)
        state.use_model(model)
        try:
            return await phase.run()
        finally:
            # Also when the phase is interrupted: delivered again, it comes back here.
            state.use_model(own)

    async def _escalating(self, msg: RunPhase, phase: Phase) -> PhaseResult[object]:
        phase.escalating = True
        result = await phase.run()
        state = self.state
        if result.stop_reason == "stalled" and state.escalation is not None:
            # Once: the agent keeps the stronger model for later phases too.
            state.use_model(state.escalation)
            state.escalation = None
            result = await Phase(state, msg).run()
        return result


def make_gate(spec: AgentSpec[object], path: str, bus: EventBus) -> ToolGate | None:
    """The agent's tool gate, or None when its spec sets no policy, approver or hook."""
    if (
        spec.permissions is None
        and spec.approver is None
        and spec.pre_tool_use is None
        and spec.post_tool_use is None
    ):
        return None
    return ToolGate(
        path=path,
        bus=bus,
        policy=spec.permissions,
        approver=spec.approver,
        approval_timeout=spec.approval_timeout,
        pre=spec.pre_tool_use,
        post=spec.post_tool_use,
    )


def _summariser(services: Services, compaction: Compaction) -> Summariser:
    """*compaction* with its summary model resolved (ConfigError for a bad name)."""
    model = compaction.model
    if model is None:
        model = services.fast_model()
    elif isinstance(model, str):
        model = services.resolve(model)
    if model is None:  # the agent's own model, whichever it is when the summary is made
        return Summariser(compaction, None, False, None)
    return Summariser(
        compaction, model, _takes(model, "meter"), model_pricing(model), _takes(model, "lane")
    )


def _check_run(
    info: _SpecInfo,
    user_message: object,
    tool_names: object,
    max_iterations: object,
    continue_context: object,
    context_label: object,
    direct_tool_calls: object,
    timeout: object = None,
    continuation: int | None = None,
    model: object = None,
    lane: object = None,
    settings: object = None,
    phase_id: object = None,
) -> RunPhase:
    parts: tuple[ContentPart, ...] = ()
    if isinstance(user_message, str):
        # The caller's text, but it may come from outside too (a file name from
        # os.listdir): no lone surrogate enters a history (see _text.scrub).
        if not user_message.isascii():
            user_message = scrub(user_message)
    else:
        user_message, parts = user_parts(user_message)
    names: tuple[str, ...] | None = None
    if tool_names is not None:
        if isinstance(tool_names, str) or not isinstance(tool_names, Sequence):
            raise InvalidArgument(f"tool_names must be a list of tool names, got {tool_names!r}")
        unknown = [n for n in tool_names if n not in info.tools]
        if unknown:
            raise InvalidArgument(
                f"tool_names has tools this agent does not have: {unknown}; "
                f"its tools are {sorted(info.tools)}"
            )
        names = tuple(tool_names)
    iterations = check_int("max_iterations", max_iterations, 1)
    if not isinstance(continue_context, bool):
        raise InvalidArgument(f"continue_context must be a bool, got {continue_context!r}")
    if context_label is not None and not isinstance(context_label, str):
        raise InvalidArgument(f"context_label must be a str or None, got {context_label!r}")
    direct: tuple[ToolCallRequest, ...] | None = None
    if direct_tool_calls is not None:
        if not isinstance(direct_tool_calls, Sequence) or not all(
            isinstance(c, ToolCallRequest) for c in direct_tool_calls
        ):
            raise InvalidArgument(
                f"direct_tool_calls must be a list of agentrio.ToolCallRequest, "
                f"got {direct_tool_calls!r}"
            )
        direct = tuple(direct_tool_calls)
    if timeout is not None:
        check_mode_timeout("timeout", timeout)
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidArgument(
            f"model must be a tier name or an 'instance:model' string, got {model!r}"
        )
    if settings is not None:
        _check_settings("settings", settings, tuple(info.tools))
        assert isinstance(settings, ModelSettings)
    if phase_id is not None and (
        not isinstance(phase_id, str) or not phase_id or len(phase_id) > 200
    ):
        raise InvalidArgument(
            f"phase_id must be a non-empty str of at most 200 characters, or None; "
            f"got {short_repr(phase_id)}"
        )
    return RunPhase(
        user_message=user_message,
        tool_names=names,
        max_iterations=iterations,
        continue_context=continue_context,
        context_label=context_label,
        direct_tool_calls=direct,
        timeout=timeout,  # type: ignore[arg-type]
        max_continuation_turns=continuation,
        model=model,
        lane=None if lane is None else check_lane(lane),
        settings=settings,
        parts=parts,
        phase_id=phase_id,
    )


def user_parts(message: object) -> tuple[str, tuple[ContentPart, ...]]:
    """A user turn given as parts: its text (its text parts joined by newlines) and
    the parts, a ``str`` item made a ``TextPart``, text scrubbed (`_text.scrub`);
    InvalidArgument naming a bad item."""
    if isinstance(message, (bytes, bytearray)) or not isinstance(message, Sequence):
        raise InvalidArgument(
            f"user_message must be a str or a list of TextPart, ImagePart and DocumentPart "
            f"(or str), got a {type(message).__name__}"
        )
    if not message:
        raise InvalidArgument("user_message is an empty list: give at least one part")
    parts: list[ContentPart] = []
    for i, item in enumerate(message):
        if isinstance(item, str):
            item = TextPart(scrub(item))
        elif isinstance(item, TextPart):
            text = scrub(item.text)
            if text is not item.text:
                item = TextPart(text)
        elif not isinstance(item, (TextPart, ImagePart, DocumentPart)):
            raise InvalidArgument(
                f"user_message[{i}] must be a str, TextPart, ImagePart or DocumentPart, "
                f"got a {type(item).__name__}"
            )
        parts.append(item)
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return text, tuple(parts)


def check_model_parts(model: Model, parts: Sequence[ContentPart], argument: str) -> None:
    """Raise InvalidArgument if *model* says it cannot take one of *parts* (its
    ``check_parts``, if it has one: a provider's model checks its wire format)."""
    check = getattr(model, "check_parts", None)
    if check is not None:
        try:
            check(parts)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{argument}: {exc}") from None


def _phase_model(state: _AgentState, cmd: RunPhase) -> Model:
    """The model *cmd*'s phase will call: ``run(model=...)``'s, else the agent's."""
    return state.model if cmd.model is None else state.services.resolve(cmd.model)


def _check_phase_parts(state: _AgentState, cmd: RunPhase) -> None:
    """*cmd*'s parts checked against the model its phase will call."""
    check_model_parts(_phase_model(state, cmd), cmd.parts, "user_message")


def _phase_command(
    state: _AgentState,
    user_message: object,
    tool_names: object,
    max_iterations: object,
    continue_context: object,
    context_label: object,
    direct_tool_calls: object,
    timeout: object,
    mode: object,
    model: object,
    lane: object = None,
    settings: object = None,
    phase_id: object = None,
) -> tuple[RunPhase, Mode | None]:
    """The checked ``RunPhase`` of ``run()``'s arguments, and the mode, if any.

    ``run()``'s own *max_iterations* and *timeout* win over the mode's, and
    the mode's over the spec's (a field of the mode left None is the spec's).
    """
    chosen: Mode | None = None
    continuation = None
    if mode is not None:
        chosen = state.services.mode(mode)
        if max_iterations is None:
            max_iterations = chosen.max_iterations
        if timeout is None:
            timeout = chosen.timeout
        continuation = chosen.max_continuation_turns
        if lane is None:
            lane = chosen.lane  # (the run's own lane= wins over the mode's)
    if max_iterations is None:
        max_iterations = state.spec.limits.max_iterations
    cmd = _check_run(
        state.info,
        user_message,
        tool_names,
        max_iterations,
        continue_context,
        context_label,
        direct_tool_calls,
        timeout,
        continuation,
        model,
        lane,
        settings,
        phase_id,
    )
    if model is not None:
        assert cmd.model is not None
        state.services.resolve(cmd.model)  # a ConfigError now, not in the phase
    return cmd, chosen


def _run_command(
    state: _AgentState,
    user_message: object,
    tool_names: object,
    max_iterations: object,
    continue_context: object,
    context_label: object,
    direct_tool_calls: object,
    timeout: object,
    mode: object,
    model: object,
    lane: object,
    settings: object,
    phase_id: object = None,
) -> RunPhase:
    """The checked ``RunPhase`` of ``run()``'s (and ``stream()``'s) arguments, its
    settings and content parts checked against the model it will call.

    On a runtime with a checkpoint store, a phase without a *phase_id* is given
    one (its durable agent's records name it)."""
    checkpoints = state.services.checkpoints
    if checkpoints is not None:
        if phase_id is None:
            phase_id = new_phase_id()
        elif isinstance(phase_id, str):
            checkpoints.check_free(phase_id)
    if mode is None and model is None:  # (the common case: no mode to read)
        if max_iterations is None:
            max_iterations = state.spec.limits.max_iterations
        cmd = _check_run(
            state.info,
            user_message,
            tool_names,
            max_iterations,
            continue_context,
            context_label,
            direct_tool_calls,
            timeout,
            lane=lane,
            settings=settings,
            phase_id=phase_id,
        )
    else:
        cmd, _ = _phase_command(
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
    if cmd.settings is not None:
        check_model_settings(_phase_model(state, cmd), cmd.settings, "settings")
    if cmd.parts:
        _check_phase_parts(state, cmd)
    return cmd


def new_phase_id() -> str:
    """A phase id no other phase has (96 random bits)."""
    return secrets.token_urlsafe(12)


def _request_stop_tree(state: _AgentState) -> None:
    """Flag *state*'s agent, and the live agents it started (subagents, helpers), to stop."""
    state.stop_requested = True
    for child in state.children or ():
        if child.ref is not None and exit_reason(child.ref) is None:
            _request_stop_tree(child)
