"""The types of what agentrio hands you: results, handles, snapshots, hook arguments, aliases.

You meet these as return values, as the arguments of your hooks and models,
inside messages, or as the allowed strings of a field; agentrio makes them,
and you name them in annotations, ``isinstance`` checks and ``match``
statements:

    from agentrio.types import HelperResult, StopReason

    def done(result: HelperResult) -> StopReason:
        return result.stop_reason

This module is their one public home (``agentrio.types.Turn``, not
``agentrio.Turn``). What you construct, call, subclass or catch is at the
top level (``agentrio.AgentSpec``, ``agentrio.tool``, ...); the events are in
`agentrio.events` and every exception in `agentrio.errors`.
"""

import typing as _typing

from . import _lazy
from .actors.actor import ActorStatistics, RestartPolicy
from .agents.budgets.budget import Lease
from .agents.budgets.usage import UsageTotals
from .agents.loop.handles import BackgroundRun, HelperResult, Response
from .agents.loop.spec import StepInfo
from .agents.loop.stream import RunStream
from .agents.tools.policy import Rule
from .host import BlockingAgent, BlockingRunStream, BlockingRuntime, BlockingStream
from .messages import (
    ContentPart,
    ContextAppend,
    ContextCompact,
    ContextRead,
    ContextReadTurns,
    ContextReset,
    FinishReason,
    Lane,
    PlanningMode,
    PlanTask,
    RawBlock,
    StopReason,
    TaskStatus,
    TextPart,
    ThinkingBlock,
    ToolStatus,
    Turn,
)
from .providers.base import AttemptMeter, OutputSchema, ToolSchema
from .providers.provider import ProviderModel, ProviderStatistics
from .supervisors.ref import SupervisorStatistics
from .supervisors.restart import Strategy

__all__ = [
    # results and handles you are given
    "HelperResult",
    "Response",
    "BackgroundRun",
    "ProviderModel",
    "Lease",
    "BlockingRuntime",
    "BlockingAgent",
    "BlockingStream",
    "BlockingRunStream",
    "RunStream",
    "PendingCall",
    # a checkpoint store read (#27)
    "StoreReader",
    "PhaseSummary",
    "RecordedTurn",
    "PhaseStatus",
    # statistics snapshots and usage totals
    "ActorStatistics",
    "SupervisorStatistics",
    "ProviderStatistics",
    "UsageTotals",
    # what your hooks, approvers and models are given
    "StepInfo",
    "AttemptMeter",
    "Rule",
    "ToolSchema",
    "OutputSchema",
    # plans (#26): what a planner answers, a task as it stands
    "Plan",
    "PlannedTask",
    "PlanTask",
    # parts of messages
    "ThinkingBlock",
    "RawBlock",
    "TextPart",
    "Turn",
    # the messages a context actor answers
    "ContextRead",
    "ContextReadTurns",
    "ContextAppend",
    "ContextReset",
    "ContextCompact",
    # the allowed strings of a field (typing.Literal aliases)
    "StopReason",
    "FinishReason",
    "ToolStatus",
    "Lane",
    "ContentPart",
    "PlanningMode",
    "TaskStatus",
    "Strategy",
    "RestartPolicy",
    # the parts of a skill registry and a security provider (#26)
    "Skill",
    "load_skill",
    "Sanitiser",
    "Redaction",
    "SECRET_RULES",
]

# The types of the feature rooms most runs never use (#26, #27: the checkpoint
# store's readers, plans, skills, security), loaded on first use (agentrio/_lazy.py).
_LAZY = {
    "PendingCall": "agentrio.agents.durability.deferred",
    "StoreReader": "agentrio.agents.durability.reader",
    "PhaseStatus": "agentrio.agents.durability.summary",
    "PhaseSummary": "agentrio.agents.durability.summary",
    "RecordedTurn": "agentrio.agents.durability.summary",
    "Plan": "agentrio.agents.planning.plan",
    "PlannedTask": "agentrio.agents.planning.plan",
    "SECRET_RULES": "agentrio.agents.security.sanitise",
    "Redaction": "agentrio.agents.security.sanitise",
    "Sanitiser": "agentrio.agents.security.sanitise",
    "Skill": "agentrio.agents.skills.skill",
    "load_skill": "agentrio.agents.skills.skill",
}
if _typing.TYPE_CHECKING:  # (what type checkers and the reference's generator read)
    from .agents.durability.deferred import PendingCall
    from .agents.durability.reader import StoreReader
    from .agents.durability.summary import PhaseStatus, PhaseSummary, RecordedTurn
    from .agents.planning.plan import Plan, PlannedTask
    from .agents.security.sanitise import SECRET_RULES, Redaction, Sanitiser
    from .agents.skills.skill import Skill, load_skill
else:
    __getattr__, __dir__ = _lazy.lazy_names(__name__, _LAZY)
