"""agentrio: many concurrent LLM agents in one process, as supervised Trio actors.

The top level holds what you type: what you construct, call, subclass or
catch. The rest has one documented home each:

- `agentrio.events`: the events ``rt.events()`` publishes, ``Event``
  and ``EventStream``;
- `agentrio.errors`: every exception (the common ones are here too);
- `agentrio.types`: the types of what agentrio hands you (results, handles,
  statistics, hook arguments, literal aliases, the context actor's messages);
- `agentrio.testing`: scripted models and a fake LLM server;
- `agentrio.actors`: the kernel's primitives (link, interrupt, alarms,
  linked asks, the event bus) that the agent layer is built on;
- `agentrio.supervisors`: the kernel's supervision tree (`Tree`);
- `agentrio.mcp`: tools from MCP servers (the `mcp` extra).

The modules behind them (``agentrio.agents``, ``agentrio.providers``, ...)
are private: their layout may change.
"""

import sys as _sys
import typing as _typing

from . import _lazy
from . import events as _events
from . import memory as _memory
from . import types as _types
from ._version import __version__ as __version__
from .actors.actor import Actor as Actor
from .actors.actor import ActorRef as ActorRef
from .actors.actor import InlineActor as InlineActor
from .agents.budgets.budget import Budget as Budget
from .agents.budgets.limits import Limits as Limits
from .agents.composition.compose import agent_tool as agent_tool
from .agents.loop.continuation import looks_unfinished as looks_unfinished
from .agents.loop.handles import Helper as Helper
from .agents.loop.prompts import PromptSlots as PromptSlots
from .agents.loop.ref import AgentRef as AgentRef
from .agents.loop.spec import AgentSpec as AgentSpec
from .agents.loop.summary import Compaction as Compaction
from .agents.routing.modes import Mode as Mode
from .agents.routing.router import Route as Route
from .agents.routing.router import RuleRouter as RuleRouter
from .agents.tools.lanes import LanePolicy as LanePolicy
from .agents.tools.lanes import Lanes as Lanes
from .agents.tools.policy import Approval as Approval
from .agents.tools.policy import Defer as Defer
from .agents.tools.policy import Deny as Deny
from .agents.tools.policy import PermissionPolicy as PermissionPolicy
from .agents.tools.policy import allow_rule as allow_rule
from .agents.tools.policy import ask_rule as ask_rule
from .agents.tools.policy import deny_rule as deny_rule
from .agents.tools.policy import terminal_approver as terminal_approver
from .agents.tools.tool import Tool as Tool
from .agents.tools.tool import ToolContext as ToolContext
from .agents.tools.tool import tool as tool
from .config import Config as Config
from .config import load_config as load_config
from .config import parse_config as parse_config
from .errors import ActorCrashed as ActorCrashed
from .errors import ActorError as ActorError
from .errors import ActorStopped as ActorStopped
from .errors import AgentrioError as AgentrioError
from .errors import AskTimeout as AskTimeout
from .errors import ConfigError as ConfigError
from .errors import InvalidArgument as InvalidArgument
from .errors import ModelRetry as ModelRetry
from .errors import ProviderError as ProviderError
from .host import open_runtime_sync as open_runtime_sync
from .host import run_sync as run_sync
from .messages import ChatMessage as ChatMessage
from .messages import DocumentPart as DocumentPart
from .messages import ImagePart as ImagePart
from .messages import Message as Message
from .messages import ModelReply as ModelReply
from .messages import ModelSettings as ModelSettings
from .messages import PhaseResult as PhaseResult
from .messages import RunPhase as RunPhase
from .messages import ToolCallRequest as ToolCallRequest
from .messages import ToolResult as ToolResult
from .messages import Usage as Usage
from .providers.base import Model as Model
from .providers.provider import Provider as Provider
from .providers.provider import ProviderConfig as ProviderConfig
from .providers.tokens import estimate_tokens as estimate_tokens
from .runtime import Runtime as Runtime
from .runtime import open_runtime as open_runtime
from .supervisors.ref import SupervisorRef as SupervisorRef
from .supervisors.restart import Backoff as Backoff
from .supervisors.restart import RestartIntensity as RestartIntensity
from .workspace import Workspace as Workspace

