"""Permissions: which tool calls an agent may make, who approves the rest, and hooks.

A [`PermissionPolicy`][agentrio.PermissionPolicy] holds ordered rules. ``deny`` rules are checked
first, then ``allow``, then ``ask``; a call no rule matches gets the policy's
``default``. ``ask`` publishes [`ConfirmationRequired`][agentrio.events.ConfirmationRequired] and
waits for the agent's approver; nothing but an approver ever approves, and an
``approval_timeout`` only ever denies.
"""

from __future__ import annotations

import fnmatch
import inspect
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Literal

import attrs
import trio

from ..._checks import short_repr
from ...errors import InvalidArgument
from ...messages import ConfirmationRequired, ToolCallRequest, ToolResult

if TYPE_CHECKING:
    from ...actors.actor import ActorRef

__all__ = [
    "Approval",
    "Approver",
    "Decision",
    "Defer",
    "Deny",
    "PermissionPolicy",
    "PostToolUse",
    "PreToolUse",
    "Rule",
    "allow_rule",
    "ask_rule",
    "deny_rule",
    "terminal_approver",
]

Decision = Literal["allow", "deny", "ask"]
_ORDER: tuple[Decision, ...] = ("deny", "allow", "ask")
ArgumentPredicate = Callable[[Mapping[str, object]], bool]


@attrs.frozen
class Rule:
    """One permission rule, usually made with ``allow``, ``ask`` or ``deny``.

    It matches a call when *tool* matches the tool's name and *when*, if
    given, returns True for the call's arguments.

    Attributes:
        action: ``"deny"``, ``"allow"`` or ``"ask"``.
        tool: a glob over tool names, matched with ``fnmatch.fnmatchcase``
            (``"read_*"``, ``"*"``).
        when: an optional predicate over the call's arguments; the rule
            matches only when it returns True.

    Raises:
        InvalidArgument: a bad *action*, an empty *tool*, a *when* that is
            not callable.
    """

    action: Decision
    tool: str
    when: ArgumentPredicate | None = None

    def __attrs_post_init__(self) -> None:
        if self.action not in _ORDER:
            raise InvalidArgument(f"Rule.action must be deny, allow or ask, got {self.action!r}")
        if not isinstance(self.tool, str) or not self.tool:
            raise InvalidArgument(f"Rule.tool must be a non-empty glob, got {self.tool!r}")
        if self.when is not None and not callable(self.when):
            raise InvalidArgument(f"Rule.when must be callable or None, got {self.when!r}")

    def matches(self, name: str, arguments: Mapping[str, object]) -> bool:
        """Whether this rule applies to calling tool *name* with *arguments*."""
        if not fnmatch.fnmatchcase(name, self.tool):
            return False
        return self.when is None or bool(self.when(arguments))


def deny_rule(tool: str, when: ArgumentPredicate | None = None) -> Rule:
    """A rule that denies calls to tools matching *tool* (and *when*)."""
    return Rule("deny", tool, when)


def allow_rule(tool: str, when: ArgumentPredicate | None = None) -> Rule:
    """A rule that allows calls to tools matching *tool* (and *when*)."""
    return Rule("allow", tool, when)


def ask_rule(tool: str, when: ArgumentPredicate | None = None) -> Rule:
    """A rule that asks the approver about calls to tools matching *tool* (and *when*).

    (Named so as not to be read as [`ActorRef.ask`][agentrio.ActorRef.ask], the
    request-reply call.)
    """
    return Rule("ask", tool, when)


