"""The Protocols an `AgentSpec` holds for the rooms above the loop (#26).

``AgentSpec.planning`` and ``.delegation`` hold a `RunDriver` (met by the
planning and delegation rooms), ``.skills`` a `Skills` (the skills room),
``.security`` a `Security` (the security room). The spec names them at run
time (its annotations are read), so this module imports nothing of the loop:
the loop's own types it passes are named here as aliases of ``Any``, as in
``seams.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from ...messages import PhaseResult, RunPhase, ToolResult
    from ..tools.tool import Tool
    from ..tools.tool_call import ToolGate

__all__ = ["PhaseGuard", "PhaseRunner", "RunDriver", "Security", "Skills"]

Phase: TypeAlias = Any  # agents.loop.phase.Phase
AgentRef: TypeAlias = Any  # agents.loop.ref.AgentRef
AgentSpec: TypeAlias = Any  # agents.loop.spec.AgentSpec


# -- planning and delegation (#26: planning) ------------------------------------------

PhaseRunner = Callable[["RunPhase"], Coroutine[object, None, "PhaseResult[object]"]]
"""Runs one phase of an agent: what ``AgentRef.run`` would do with a ``RunPhase``."""


class RunDriver(Protocol):
    """What runs a request as more than one phase: ``AgentSpec.planning``
    (``planning.planner.Planning``) or ``AgentSpec.delegation``
    (``delegation.registry.Delegation``). ``AgentRef.run`` hands such an
    agent's requests to it (the spec's planning first, else its delegation)."""

    def check_spec(self, spec: AgentSpec) -> None:
        """Raise ``InvalidArgument`` (or ``PermissionEscalation``) if *spec* may not hold it."""

    def check_run(self, planning: object) -> None:
        """Raise ``InvalidArgument`` if ``run(planning=...)`` may not be *planning*."""

    def drive(
        self,
        agent: AgentRef,
        cmd: RunPhase,
        run_phase: PhaseRunner,
        planning: str | None,
    ) -> Coroutine[object, None, PhaseResult[object]]:
        """Run the request of *cmd* (checked) on *agent*, each phase of the agent's
        own by *run_phase*; *planning* is ``run(planning=...)``."""


# -- #26: skills and security, held by the spec (AgentSpec.skills, AgentSpec.security) ----


class Skills(Protocol):
    """An agent's skills, as the loop uses them (``skills.registry.SkillRegistry``).

    The spec takes its tool and catalogue once (``_SpecInfo``); a phase calls
    `narrow` when it begins and after each tool turn, only when the spec has
    skills (one test per turn otherwise).
    """

    def tools(self) -> tuple[Tool, ...]:
        """The tools the skills add to the agent's (``activate_skill``...), which no
        narrowing takes away."""

    def catalogue(self) -> str:
        """The skills' names and descriptions, added to the system prompt."""

    def narrow(self, phase: Phase, results: Sequence[ToolResult] | None) -> None:
        """Set ``phase.allowed`` to what the active skills allow (*results*: the
        turn just settled; None: the phase begins)."""


class PhaseGuard(Protocol):
    """One phase's security (``security.guard.Guard``): made when the phase begins."""

    gate: ToolGate  # the phase's tool calls pass it (the agent's gate, and taint)

    def saw(self, results: Sequence[ToolResult]) -> None:
        """A turn's tool results (the untrusted ones taint what they hold)."""

    def sanitise(self, text: str) -> str:
        """*text*, a reply of the model, with what the rules redact redacted."""

    def hide(self, text: str) -> str:
        """*text* (a ``ToolEnded`` preview's) redacted by the rules, with no event."""

    def recalled(self, items: Sequence[tuple[int, str, str]]) -> None:
        """Memory items (id, source, text) recalled into the phase (those of
        untrusted tools taint it)."""


class Security(Protocol):
    """An agent's security provider (``security.provider.SecurityProvider``)."""

    def guard(self, phase: Phase) -> PhaseGuard:
        """The guard of *phase*, which has read its history."""

    def redact(self, text: str) -> tuple[str, tuple[str, ...], int]:
        """*text* (an answer the agent gives that no phase of its own made: a
        delegate's) through its rules: the text, the rules that matched, how often."""
