"""AgentActor: an LLM agent as a supervised actor; one phase is one ``RunPhase`` message.

An agent is one actor (its phases run one at a time, in order) plus one
ContextActor per context label it has used, owned by it: they stop after it.
What must survive a restart of the agent actor (its contexts, its usage, a
pending stop request) lives in an ``_AgentState`` shared by its incarnations.
"""

from __future__ import annotations

import inspect
import os
import secrets
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs
import trio

from ..._checks import check_int, check_name, check_timeout, short_repr
from ..._handles import NoPublicConstructor, create
from ..._text import scrub
from ...actors import exit_reason, withdrawn
from ...actors.actor import Actor, ActorRef, ActorStatistics
from ...errors import (
    ActorCrashed,
    ActorError,
    ActorStopped,
    AgentrioError,
    InvalidArgument,
    SelfAsk,
)
from ...messages import (
    ChatMessage,
    ContentPart,
    ContextReadTurns,
    DocumentPart,
    ImagePart,
    Lane,
    ModelSettings,
    OutputT,
    PhaseResult,
    RunPhase,
    TextPart,
    ToolCallRequest,
    Turn,
    Usage,
    WorkspaceWriteFailed,
)
from ...providers.base import (
    OUTPUT_TOOL,
    Model,
    Prices,
    ToolSchema,
    check_model,
    context_window,
    model_pricing,
    split_model,
)
from ...providers.limiter import DEFAULT_LANE
from ...providers.tokens import TokenEstimator, estimate_tokens, message_text
from ...workspace import Workspace, agent_workspace
from ..budgets.budget import Budget, UsageTotals
from ..budgets.limits import Limits
from ..routing.modes import Mode, check_mode_timeout
from ..tools.lanes import check_lane
from ..tools.output import output_type_of
from ..tools.policy import Approver, PermissionPolicy, PostToolUse, PreToolUse
from ..tools.tool import NO_ENV, Tool, check_env
from ..tools.tool_call import ToolGate
from ..tools.validators import OutputValidator, to_validators
from .compaction import Compaction, Summariser
from .context import ContextActor
from .continuation import ContinuationDetector
from .phase import Phase
from .services import Services
from .stream import RunStream

if TYPE_CHECKING:
    from ...actors.bus import EventBus
    from ...supervisors.ref import SupervisorRef
    from ..routing.router import Router
    from .handles import BackgroundRun, Helper, Response

__all__ = ["AgentActor", "AgentRef", "AgentSpec", "StepInfo"]

_T = TypeVar("_T")  # an agent's output type


@attrs.frozen
class StepInfo:
    """What ``AgentSpec.on_step`` is told after each model turn and each tool call.

    See [`on_step`][on_step].

    Attributes:
        agent: the agent's path.
        step: 1 for the phase's first step, then 2, 3...
        tool_name: the tool, or ``None`` for a model turn.
        summary: at most 80 characters: the reply's text (or ``"<n> tool
            call(s)"``), or the tool's ``"<status>: <content>"``.
        iteration: the model call this step belongs to (1 for the phase's
            first; a tool call's is the call that asked for it); 0 in a
            phase of direct tool calls.
        max_iterations: the phase's step limit: the model calls it may make
            (``run(max_iterations=...)``, by default ``Limits.max_iterations``).
        tool_arguments: for a tool step, the arguments the tool was called
            with, a read-only view (``types.MappingProxyType``: changing it
            raises ``TypeError``); ``None`` for a model turn.
        tokens: the running token estimate: the estimated size of the
            conversation up to this step (the history the phase continued,
            its new turns so far, this step's included), as the spec's
            token estimator counts it.
    """

    agent: str
    step: int
    tool_name: str | None
    summary: str
    iteration: int = 0
    max_iterations: int = 0
    tool_arguments: Mapping[str, object] | None = None
    tokens: int = 0


def _to_tools(value: Sequence[Tool | Callable[..., object]]) -> tuple[Tool, ...]:
    # (Typed for the spec's __init__, which type checkers read from it; checked
    # all the same, for callers that are not type-checked.)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument(f"AgentSpec.tools must be a list of tools, got {value!r}")
    return tuple(v if isinstance(v, Tool) else Tool(v) for v in value)


def _to_env(value: Mapping[str, str]) -> Mapping[str, str]:
    return check_env("AgentSpec.env", value)


def _to_lane(value: Lane) -> Lane:
    return check_lane(value, "AgentSpec.lane")


