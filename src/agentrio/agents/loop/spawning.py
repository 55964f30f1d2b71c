"""Spawning an agent: its spec checked, its model and budget resolved, its state
made and its actor spawned under a supervisor; the `AgentRef` that holds it."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from ..._handles import create
from ...errors import InvalidArgument
from ...providers.base import Model
from ..budgets.budget import Budget
from ..tools.tool_call import ToolGate
from .agent import AgentActor, _summariser
from .ref import AgentRef
from .services import Services
from .spec import AgentSpec, check_model_settings, check_spec
from .state import _AgentState

if TYPE_CHECKING:
    from ...actors.bus import EventBus
    from ...supervisors.ref import SupervisorRef

__all__ = ["spawn_agent"]

_T = TypeVar("_T")  # an agent's output type


def spawn_agent(
    services: Services, sup: SupervisorRef, spec: AgentSpec[_T], name: object, budget: object
) -> AgentRef[_T]:
    """Spawn an agent under *sup*, drawing on *services* (the runtime's)."""
    if type(spec) is not AgentSpec:  # (the common case needs no call)
        check_spec(spec)
    root = services.budget
    if budget is None:
        budget = root
    else:
        if not isinstance(budget, Budget):
            raise InvalidArgument(f"budget must be an agentrio.Budget or None, got {budget!r}")
        top = budget._root()
        if top is not root:
            # A free-standing budget (or a chain of them) is carved out of the
            # runtime's: nothing an agent spends escapes the runtime's limits.
            top._attach(root)
    agent_name = spec.name if name is None else name
    model: Model
    escalation: Model | None = None
    lower = None  # the tier it falls back to, if spec.model is one without a model
    if isinstance(spec.model, str):
        lower = services.fallback(spec.model)
        model = services.resolve(spec.model)
        if spec.escalate_on_stall:
            stronger = services.next_tier(spec.model)
            if stronger is not None:
                escalation = services.resolve(stronger)
    else:
        model = spec.model
    if spec.settings is not None:
        check_model_settings(model, spec.settings, "AgentSpec.settings")
    summariser = None if spec.compaction is None else _summariser(services, spec.compaction)
    state = _AgentState(
        spec,
        services,
        sup,
        budget,
        agent_name if isinstance(agent_name, str) else "",
        model,
        escalation,
        summariser,
    )
    ref = state.ref = sup.spawn_nowait(
        AgentActor,
        state,
        name=agent_name,  # type: ignore[arg-type]  # (any object: spawn checks it)
        mailbox=spec.limits.mailbox,
    )
    state.gate = make_gate(spec, ref.path, services.bus)
    if lower is not None:
        services.fell_back(ref.path, str(spec.model), lower)
    return create(AgentRef, state)


def make_gate(spec: AgentSpec[object], path: str, bus: EventBus) -> ToolGate | None:
    """The agent's tool gate, or None when its spec sets no policy, approver or hook."""
    if (
        spec.permissions is None
        and spec.approver is None
        and spec.pre_tool_use is None
        and spec.post_tool_use is None
    ):
        return None
    return ToolGate(
        path=path,
        bus=bus,
        policy=spec.permissions,
        approver=spec.approver,
        approval_timeout=spec.approval_timeout,
        pre=spec.pre_tool_use,
        post=spec.post_tool_use,
    )