def _to_rules(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    return tuple(rules)


@attrs.frozen
class PermissionPolicy:
    """Ordered rules (deny, then allow, then ask) and a default for the rest.

    Which tool calls an agent may make: set as ``AgentSpec(permissions=...)``.
    For each call, every ``deny`` rule is checked first, then every
    ``allow``, then every ``ask``; the first that matches decides, and a call
    that no rule matches gets *default*. *rules* may be given as any iterable
    of [`Rule`][agentrio.types.Rule]. How they apply: [Permissions, approval and
    hooks][permissions-approval-and-hooks].

    Example:

        policy = PermissionPolicy(
            rules=[deny_rule("shell"), allow_rule("read_*"), ask_rule("write_file")],
            default="ask",
        )

    Raises:
        InvalidArgument: a rule that is not a ``Rule``; a bad *default*.
    """

    rules: tuple[Rule, ...] = attrs.field(default=(), converter=_to_rules)
    default: Decision = "allow"

    def __attrs_post_init__(self) -> None:
        if not all(isinstance(r, Rule) for r in self.rules):
            raise InvalidArgument(
                "PermissionPolicy.rules must be Rule objects "
                "(from agentrio.allow_rule, ask_rule or deny_rule)"
            )
        if self.default not in _ORDER:
            raise InvalidArgument(
                f"PermissionPolicy.default must be deny, allow or ask, got {self.default!r}"
            )

    def decide(self, name: str, arguments: Mapping[str, object]) -> Decision:
        """What this policy says about calling *name* with *arguments*."""
        for action in _ORDER:
            for rule in self.rules:
                if rule.action == action and rule.matches(name, arguments):
                    return action
        return self.default


def _shown(value: object) -> str:
    """*value* and its type, for a message: ``'no' (a str)``, ``1 (an int)``.

    The repr is cut to 100 characters: an approver's answer may be anything,
    as big as it likes, and the model sees the message.
    """
    kind = type(value).__name__
    return f"{short_repr(value)} ({'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind})"


@attrs.frozen
class Approval:
    """An approver's answer.

    An approver may also answer a plain ``True`` or ``False``. Any other
    answer (``"yes"``, ``1``, ``None``, a ``Deny``) is a refusal, and the model
    sees what came back: ``the approver refused 'pay': the approver answered
    'yes' (a str), not True, False or an Approval`` (the answer's ``repr``,
    cut to 100 characters).

    Attributes:
        approved: True lets the call run, False refuses it. Only a real
            ``bool`` will do: ``Approval("no")`` would otherwise approve.
        reason: why; the model sees it when the call is refused.

    Raises:
        InvalidArgument: *approved* is not a bool, or *reason* not a str.
    """

    approved: bool
    reason: str = ""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.approved, bool):
            raise InvalidArgument(f"Approval.approved must be a bool, got {_shown(self.approved)}")
        if not isinstance(self.reason, str):
            raise InvalidArgument(f"Approval.reason must be a str, got {_shown(self.reason)}")


@attrs.frozen
class Defer:
    """The answer "later", from an approver or a tool (sessions and deferred
    decisions, #27): the phase parks in the checkpoint store, holding no task
    and no budget, until the decision (``Runtime.approve`` / ``deny``) or the
    result (``Runtime.give_result``) is given, in this process or another one.
    See [Deferred decisions][deferred-decisions].

    An approver returns ``Defer()`` instead of ``True``/``False``; a tool returns
    it instead of its result (an external job: the result comes later). Only a
    durable agent (a runtime with a store, ``open_runtime(store=...)``) can
    park: elsewhere the call is refused (an approver's) or failed (a tool's),
    and the model sees why.

    Attributes:
        note: what the decision waits for, shown by ``Runtime.pending_approvals``
            and ``pending_results`` (never to the model). Up to 1,000 characters.

    Raises:
        InvalidArgument: *note* is not a str, or is longer than 1,000 characters.
    """

    note: str = ""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.note, str) or len(self.note) > 1000:
            raise InvalidArgument(
                f"Defer.note must be a str of at most 1,000 characters, got {_shown(self.note)}"
            )


@attrs.frozen
class Deny:
    """Returned by a ``pre_tool_use`` hook to refuse a call; the model sees *reason*."""

    reason: str


Approver = Callable[
    [ConfirmationRequired], Awaitable[bool | Approval | Defer] | bool | Approval | Defer
]
PreToolUse = Callable[[ToolCallRequest], Awaitable[ToolCallRequest | Deny | None]]
PostToolUse = Callable[[ToolCallRequest, ToolResult], Awaitable[ToolResult | None]]


async def ask_approver(
    approver: Approver | ActorRef, request: ConfirmationRequired
) -> Approval | Defer:
    """Ask *approver* (a callable, sync or async, or an actor) about *request*.

    ``True``, ``False`` and an [`Approval`][agentrio.Approval] are answers; anything else
    (``"no"``, ``1``, ``None``) is a refusal whose reason names what came back,
    so a sloppy approver can never approve by accident.
    """
    from ...actors.actor import ActorRef

    if isinstance(approver, ActorRef):
        answer: object = await approver.ask(request)
    else:
        answer = approver(request)
        if inspect.isawaitable(answer):
            answer = await answer
    if isinstance(answer, (Approval, Defer)):
        return answer
    if isinstance(answer, bool):
        return Approval(answer)
    return Approval(
        False,
        f"the approver answered {_shown(answer)}, not True, False or an Approval",
    )


async def terminal_approver(request: ConfirmationRequired) -> Approval:
    """Ask the person at the terminal about each call: ``Allow? [y/N]`` on stderr,
    the answer read from stdin.

    The prompt runs in a worker thread, so the other agents go on meanwhile.
    Use as ``AgentSpec(approver=agentrio.terminal_approver)``.
    """
    call = request.tool_call

    def prompt() -> str:
        sys.stderr.write(
            f"\nagent {request.agent!r} wants to call {call.name}({call.arguments}). Allow? [y/N] "
        )
        sys.stderr.flush()
        return sys.stdin.readline()

    answer = await trio.to_thread.run_sync(prompt, abandon_on_cancel=True)
    approved = answer.strip().lower() in ("y", "yes")
    return Approval(approved, "approved at the terminal" if approved else "refused at the terminal")
