"""The loop's seams: what plugs into it from the rooms above, declared here.

The loop calls out at a few points: to an observer (``observation``:
OpenTelemetry's spans and metrics), to a durable agent's recording
(``durability``: checkpoint records, a phase going on after a crash), and,
from `AgentRef`'s composing methods, to ``composition`` (respond, background
runs, helpers, subagents, maps). Each is a Protocol of this module, held by
`Services` (``services.otel``, ``services.checkpoints``: None when off, which
costs the loop one test; ``services.composer``), and met by the room above,
which imports the loop, never the other way round (as the kernel's actors
reach their supervisor through ``actors.actor.Parent``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from ...errors import ActorError
    from ...messages import (
        ChatMessage,
        ModelReply,
        PhaseResult,
        RunPhase,
        ToolCallRequest,
        ToolResult,
    )
    from ...providers.base import Model
    from ...supervisors.ref import SupervisorRef
    from ..budgets.budget import Budget
    from ..routing.modes import Mode
    from ..tools.tool import Tool
    from ..tools.tool_call import ToolGate, ToolRunner
    from .agent import _AgentState
    from .handles import BackgroundRun, Helper, Response
    from .phase import Phase
    from .ref import AgentRef
    from .services import Services
    from .spec import AgentSpec

__all__ = [
    "Checkpointing",
    "Composer",
    "Observer",
    "Parked",
    "PhaseGuard",
    "PhaseRecording",
    "PhaseRunner",
    "Resumed",
    "RunDriver",
    "Security",
    "Skills",
]

_T = TypeVar("_T")


class Observer(Protocol):
    """What watches the loop (``observation.otel.OpenTelemetry``)."""

    def asked(self, cmd: RunPhase, reply: Awaitable[object]) -> Awaitable[object]:
        """An ask of a phase (*cmd*) by the calling task: *reply*, in the caller's context."""

    def run_phase(
        self, phase: Phase, body: Coroutine[object, None, PhaseResult[object]]
    ) -> Coroutine[object, None, PhaseResult[object]]:
        """Run a phase's *body*, observed."""

    def phase_ended(self, phase: Phase) -> None:
        """A phase has ended."""

    def chat(
        self,
        phase: Phase,
        messages: Sequence[ChatMessage],
        max_output_tokens: int,
        call: Coroutine[object, None, ModelReply],
    ) -> Coroutine[object, None, ModelReply]:
        """Make a model *call* of *phase*, observed."""

    def runner(
        self,
        phase: Phase,
        tool: Tool,
        request: ToolCallRequest,
        timeout: float,
        gate: ToolGate | None,
    ) -> ToolRunner:
        """The runner of one tool call of *phase*, observed."""

    def waited(self, st: _AgentState, what: str, seconds: float) -> None:
        """An agent waited *seconds* for *what* (``"budget"``, a provider's wait)."""

    def context_added(
        self, phase: Phase, source: str, tokens: int, *, cut: bool = False, skipped: str = ""
    ) -> None:
        """A memory or a context provider added to (or was skipped for) a model call (#26)."""


class Resumed(Protocol):
    """What a phase cut short had recorded, which it goes on from
    (``durability.checkpoint.Resume``)."""

    messages: list[ChatMessage]
    timestamps: list[float]
    calls: list[ToolResult]
    restart: bool
    going_on: bool  # restored, and its last turn not yet taken up again

    def pending(self) -> tuple[ToolCallRequest, ...]:
        """The calls of the last turn that have no result in the history."""

    def replay(self, req: ToolCallRequest, idempotent: bool) -> ToolResult | None:
        """The result of pending call *req* without running it, if it is not to be run."""


class Parked(Exception):
    """Raised by `PhaseRecording.park` through the phase's turns: the phase is
    parked in the store (a deferred decision, #27), and ends ``"deferred"``."""


