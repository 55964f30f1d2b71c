"""Composing agents: subagents, agents as tools, and fan-out.

No composition escapes its parent's limits: a child's allowlist is at most
its parent's (and, for a child started during a phase narrowed by
``tool_names``, at most that phase's), the parent's permission rules,
approver and tool-use hooks still apply to it, its budget is carved out of
the parent's, and stopping or cancelling the parent reaches it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs
import msgspec
import trio

from ..._checks import check_int
from ...actors import begin_stop, exit_reason, link, wait_exited
from ...errors import ActorError, ActorStopped, InvalidArgument, PermissionEscalation
from ...messages import (
    ConfirmationRequired,
    PhaseResult,
    SubagentEnded,
    SubagentStarted,
    ToolCallRequest,
    ToolResult,
)
from ..budgets.budget import Budget
from ..loop.phase import CALLER
from ..loop.ref import AgentRef
from ..loop.spawning import spawn_agent
from ..loop.spec import AgentSpec, check_spec
from ..loop.state import _AgentState
from ..tools.policy import (
    Approval,
    Approver,
    Decision,
    Defer,
    Deny,
    PermissionPolicy,
    PostToolUse,
    PreToolUse,
    ask_approver,
)
from ..tools.pydantic_models import enc_hook
from ..tools.tool import Tool

if TYPE_CHECKING:
    from ...actors.actor import ActorRef
    from ...supervisors.ref import SupervisorRef
    from ..loop.services import Services

__all__ = ["agent_tool", "combine_policies", "map_phases", "spawn_child"]

_STRICTNESS: dict[Decision, int] = {"allow": 0, "ask": 1, "deny": 2}
_names = itertools.count(1)
_H = TypeVar("_H", PreToolUse, PostToolUse)
_T = TypeVar("_T")  # an agent's output type


@attrs.frozen
class _Nested(PermissionPolicy):
    """A child's policy: its parent's and its own both apply, the stricter decision wins.

    Merging the two rule lists would not do: deny, allow and ask are checked
    in that order across all rules, so a child's ``allow_rule("*")`` would beat its
    parent's ``ask`` rules and default. (``rules`` and ``default`` hold both
    sets, for display.)

    Attributes:
        outer: the parent's policy.
        inner: the child's own.
        outer_asks: False when the parent has no approver: what its rules
            would ask about, it could never do, and neither may the child.
    """

    outer: PermissionPolicy = attrs.field(factory=PermissionPolicy)
    inner: PermissionPolicy = attrs.field(factory=PermissionPolicy)
    outer_asks: bool = True

    def decide(self, name: str, arguments: Mapping[str, object]) -> Decision:
        first = self.outer.decide(name, arguments)
        if first == "ask" and not self.outer_asks:
            first = "deny"
        if first == "deny":
            return first
        return max(first, self.inner.decide(name, arguments), key=_STRICTNESS.__getitem__)


def combine_policies(
    parent: PermissionPolicy | None,
    child: PermissionPolicy | None,
    *,
    parent_asks: bool = True,
) -> PermissionPolicy | None:
    """The policy a child runs under: each call gets the stricter of both decisions."""
    if parent is None or parent is child:
        return child
    inner = child if child is not None else PermissionPolicy()
    default = max(parent.default, inner.default, key=_STRICTNESS.__getitem__)
    return _Nested(
        rules=(*parent.rules, *inner.rules),
        default=default,
        outer=parent,
        inner=inner,
        outer_asks=parent_asks,
    )


def _combine_approvers(
    parent: AgentSpec[object], child: AgentSpec[object]
) -> Approver | ActorRef | None:
    """Who answers a child's ``ask``: its parent's approver for the parent's rules, its own
    (or, without one, its parent's) for its own; both when both rule sets ask."""
    outer, inner = parent.approver, child.approver
    if inner is None or outer is None or inner is outer:
        return inner if inner is not None else outer
    levels = ((parent.permissions, outer), (child.permissions, inner))

    async def both(request: ConfirmationRequired) -> Approval | Defer:
        call = request.tool_call
        for policy, approver in levels:
            if policy is not None and policy.decide(call.name, call.arguments) == "ask":
                answer = await ask_approver(approver, request)
                if isinstance(answer, Defer) or not answer.approved:
                    return answer
        return Approval(True)

    return both


class _PreChain:
    """The ``pre_tool_use`` hooks of an agent's ancestors and its own, outermost first.

    Each hook sees the call as the hooks before it left it; the first
    ``Deny`` ends the chain. A rewrite by an inner hook must still pass the
    outer ones (a child's hook must not undo its parent's sandbox): the
    hooks before the last one that rewrote the call run again on the final
    call, once. A ``Deny`` there refuses it; a rewrite there is final (the
    outer word is last; the inner hooks do not run again). The gate judges
    the final call again, as it does a single hook's rewrite.
    """

    __slots__ = ("hooks",)

    def __init__(self, hooks: tuple[PreToolUse, ...]) -> None:
        self.hooks = hooks

    async def __call__(self, call: ToolCallRequest) -> ToolCallRequest | Deny | None:
        current = call
        rewrote = 0  # how many hooks lie before the last one that rewrote the call
        for n, hook in enumerate(self.hooks):
            verdict = await hook(current)
            if isinstance(verdict, Deny):
                return verdict
            if isinstance(verdict, ToolCallRequest) and verdict is not current:
                if verdict.name != call.name:
                    return verdict  # (the gate refuses a change of tool)
                if verdict != current:
                    rewrote = n
                current = verdict
        # (Only when an inner hook rewrote: a chain that left the call alone,
        # or whose outermost hook alone rewrote it, costs nothing more.)
        for hook in self.hooks[:rewrote]:
            verdict = await hook(current)
            if isinstance(verdict, Deny):
                return verdict
            if isinstance(verdict, ToolCallRequest):
                if verdict.name != call.name:
                    return verdict
                current = verdict
        return None if current is call else current


class _PostChain:
    """The ``post_tool_use`` hooks of an agent's ancestors and its own, outermost first.

    Each hook sees the result as the hooks before it left it; the model sees
    what the last one leaves.
    """

    __slots__ = ("hooks",)

    def __init__(self, hooks: tuple[PostToolUse, ...]) -> None:
        self.hooks = hooks

    async def __call__(self, call: ToolCallRequest, result: ToolResult) -> ToolResult | None:
        current = result
        for hook in self.hooks:
            rewritten = await hook(call, current)
            if isinstance(rewritten, ToolResult):
                current = rewritten
        return None if current is result else current


def _chain_pre(outer: PreToolUse | None, inner: PreToolUse | None) -> PreToolUse | None:
    """The parent's ``pre_tool_use`` hooks, then the child's (each hook once)."""
    hooks = _hook_list(outer, inner)
    if len(hooks) <= 1:
        return hooks[0] if hooks else None
    return _PreChain(hooks)


def _chain_post(outer: PostToolUse | None, inner: PostToolUse | None) -> PostToolUse | None:
    """The parent's ``post_tool_use`` hooks, then the child's (each hook once)."""
    hooks = _hook_list(outer, inner)
    if len(hooks) <= 1:
        return hooks[0] if hooks else None
    return _PostChain(hooks)


def _hook_list(outer: _H | None, inner: _H | None) -> tuple[_H, ...]:
    """The hooks of *outer* then *inner*, chains flattened, a hook already there skipped.

    The same function on parent and child (a session helper's, copied from
    its agent; a sandbox hook set on both) runs once, in its outermost place:
    a rewriting hook run twice would rewrite twice.
    """
    out: list[_H] = []
    for hook in (outer, inner):
        if hook is None:
            continue
        members = hook.hooks if isinstance(hook, (_PreChain, _PostChain)) else (hook,)
        for member in members:
            if not any(member is seen for seen in out):
                out.append(member)
    return tuple(out)


def _child_spec(parent: _AgentState, spec: AgentSpec[_T]) -> AgentSpec[_T]:
    """*spec* (checked by the caller: an AgentSpec) as the child of *parent* may
    run it, or PermissionEscalation."""
    mine = parent.info.tools
    # The same name is not enough: a child's own tool called "read" may do anything.
    extra = sorted(t.name for t in spec.tools if t.name not in mine or mine[t.name].fn is not t.fn)
    if extra:
        raise PermissionEscalation(
            f"subagent {spec.name!r} asks for tools its parent {parent.spec.name!r} "
            f"does not have (or has as another function): {extra}"
        )
    up = parent.spec
    if (
        up.permissions is None
        and up.approver is None
        and up.approval_timeout is None
        and up.pre_tool_use is None
        and up.post_tool_use is None
    ):
        # Nothing of the parent's to add: the spec as it is (and what is
        # derived from it once, shared by every child of a map). A parent
        # without a gate costs its children nothing.
        return spec
    return attrs.evolve(
        spec,
        permissions=combine_policies(
            up.permissions, spec.permissions, parent_asks=up.approver is not None
        ),
        approver=_combine_approvers(up, spec),
        approval_timeout=(
            spec.approval_timeout if spec.approval_timeout is not None else up.approval_timeout
        ),
        # (The parent's spec holds its own ancestors' hooks already: a
        # grandchild runs them all, outermost first.)
        pre_tool_use=_chain_pre(up.pre_tool_use, spec.pre_tool_use),
        post_tool_use=_chain_post(up.post_tool_use, spec.post_tool_use),
    )


def _chain(budget: Budget | None) -> list[Budget]:
    out = []
    while budget is not None:
        out.append(budget)
        budget = budget.parent
    return out


def _carve(budget: Budget, parent: Budget) -> None:
    """Make *budget* draw from *parent*'s, or refuse it: a budget elsewhere in the tree
    (or above the parent's) would let the child spend past its parent's limits."""
    if any(b is parent for b in _chain(budget)):
        return
    if budget.parent is None and not any(b is budget for b in _chain(parent)):
        budget._attach(parent)  # a free-standing budget is carved out of the parent's
        return
    raise InvalidArgument(
        f"a subagent's budget must be its parent's, one below it, or one with no parent "
        f"(then carved out of the parent's); {budget!r} is not"
    )


def spawn_child(
    parent: _AgentState,
    spec: AgentSpec[_T],
    *,
    name: str | None = None,
    budget: Budget | None = None,
    checked: AgentSpec[_T] | None = None,
) -> AgentRef[_T]:
    """Spawn *spec* as a subagent of *parent*: same supervisor, owned by the parent.

    *checked* is ``_child_spec(parent, spec)`` when the caller has it already
    (a fan-out makes it once for all its children).

    Raises:
        PermissionEscalation: the spec has tools the parent does not.
        InvalidArgument: *budget* is not the parent's, below it, or free-standing.
        ActorStopped: the parent has exited (no one would stop the child).
    """
    owner = parent.ref
    assert owner is not None
    ended = exit_reason(owner)
    if ended is not None:
        raise ActorStopped(
            f"agent {owner.path!r} has {ended}: it cannot have subagents",
            path=owner.path,
            reason=ended,
        )
    if checked is None:
        checked = _child_spec(parent, spec)
    if budget is None:
        budget = parent.budget
    elif not isinstance(budget, Budget):
        raise InvalidArgument(f"budget must be an agentrio.Budget or None, got {budget!r}")
    else:
        _carve(budget, parent.budget)
    if name is None:
        name = f"{owner.name}.{spec.name}-{next(_names)}"
    child = spawn_agent(parent.services, parent.sup, checked, name, budget)
    # A child started while its parent runs a phase narrowed by tool_names
    # may use at most that phase's tools (its own tools intersected with
    # them), and so may its own children: the narrowing binds the subtree.
    phase = parent.phase
    if phase is not None and phase.allowed is not parent.info.tool_set:
        ceiling: frozenset[str] | None = phase.allowed
    else:
        ceiling = parent.ceiling
    if ceiling is not None:
        child._state.ceiling = ceiling
    link(child.ref, owner)  # it ends after its parent
    _adopt(parent, child._state)
    bus = parent.services.bus
    if bus.active:
        bus.publish(SubagentStarted(path=owner.path, child=child.path))
    return child


def _adopt(parent: _AgentState, child: _AgentState) -> None:
    """Keep *child* among *parent*'s children (whom its request_stop reaches)."""
    children = parent.children
    if children is None:
        children = parent.children = []
    elif len(children) >= 64 and not len(children) & (len(children) - 1):
        # Drop the children that have exited now and then (at each power of
        # two): a long-lived parent must not keep every child it ever had.
        children[:] = [c for c in children if c.ref is None or exit_reason(c.ref) is None]
    children.append(child)


def _ended(parent: _AgentState, child: AgentRef[object], result: PhaseResult[object]) -> None:
    """Publish that *parent*'s subagent *child* ended its phase."""
    bus = parent.services.bus
    if bus.active and parent.ref is not None:
        bus.publish(
            SubagentEnded(path=parent.ref.path, child=child.path, stop_reason=result.stop_reason)
        )


def _release(agent: AgentRef[object], *, finished: bool) -> None:
    """Stop a child that answered; cancel one whose ``run()`` was abandoned.

    (By then an abandoned child's phase, if it had begun, has ended with
    ``"cancelled"``: ``run()`` raises only once it has.)
    """
    if finished:
        begin_stop(agent.ref)
    else:
        agent.ref.cancel()


def agent_tool(
    spec: AgentSpec[object], *, name: str | None = None, description: str | None = None
) -> Tool:
    """Make *spec* into a tool: each call runs a fresh child phase and returns its text.

    The tool has one argument, ``task: str``. Each call spawns a fresh
    subagent of the calling agent (so its tools must be a subset of the
    caller's, the caller's rules, approver and hooks apply, and in a phase
    narrowed by ``tool_names`` it may use only the tools that phase names),
    runs one phase on ``task`` in a new context, stops it, and returns its
    final text (for a spec with an ``output_type``, its ``output`` as JSON);
    when the phase does not end with ``done``, ``"(stop_reason: ...)"``
    follows the text. A ``SubagentEnded`` event is
    published after each call that gets the child's result. If the call is
    abandoned (the tool timed out, the calling phase was cancelled or
    ended), the child's phase ends at once with ``"cancelled"`` (its model
    call and tool calls cancelled, a ``PhaseEnded`` published), and the child
    is cancelled, so it cannot go on spending. Called outside an agent's
    phase, the tool raises ``RuntimeError``. See [Composing
    agents][composing-agents].

    Example:

        researcher = agent_tool(research_spec, description="Research one subtopic.")
        lead = AgentSpec("lead", model, tools=[researcher, lookup])

    Args:
        spec: the child's spec.
        name: the tool's name (default ``spec.name``).
        description: default ``"Give the <name> agent a task; it answers in
            text."`` (``"...; it answers in JSON."`` with an ``output_type``).

    Raises:
        InvalidArgument: *spec* is not an ``AgentSpec``.
    """
    check_spec(spec)

    async def run_agent(task: str) -> str:
        caller = CALLER.get()
        if caller is None:
            raise RuntimeError(f"agent tool {spec.name!r} can only run inside an agent's phase")
        child = spawn_child(caller, spec)
        result = None
        try:
            result = await child.run(task, continue_context=False)
        finally:
            # A child whose caller gave up (a timeout, a cancel) has ended its
            # phase "cancelled" with it, and is cancelled; one that answered
            # just stops.
            _release(child, finished=result is not None)
        _ended(caller, child, result)
        if result.stop_reason == "done":
            if typed:  # (its value, as the model sees every tool's result: JSON)
                return msgspec.json.encode(result.output, enc_hook=enc_hook).decode()
            return result.final_text
        return f"{result.final_text}\n(stop_reason: {result.stop_reason})"

    typed = spec.output_type is not None and spec.output_type is not str
    answers = "JSON" if typed else "text"
    tool = Tool(
        run_agent,
        name=name or spec.name,
        description=description or f"Give the {spec.name} agent a task; it answers in {answers}.",
    )
    tool.needs_caller = True
    return tool


async def _wait_exited(agents: list[AgentRef[object]], timeout: float) -> None:
    """Wait until *agents* and what they own have exited: shielded (the caller is
    most likely cancelled), and at most *timeout* seconds (one deadline for all)."""
    with trio.CancelScope(deadline=trio.current_time() + timeout, shield=True):
        for agent in agents:
            await wait_exited(agent.ref)  # (and what it owns: its contexts, its children)


async def map_phases(
    services: Services,
    sup: SupervisorRef,
    spec: AgentSpec[_T],
    inputs: Sequence[str],
    *,
    concurrency: int,
    budget: Budget | None,
    parent: _AgentState | None,
) -> list[PhaseResult[_T] | ActorError]:
    """One fresh agent per input, at most *concurrency* at once; results in input order.

    The agents are spawned under *sup*, drawing on *services*; with a
    *parent*, each is its subagent (under the parent's supervisor).
    """
    check_spec(spec)
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        raise InvalidArgument(f"inputs must be a list of user messages, got {inputs!r}")
    if not all(isinstance(i, str) for i in inputs):
        raise InvalidArgument("inputs must all be str (one user message per phase)")
    check_int("concurrency", concurrency, 1)
    # The spec as the parent's children run it, made once: with a gated parent
    # each child's would be a new spec, and what is derived from a spec made
    # again for each (PermissionEscalation is raised here, before any spawn).
    checked = _child_spec(parent, spec) if parent is not None else spec
    results: list[PhaseResult[_T] | ActorError | None] = [None] * len(inputs)
    batch = next(_names)
    slots = trio.Semaphore(concurrency)
    abandoned: list[AgentRef[object]] = []  # cancelled before they answered

    async def one(i: int, agent: AgentRef[_T]) -> None:
        try:
            result = results[i] = await agent.run(inputs[i], continue_context=False)
            if parent is not None:
                _ended(parent, agent, result)
        except ActorError as exc:
            results[i] = exc
        finally:
            finished = results[i] is not None
            _release(agent, finished=finished)
            if not finished:
                abandoned.append(agent)
            slots.release()

    # A spawn that fails (PermissionEscalation, a bad budget, RuntimeClosed)
    # cancels the phases under way and is raised as itself, not in a group.
    failure: Exception | None = None
    try:
        async with trio.open_nursery() as nursery:
            for i in range(len(inputs)):
                # A schedule point only when all slots are taken: a checkpoint per
                # spawn would run the scheduler once per input.
                await trio.lowlevel.checkpoint_if_cancelled()
                try:
                    slots.acquire_nowait()
                except trio.WouldBlock:
                    await slots.acquire()
                name = f"{spec.name}.map{batch}-{i}"
                try:
                    if parent is not None:
                        agent = spawn_child(parent, spec, name=name, budget=budget, checked=checked)
                    else:
                        agent = spawn_agent(services, sup, spec, name, budget)
                except Exception as exc:
                    failure = exc
                    nursery.cancel_scope.cancel()
                    break
                nursery.start_soon(one, i, agent)
    finally:
        if abandoned:
            # Work started for a caller ends with the caller: a map that is
            # cancelled (or fails) returns once the agents it cancelled are gone.
            await _wait_exited(abandoned, sup.shutdown_timeout)
    if failure is not None:
        raise failure
    done = [r for r in results if r is not None]
    assert len(done) == len(inputs)
    return done
