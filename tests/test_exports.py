"""The public surface: pinned, one home per name, documented, and made of handles
without constructors."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
import logging
import pathlib
import pickle
import subprocess
import sys
import traceback
import types
import typing

import msgspec
import pytest

import agentrio
import agentrio.errors
import agentrio.events
import agentrio.memory
import agentrio.messages
import agentrio.testing
import agentrio.types

# What a user types: kept to 60 names or fewer.
PUBLIC = [
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorRef",
    "ActorStopped",
    "AgentRef",
    "AgentSpec",
    "AgentrioError",
    "Approval",
    "AskTimeout",
    "Backoff",
    "Budget",
    "ChatMessage",
    "Compaction",
    "Config",
    "ConfigError",
    "Defer",
    "Delegate",
    "Delegation",
    "Deny",
    "DocumentPart",
    "Helper",
    "ImagePart",
    "InlineActor",
    "InvalidArgument",
    "LanePolicy",
    "Lanes",
    "Limits",
    "Message",
    "Mode",
    "Model",
    "ModelReply",
    "ModelRetry",
    "ModelSettings",
    "PermissionPolicy",
    "PhaseResult",
    "Planning",
    "PromptSlots",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "RestartIntensity",
    "Route",
    "RuleRouter",
    "RunPhase",
    "Runtime",
    "SecurityProvider",
    "SkillRegistry",
    "SupervisorRef",
    "Tool",
    "ToolCallRequest",
    "ToolContext",
    "ToolResult",
    "Usage",
    "Workspace",
    "agent_tool",
    "allow_rule",
    "ask_rule",
    "deny_rule",
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

EVENTS = [
    "ActorExited",
    "ActorFailed",
    "ActorRestarted",
    "ActorStarted",
    "BudgetExhausted",
    "CheckpointTorn",
    "CompactionFailed",
    "ConfirmationReceived",
    "ConfirmationRequired",
    "ContextCompacted",
    "ContextProvided",
    "ContextProviderFailed",
    "ContextTruncated",
    "ContinuationInjected",
    "DeadLetter",
    "Event",
    "EventStream",
    "EventsLost",
    "GoalAchieved",
    "GoalExtracted",
    "GoalProgress",
    "MemoriesSearched",
    "MemoryCleared",
    "MemoryRecalled",
    "MemoryStored",
    "OutputSanitised",
    "PartialOutput",
    "PermissionDenied",
    "PhaseDeferred",
    "PhaseEnded",
    "PhaseError",
    "PhaseResumed",
    "PhaseStarted",
    "PlanningEnded",
    "PlanningStarted",
    "ResumedPhaseEnded",
    "Routed",
    "RunDone",
    "RunItem",
    "RuntimeOpened",
    "SkillActivated",
    "Stalled",
    "StepEnded",
    "StepStarted",
    "SubagentEnded",
    "SubagentProgress",
    "SubagentStarted",
    "SupervisorEscalated",
    "TaintBlocked",
    "TaskUpdated",
    "TextDelta",
    "TierFellBack",
    "ToolDeadLetter",
    "ToolEnded",
    "ToolRetry",
    "ToolStarted",
    "TraceWriteFailed",
    "TurnEnded",
    "TurnStarted",
    "Waited",
    "WorkspaceWriteFailed",
]

ERRORS = [
    "ActorCrashed",
    "ActorError",
    "ActorStopped",
    "AgentrioError",
    "AskTimeout",
    "AuthError",
    "BadResponse",
    "ConfigError",
    "ContextTooLong",
    "DuplicateName",
    "HelperTurnsExceeded",
    "HostLost",
    "InvalidArgument",
    "MailboxFull",
    "ModelRetry",
    "NotAMessage",
    "OutputInvalid",
    "PermissionEscalation",
    "PhaseFailed",
    "PlanFailed",
    "ProviderError",
    "ProviderUnavailable",
    "RateLimited",
    "RemoteError",
    "RestartIntensityExceeded",
    "RuntimeClosed",
    "SelfAsk",
    "SpecVersionMismatch",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolResultInvalid",
    "TraceError",
    "UnknownName",
    "UsageError",
    "UsageInvalid",
]

# The exceptions people catch: at the top level too.
COMMON_ERRORS = [
    "ActorCrashed",
    "ActorError",
    "ActorStopped",
    "AgentrioError",
    "AskTimeout",
    "ConfigError",
    "InvalidArgument",
    "ModelRetry",  # (raised, not caught: by an output validator)
    "ProviderError",
]

TYPES = [
    "ActorStatistics",
    "AttemptMeter",
    "BackgroundRun",
    "BlockingAgent",
    "BlockingRunStream",
    "BlockingRuntime",
    "BlockingStream",
    "ContentPart",
    "ContextAppend",
    "ContextCompact",
    "ContextRead",
    "ContextReadTurns",
    "ContextReset",
    "FinishReason",
    "HelperResult",
    "Lane",
    "Lease",
    "OutputSchema",
    "PendingCall",
    "PhaseStatus",
    "PhaseSummary",
    "Plan",
    "PlanTask",
    "PlannedTask",
    "PlanningMode",
    "ProviderModel",
    "ProviderStatistics",
    "RawBlock",
    "RecordedTurn",
    "Redaction",
    "Response",
    "RestartPolicy",
    "Rule",
    "RunStream",
    "SECRET_RULES",
    "Sanitiser",
    "Skill",
    "StepInfo",
    "StopReason",
    "StoreReader",
    "Strategy",
    "SupervisorStatistics",
    "TaskStatus",
    "TextPart",
    "ThinkingBlock",
    "ToolSchema",
    "ToolStatus",
    "Turn",
    "UsageTotals",
    "load_skill",
]

# Memory and context providers (#26)
MEMORY = [
    "BM25",
    "ContextProvider",
    "ContextProviders",
    "ContextQuery",
    "Embeddings",
    "FileRetrieval",
    "Memory",
    "MemoryHandle",
    "MemoryItem",
    "Scorer",
    "keep_ok_results",
]

# Every public namespace but the top level, with the names it is the home of.
NAMESPACES: dict[types.ModuleType, list[str]] = {
    agentrio.events: EVENTS,
    agentrio.errors: ERRORS,
    agentrio.types: TYPES,
    agentrio.memory: MEMORY,
}


def _home(name: str) -> str:
    for module, names in NAMESPACES.items():
        if name in names:
            return module.__name__
    return "agentrio"


# (namespace, name) for every public name, each once, in its home.
ALL = [(_home(n), n) for n in sorted({*PUBLIC, *EVENTS, *ERRORS, *TYPES, *MEMORY})]


def _public_names(module: types.ModuleType) -> list[str]:
    # A name loaded on first use (agentrio/_lazy.py) is in vars() once used, and
    # in the module's dir() always: each is resolved, so one its room lacks fails.
    return sorted(
        name
        for name in {*vars(module), *dir(module)}
        if not name.startswith("_")
        and not isinstance(getattr(module, name), types.ModuleType)
        and name != "__version__"
    )


def _value(home: str, name: str) -> object:
    return getattr(importlib.import_module(home), name)


def test_public_names_are_pinned() -> None:
    assert _public_names(agentrio) == PUBLIC
    assert sorted(agentrio.__all__) == PUBLIC


def test_the_top_level_is_small() -> None:
    # (61: ModelRetry, raised in a validator as pydantic-ai's users do, #23;
    # 67: #26's Planning, Delegation, Delegate, PromptSlots, SkillRegistry,
    # SecurityProvider; 68: Defer, an approver's or a tool's answer "later", #27.)
    assert len(PUBLIC) <= 68


@pytest.mark.parametrize("module", list(NAMESPACES), ids=lambda m: m.__name__)
def test_namespaces_are_pinned(module: types.ModuleType) -> None:
    assert sorted(module.__all__) == NAMESPACES[module]
    if module is not agentrio.errors:  # (errors.py defines them, and imports nothing public)
        assert _public_names(module) == NAMESPACES[module]


def test_every_name_has_one_home() -> None:
    homes = [*EVENTS, *ERRORS, *TYPES, *MEMORY]
    assert len(homes) == len(set(homes))
    # Only the common exceptions are at the top level as well as in their home.
    assert set(PUBLIC) & set(homes) == set(COMMON_ERRORS)
    for name in COMMON_ERRORS:
        assert getattr(agentrio, name) is getattr(agentrio.errors, name)


def test_every_event_and_message_of_agentrio_messages_is_public() -> None:
    found = {
        name
        for name, value in vars(agentrio.messages).items()
        if inspect.isclass(value) and issubclass(value, msgspec.Struct)
    }
    events = {n for n in found if issubclass(getattr(agentrio.messages, n), agentrio.events.Event)}
    assert events <= set(EVENTS)
    assert found - events <= {*PUBLIC, *TYPES}


def test_version() -> None:
    assert agentrio.__version__ == importlib.metadata.version("agentrio")


def _fixed(home: str, name: str) -> bool:
    value = _value(home, name)
    return inspect.isclass(value) or inspect.isfunction(value)


@pytest.mark.parametrize(("home", "name"), [hn for hn in ALL if _fixed(*hn)])
def test_module_is_the_public_home(home: str, name: str) -> None:
    value = _value(home, name)
    assert value.__module__ == home  # type: ignore[attr-defined]
    # So pickle (and anyone else) finds it there.
    assert pickle.loads(pickle.dumps(value)) is value


@pytest.mark.parametrize("name", agentrio.testing.__all__)
def test_the_testing_doubles_are_named_in_agentrio_testing(name: str) -> None:
    value = getattr(agentrio.testing, name)
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return  # (ReplyHandler: a typing alias)
    # (Reply is agentrio.ModelReply, whose home is agentrio.)
    top = getattr(agentrio, value.__name__, None) is value
    home = "agentrio" if top else "agentrio.testing"
    assert value.__module__ == home
    assert pickle.loads(pickle.dumps(value)) is value
    if inspect.isclass(value):
        typing.get_type_hints(value, include_extras=True)  # (read in their new home)
        if issubclass(value, msgspec.Struct):
            msgspec.json.Decoder(value)


def test_reprs_and_tracebacks_say_the_public_name() -> None:
    assert repr(agentrio.AgentSpec) == "<class 'agentrio.AgentSpec'>"
    assert repr(agentrio.events.ToolEnded) == "<class 'agentrio.events.ToolEnded'>"
    assert repr(agentrio.types.StepInfo) == "<class 'agentrio.types.StepInfo'>"
    (line,) = traceback.format_exception_only(agentrio.errors.MailboxFull("full", path="w"))
    assert line == "agentrio.errors.MailboxFull: full\n"
    (line,) = traceback.format_exception_only(agentrio.InvalidArgument("bad"))
    assert line == "agentrio.errors.InvalidArgument: bad\n"


@pytest.mark.parametrize(
    ("home", "name"), [hn for hn in ALL if inspect.isclass(_value(*hn))], ids="{0[1]}".format
)
def test_annotations_resolve_in_the_public_home(home: str, name: str) -> None:
    # Annotations are strings, read in the module __module__ names: the move
    # must not leave them naming what that module does not hold.
    cls = _value(home, name)
    assert isinstance(cls, type)
    typing.get_type_hints(cls, include_extras=True)
    if issubclass(cls, msgspec.Struct):
        msgspec.msgpack.Decoder(cls)
        msgspec.json.Decoder(cls)


def test_events_round_trip_and_pickle_in_their_new_home() -> None:
    event = agentrio.events.TurnEnded(path="a", iteration=2, usage=agentrio.Usage(3, 4))
    raw = msgspec.msgpack.encode(event)
    assert msgspec.msgpack.decode(raw, type=agentrio.events.TurnEnded) == event
    assert pickle.loads(pickle.dumps(event)) == event
    closed = agentrio.events.ActorExited(path="a", reason="crashed")
    assert msgspec.json.decode(msgspec.json.encode(closed), type=type(closed)) == closed
    error = agentrio.errors.UnknownName("nobody")
    assert type(pickle.loads(pickle.dumps(error))) is agentrio.errors.UnknownName


def test_the_permission_rule_constructors_do_not_read_as_ask() -> None:
    assert not hasattr(agentrio, "ask")
    assert not hasattr(agentrio, "allow") and not hasattr(agentrio, "deny")
    rule = agentrio.ask_rule("write_*")
    assert isinstance(rule, agentrio.types.Rule) and rule.action == "ask"
    assert agentrio.allow_rule("x").action == "allow"
    assert agentrio.deny_rule("x").action == "deny"


@pytest.mark.parametrize(
    ("home", "name"),
    [hn for hn in ALL if inspect.isclass(_value(*hn)) or inspect.isfunction(_value(*hn))],
    ids="{0[1]}".format,
)
def test_public_classes_and_functions_have_docstrings(home: str, name: str) -> None:
    assert inspect.getdoc(_value(home, name))


@pytest.mark.parametrize(
    "cls",
    [
        agentrio.ActorRef,
        agentrio.SupervisorRef,
        agentrio.Runtime,
        agentrio.events.EventStream,
        agentrio.Helper,
        agentrio.types.BackgroundRun,
        agentrio.types.BlockingRuntime,
        agentrio.types.BlockingAgent,
        agentrio.types.BlockingStream,
        agentrio.types.BlockingRunStream,
        agentrio.types.RunStream,
    ],
)
def test_handles_have_no_public_constructor(cls: type) -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        cls()


def test_importing_agentrio_installs_only_a_null_handler() -> None:
    # In a fresh interpreter: what logging holds once every public module is imported.
    code = """
