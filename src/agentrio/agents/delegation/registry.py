"""Delegates and the rule that picks one: ``AgentSpec(delegation=Delegation([...]))``.

A delegate is a child spec with a description. When a request comes to the
agent (``AgentRef.run``), the delegation's rule reads it and names a
delegate, or none; a named one gets the request as a fresh subagent of the
agent (``composition``'s ``spawn_child``: its tools at most the agent's,
the agent's rules, approver and hooks before its own, its budget the
agent's, stopped or cancelled with it), and its result is the run's. A
planned run (``agents/planning``) hands the steps its planner assigned to
a delegate the same way. Each step the child takes is a ``SubagentProgress``
event, between the ``SubagentStarted`` and ``SubagentEnded`` that every
subagent has.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import msgspec
import trio

from ..._checks import short_repr
from ...errors import InvalidArgument, PermissionEscalation
from ...messages import OutputSanitised, PhaseResult, RunPhase, SubagentProgress
from ..composition.compose import _ended, _release, spawn_child
from ..loop.ref import AgentRef
from ..loop.spec import AgentSpec, StepInfo, check_spec
from ..routing.router import Router, choose_route

if TYPE_CHECKING:
    from ...actors.bus import EventBus
    from ..loop.extensions import PhaseRunner, Security

__all__ = ["Delegate", "Delegation", "DelegationRule", "hand_over", "keyword_rule"]

DelegationRule = Callable[[str, Sequence["Delegate"]], "Awaitable[str | None] | str | None"]
"""``rule(request, delegates) -> name | None`` (plain or async): the delegate to
hand *request* to, by its name, or None to keep it."""

_WORDS = re.compile(r"[^\W_]+")
_READ_CHARS = 20_000  # a rule reads at most this much of a request


def _to_keywords(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgument(f"Delegate.keywords must be a list of str, got {value!r}")
    if not all(isinstance(k, str) and k.strip() for k in value):
        raise InvalidArgument("Delegate.keywords must all be non-empty str")
    return tuple(" ".join(_WORDS.findall(k.lower())) for k in value)


@attrs.frozen
class Delegate:
    """A child agent a request may be handed to: its spec and what it is for.

    Attributes:
        spec: the child's spec. Its tools must be among its parent's (the
            same functions), and its ``output_type`` the parent's: its
            result is the parent's run's.
        description: what it does, in a sentence: the planner reads it when
            it assigns tasks (see [Planning][planning]).
        keywords: words or phrases (any case) by which the default rule,
            [`Delegation.keyword_rule`][agentrio.Delegation.keyword_rule], hands it
            a request.
        name: the name a rule or a plan gives it by (default: the spec's).

    Raises:
        InvalidArgument: *spec* is not an ``AgentSpec``; *description* is
            not a str; *keywords* not a list of non-empty str; *name* empty.
    """

    spec: AgentSpec[Any]
    description: str
    keywords: tuple[str, ...] = attrs.field(default=(), converter=_to_keywords)
    name: str = attrs.field(
        default=attrs.Factory(lambda self: getattr(self.spec, "name", ""), takes_self=True)
    )

    # The spec as its children run it: its on_step publishes their progress (made
    # once: what is derived from a spec is worked out once per spec).
    _reporting: AgentSpec[Any] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        check_spec(self.spec)
        object.__setattr__(
            self, "_reporting", attrs.evolve(self.spec, on_step=_Progress(self.spec.on_step))
        )
        if not isinstance(self.description, str):
            raise InvalidArgument(f"Delegate.description must be a str, got {self.description!r}")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"Delegate.name must be a non-empty str, got {self.name!r}")


def keyword_rule(request: str, delegates: Sequence[Delegate]) -> str | None:
    """The default rule: the delegate with the most of its ``keywords`` in *request*.

    Keywords are matched as whole words (a phrase as consecutive words), in
    any case, in the first 20,000 characters of the request; a tie goes to
    the delegate listed first; a request with none of them stays with the
    agent (None).
    """
    text = f" {' '.join(_WORDS.findall(request[:_READ_CHARS].lower()))} "
    best: tuple[int, str] | None = None
    for delegate in delegates:
        hits = sum(1 for k in delegate.keywords if f" {k} " in text)
        if hits and (best is None or hits > best[0]):
            best = (hits, delegate.name)
    return None if best is None else best[1]


def _to_delegates(value: Sequence[Delegate]) -> tuple[Delegate, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgument(f"Delegation.delegates must be a list of Delegate, got {value!r}")
    for item in value:
        if not isinstance(item, Delegate):
            raise InvalidArgument(f"Delegation.delegates must hold Delegate objects, got {item!r}")
    return tuple(value)


def _same_output(child: AgentSpec[Any], parent: AgentSpec[Any]) -> bool:
    kinds = [s.output_type if s.output_type is not None else str for s in (child, parent)]
    return kinds[0] == kinds[1]


@attrs.frozen
class Delegation:
    """The children an agent may hand requests to, and the rule that picks one.

    Set it as ``AgentSpec(delegation=...)``. Each ``run()`` of the agent asks
    *rule* with the request; a delegate's name hands the request to a fresh
    subagent of that spec, whose result is the run's; None runs it as
    usual. With ``AgentSpec.planning`` too, the rule is asked first, and
    the planner may give each task to a delegate by name. See
    [Delegation][delegation].

    Attributes:
        delegates: the [`Delegate`][agentrio.Delegate]s, by distinct names.
        rule: ``rule(request, delegates) -> name | None``, plain or async
            (default [`Delegation.keyword_rule`][agentrio.Delegation.keyword_rule]);
            None: no request
            is handed over whole, only the steps a plan assigns.

    Raises:
        InvalidArgument: no delegates, or two of one name; *rule* not callable.
    """

    delegates: tuple[Delegate, ...] = attrs.field(converter=_to_delegates)
    rule: DelegationRule | None = keyword_rule

    @staticmethod
    def keyword_rule(request: str, delegates: Sequence[Delegate]) -> str | None:
        """The default rule: the delegate with the most of its ``keywords`` in *request*.

        Keywords are matched as whole words (a phrase as consecutive words), in
        any case, in the first 20,000 characters of the request; a tie goes to
        the delegate listed first; a request with none of them stays with the
        agent (None).
        """
        return keyword_rule(request, delegates)

    @staticmethod
    def router_rule(router: Router, by_mode: Mapping[str, str]) -> DelegationRule:
        """A rule made of a router: the mode it routes a request to names the delegate.

        *router* is any router of ``AgentRef.respond`` (a
        [`RuleRouter`][agentrio.RuleRouter], a callable returning a
        [`Route`][agentrio.Route], plain or async); the request goes to the
        delegate ``by_mode[route.mode]``, or stays with the agent for a mode
        not in *by_mode*. ``Delegation.router_rule(RuleRouter(), {"background":
        "researcher"})`` hands what the router would run in the background (a
        long request, a list of tasks, many links) to the researcher.

        Raises:
            InvalidArgument: *router* is not callable, *by_mode* not a mapping of
                str to str (when made); the router returned no ``Route`` (when run).
        """
        if not callable(router):
            raise InvalidArgument(f"router must be callable, got {router!r}")
        if not isinstance(by_mode, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in by_mode.items()
        ):
            raise InvalidArgument(f"by_mode must map mode names to delegate names, got {by_mode!r}")
        table = dict(by_mode)

        async def rule(request: str, delegates: Sequence[Delegate]) -> str | None:
            return table.get((await choose_route(router, request)).mode)

        return rule

    def __attrs_post_init__(self) -> None:
        names = [d.name for d in self.delegates]
        if not names:
            raise InvalidArgument("Delegation.delegates must not be empty")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidArgument(f"Delegation.delegates has two delegates named {dupes}")
        if self.rule is not None and not callable(self.rule):
            raise InvalidArgument(f"Delegation.rule must be callable or None, got {self.rule!r}")

    def named(self, name: str | None) -> Delegate | None:
        """The delegate called *name*, or None (no such delegate, or *name* None)."""
        for delegate in self.delegates:
            if delegate.name == name:
                return delegate
        return None

    async def choose(self, request: str) -> Delegate | None:
        """The delegate *rule* hands *request* to, or None.

        Raises:
            InvalidArgument: the rule returned something that is neither None
                nor a delegate's name.
        """
        if self.rule is None:
            await trio.lowlevel.checkpoint()
            return None
        name = self.rule(request, self.delegates)
        if inspect.isawaitable(name):
            name = await name
        else:
            await trio.lowlevel.checkpoint()
        if name is None:
            return None
        found = self.named(name) if isinstance(name, str) else None
        if found is None:
            raise InvalidArgument(
                f"the delegation rule returned {short_repr(name)}, not None nor one of "
                f"{[d.name for d in self.delegates]}"
            )
        return found

    # -- the loop's RunDriver --------------------------------------------------------

    def check_spec(self, spec: AgentSpec[object]) -> None:
        """Check that *spec* may hand its requests to these delegates.

        Raises:
            InvalidArgument: *spec* holds this elsewhere than in ``delegation``;
                a delegate's ``output_type`` is not the spec's.
            PermissionEscalation: a delegate has tools *spec* does not have.
        """
        if spec.delegation is not self:
            raise InvalidArgument("an agentrio.Delegation goes in AgentSpec.delegation")
        mine = {t.name: t.fn for t in spec.tools}
        for delegate in self.delegates:
            extra = sorted(t.name for t in delegate.spec.tools if mine.get(t.name) is not t.fn)
            if extra:
                raise PermissionEscalation(
                    f"delegate {delegate.name!r} asks for tools agent {spec.name!r} does not "
                    f"have (or has as another function): {extra}"
                )
            if not _same_output(delegate.spec, spec):
                raise InvalidArgument(
                    f"delegate {delegate.name!r} answers as {delegate.spec.output_type!r}, "
                    f"agent {spec.name!r} as {spec.output_type!r}: they must be the same"
                )

    def check_run(self, planning: object) -> None:
        """``run(planning=...)`` needs ``AgentSpec.planning``: raise for anything but None."""
        if planning is not None:
            raise InvalidArgument(
                f"run(planning={planning!r}) needs an agent whose AgentSpec.planning is set"
            )

    def drive(
        self,
        agent: AgentRef[object],
        cmd: RunPhase,
        run_phase: PhaseRunner,
        planning: str | None,
    ) -> Coroutine[object, None, PhaseResult[object]]:
        """Run *cmd*: handed to the delegate the rule names, else as one phase."""
        return self._run(agent, cmd, run_phase)

    async def _run(
        self, agent: AgentRef[object], cmd: RunPhase, run_phase: PhaseRunner
    ) -> PhaseResult[object]:
        chosen = None if cmd.parts else await self.choose(cmd.user_message)
        if chosen is None:
            return await run_phase(cmd)
        timeout = cmd.timeout if cmd.timeout is not None else agent.spec.limits.timeout
        result = await hand_over(agent, chosen, cmd.user_message, cmd, timeout=timeout)
        if agent.spec.security is not None:  # the agent's answer: its rules apply
            result = _redacted(agent, result)
        return result


def _redacted(agent: AgentRef[object], result: PhaseResult[object]) -> PhaseResult[object]:
    """*result*, a delegate's answer given as *agent*'s, through *agent*'s security
    provider's rules (its text, and its output when that is the text)."""
    security = agent.spec.security
    assert security is not None
    text, rules, count = security.redact(result.final_text)
    if not count:
        return result
    bus = agent._state.services.bus
    if bus.active:
        bus.publish(OutputSanitised(path=agent.path, rules=rules, count=count))
    output = text if isinstance(result.output, str) else result.output
    return msgspec.structs.replace(result, final_text=text, output=output)


class _Progress:
    """A delegate's ``on_step`` hook: each step of one of its children, as a
    ``SubagentProgress`` of the child's parent, then the delegate's own hook."""

    __slots__ = ("own", "parents")

    def __init__(self, own: Callable[[StepInfo], object] | None) -> None:
        self.own = own
        # A child's path -> its parent's path, event bus and security provider (whose
        # rules redact the summary), while it runs (hand_over).
        self.parents: dict[str, tuple[str, EventBus, Security | None]] = {}

    def __call__(self, info: StepInfo) -> object:
        parent = self.parents.get(info.agent)
        if parent is not None and parent[1].active:
            summary = info.summary
            if parent[2] is not None:
                summary = parent[2].redact(summary)[0]
            parent[1].publish(
                SubagentProgress(
                    path=parent[0],
                    child=info.agent,
                    step=info.step,
                    tool=info.tool_name,
                    summary=summary,
                )
            )
        return None if self.own is None else self.own(info)


async def hand_over(
    agent: AgentRef[object],
    delegate: Delegate,
    task: str,
    cmd: RunPhase,
    *,
    timeout: float | None,
) -> PhaseResult[object]:
    """Run *task* as one phase of a fresh subagent of *agent* from *delegate*'s spec.

    The child draws on *agent*'s budget and runs its rules, approver and
    hooks before its own; a run narrowed by ``tool_names`` (*cmd*'s) narrows
    it too. It runs one phase in a new context, with *timeout* (None: its
    spec's); then it stops, or, if the caller gave up, it is cancelled. A
    stop request it saw is used up: *agent*'s too.
    """
    state = agent._state
    spec = delegate._reporting
    child = spawn_child(state, spec)
    if cmd.tool_names is not None:
        allowed = frozenset(cmd.tool_names)
        ceiling = child._state.ceiling
        child._state.ceiling = allowed if ceiling is None else ceiling & allowed
    progress = spec.on_step
    assert isinstance(progress, _Progress)
    progress.parents[child.path] = (agent.path, state.services.bus, agent.spec.security)
    result = None
    try:
        result = await child.run(task, continue_context=False, timeout=timeout, lane=cmd.lane)
    finally:
        del progress.parents[child.path]
        _release(child, finished=result is not None)
    _ended(state, child, result)
    if result.stop_reason == "stop_requested":
        state.stop_requested = False  # (the run saw it: used up, as by a phase)
    return result