__all__ = [
    # the runtime and its configuration
    "open_runtime",
    "Runtime",
    "open_runtime_sync",
    "run_sync",
    "Config",
    "load_config",
    "parse_config",
    # agents
    "AgentSpec",
    "AgentRef",
    "Limits",
    "Budget",
    "Compaction",
    "Workspace",
    "estimate_tokens",
    "looks_unfinished",
    "ModelRetry",
    # messages, and what a model reads and answers
    "Message",
    "RunPhase",
    "PhaseResult",
    "ChatMessage",
    "ImagePart",
    "DocumentPart",
    "ModelReply",
    "ModelSettings",
    "ToolCallRequest",
    "ToolResult",
    "Usage",
    # models and providers
    "Model",
    "Provider",
    "ProviderConfig",
    # tools
    "tool",
    "Tool",
    "ToolContext",
    # permissions
    "PermissionPolicy",
    "allow_rule",
    "ask_rule",
    "deny_rule",
    "Approval",
    "Deny",
    "terminal_approver",
    "Defer",  # (sessions and deferred decisions, #27)
    # composition
    "agent_tool",
    "Helper",
    # planning and delegation (#26)
    "Planning",
    "Delegation",
    "Delegate",
    # modes, routing and lanes
    "Mode",
    "Route",
    "RuleRouter",
    "Lanes",
    "LanePolicy",
    # prompt slots, skills, security (#26)
    "PromptSlots",
    "SkillRegistry",
    "SecurityProvider",
    # observability
    # actors and supervisors
    "Actor",
    "InlineActor",
    "ActorRef",
    "SupervisorRef",
    "Backoff",
    "RestartIntensity",
    # the common exceptions (their home, with the rest, is agentrio.errors)
    "AgentrioError",
    "InvalidArgument",
    "ConfigError",
    "ActorError",
    "ActorCrashed",
    "ActorStopped",
    "AskTimeout",
    "ProviderError",
]


# The feature rooms most runs never use (#26), loaded on first use (agentrio/_lazy.py):
# ``agentrio.Planning`` or ``from agentrio import Planning`` imports its room then.
# (tests/test_exports.py::test_import_agentrio_leaves_the_feature_rooms_unloaded)
_LAZY = {
    "Delegate": "agentrio.agents.delegation.registry",
    "Delegation": "agentrio.agents.delegation.registry",
    "Planning": "agentrio.agents.planning.planner",
    "SecurityProvider": "agentrio.agents.security.provider",
    "SkillRegistry": "agentrio.agents.skills.registry",
}
if _typing.TYPE_CHECKING:  # (what type checkers and the reference's generator read)
    from .agents.delegation.registry import Delegate as Delegate
    from .agents.delegation.registry import Delegation as Delegation
    from .agents.planning.planner import Planning as Planning
    from .agents.security.provider import SecurityProvider as SecurityProvider
    from .agents.skills.registry import SkillRegistry as SkillRegistry
else:
    # (agentrio.store, the checkpoint stores, is imported when first named too)
    __getattr__, __dir__ = _lazy.lazy_names(__name__, _LAZY, submodules=("store",))


def _fix_module_metadata() -> None:
    """Set ``__module__`` of every public class and function to its public home.

    So reprs, tracebacks and docs say ``agentrio.AgentSpec``,
    ``agentrio.events.ToolEnded``, ``agentrio.errors.ActorCrashed`` (the
    errors' home is ``agentrio.errors``, whose module they are defined in) and
    pickles name them there. As trio does; typing aliases are left as they are.
    The names loaded on first use get theirs then (`agentrio._lazy`).
    """
    for namespace in (_sys.modules[__name__], _events, _types, _memory):
        held = vars(namespace)
        public = {name: held[name] for name in namespace.__all__ if name in held}
        _lazy.set_public_home(public, namespace.__name__)


_fix_module_metadata()