import json, logging
import agentrio, agentrio.actors, agentrio.supervisors, agentrio.events, agentrio.types
import agentrio.errors
import agentrio.testing, agentrio.mcp, agentrio.otel, agentrio.cli, agentrio.demo
names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "agentrio"]
loggers = [logging.getLogger(), *map(logging.getLogger, names)]
print(json.dumps({
    "names": names,
    "handlers": [repr(h) for l in loggers for h in l.handlers],
    "levels": [l.level for l in loggers[1:]],
}))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    found = json.loads(result.stdout)
    assert {"agentrio.providers", "agentrio.supervisors.supervisor"} <= set(found["names"])
    # One handler: the NullHandler of "agentrio", as a library's (docs/howto/logging.md).
    assert found["handlers"] == ["<NullHandler (NOTSET)>"]
    assert set(found["levels"]) == {logging.NOTSET}
    assert [type(h) for h in logging.getLogger("agentrio").handlers] == [logging.NullHandler]


# The feature rooms that `import agentrio` leaves unloaded (agentrio/_lazy.py):
# their public names load them on first use.
LAZY_ROOMS = (
    "agentrio.agents.delegation",
    "agentrio.agents.planning",
    "agentrio.agents.security",
    "agentrio.agents.skills",
    "agentrio.agents.durability",
    "agentrio.store",
    "agentrio.testing.fake_server",
    "agentrio.providers.anthropic",
    "agentrio.providers._anthropic_blocks",
    "agentrio.providers.ollama",
    "agentrio.providers.responses",
    "difflib",
    "tomllib",
)


