"""A run's command and its ask: ``run()``'s (and ``stream()``'s, a background run's)
arguments checked into a ``RunPhase``, against the spec, the mode and the model the
phase will call; the linked ask that runs it."""

from __future__ import annotations

import secrets
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from ..._checks import check_int, short_repr
from ..._text import scrub
from ...errors import ActorCrashed, InvalidArgument, SelfAsk
from ...messages import (
    ContentPart,
    DocumentPart,
    ImagePart,
    ModelSettings,
    PhaseResult,
    RunPhase,
    TextPart,
    ToolCallRequest,
)
from ...providers.base import Model
from ..routing.modes import Mode, check_mode_timeout
from ..tools.lanes import check_lane
from .spec import _check_settings, _SpecInfo, check_model_settings

if TYPE_CHECKING:
    from .extensions import RunDriver
    from .state import _AgentState

__all__ = ["check_model_parts", "new_phase_id", "user_parts"]


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
    one (its durable agent's records name it): the runtime's random prefix and a
    count, not a read of the system's random source for each phase."""
    checkpoints = state.services.checkpoints
    if checkpoints is not None:
        if phase_id is None:
            phase_id = checkpoints.new_id()
        elif isinstance(phase_id, str):
            checkpoints.check_free(phase_id)
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


def _asked(state: _AgentState, cmd: RunPhase) -> Coroutine[Any, Any, object]:
    """The linked ask of *cmd* of *state*'s agent: the phase is this caller's work,
    and ends with it (see ActorRef.ask, and AgentActor._again for how it ends)."""
    ref = state.ref
    assert ref is not None
    try:
        return ref.ask(cmd, linked=True)
    except SelfAsk:
        raise SelfAsk(
            f"agent {ref.path!r} was asked to run a phase from inside its own "
            "phase (a tool running its own agent): it would deadlock"
        ) from None


# -- a run's phase, observed or durable; a run driven by the spec's RunDriver ---------

# (ref.py imports this module: AgentRef is named as seams.py names it)
AgentRef: TypeAlias = Any  # agents.loop.ref.AgentRef


def _driven(
    agent: AgentRef, cmd: RunPhase, driver: RunDriver | None, planning: object
) -> Coroutine[Any, Any, PhaseResult[Any]]:
    """The run of *cmd* by the spec's *driver* (planning, delegation): checked now."""
    if driver is None:
        raise InvalidArgument(
            f"run(planning={planning!r}) needs an agent whose AgentSpec.planning is set"
        )
    driver.check_run(planning)
    _asked(agent._state, cmd).close()  # (SelfAsk now, as for a phase)

    def run_phase(step: RunPhase) -> Coroutine[Any, Any, PhaseResult[object]]:
        state = agent._state
        asked = _asked(state, step)
        services = state.services
        if services.otel is None and services.checkpoints is None:
            return cast("Coroutine[Any, Any, PhaseResult[object]]", asked)
        return _phase(agent, step, asked)

    mode = planning if isinstance(planning, str) else None
    return driver.drive(agent, cmd, run_phase, mode)


async def _phase(
    agent: AgentRef, cmd: RunPhase, asked: Coroutine[Any, Any, object]
) -> PhaseResult[Any]:
    """Run *cmd* on *agent* (*asked*: its ask), with OpenTelemetry (the phase's span
    nests under the caller's) or a checkpoint store (a crashed durable agent's phase
    goes on)."""
    state = agent._state
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
        result = await checkpoints.rerun(agent, cmd, linked=True)
    assert isinstance(result, PhaseResult)
    return result
