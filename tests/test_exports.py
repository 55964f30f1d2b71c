"""The public surface: pinned, documented, and made of handles without constructors."""

from __future__ import annotations

import ast
import inspect
import pathlib
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
    "parse_config",
    "terminal_approver",
    "tool",
]

SRC = pathlib.Path(agentrio.__file__).parent
# The self-contained core (STYLE.md, rule 2): at import time these modules load
# nothing from agentrio but each other: no providers, tools, config, CLI or agents.
CORE = [
    "_checks.py",
    "errors.py",
    "messages.py",
    "core/",
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


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _agentrio_imports(path: pathlib.Path) -> set[str]:
    """The agentrio modules *path* imports when it is imported, as package-relative paths.

    Imports under ``if TYPE_CHECKING:`` and inside functions (loaded on first
    use, not at import) are not counted.
    """
    tree = ast.parse(path.read_text())
    rel = path.relative_to(SRC)
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(rel.parent.parts)[: len(rel.parent.parts) - (node.level - 1)]
            target = [*base, *(node.module or "").split(".")]
            found.add("/".join(p for p in target if p))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
            )
            for name in names:
                if name and name.split(".")[0] == "agentrio":
                    found.add("/".join(name.split(".")[1:]))
        elif isinstance(node, ast.If | ast.Try) and not _is_type_checking_block(node):
            raise AssertionError(f"{rel}: conditional imports at module level; extend the scan")
    return found


def _core_files() -> list[pathlib.Path]:
    files: list[pathlib.Path] = []
    for entry in CORE:
        path = SRC / entry
        files.extend(sorted(path.glob("*.py")) if entry.endswith("/") else [path])
    return files


def _in_core(target: str) -> bool:
    return target in ("_checks", "errors", "messages") or (
        target.startswith("core/") or target == "core"
    )


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_imports_nothing_outside_the_core(path: pathlib.Path) -> None:
    for target in _agentrio_imports(path):
        assert _in_core(target), f"{path.relative_to(SRC)} imports agentrio/{target}"


def test_import_scanner_sees_relative_imports() -> None:
    # Guards the test above against passing because it found nothing.
    assert "core/actor" in _agentrio_imports(SRC / "core" / "supervisor.py")
    assert "errors" in _agentrio_imports(SRC / "core" / "actor.py")
    assert not _in_core("agents/agent")
    assert not _in_core("config")