@attrs.frozen
class AgentSpec(Generic[OutputT]):
    """Everything that defines an agent; one spec can be spawned many times.

    Spawn it with [`Runtime.spawn_agent`][agentrio.Runtime.spawn_agent].

    Example:

        spec = agentrio.AgentSpec(
            name="researcher",
            model=agentrio.testing.ScriptedModel([...]),
            instructions="You answer in one sentence.",
            tools=[lookup],
            limits=agentrio.Limits(max_iterations=5, timeout=60),
        )
        agent = await rt.spawn_agent(spec)

    Attributes:
        name: the agent's default name (``spawn_agent(name=...)`` overrides it):
            an actor's name (a non-empty str without ``/``, not ending with
            ``.context`` nor containing ``.context.``, the form reserved for
            context actors) that does not start with ``context.`` (a
            subagent's default name, ``"<agent>.<name>-<n>"``, would have
            that form).
        model: a model object (see [`agentrio.Model`][agentrio.Model]), a tier name from
            agentrio.toml (``"fast"``), or an ``"instance:model"`` string
            (``"local:qwen2.5:0.5b"``), resolved through the runtime's
            [`Config`][agentrio.Config] when the agent is spawned.
        instructions: the system prompt, put first in each new context.
        tools: the agent's allowlist: [`agentrio.Tool`][agentrio.Tool] objects (plain
            functions are wrapped with [`agentrio.tool`][agentrio.tool]); stored as a tuple.
        limits: the bounds of each phase (see [`Limits`][agentrio.Limits]).
        workspace: a folder for ``artifacts/``, ``logs/``, ``memory/`` and
            ``run_summary.json`` (see [`Workspace`][agentrio.Workspace]); an
            agent spawned under another name than the spec's gets a
            subfolder of that name, which must not be one of those entries.
        on_step: called (sync or async) with a [`StepInfo`][agentrio.types.StepInfo] after every
            model turn and tool call; if it raises, the phase ends with ``error``.
        token_estimator: ``fn(text) -> tokens``, for the context window and
            the budget's reservations (default:
            [`estimate_tokens`][agentrio.estimate_tokens]).
        escalate_on_stall: when ``model`` is a tier listed in the
            configuration's ``escalation``, a phase that ends ``"stalled"``
            is run once more on the next tier, and the agent keeps that
            model from then on.
        permissions: the [`agentrio.PermissionPolicy`][agentrio.PermissionPolicy] for its tool
            calls (None: every allowlisted call is allowed).
        approver: who answers the policy's ``ask`` decisions: a callable
            (plain or async) taking a
            [`agentrio.events.ConfirmationRequired`][agentrio.events.ConfirmationRequired] and
            returning a bool or an [`agentrio.Approval`][agentrio.Approval], or an
            [`ActorRef`][agentrio.ActorRef] that is asked with the
            ``ConfirmationRequired`` and replies the same. Without one,
            ``ask`` means deny. Any other answer (``"yes"``, ``1``, ``None``)
            denies the call, and the model sees what it answered.
        approval_timeout: seconds to wait for the approver; then the call is
            denied (None: wait as long as the phase may).
        pre_tool_use: ``async (ToolCallRequest) -> ToolCallRequest | Deny |
            None``, called before each admitted call: a
            [`Deny`][agentrio.Deny] refuses it, a request replaces it (other
            arguments, same tool; the policy judges the new arguments
            again), ``None`` lets it go as it is.
        post_tool_use: ``async (ToolCallRequest, ToolResult) -> ToolResult |
            None``, called after each call: a result replaces the one the
            model sees.
        env: environment variables for its tools: a mapping of str to str
            (``None``: empty, the default), kept as a read-only (and
            hashable) copy and handed to each tool that declares a
            [`agentrio.ToolContext`][agentrio.ToolContext] as ``ctx.env``. agentrio sets no
            process environment from it (all agents share one process); a
            tool passes it on itself, to a subprocess say. Its repr shows
            the names only. A session helper has its agent's; a subagent
            has its own spec's.
        continuation_detector: ``(text) -> bool`` (sync or async): does a
            reply without tool calls read as an intermediate step rather
            than a final answer? Asked with the reply's text, only while
            ``limits.max_continuation_turns`` allows another continuation
            (never when it is 0, the default); only True continues (None:
            [`agentrio.looks_unfinished`][agentrio.looks_unfinished]). If it raises, the
            phase ends with ``error``.
        compaction: a [`agentrio.Compaction`][agentrio.Compaction] to replace a context's
            older turns with a summary once it passes a share of the model's
            window (``None``, the default: no compaction; old turns are only
            left out of each call's view). A session helper has its agent's.
        lane: the priority lane of its phases' model calls and tool calls,
            unless ``run(lane=...)`` says otherwise: ``"interactive"``
            (``"control"`` is stored as ``"interactive"``), ``"query"`` (the
            default), ``"execute"`` or ``"background"``. While a provider's
            or the runtime's limit is full, the higher lanes' calls go
            first. A session helper has its agent's; a subagent, an agent
            tool's child and ``map``'s agents their own spec's.
        settings: request settings for its model calls
            ([`agentrio.ModelSettings`][agentrio.ModelSettings]), laid over its provider's
            (``ProviderConfig.settings``); a run's ``settings`` are laid over
            them. A named ``tool_choice`` must be one of its tools. At
            ``spawn_agent``, the resolved model must take settings (a
            ``settings`` keyword on its ``complete``) and be able to send
            each one (its ``check_settings``, if it has one), else
            ``InvalidArgument``. Summary calls (compaction) go without them.
        output_type: the type of its answers (None, the default, or ``str``:
            plain text): a ``msgspec.Struct``, an attrs class, a dataclass,
            or a type such as ``list[str]``; the spec is then an
            ``AgentSpec[T]`` and its phases' results ``PhaseResult[T]``s.
            A phase's answer (a reply without tool calls) is parsed as JSON
            and validated as that type, and its ``output`` is the value. A
            model that takes an ``output_schema`` keyword (a provider's)
            is told the type's JSON schema: OpenAI's structured outputs,
            Ollama's ``format``, Anthropic's forced tool ``final_result``
            (so no tool of the spec may be named so). See [Typed
            outputs][typed-outputs].
        output_retries: how many refused answers in a phase are sent back to
            the model, with why they were refused, for another answer (each
            one more model call of the phase's ``max_iterations``); past
            them the phase ends with ``"error"`` (``error_type``
            ``"OutputInvalid"``). Default 1. Answers refused by
            *output_validators* count here too.
        output_validators: functions ``fn(value)``, plain or async, given
            each answer once it parsed (the ``output_type``'s value, else the
            text), in order; stored as a tuple. One refuses the answer by
            raising [`agentrio.ModelRetry`][agentrio.errors.ModelRetry]``(reason)``:
            the model is told the reason and answers again, within
            *output_retries*; past them the phase ends with ``"error"``
            (``OutputInvalid``, naming the last reason). What it returns is
            not used; anything else it raises ends the phase with
            ``"error"``. See [Output validators][output-validators].

    Both hooks reach the agent's children (subagents, agent tools' agents,
    ``map``'s agents, session helpers, and theirs), and so do its policy and
    approver: a child runs its parent's hooks, then its own, outermost
    first. Each ``pre_tool_use`` hook sees the call as the hooks before it
    left it, and the first ``Deny`` refuses it; when a hook rewrites the
    call, the hooks before it run once more on the final call (a ``Deny``
    there refuses it, a rewrite there is final), so a child's hook cannot
    undo its parent's. Each ``post_tool_use`` hook sees the result as the
    hooks before it left it, and the model sees what the last one leaves. A
    hook function set on both a parent and its child runs once, in its
    outermost place.

    A spec need not be hashable (a model object, or ``settings`` with table
    fields, may not be); what an agent works out once per spec is kept on
    the spec itself.

    Raises:
        InvalidArgument: a bad field, named in the message (including a
            *name* against the rules above); two tools with the same name; a
            model object without an ``async def complete`` (or a class
            instead of an instance), or with a ``context_window`` that is
            not an int >= 1; *permissions* that is not a
            ``PermissionPolicy``; an *approver* that is neither callable nor
            an ``ActorRef``; a negative *approval_timeout*; an *env* that is
            not a mapping, or with a key or value that is not a str (the
            message names the key, never a value); a *continuation_detector*
            that is not callable; a *lane* that is not a lane's name;
            *settings* that is not a ``ModelSettings``, or whose
            ``tool_choice`` names a tool the spec does not have; an
            *output_type* msgspec cannot validate, or with a tool named
            ``final_result``; *output_retries* not an int >= 0;
            *output_validators* not a list of functions, or one that cannot be
            called with the answer alone (``fn(ctx, value)``).
        ConfigError: *model* is a string with a colon that is not a valid
            ``"instance:model"``.
    """

    name: str
    model: Model | str
    instructions: str = ""
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_to_tools)
    limits: Limits = attrs.field(factory=Limits)
    workspace: str | os.PathLike[str] | None = None
    on_step: Callable[[StepInfo], object] | None = None
    token_estimator: TokenEstimator | None = None
    escalate_on_stall: bool = False
    _info: _SpecInfo | None = attrs.field(
        init=False, default=None, eq=False, hash=False, repr=False
    )
    permissions: PermissionPolicy | None = None
    approver: Approver | ActorRef | None = None
    approval_timeout: float | None = None
    pre_tool_use: PreToolUse | None = None
    post_tool_use: PostToolUse | None = None
    env: Mapping[str, str] = attrs.field(default=NO_ENV, converter=_to_env)
    continuation_detector: ContinuationDetector | None = None
    compaction: Compaction | None = None
    lane: Lane = attrs.field(default=DEFAULT_LANE, converter=_to_lane)
    settings: ModelSettings | None = None
    output_type: type[OutputT] | None = None
    output_retries: int = 1
    output_validators: tuple[OutputValidator, ...] = attrs.field(
        default=(), converter=to_validators
    )

    def __attrs_post_init__(self) -> None:
        check_name("AgentSpec.name", self.name)
        if self.name.startswith("context."):
            # A subagent's default name, "<agent>.<spec.name>-<n>", would be of
            # the form reserved for context actors, and refused at its spawn.
            raise InvalidArgument(
                f"AgentSpec.name must not start with 'context.' (a subagent's default name "
                f"'<agent>.{self.name}-<n>' would be a context actor's), got {self.name!r}"
            )
        if isinstance(self.model, str):
            if ":" in self.model:
                split_model(self.model)
            elif not self.model:
                raise InvalidArgument("AgentSpec.model must not be empty")
        else:
            check_model(self.model, "AgentSpec.model")
        if not isinstance(self.escalate_on_stall, bool):
            raise InvalidArgument(
                f"AgentSpec.escalate_on_stall must be a bool, got {self.escalate_on_stall!r}"
            )
        if not isinstance(self.instructions, str):
            raise InvalidArgument(
                f"AgentSpec.instructions must be a str, got {self.instructions!r}"
            )
        names = [t.name for t in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidArgument(f"AgentSpec.tools has duplicate names: {dupes}")
        if not isinstance(self.limits, Limits):
            raise InvalidArgument(
                f"AgentSpec.limits must be an agentrio.Limits, got {self.limits!r}"
            )
        if self.workspace is not None:
            Workspace(self.workspace)
        if self.permissions is not None and not isinstance(self.permissions, PermissionPolicy):
            raise InvalidArgument(
                f"AgentSpec.permissions must be an agentrio.PermissionPolicy or None, "
                f"got {self.permissions!r}"
            )
        if self.approver is not None and not (
            callable(self.approver) or isinstance(self.approver, ActorRef)
        ):
            raise InvalidArgument(
                f"AgentSpec.approver must be a callable or an ActorRef, got {self.approver!r}"
            )
        check_timeout("AgentSpec.approval_timeout", self.approval_timeout)
        if self.compaction is not None and not isinstance(self.compaction, Compaction):
            raise InvalidArgument(
                f"AgentSpec.compaction must be an agentrio.Compaction or None, "
                f"got {self.compaction!r}"
            )
        if self.settings is not None:
            _check_settings("AgentSpec.settings", self.settings, names)
        check_int("AgentSpec.output_retries", self.output_retries, 0)
        if self.output_type is not None and self.output_type is not str:
            output_type_of(self.output_type, self.output_retries)  # (checks it, once)
            if OUTPUT_TOOL in names:
                raise InvalidArgument(
                    f"AgentSpec.tools has a tool named {OUTPUT_TOOL!r}, the name of the "
                    f"tool a typed answer is given with (AgentSpec.output_type)"
                )
        for hook in (
            "on_step",
            "token_estimator",
            "pre_tool_use",
            "post_tool_use",
            "continuation_detector",
        ):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise InvalidArgument(f"AgentSpec.{hook} must be callable or None, got {value!r}")


class _SpecInfo:
    """What is derived from a spec once, shared by every agent spawned from it."""

    __slots__ = (
        "estimator",
        "model_facts",
        "needs_caller",
        "output",
        "schemas",
        "system",
        "tool_set",
        "tools",
    )

    def __init__(self, spec: AgentSpec[object]) -> None:
        self.tools = {t.name: t for t in spec.tools}
        self.tool_set = frozenset(self.tools)
        self.schemas = tuple(t.schema for t in spec.tools)
        self.estimator: TokenEstimator = spec.token_estimator or estimate_tokens
        self.needs_caller = any(t.needs_caller for t in spec.tools)
        kind = spec.output_type
        self.output = (
            None if kind is None or kind is str else output_type_of(kind, spec.output_retries)
        )
        # The system prompt as the first message of a new context, and its size.
        self.system: tuple[ChatMessage, int] | None = None
        if spec.instructions:
            message = ChatMessage("system", scrub(spec.instructions))  # (see _check_run)
            self.system = (message, self.estimator(message_text(message)))
        # (model, window, streams, metered, laned, pricing) of the last model an
        # agent of this spec was given: 10k agents of one spec work these out
        # once. The model is held weakly: a spec may outlive the runtime that
        # resolved it.
        self.model_facts: tuple[weakref.ref[Model], int, bool, bool, bool, Prices | None] | None = (
            None
        )

    def schemas_for(self, names: frozenset[str]) -> tuple[ToolSchema, ...]:
        if names == self.tool_set:
            return self.schemas
        return tuple(s for s in self.schemas if s.name in names)


def _spec_info(spec: AgentSpec[object]) -> _SpecInfo:
    # Cached on the spec itself (not in a dict keyed by it): a spec need not be
    # hashable, since the model object it holds may not be.
    info = spec._info
    if info is None:
        info = _SpecInfo(spec)
        object.__setattr__(spec, "_info", info)
    return info


def _check_settings(argument: str, settings: object, tools: Sequence[str]) -> None:
    """*settings* must be ModelSettings whose named ``tool_choice`` is one of *tools*."""
    if not isinstance(settings, ModelSettings):
        raise InvalidArgument(
            f"{argument} must be an agentrio.ModelSettings or None, got {settings!r}"
        )
    choice = settings.tool_choice
    if choice is not None and choice not in ("auto", "none", "required") and choice not in tools:
        raise InvalidArgument(
            f"{argument}.tool_choice names tool {choice!r}, which the agent does not have "
            f'(its tools: {sorted(tools)}); expected "auto", "none", "required" '
            f"or one of them"
        )


def check_model_settings(model: Model, settings: ModelSettings, argument: str) -> None:
    """Raise InvalidArgument unless *model* takes ``settings`` and can send each of them."""
    if not _takes(model, "settings"):
        raise InvalidArgument(
            f"{argument}: the model {model!r} takes no settings (its complete() has no "
            f"settings keyword); they would be dropped"
        )
    check = getattr(model, "check_settings", None)
    if check is not None:
        try:
            check(settings)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{argument}: {exc}") from None


_TAKES: dict[tuple[type, str], bool] = {}


def _takes(model: Model, keyword: str) -> bool:
    """Does *model*'s ``complete`` take *keyword* (``on_text``, ``meter``, ``lane``)?

    Cached per class: inspect is slow.
    """
    cls = type(model)
    if "complete" in getattr(model, "__dict__", {}):  # set on the instance: look at it
        return keyword in inspect.signature(model.complete).parameters
    known = _TAKES.get((cls, keyword))
    if known is None:
        known = keyword in inspect.signature(model.complete).parameters
        _TAKES[cls, keyword] = known
    return known


def context_name(agent: str, label: str | None) -> str:
    """The name of *agent*'s context actor for *label*, distinct for each label.

    ``<agent>.context`` for the primary context, ``<agent>.context.<label>``
    for the others, with ``%`` in the label written ``%25`` and then ``/``
    written ``%2F`` (a name has no ``/``): an encoding with one name per
    label, so ``"a/b"`` and ``"a%2Fb"`` get two actors.
    """
    if label is None:
        return agent + ".context"
    return f"{agent}.context.{label.replace('%', '%25').replace('/', '%2F')}"


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
            model = state.services.resolve(msg.model)
        except AgentrioError as exc:  # (a RunPhase sent without run()'s checks)
            phase._error(exc)
            return phase._ended()
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


def check_spec(spec: object) -> None:
    """Raise [`InvalidArgument`][agentrio.errors.InvalidArgument] unless *spec* is an
    [`AgentSpec`][agentrio.AgentSpec]."""
    if not isinstance(spec, AgentSpec):
        raise InvalidArgument(
            f"spec must be an agentrio.AgentSpec, got {type(spec).__name__}: {short_repr(spec)}"
        )


def spawn_agent(
    services: Services, sup: SupervisorRef, spec: AgentSpec[_T], name: object, budget: object
) -> AgentRef[_T]:
    """Spawn an agent under *sup*, drawing on *services* (the runtime's)."""
    if type(spec) is not AgentSpec:  # (the common case needs no call)
        check_spec(spec)
    root = services.budget
    if budget is None:
        budget = root
    else:
        if not isinstance(budget, Budget):
            raise InvalidArgument(f"budget must be an agentrio.Budget or None, got {budget!r}")
        top = budget._root()
        if top is not root:
            # A free-standing budget (or a chain of them) is carved out of the
            # runtime's: nothing an agent spends escapes the runtime's limits.
            top._attach(root)
    agent_name = spec.name if name is None else name
    model: Model
    escalation: Model | None = None
    if isinstance(spec.model, str):
        model = services.resolve(spec.model)
        if spec.escalate_on_stall:
            stronger = services.next_tier(spec.model)
            if stronger is not None:
                escalation = services.resolve(stronger)
    else:
        model = spec.model
    if spec.settings is not None:
        check_model_settings(model, spec.settings, "AgentSpec.settings")
    summariser = None if spec.compaction is None else _summariser(services, spec.compaction)
    state = _AgentState(
        spec,
        services,
        sup,
        budget,
        agent_name if isinstance(agent_name, str) else "",
        model,
        escalation,
        summariser,
    )
    ref = state.ref = sup.spawn_nowait(
        AgentActor,
        state,
        name=agent_name,  # type: ignore[arg-type]  # (any object: spawn checks it)
        mailbox=spec.limits.mailbox,
    )
    state.gate = make_gate(spec, ref.path, services.bus)
    return create(AgentRef, state)


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

    def __repr__(self) -> str:
        ref = self.ref
        return f"<AgentRef {ref.path!r} {ref.statistics().state}>"

    async def run(
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
    ) -> PhaseResult[OutputT]:
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
                takes none), a tool name the agent does not have, an unknown *lane*, or a
                mode name the runtime does not have (the message lists its
                modes); *settings* that is not a ``ModelSettings``, names in
                ``tool_choice`` a tool the agent does not have, holds a
                setting the phase's model (*model*'s, else the agent's)
                cannot send (the message names it), or is given to a model
                that takes no settings; a *phase_id* in use.
            ConfigError: *model* is neither a tier nor a model of the
                runtime's configuration (or there is none); the runtime's
                agentrio.toml, read for a mode's name, is wrong.
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
        ref = state.ref
        assert ref is not None
        try:
            # Linked: the phase is this caller's work, and ends with it (see
            # ActorRef.ask, and AgentActor._again for how the phase ends).
            asked = ref.ask(cmd, linked=True)
        except SelfAsk:
            raise SelfAsk(
                f"agent {ref.path!r} was asked to run a phase from inside its own "
                "phase (a tool running its own agent): it would deadlock"
            ) from None
        # (With OpenTelemetry, the phase's span nests under the caller's. No local
        # for it: this frame waits on each of 10k agents' callers.)
        try:
            if state.services.otel is None:
                result = await asked
            else:
                result = await state.services.otel.asked(cmd, asked)
        except ActorCrashed:
            checkpoints = state.services.checkpoints
            if checkpoints is None or not checkpoints.restarted(cmd):
                raise
            # A durable agent crashed, and was restarted: its phase goes on
            # from its last completed turn (agents/durability/checkpoint.py).
            result = await checkpoints.rerun(self, cmd, linked=True)
        assert isinstance(result, PhaseResult)
        return result

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
        return await self._state.services.composer.respond(
            self, request, router=router, context_label=context_label, escalate=escalate
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
        return await self._state.services.composer.continue_in_background(self, response, message)

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
        return await self._state.services.composer.start_background(self, cmd, chosen)

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
        return self._state.services.composer.session_helper(
            self._state,
            model,
            instructions=instructions,
            max_turns=max_turns,
            final_answer=final_answer,
            name=name,
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
        return self._state.services.composer.spawn_child(
            self._state, spec, name=name, budget=budget
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
