"""AgentSpec, StepInfo: what an agent is, checked once when made; its derived, shared _SpecInfo."""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Generic

import attrs

from ..._checks import check_int, check_name, check_timeout, short_repr
from ..._text import scrub
from ...actors.actor import ActorRef
from ...errors import (
    InvalidArgument,
)
from ...messages import (
    ChatMessage,
    Lane,
    ModelSettings,
    OutputT,
)
from ...providers.base import (
    OUTPUT_TOOL,
    Model,
    Prices,
    ToolSchema,
    check_model,
    split_model,
)
from ...providers.limiter import DEFAULT_LANE
from ...providers.tokens import TokenEstimator, estimate_tokens, message_text
from ...workspace import Workspace
from ..budgets.limits import Limits
from ..memory.memory import Memory
from ..memory.providers import ContextProviders, to_context_providers
from ..tools.lanes import check_lane
from ..tools.output import output_type_of
from ..tools.policy import Approver, PermissionPolicy, PostToolUse, PreToolUse
from ..tools.tool import NO_ENV, Tool, check_env
from ..tools.validators import OutputValidator, to_validators
from .continuation import ContinuationDetector

# (at run time: typing.get_type_hints reads the fields)
from .extensions import RunDriver, Security, Skills
from .prompts import PromptSlots, system_prompt
from .summary import Compaction

__all__ = ["AgentSpec", "StepInfo", "check_spec"]


def _to_memory(value: object) -> Memory | None:
    """``AgentSpec.memory``: a Memory, a shared memory's name, or None."""
    if value is None or isinstance(value, Memory):
        return value
    if isinstance(value, str):
        return Memory(name=value)
    raise InvalidArgument(
        f"AgentSpec.memory must be an agentrio.Memory, a str or None, got {short_repr(value)}"
    )


