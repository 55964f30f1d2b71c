"""agentrio: many concurrent LLM agents in one process, as supervised Trio actors.

Everything public is re-exported here; the modules behind it are private.
"""

from .actors._core import Actor as Actor
from .actors._core import ActorRef as ActorRef
from .actors._core import ActorStatistics as ActorStatistics
from .actors._core import RestartPolicy as RestartPolicy
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
from .messages import DeadLetter as DeadLetter
from .messages import Event as Event
from .messages import EventsLost as EventsLost
from .messages import Message as Message
from .messages import SupervisorEscalated as SupervisorEscalated
from .supervisors.bus import EventStream as EventStream
from .supervisors.runtime import Runtime as Runtime
from .supervisors.runtime import open_runtime as open_runtime
from .supervisors.supervisor import Backoff as Backoff
from .supervisors.supervisor import RestartIntensity as RestartIntensity
from .supervisors.supervisor import Strategy as Strategy
from .supervisors.supervisor import SupervisorRef as SupervisorRef
from .supervisors.supervisor import SupervisorStatistics as SupervisorStatistics

__version__ = "0.1.0"