def _in_fresh_interpreter(code: str) -> object:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(result.stdout)


def test_import_agentrio_leaves_the_feature_rooms_unloaded() -> None:
    # Every public namespace imported, and an agent's run made, in a fresh
    # interpreter: none of the rooms is loaded (each is about 0.1-0.5 MB in
    # every process; see docs/design.md, "Rooms (#25): measured").
    code = f"""
import json, sys
import agentrio, agentrio.events, agentrio.types, agentrio.memory, agentrio.errors
import agentrio.testing, agentrio.otel
from agentrio.testing import ScriptedModel, Reply

spec = agentrio.AgentSpec(name="a", model=ScriptedModel([Reply(text="hi")]))
assert agentrio.run_sync(spec, "hello").final_text == "hi"
rooms = {LAZY_ROOMS!r}
print(json.dumps(sorted(m for m in sys.modules if m.startswith(rooms))))
"""
    assert _in_fresh_interpreter(code) == []


def test_the_names_loaded_on_first_use_are_there_for_every_way_of_asking() -> None:
    code = """
import json, sys
import agentrio, agentrio.types
from agentrio import Planning
names = sorted(set(agentrio.__all__) - set(vars(agentrio)))
print(json.dumps({
    "from_import": Planning.__module__,
    "dir": sorted(set(agentrio.__all__) - set(dir(agentrio))),
    "types_dir": sorted(set(agentrio.types.__all__) - set(dir(agentrio.types))),
    "homes": [agentrio.types.PendingCall.__module__, agentrio.types.load_skill.__module__],
    "loaded": "agentrio.agents.durability.deferred" in sys.modules,
    "unloaded_left": names,
    "store": agentrio.store.DirectoryStore.__module__,  # (a public module, as before)
}))
"""
    found = _in_fresh_interpreter(code)
    assert found == {
        "from_import": "agentrio",
        "dir": [],
        "types_dir": [],
        "homes": ["agentrio.types", "agentrio.types"],
        "loaded": True,
        # (Planning was asked for, and its room loaded delegation's, whose names are
        # put in place too: two of agentrio's are still to load)
        "unloaded_left": ["SecurityProvider", "SkillRegistry"],
        "store": "agentrio.store",
    }
    with pytest.raises(AttributeError, match="has no attribute 'Planing'"):
        agentrio.Planing  # type: ignore[attr-defined]  # noqa: B018