SpecMigration = Callable[[str | None, Sequence[ChatMessage]], Sequence[ChatMessage]]
"""``AgentSpec.migrate``: ``fn(recorded_version, messages) -> messages`` (#27)."""


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
        memory: what the agent remembers (#26): an
            [`agentrio.memory.Memory`][agentrio.memory.Memory] (its own memory, or the
            one shared by its ``name``), a str (``Memory(name=...)``, a
            shared memory with the defaults), or None (none, the default).
            Tool results its ``keep`` rule keeps are stored after each batch
            of tool calls, and its best items recalled before each model
            call; ``AgentRef.memory`` searches and clears it. See
            [Memory][agent-memory].
        context_providers: sources of context added before each model call
            (#26): a list of [context providers][agentrio.memory.ContextProvider],
            or an [`agentrio.memory.ContextProviders`][agentrio.memory.ContextProviders]
            that also sets their timeout and token allowance. See [Context
            providers][context-providers].
        prompt: a [`PromptSlots`][agentrio.PromptSlots]: the role, guidelines,
            style and extra parts of the system prompt, put around
            *instructions* in that order, before agentrio's own parts (None:
            the system prompt is *instructions* as written). See [Prompt
            slots][prompt-slots].
        skills: a [`SkillRegistry`][agentrio.SkillRegistry]: skills offered by
            name and description, activated by the model with the
            ``activate_skill`` tool (added to its tools, so none of *tools*
            may be named so); an active skill narrows the phase's tools to
            those it allows. See [How to give an agent
            skills][how-to-give-an-agent-skills].
        security: a [`SecurityProvider`][agentrio.SecurityProvider]: taint
            from untrusted tools' results checked in the calls of sensitive
            tools (through the approver, or denied), and the model's replies
            sanitised. See [What taint tracking sees][what-taint-tracking-sees].
        version: (#27, durable agents) the spec's version, recorded with each
            phase in a checkpoint store; a runtime resuming a phase begun under
            another version refuses it
            ([`SpecVersionMismatch`][agentrio.errors.SpecVersionMismatch]) unless
            *migrate* is given. Default None (no version); else a non-empty
            str of at most 200 characters.
        migrate: (#27) ``fn(recorded_version, messages) -> messages``: carries a
            phase begun under another version over to this one when it is
            resumed (the phase's recorded messages in, a list of those to go on
            from out; anything else is refused with ``InvalidArgument``, and
            what it raises comes out of ``open_runtime`` as it is).

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
            called with the answer alone (``fn(ctx, value)``); *prompt*,
            *skills* or *security* of the wrong type, or a tool named
            ``activate_skill`` beside *skills*.
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
    # Memory and context providers (#26: agents/memory, loop/recall.py)
    memory: Memory | None = attrs.field(default=None, converter=_to_memory)
    context_providers: ContextProviders | None = attrs.field(
        default=None, converter=to_context_providers
    )
    # Planning and delegation (#26, the planning part): what runs a request as
    # more than one phase (loop/extensions.py's RunDriver; agents/planning, agents/delegation).
    planning: RunDriver | None = None
    delegation: RunDriver | None = None
    # -- #26, the skills branch: prompt slots, skills, a security provider ---------------
    prompt: PromptSlots | None = None
    skills: Skills | None = None
    security: Security | None = None
    # -- #27, the store (durable agents): the spec's version, and how a phase of
    # another version goes on under this one.
    version: str | None = None
    migrate: SpecMigration | None = None

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
        if self.version is not None and (
            not isinstance(self.version, str)
            or not 0 < len(self.version) <= 200
            or scrub(self.version) != self.version
        ):  # (recorded with each phase: bounded, and encodable)
            raise InvalidArgument(
                "AgentSpec.version must be a non-empty str of at most 200 characters, or"
                f" None; got {short_repr(self.version)}"
            )
        if self.migrate is not None and not callable(self.migrate):
            raise InvalidArgument(f"AgentSpec.migrate must be callable, got {self.migrate!r}")
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
        _check_26(self, names)
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
        _check_drivers(self)


def _check_drivers(spec: AgentSpec[object]) -> None:
    """Check ``planning`` and ``delegation`` (each met by a room above the loop)."""
    for field, kind in (("planning", "Planning"), ("delegation", "Delegation")):
        driver = getattr(spec, field)
        if driver is None:
            continue
        if not all(callable(getattr(driver, m, None)) for m in ("drive", "check_spec")):
            raise InvalidArgument(
                f"AgentSpec.{field} must be an agentrio.{kind} or None, got {driver!r}"
            )
        driver.check_spec(spec)  # (which checks that it is in its own field)


def _check_26(spec: AgentSpec[object], names: Sequence[str]) -> None:
    """The fields of #26's skills branch: ``prompt``, ``skills``, ``security``."""
    if spec.prompt is not None and not isinstance(spec.prompt, PromptSlots):
        raise InvalidArgument(
            f"AgentSpec.prompt must be an agentrio.PromptSlots or None, got {spec.prompt!r}"
        )
    skills = spec.skills
    if skills is not None:
        if not all(callable(getattr(skills, m, None)) for m in ("tools", "catalogue", "narrow")):
            raise InvalidArgument(
                f"AgentSpec.skills must be an agentrio.SkillRegistry or None, got {skills!r}"
            )
        taken = sorted({t.name for t in skills.tools()} & set(names))
        if taken:
            raise InvalidArgument(
                f"AgentSpec.tools has a tool named {taken[0]!r}, the name of a tool of "
                f"its skills (AgentSpec.skills)"
            )
    if spec.security is not None and not callable(getattr(spec.security, "guard", None)):
        raise InvalidArgument(
            f"AgentSpec.security must be an agentrio.SecurityProvider or None, "
            f"got {spec.security!r}"
        )


class _SpecInfo:
    """What is derived from a spec once, shared by every agent spawned from it."""

    __slots__ = (
        "driver",
        "estimator",
        "model_facts",
        "needs_caller",
        "output",
        "schemas",
        "skills",
        "system",
        "tool_set",
        "tools",
    )

    def __init__(self, spec: AgentSpec[object]) -> None:
        tools = spec.tools
        self.skills = spec.skills
        own: tuple[str, ...] = ()  # agentrio's parts of the system prompt
        if self.skills is not None:  # its activate_skill tool, its catalogue
            tools += self.skills.tools()
            own = (self.skills.catalogue(),)
        self.tools = {t.name: t for t in tools}
        self.tool_set = frozenset(self.tools)
        self.schemas = tuple(t.schema for t in tools)
        self.estimator: TokenEstimator = spec.token_estimator or estimate_tokens
        self.needs_caller = any(t.needs_caller for t in spec.tools)
        # What runs its requests as more than one phase (None: AgentRef.run asks
        # one phase): its planning, which hands steps to its delegation, else that.
        self.driver = spec.planning if spec.planning is not None else spec.delegation
        kind = spec.output_type
        self.output = (
            None if kind is None or kind is str else output_type_of(kind, spec.output_retries)
        )
        # The system prompt as the first message of a new context, and its size.
        self.system: tuple[ChatMessage, int] | None = None
        text = system_prompt(spec.instructions, spec.prompt, own)
        if text:
            message = ChatMessage("system", scrub(text))  # (see _check_run)
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


def _takes_each(model: Model, keywords: tuple[str, ...]) -> tuple[bool, ...]:
    """`_takes` for each of *keywords*, in one call (an agent's state asks three)."""
    return tuple(_takes(model, keyword) for keyword in keywords)


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


def check_spec(spec: object) -> None:
    """Raise [`InvalidArgument`][agentrio.errors.InvalidArgument] unless *spec* is an
    [`AgentSpec`][agentrio.AgentSpec]."""
    if not isinstance(spec, AgentSpec):
        raise InvalidArgument(
            f"spec must be an agentrio.AgentSpec, got {type(spec).__name__}: {short_repr(spec)}"
        )