class PhaseRecording(Protocol):
    """One durable phase's recording (``durability.checkpoint.PhaseRecorder``)."""

    id: str
    upto: int  # the phase's history is recorded up to here

    @property
    def parked(self) -> Sequence[object] | None:
        """The calls deferred in the turn under way (None: none)."""

    def defer(self, req: ToolCallRequest, kind: str, note: str) -> bool:
        """The decision on *req*, or its result, is deferred: True if the phase parks."""

    async def park(self, phase: Phase) -> None:
        """Park the phase (its turn's calls were deferred): raises `Parked`."""

    @property
    def resume(self) -> Resumed | None:
        """What the phase goes on from (None: a new phase)."""

    @property
    def sync_turns(self) -> bool:
        """Is each model call preceded by a sync (``durability="turn"``)?"""

    async def synced(self) -> None:
        """Wait until what was recorded so far is durable."""

    def started(self, phase: Phase) -> None:
        """The phase began."""

    def turn(self, phase: Phase, totals: bool = True) -> None:
        """The turns since the last record (a model's reply last)."""

    def tools(self, phase: Phase, results: list[ToolResult], at: float) -> None:
        """A turn's tool results, in call order."""

    def tool_done(self, result: ToolResult) -> None:
        """One call of a parallel batch has ended."""

    def done(self, phase: Phase, result: PhaseResult[object], persisted: bool) -> None:
        """The phase has ended with *result*."""

    def crashed(self, phase: Phase) -> None:
        """The phase's agent crashed while it ran: keep what it recorded."""

    async def begin_tool(self, runner: ToolRunner) -> None:
        """A call to a tool not declared idempotent is about to run: synced first."""


class Checkpointing(Protocol):
    """A runtime's checkpoints, as the loop uses them (``durability.checkpoint.Checkpoints``)."""

    def recorder(self, phase: Phase) -> PhaseRecording | None:
        """The recording of *phase* (None: its agent is not durable)."""

    def check_free(self, phase_id: str) -> None:
        """Raise ``InvalidArgument`` if *phase_id* names a phase in use."""

    def restarted(self, cmd: RunPhase) -> bool:
        """Did the phase of *cmd* crash with its agent, and may it go on?"""

    async def rerun(self, ref: AgentRef[object], cmd: RunPhase, *, linked: bool) -> object:
        """Ask the restarted agent with *cmd* again, until nothing is left to go on from."""

    # (memory, #26: a memory's items are kept in the store as opaque records)
    def memory_records(self, name: str) -> Sequence[bytes]:
        """The records the store holds for the memory *name*, oldest first."""

    def keep_memory(self, name: str, data: bytes) -> None:
        """Append one record of the memory *name* (never waits)."""


class Composer(Protocol):
    """What `AgentRef`'s composing methods call (``composition.composer.COMPOSER``)."""

    async def respond(
        self,
        agent: AgentRef[object],
        request: object,
        *,
        router: object,
        context_label: object,
        escalate: object,
    ) -> Response:
        """The body of ``AgentRef.respond``."""

    async def continue_in_background(
        self, agent: AgentRef[object], response: object, message: object
    ) -> BackgroundRun:
        """The body of ``AgentRef.continue_in_background``."""

    async def start_background(
        self, agent: AgentRef[object], cmd: RunPhase, mode: Mode | None
    ) -> BackgroundRun:
        """Queue *cmd* on *agent* and spawn the actor that waits for it."""

    def session_helper(
        self,
        parent: _AgentState,
        model: Model | str | None,
        *,
        instructions: str,
        max_turns: int,
        final_answer: bool,
        name: str | None,
    ) -> Helper:
        """The body of ``AgentRef.helper``."""

    def spawn_child(
        self,
        parent: _AgentState,
        spec: AgentSpec[_T],
        *,
        name: str | None = None,
        budget: Budget | None = None,
    ) -> AgentRef[_T]:
        """Spawn *spec* as a subagent of *parent*."""

    async def map_phases(
        self,
        services: Services,
        sup: SupervisorRef,
        spec: AgentSpec[_T],
        inputs: Sequence[str],
        *,
        concurrency: int,
        budget: Budget | None,
        parent: _AgentState | None,
    ) -> list[PhaseResult[_T] | ActorError]:
        """One fresh agent per input, at most *concurrency* at once."""


# -- planning and delegation (#26: planning) ------------------------------------------

PhaseRunner = Callable[["RunPhase"], Coroutine[object, None, "PhaseResult[object]"]]
"""Runs one phase of an agent: what ``AgentRef.run`` would do with a ``RunPhase``."""


class RunDriver(Protocol):
    """What runs a request as more than one phase: ``AgentSpec.planning``
    (``planning.planner.Planning``) or ``AgentSpec.delegation``
    (``delegation.registry.Delegation``). ``AgentRef.run`` hands such an
    agent's requests to it (the spec's planning first, else its delegation)."""

    def check_spec(self, spec: AgentSpec[object]) -> None:
        """Raise ``InvalidArgument`` (or ``PermissionEscalation``) if *spec* may not hold it."""

    def check_run(self, planning: object) -> None:
        """Raise ``InvalidArgument`` if ``run(planning=...)`` may not be *planning*."""

    def drive(
        self,
        agent: AgentRef[object],
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
