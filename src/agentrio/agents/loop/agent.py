"""AgentActor: an LLM agent as a supervised actor; one phase is one ``RunPhase`` message.

An agent is one actor (its phases run one at a time, in order) plus one
ContextActor per context label it has used, owned by it: they stop after it.
What must survive a restart of the agent actor (its contexts, its usage, a
pending stop request) lives in an ``_AgentState`` (state.py) shared by its
incarnations.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import cast

from ...actors import exit_reason, withdrawn
from ...actors.actor import Actor
from ...errors import (
    AgentrioError,
)
from ...messages import (
    PhaseResult,
    RunPhase,
)
from ...providers.base import (
    model_pricing,
)
from .phase import Phase
from .services import Services
from .spec import _takes
from .state import _AgentState
from .summary import Compaction, Summariser

__all__ = ["AgentActor"]


class AgentActor(Actor[RunPhase]):
    """The actor behind an [`AgentRef`][agentrio.AgentRef]: runs one phase per ``RunPhase``."""

    __slots__ = ("state",)

    def __init__(self, state: _AgentState) -> None:
        self.state = state
        phase = cast("Phase | None", state.phase)  # (the state holds a Phase)
        if phase is not None:  # left over from a phase that ended in a crash
            if phase.rec is not None:  # a durable agent's: it goes on when asked again
                phase.rec.crashed(phase)
            state.phase = None

    def handle(self, msg: RunPhase) -> Coroutine[object, None, PhaseResult[object]]:
        # Returns the phase's coroutine rather than awaiting it: one frame less
        # on each of 10k live agents' stacks (and for the cyclic GC to walk).
        state = self.state
        phase = cast("Phase | None", state.phase)  # (the state holds a Phase)
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


def _request_stop_tree(state: _AgentState) -> None:
    """Flag *state*'s agent, and the live agents it started (subagents, helpers), to stop."""
    state.stop_requested = True
    for child in state.children or ():
        if child.ref is not None and exit_reason(child.ref) is None:
            _request_stop_tree(child)
