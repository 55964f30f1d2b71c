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
import trio

from ..._checks import check_int, check_name
from ..._handles import NoPublicConstructor, create
from ...errors import HelperTurnsExceeded, InvalidArgument
from ...messages import StopReason, ToolCallRequest, ToolResult
from ...providers.base import Model
from ..budgets.budget import UsageTotals
from ..budgets.limits import Limits
from ..loop.agent import AgentRef, AgentSpec, _AgentState, spawn_agent
from ..tools.policy import PermissionPolicy
from ..tools.tool import Tool, check_env
from .compose import spawn_child

if TYPE_CHECKING:
    from ...supervisors.ref import SupervisorRef
    from ..budgets.budget import Budget
    from ..loop.services import Services

__all__ = ["Helper", "HelperResult", "infrastructure_helper", "session_helper"]

_numbers = itertools.count(1)


@attrs.frozen
class HelperResult:
    """What one [`Helper.execute`][agentrio.Helper.execute] produced.

    Attributes:
        content: the model's final text.
        tool_calls: the tool calls it made, in order.
        tool_results: their results, in the same order.
        usage: what this execute spent (tokens, requests, tool calls).
        stop_reason: why its phase ended (``done`` unless a limit was hit).
    """

    content: str
    tool_calls: tuple[ToolCallRequest, ...]
    tool_results: tuple[ToolResult, ...]
    usage: UsageTotals
    stop_reason: StopReason = "done"


def _minus(after: UsageTotals, before: UsageTotals) -> UsageTotals:
    return UsageTotals(
        input_tokens=after.input_tokens - before.input_tokens,
        output_tokens=after.output_tokens - before.output_tokens,
        total_tokens=after.total_tokens - before.total_tokens,
        requests=after.requests - before.requests,
        tool_calls=after.tool_calls - before.tool_calls,
        attempts=after.attempts - before.attempts,
        cached_input_tokens=after.cached_input_tokens - before.cached_input_tokens,
        cache_write_tokens=after.cache_write_tokens - before.cache_write_tokens,
        reasoning_tokens=after.reasoning_tokens - before.reasoning_tokens,
    )


class Helper(metaclass=NoPublicConstructor):
    """An LLM called like a function, from [`Runtime.helper`][agentrio.Runtime.helper]
    (infrastructure) or [`AgentRef.helper`][agentrio.AgentRef.helper] (session).

    Behind it is an agent actor. No public constructor.
    """

    __slots__ = ("_agent", "_final_answer", "_lock", "_max_turns")

    def __init__(self, agent: AgentRef, max_turns: int, final_answer: bool) -> None:
        self._agent = agent
        # One execute at a time, so each one's usage is its own (the agent runs
        # phases one at a time anyway).
        self._lock = trio.Lock()
        self._max_turns = max_turns
        self._final_answer = final_answer

    @property
    def agent(self) -> AgentRef:
        """The agent actor behind the helper."""
        return self._agent

    def __repr__(self) -> str:
        return f"<Helper {self._agent.path!r}>"

    async def execute(self, prompt: str) -> HelperResult:
        """Run *prompt* to a final answer (up to ``max_turns`` model calls) in a fresh context.

        If the task awaiting ``execute()`` is cancelled, its phase ends with
        ``"cancelled"``, as for [`AgentRef.run`][agentrio.AgentRef.run], and the
        helper takes its next ``execute()`` as usual.

        Returns:
            A [`HelperResult`][agentrio.types.HelperResult].

        Raises:
            HelperTurnsExceeded: ``max_turns`` was reached without a final
                answer (unless the helper was made with ``final_answer=True``).
            InvalidArgument: *prompt* is not a str.
            ActorStopped: the helper (or its caller) has stopped.
            trio.Cancelled: the caller was cancelled (once the phase has ended).
        """
        if not isinstance(prompt, str):
            raise InvalidArgument(f"prompt must be a str, got {prompt!r}")
        async with self._lock:
            before = self._agent.usage()
            phase = await self._agent.run(
                prompt, max_iterations=self._max_turns, continue_context=False
            )
            spent = _minus(self._agent.usage(), before)
        result = HelperResult(
            content=phase.final_text,
            tool_calls=tuple(
                ToolCallRequest(r.name, r.arguments, id=r.id) for r in phase.tool_calls
            ),
            tool_results=phase.tool_calls,
            usage=spent,
            stop_reason=phase.stop_reason,
        )
        if phase.stop_reason == "max_iterations" and not self._final_answer:
            raise HelperTurnsExceeded(
                f"helper {self._agent.path!r} used its {self._max_turns} turns "
                "without a final answer",
                result=result,
            )
        return result

    async def stop(self) -> None:
        """Stop the helper's agent.

        It is also stopped with its caller: a session helper with its agent,
        an infrastructure helper with its supervisor.
        """
        await self._agent.stop()


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
