"""agentrio: many concurrent LLM agents in one process, as supervised Trio actors.

Everything public is re-exported here; the modules behind it are private.
"""

from .actors._core import Actor as Actor
from .actors._core import ActorRef as ActorRef
from .actors._core import ActorStatistics as ActorStatistics
from .actors._core import RestartPolicy as RestartPolicy
from .actors.agent import AgentRef as AgentRef
from .actors.agent import AgentSpec as AgentSpec
from .actors.agent import StepInfo as StepInfo
from .actors.context import estimate_tokens as estimate_tokens
from .errors import ActorCrashed as ActorCrashed
from .errors import ActorError as ActorError
from .errors import ActorStopped as ActorStopped
from .errors import AgentrioError as AgentrioError
from .errors import AskTimeout as AskTimeout
from .errors import DuplicateName as DuplicateName
from .errors import InvalidArgument as InvalidArgument
from .errors import MailboxFull as MailboxFull
from .errors import NotAMessage as NotAMessage
from .errors import RestartIntensityExceeded as RestartIntensityExceeded
from .errors import RuntimeClosed as RuntimeClosed
from .errors import SelfAsk as SelfAsk
from .errors import UnknownName as UnknownName
from .errors import UsageError as UsageError
from .messages import ActorExited as ActorExited
from .messages import ActorFailed as ActorFailed
from .messages import ActorRestarted as ActorRestarted
from .messages import ActorStarted as ActorStarted
from .messages import BudgetExhausted as BudgetExhausted
from .messages import ChatMessage as ChatMessage
from .messages import ContextAppend as ContextAppend
from .messages import ContextRead as ContextRead
from .messages import ContextReset as ContextReset
from .messages import ContextTruncated as ContextTruncated
from .messages import DeadLetter as DeadLetter
from .messages import Event as Event
from .messages import EventsLost as EventsLost
from .messages import Message as Message
from .messages import ModelReply as ModelReply
from .messages import PhaseEnded as PhaseEnded
from .messages import PhaseError as PhaseError
from .messages import PhaseResult as PhaseResult
from .messages import PhaseStarted as PhaseStarted
from .messages import RunPhase as RunPhase
from .messages import Stalled as Stalled
from .messages import StopReason as StopReason
from .messages import SupervisorEscalated as SupervisorEscalated
from .messages import ToolCallRequest as ToolCallRequest
from .messages import ToolEnded as ToolEnded
from .messages import ToolResult as ToolResult
from .messages import ToolStarted as ToolStarted
from .messages import ToolStatus as ToolStatus
from .messages import TurnEnded as TurnEnded
from .messages import TurnStarted as TurnStarted
from .messages import Usage as Usage
from .providers.base import Model as Model
from .supervisors.budget import Budget as Budget
from .supervisors.budget import Lease as Lease
from .supervisors.budget import UsageTotals as UsageTotals
from .supervisors.bus import EventStream as EventStream
from .supervisors.limits import Limits as Limits
from .supervisors.runtime import Runtime as Runtime
from .supervisors.runtime import open_runtime as open_runtime
from .supervisors.supervisor import Backoff as Backoff
from .supervisors.supervisor import RestartIntensity as RestartIntensity
from .supervisors.supervisor import Strategy as Strategy
from .supervisors.supervisor import SupervisorRef as SupervisorRef
from .supervisors.supervisor import SupervisorStatistics as SupervisorStatistics
from .tools.tool import Tool as Tool
from .tools.tool import ToolSchema as ToolSchema
from .tools.tool import tool as tool
from .workspace import Workspace as Workspace

__version__ = "0.1.0"
