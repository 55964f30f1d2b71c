"""The events the runtime publishes, and the stream that delivers them.

Every event is a frozen [`Event`][agentrio.events.Event] (a [`Message`][agentrio.Message]) whose
``path`` names the actor, supervisor or agent it is about; ``rt.events()``
gives an [`EventStream`][agentrio.events.EventStream] of them:

    import agentrio
    from agentrio.events import PhaseEnded, ToolEnded

    async with rt.events() as stream:
        async for event in stream:
            match event:
                case ToolEnded(tool=tool, status=status):
                    print(event.path, tool, status)
                case PhaseEnded(stop_reason=why):
                    print(event.path, "ended:", why)

This module is their one public home: ``agentrio.events.ToolEnded``, not
``agentrio.ToolEnded``. The messages you send (``RunPhase``,
``ToolCallRequest``, ...) are at the top level.
"""

from .actors.bus import EventStream
from .agents.loop.stream import PartialOutput, RunDone, RunItem
from .messages import (  # (#26: memory, context providers, plans, goals, skills, security)
    ActorExited,
    ActorFailed,
    ActorRestarted,
    ActorStarted,
    BudgetExhausted,
    CheckpointTorn,
    CompactionFailed,
    ConfirmationReceived,
    ConfirmationRequired,
    ContextCompacted,
    ContextProvided,
    ContextProviderFailed,
    ContextTruncated,
    ContinuationInjected,
    DeadLetter,
    Event,
    EventsLost,
    GoalAchieved,
    GoalExtracted,
    GoalProgress,
    MemoriesSearched,
    MemoryCleared,
    MemoryRecalled,
    MemoryStored,
    OutputSanitised,
    PermissionDenied,
    PhaseDeferred,
    PhaseEnded,
    PhaseError,
    PhaseResumed,
    PhaseStarted,
    PlanningEnded,
    PlanningStarted,
    ResumedPhaseEnded,
    Routed,
    RuntimeOpened,
    SkillActivated,
    Stalled,
    StepEnded,
    StepStarted,
    SubagentEnded,
    SubagentProgress,
    SubagentStarted,
    SupervisorEscalated,
    TaintBlocked,
    TaskUpdated,
    TextDelta,
    TierFellBack,
    ToolDeadLetter,
    ToolEnded,
    ToolRetry,
    ToolStarted,
    TraceWriteFailed,
    TurnEnded,
    TurnStarted,
    Waited,
    WorkspaceWriteFailed,
)

__all__ = [
    # the base class and the stream
    "Event",
    "EventStream",
    # actors and supervisors
    "ActorStarted",
    "ActorExited",
    "ActorFailed",
    "ActorRestarted",
    "DeadLetter",
    "SupervisorEscalated",
    "EventsLost",
    "RuntimeOpened",
    # phases and turns
    "Routed",
    "PhaseStarted",
    "PhaseEnded",
    "PhaseError",
    "TurnStarted",
    "TurnEnded",
    "TextDelta",
    "Stalled",
    "ContinuationInjected",
    "BudgetExhausted",
    "Waited",
    "WorkspaceWriteFailed",
    "TraceWriteFailed",
    # durable agents (open_runtime(store=...))
    "PhaseResumed",
    "ResumedPhaseEnded",
    "CheckpointTorn",
    "PhaseDeferred",
    # tool calls
    "ToolStarted",
    "ToolEnded",
    "ToolRetry",
    "ToolDeadLetter",
    # contexts
    "ContextTruncated",
    "ContextCompacted",
    "CompactionFailed",
    # permissions and subagents
    "ConfirmationRequired",
    "ConfirmationReceived",
    "PermissionDenied",
    "SubagentStarted",
    "SubagentEnded",
    # memory and context providers (#26)
    "MemoryStored",
    "MemoryRecalled",
    "MemoriesSearched",
    "MemoryCleared",
    "ContextProvided",
    "ContextProviderFailed",
    # plans, goals and delegation (#26)
    "PlanningStarted",
    "PlanningEnded",
    "StepStarted",
    "StepEnded",
    "TaskUpdated",
    "GoalExtracted",
    "GoalProgress",
    "GoalAchieved",
    "SubagentProgress",
    # a run's own stream (AgentRef.stream): its items
    "RunItem",
    "PartialOutput",
    "RunDone",
    # tier fallback, skills, security (#26)
    "TierFellBack",
    "SkillActivated",
    "TaintBlocked",
    "OutputSanitised",
]
