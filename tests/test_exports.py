"""The public surface: pinned, documented, and made of handles without constructors."""

from __future__ import annotations

import inspect
import types

import pytest

import agentrio

PUBLIC = [
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorExited",
    "ActorFailed",
    "ActorRef",
    "ActorRestarted",
    "ActorStarted",
    "ActorStatistics",
    "ActorStopped",
    "AgentRef",
    "AgentSpec",
    "AgentrioError",
    "Approval",
    "AskTimeout",
    "AttemptMeter",
    "AuthError",
    "BackgroundRun",
    "Backoff",
    "BadResponse",
    "BlockingAgent",
    "BlockingRuntime",
    "BlockingStream",
    "Budget",
    "BudgetExhausted",
    "ChatMessage",
    "Compaction",
    "CompactionFailed",
    "Config",
    "ConfigError",
    "ConfirmationReceived",
    "ConfirmationRequired",
    "ContextAppend",
    "ContextCompact",
    "ContextCompacted",
    "ContextRead",
    "ContextReadTurns",
    "ContextReset",
    "ContextTruncated",
    "ContinuationInjected",
    "DeadLetter",
    "Deny",
    "DuplicateName",
    "Event",
    "EventStream",
    "EventsLost",
    "FinishReason",
    "Helper",
    "HelperResult",
    "HelperTurnsExceeded",
    "InlineActor",
    "InvalidArgument",
    "Lane",
    "LanePolicy",
    "Lanes",
    "Lease",
    "Limits",
    "MailboxFull",
    "Message",
    "Mode",
    "Model",
    "ModelReply",
    "ModelSettings",
    "NotAMessage",
    "PermissionDenied",
    "PermissionEscalation",
    "PermissionPolicy",
    "PhaseEnded",
    "PhaseError",
    "PhaseResult",
    "PhaseStarted",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderModel",
    "ProviderStatistics",
    "ProviderUnavailable",
    "RateLimited",
    "Response",
    "RestartIntensity",
    "RestartIntensityExceeded",
    "RestartPolicy",
    "Route",
    "Routed",
    "Rule",
    "RuleRouter",
    "RunPhase",
    "Runtime",
    "RuntimeClosed",
    "SelfAsk",
    "Stalled",
    "StepInfo",
    "StopReason",
    "Strategy",
    "SubagentEnded",
    "SubagentStarted",
    "SupervisorEscalated",
    "SupervisorRef",
    "SupervisorStatistics",
    "TextDelta",
    "ThinkingBlock",
    "Tool",
    "ToolArgumentsInvalid",
    "ToolCallRequest",
    "ToolContext",
    "ToolDeadLetter",
    "ToolEnded",
    "ToolError",
    "ToolResult",
    "ToolResultInvalid",
    "ToolRetry",
    "ToolSchema",
    "ToolStarted",
    "ToolStatus",
    "Turn",
    "TurnEnded",
    "TurnStarted",
    "UnknownName",
    "Usage",
    "UsageError",
    "UsageInvalid",
    "UsageTotals",
    "Workspace",
    "WorkspaceWriteFailed",
    "agent_tool",
    "allow",
    "ask",
    "deny",
    "estimate_tokens",
    "load_config",
    "looks_unfinished",
    "open_runtime",
    "open_runtime_sync",
    "parse_config",
    "run_sync",
    "terminal_approver",
    "tool",
]


def _public_names() -> list[str]:
    return sorted(
        name
        for name, value in vars(agentrio).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "__version__"
    )


def test_public_names_are_pinned() -> None:
    assert _public_names() == PUBLIC


def test_version() -> None:
    assert agentrio.__version__ == "0.1.0"


@pytest.mark.parametrize("name", PUBLIC)
def test_exported_objects_come_from_agentrio(name: str) -> None:
    value = getattr(agentrio, name)
    module = getattr(value, "__module__", None)
    if module is not None and (inspect.isclass(value) or inspect.isfunction(value)):
        assert module.startswith("agentrio."), module


@pytest.mark.parametrize(
    "name", [n for n in PUBLIC if inspect.isclass(getattr(agentrio, n)) or n == "open_runtime"]
)
def test_public_classes_and_functions_have_docstrings(name: str) -> None:
    assert inspect.getdoc(getattr(agentrio, name))


@pytest.mark.parametrize(
    "cls", [agentrio.ActorRef, agentrio.SupervisorRef, agentrio.Runtime, agentrio.EventStream]
)
def test_handles_have_no_public_constructor(cls: type) -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        cls()


# The layering of the modules (every import, wherever written) is checked by
# tests/test_layers.py.
