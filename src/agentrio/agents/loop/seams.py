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

from collections.abc import Awaitable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

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
    from .spec import AgentSpec

__all__ = [
    "Checkpointing",
    "Composer",
    "Observer",
    "Parked",
    "PhaseRecording",
    "Resumed",
]

_T = TypeVar("_T")

# The loop's own types that the seams pass: the loop's upper modules define them,
# and import this module (Services holds the seams), so naming them here would
# close a circle inside the loop. The rooms that meet these Protocols take each
# by its real type (Any is compatible with it); the loop passes the real ones.
Phase: TypeAlias = Any  # agents.loop.phase.Phase
_AgentState: TypeAlias = Any  # agents.loop.state._AgentState
AgentRef: TypeAlias = Any  # agents.loop.ref.AgentRef (AgentRef)
Response: TypeAlias = Any  # agents.loop.handles.Response
BackgroundRun: TypeAlias = Any  # agents.loop.handles.BackgroundRun
Helper: TypeAlias = Any  # agents.loop.handles.Helper
Services: TypeAlias = Any  # agents.loop.services.Services


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

    def begin_tool(self, runner: ToolRunner) -> Awaitable[object] | None:
        """A call to a tool not declared idempotent is about to run: synced first
        (the wait for the sync, awaited at once; None: nothing to wait for)."""


class Checkpointing(Protocol):
    """A runtime's checkpoints, as the loop uses them (``durability.checkpoint.Checkpoints``)."""

    def recorder(self, phase: Phase) -> PhaseRecording | None:
        """The recording of *phase* (None: its agent is not durable)."""

    def check_free(self, phase_id: str) -> None:
        """Raise ``InvalidArgument`` if *phase_id* names a phase in use."""

    def new_id(self) -> str:
        """A phase id no other phase has (the runtime's random prefix and a count)."""

    def restarted(self, cmd: RunPhase) -> bool:
        """Did the phase of *cmd* crash with its agent, and may it go on?"""

    async def rerun(self, ref: AgentRef, cmd: RunPhase, *, linked: bool) -> object:
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
        agent: AgentRef,
        request: object,
        *,
        router: object,
        context_label: object,
        escalate: object,
    ) -> Response:
        """The body of ``AgentRef.respond``."""

    async def continue_in_background(
        self, agent: AgentRef, response: object, message: object
    ) -> BackgroundRun:
        """The body of ``AgentRef.continue_in_background``."""

    async def start_background(
        self, agent: AgentRef, cmd: RunPhase, mode: Mode | None
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
    ) -> AgentRef:
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