def test_a_room_loaded_by_agentrio_itself_names_its_public_home(tmp_path: object) -> None:
    # open_runtime(store=...) loads the checkpoints' room: the public names among
    # its modules (PendingCall, StoreReader...) say agentrio.types at once, before
    # any code names them there.
    code = f"""
import json, sys
import trio
import agentrio

async def main():
    async with agentrio.open_runtime(store={str(tmp_path)!r}) as rt:
        assert rt.pending_approvals() == []

before = "PendingCall" in vars(agentrio.types)
trio.run(main)
deferred = sys.modules["agentrio.agents.durability.deferred"]
reader = sys.modules["agentrio.agents.durability.reader"]
print(json.dumps([before, deferred.PendingCall.__module__, reader.StoreReader.__module__,
                  "PhaseSummary" in vars(agentrio.types)]))
"""
    assert _in_fresh_interpreter(code) == [False, "agentrio.types", "agentrio.types", True]


def test_type_checkers_see_the_names_loaded_on_first_use(tmp_path: pathlib.Path) -> None:
    # Imported for them under TYPE_CHECKING; the namespaces' __getattr__ is hidden
    # from them (else any misspelt name would type-check, as what it returns).
    api = pytest.importorskip("mypy.api")
    user = tmp_path / "user.py"
    user.write_text(
        "import agentrio\n"
        "import agentrio.testing\n"
        "import agentrio.types\n"
        "from agentrio import Planning\n"
        "planning: Planning | None = None\n"
        "reader: agentrio.types.StoreReader | None = None\n"
        "server: agentrio.testing.FakeLLMServer | None = None\n"
        "skills: agentrio.SkillRegistry | None = None\n"
        "agentrio.Planing\n"
        "agentrio.types.StoreReeder\n"
    )
    out, err, status = api.run(["--strict", "--no-incremental", str(user)])
    assert status == 1, out + err
    assert out.splitlines() == [
        f'{user}:9: error: Module has no attribute "Planing"; maybe "Planning"?  [attr-defined]',
        f'{user}:10: error: Module has no attribute "StoreReeder"; maybe "StoreReader"?  '
        "[attr-defined]",
        "Found 2 errors in 1 file (checked 1 source file)",
    ]
