"""Composing agents: subagents, agents as tools, and fan-out.

No composition escapes its parent's limits: a child's allowlist is at most
its parent's, the parent's permission rules and approver still apply to it,
its budget is carved out of the parent's, and stopping or cancelling the
parent reaches it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ..errors import ActorError, InvalidArgument, PermissionEscalation
from ..messages import PhaseResult, SubagentEnded, SubagentStarted
from ..tools.policy import Decision, PermissionPolicy, Rule
from ..tools.tool import Tool
from ._core import request_stop
from ._phase import CALLER
from .agent import AgentRef, AgentSpec, _AgentState, spawn_agent

if TYPE_CHECKING:
    from ..supervisors.budget import Budget
    from ..supervisors.supervisor import _Supervisor

__all__ = ["agent_tool", "combine_policies", "map_phases", "spawn_child"]

_STRICTNESS: dict[Decision, int] = {"allow": 0, "ask": 1, "deny": 2}
_names = itertools.count(1)


def combine_policies(
    parent: PermissionPolicy | None, child: PermissionPolicy | None
) -> PermissionPolicy | None:
    """The policy a child runs under: both rule sets, and the stricter default."""
    if parent is None:
        return child
    if child is None:
        return parent
    default = max(parent.default, child.default, key=_STRICTNESS.__getitem__)
    rules: list[Rule] = [*parent.rules, *child.rules]
    return PermissionPolicy(rules=rules, default=default)


def _child_spec(parent: _AgentState, spec: AgentSpec) -> AgentSpec:
    """*spec* as the child of *parent* may run it, or PermissionEscalation."""
    if not isinstance(spec, AgentSpec):
        raise InvalidArgument(f"spec must be an agentrio.AgentSpec, got {spec!r}")
    extra = sorted(t.name for t in spec.tools if t.name not in parent.info.tools)
    if extra:
        raise PermissionEscalation(
            f"subagent {spec.name!r} asks for tools its parent {parent.spec.name!r} "
            f"does not have: {extra}"
        )
    import attrs

    return attrs.evolve(
        spec,
        permissions=combine_policies(parent.spec.permissions, spec.permissions),
        approver=spec.approver if spec.approver is not None else parent.spec.approver,
        approval_timeout=(
            spec.approval_timeout
            if spec.approval_timeout is not None
            else parent.spec.approval_timeout
        ),
    )


def spawn_child(
    parent: _AgentState,
    spec: AgentSpec,
    *,
    name: str | None = None,
    budget: Budget | None = None,
) -> AgentRef:
    """Spawn *spec* as a subagent of *parent*: same supervisor, owned by the parent.

    Raises:
        PermissionEscalation: the spec has tools the parent does not.
    """
    from ..supervisors.budget import Budget

    checked = _child_spec(parent, spec)
    if budget is None:
        budget = parent.budget
    elif not isinstance(budget, Budget):
        raise InvalidArgument(f"budget must be an agentrio.Budget or None, got {budget!r}")
    elif budget.parent is None:
        budget.parent = parent.budget  # carved out of the parent's
    assert parent.cell is not None
    if name is None:
        name = f"{parent.cell.name}.{spec.name}-{next(_names)}"
    child = spawn_agent(parent.sup, checked, name, budget)
    child_cell = child._cell
    child_cell.owner = parent.cell
    if parent.cell.dependents is None:
        parent.cell.dependents = []
    parent.cell.dependents.append(child_cell)
    if parent.sup.bus.active:
        parent.sup.bus.publish(SubagentStarted(path=parent.cell.path, child=child_cell.path))
    return child


def agent_tool(spec: AgentSpec, *, name: str | None = None, description: str | None = None) -> Tool:
    """Make *spec* into a tool: each call runs a fresh child phase and returns its text.

    The child is spawned as a subagent of the calling agent (so its tools must
    be a subset of the caller's, and the caller's rules and approver apply),
    runs one phase on the ``task`` argument in its own context, and stops.
    When the phase does not end with ``done``, its stop reason follows the text.

    Example::

        researcher = agent_tool(research_spec, description="Research one subtopic.")
        lead = AgentSpec("lead", model, tools=[researcher, lookup])
    """
    if not isinstance(spec, AgentSpec):
        raise InvalidArgument(f"spec must be an agentrio.AgentSpec, got {spec!r}")

    async def run_agent(task: str) -> str:
        caller = CALLER.get()
        if caller is None:
            raise RuntimeError(f"agent tool {spec.name!r} can only run inside an agent's phase")
        child = spawn_child(caller, spec)
        try:
            result = await child.run(task, continue_context=False)
        finally:
            request_stop(child._cell)
        if caller.sup.bus.active and caller.cell is not None:
            caller.sup.bus.publish(
                SubagentEnded(
                    path=caller.cell.path, child=child.path, stop_reason=result.stop_reason
                )
            )
        if result.stop_reason == "done":
            return result.final_text
        return f"{result.final_text}\n(stop_reason: {result.stop_reason})"

    tool = Tool(
        run_agent,
        name=name or spec.name,
        description=description or f"Give the {spec.name} agent a task; it answers in text.",
    )
    tool.needs_caller = True
    return tool


async def map_phases(
    sup: _Supervisor,
    spec: AgentSpec,
    inputs: Sequence[str],
    *,
    concurrency: int,
    budget: Budget | None,
    parent: _AgentState | None,
) -> list[PhaseResult | ActorError]:
    """One fresh agent per input, at most *concurrency* at once; results in input order."""
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        raise InvalidArgument(f"inputs must be a list of user messages, got {inputs!r}")
    if not all(isinstance(i, str) for i in inputs):
        raise InvalidArgument("inputs must all be str (one user message per phase)")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgument(f"concurrency must be an int >= 1, got {concurrency!r}")
    results: list[PhaseResult | ActorError | None] = [None] * len(inputs)
    batch = next(_names)
    slots = trio.Semaphore(concurrency)

    async def one(i: int, agent: AgentRef) -> None:
        try:
            results[i] = await agent.run(inputs[i], continue_context=False)
        except ActorError as exc:
            results[i] = exc
        finally:
            request_stop(agent._cell)
            slots.release()

    async with trio.open_nursery() as nursery:
        for i in range(len(inputs)):
            await slots.acquire()
            name = f"{spec.name}.map{batch}-{i}"
            try:
                if parent is not None:
                    agent = spawn_child(parent, spec, name=name, budget=budget)
                else:
                    agent = spawn_agent(sup, spec, name, budget)
            except BaseException:
                slots.release()
                raise
            nursery.start_soon(one, i, agent)
    done = [r for r in results if r is not None]
    assert len(done) == len(inputs)
    return done
