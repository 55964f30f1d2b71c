"""Helpers: call an LLM like a function.

An *infrastructure* helper (``rt.helper(...)``) gets an explicit tool
whitelist: only those tools run, a call to any other is a ``denied`` result
the model sees, and no approval is ever asked. A *session* helper
(``agent.helper(...)``) inherits its parent agent's tools, permission policy,
approver, hooks, workspace, ``env`` and budget, and its spending shows in
its parent's usage. It asks the approver about any call its agent's rules do not
settle (no rule matches it), even when the agent's own default is ``allow``;
an agent's default of ``deny`` still denies.

Either way the helper is an agent actor: an infrastructure helper under the
runtime's root or the supervisor given as ``under``, a session helper beside
its agent. Each ``execute`` is one phase in a fresh context, and the helper
is stopped with its supervisor or agent (or by [`Helper.stop`][agentrio.Helper.stop]).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from ..._checks import check_int, check_name
from ..._handles import create
from ...providers.base import Model
from ..budgets.limits import Limits
from ..loop.handles import Helper
from ..loop.spawning import spawn_agent
from ..loop.spec import AgentSpec
from ..loop.state import _AgentState
from ..tools.policy import PermissionPolicy
from ..tools.tool import Tool, check_env
from .compose import spawn_child

if TYPE_CHECKING:
    from ...supervisors.ref import SupervisorRef
    from ..budgets.budget import Budget
    from ..loop.services import Services

__all__ = ["infrastructure_helper", "session_helper"]

_numbers = itertools.count(1)


def _check_turns(max_turns: object) -> int:
    return check_int("max_turns", max_turns, 1)


def infrastructure_helper(
    services: Services,
    sup: SupervisorRef,
    model: Model | str,
    tools: Sequence[Tool],
    *,
    instructions: str,
    workspace: str | os.PathLike[str] | None,
    max_turns: int,
    final_answer: bool,
    budget: Budget | None,
    name: str | None,
    env: Mapping[str, str] | None = None,
) -> Helper:
    """The body of ``Runtime.helper``: a helper agent under *sup*, drawing on *services*."""
    check_name("name", name, optional=True)
    turns = _check_turns(max_turns)
    variables = check_env("env", env)
    spec = AgentSpec(
        name=name or f"helper-{next(_numbers)}",
        model=model,
        instructions=instructions,
        tools=tools,
        limits=Limits(max_iterations=turns, final_answer=final_answer),
        workspace=workspace,
        permissions=PermissionPolicy(default="allow"),
        env=variables,
    )
    agent = spawn_agent(services, sup, spec, spec.name, budget)
    return create(Helper, agent, turns, final_answer)


def _asking(policy: PermissionPolicy | None) -> PermissionPolicy:
    """A session helper's own policy: its agent's rules, and ``ask`` for what they leave.

    The agent's whole policy still applies on top of it (``spawn_child``
    takes the stricter decision of both), so where a rule of the agent's
    matches, the agent's decision stands, and its default of ``deny`` still
    denies; only a default of ``allow`` becomes ``ask``. (``policy.rules``
    holds every level's rules when the agent is itself a subagent.)
    """
    if policy is None:
        return PermissionPolicy(default="ask")
    return PermissionPolicy(rules=policy.rules, default="ask")


def session_helper(
    parent: _AgentState,
    model: Model | str | None,
    *,
    instructions: str,
    max_turns: int,
    final_answer: bool,
    name: str | None,
) -> Helper:
    """The body of ``AgentRef.helper``: inherits the parent's tools, rules, approver, budget."""
    check_name("name", name, optional=True)
    turns = _check_turns(max_turns)
    base = parent.spec
    spec = attrs.evolve(
        base,
        name=name or f"{base.name}.helper-{next(_numbers)}",
        model=model if model is not None else parent.model,
        instructions=instructions or base.instructions,
        limits=attrs.evolve(base.limits, max_iterations=turns, final_answer=final_answer),
        permissions=_asking(base.permissions),
        on_step=None,
        escalate_on_stall=False,
    )
    assert parent.ref is not None
    agent = spawn_child(parent, spec, name=f"{parent.ref.name}.{spec.name.rsplit('.', 1)[-1]}")
    agent._state.usage_parent = parent
    if parent.workspace is not None:
        agent._state.workspace = parent.workspace
    return create(Helper, agent, turns, final_answer)
