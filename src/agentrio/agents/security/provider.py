"""SecurityProvider: taint tracking from untrusted tools to sensitive ones, and sanitised answers.

Set as ``AgentSpec(security=SecurityProvider(...))``. Each phase of the agent
gets a `Guard` (the loop's ``PhaseGuard``), made when the phase has read its
history: it taints what the untrusted tools returned (in the history and in
the phase), judges each call to a sensitive tool through the agent's tool
gate (the same policy, approver and ``ConfirmationRequired`` machinery as
``PermissionPolicy``'s ``ask``), and redacts the model's replies.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import attrs

from ..._checks import check_int
from ...errors import InvalidArgument
from ...messages import OutputSanitised, TaintBlocked, ToolCallRequest, ToolResult
from ..tools.tool_call import ToolGate
from .sanitise import Sanitiser, check_globs
from .taint import Taint

if TYPE_CHECKING:
    from ..loop.phase import Phase

__all__ = ["Guard", "SecurityProvider"]


def _untrusted(value: Sequence[str]) -> tuple[str, ...]:
    return check_globs("untrusted", value)


def _sensitive(value: Sequence[str]) -> tuple[str, ...]:
    return check_globs("sensitive", value)


@attrs.frozen
class SecurityProvider:
    """Taint tracking and output sanitisation for an agent's phases.

    **Taint.** The results of the tools named by *untrusted* (a web page, an
    e-mail, a file from outside) are tainted. A call to a tool named by
    *sensitive* (send a message, pay, run a command) whose arguments hold a
    copy of tainted text (at least *min_match* characters of it: see
    [What taint tracking sees][what-taint-tracking-sees]) publishes a
    ``TaintBlocked`` event and is then, by *on_taint*: ``"ask"``, put to the
    agent's approver as a ``ConfirmationRequired`` (no approver: denied), as
    a ``PermissionPolicy``'s ``ask`` rule would; ``"deny"``, refused. A call
    the permission policy denies stays denied. The taint of a phase is read
    from its context's history too, so it holds across phases and a resume.

    **Sanitising.** Each reply of the model is passed through *sanitiser*
    before it is kept: the final answer (``PhaseResult.final_text`` and
    ``output``), the history, a run stream's text; an ``OutputSanitised``
    event names the rules that matched. ``TextDelta`` events, sent as a
    streaming model writes, are not (see [Secrets out of answers][secrets-out-of-answers]).

    Attributes:
        untrusted: tool names or globs whose results are tainted.
        sensitive: tool names or globs whose calls are checked for taint.
        on_taint: ``"ask"`` (the default) or ``"deny"``.
        sanitiser: the rules replies are redacted with (default: secrets
            and credentials, [`SECRET_RULES`][agentrio.types.SECRET_RULES]); None:
            replies are not sanitised.
        min_match: the fewest characters of tainted text that count as a
            copy (>= 4; default 12).
        max_tainted_chars: the most characters of untrusted results a phase
            keeps fragments of (default 262,144); past them every argument
            of a sensitive call counts as tainted.

    Raises:
        InvalidArgument: a field of the wrong type or out of range.
    """

    untrusted: tuple[str, ...] = attrs.field(default=(), converter=_untrusted)
    sensitive: tuple[str, ...] = attrs.field(default=(), converter=_sensitive)
    on_taint: Literal["ask", "deny"] = "ask"
    sanitiser: Sanitiser | None = attrs.field(factory=Sanitiser)
    min_match: int = 12
    max_tainted_chars: int = 262_144

    def __attrs_post_init__(self) -> None:
        if self.on_taint not in ("ask", "deny"):
            raise InvalidArgument(
                f"SecurityProvider.on_taint must be 'ask' or 'deny', got {self.on_taint!r}"
            )
        if self.sanitiser is not None and not isinstance(self.sanitiser, Sanitiser):
            raise InvalidArgument(
                f"SecurityProvider.sanitiser must be an agentrio.types.Sanitiser or None, "
                f"got {self.sanitiser!r}"
            )
        check_int("SecurityProvider.min_match", self.min_match, 4)
        check_int("SecurityProvider.max_tainted_chars", self.max_tainted_chars, 1)

    def is_untrusted(self, tool: str) -> bool:
        """Are *tool*'s results tainted?"""
        return any(fnmatch.fnmatchcase(tool, glob) for glob in self.untrusted)

    def is_sensitive(self, tool: str) -> bool:
        """Are *tool*'s calls checked for taint?"""
        return any(fnmatch.fnmatchcase(tool, glob) for glob in self.sensitive)

    def redact(self, text: str) -> tuple[str, tuple[str, ...], int]:
        """*text* through the sanitiser's rules: the text, the rules that matched,
        and how many redactions (as it is, ``()`` and 0 without a sanitiser)."""
        if self.sanitiser is None:
            return text, (), 0
        return self.sanitiser.sanitise(text)

    def guard(self, phase: Phase) -> Guard:
        """The guard of *phase* (the loop calls it once its history is read)."""
        return Guard(self, phase)


class Guard:
    """One phase's security: its taint, its gate, its sanitising (the loop's ``PhaseGuard``)."""

    __slots__ = ("bus", "gate", "path", "provider", "recalled_ids", "taint")

    def __init__(self, provider: SecurityProvider, phase: Phase) -> None:
        self.provider = provider
        self.bus = phase.bus
        self.path = phase.path
        self.recalled_ids: set[int] = set()  # (memory items already tainting it)
        # (a stride of half the match: a copy of 1.5 min_match characters is always found)
        self.taint = Taint(
            min_match=provider.min_match,
            stride=max(1, provider.min_match // 2),
            max_chars=provider.max_tainted_chars,
        )
        for message in phase.history:  # earlier phases' untrusted results
            if message.role == "tool" and message.name and provider.is_untrusted(message.name):
                self.taint.add(message.name, message.content)
        st = phase.st
        gate = st.gate
        if gate is None:  # (no policy, approver or hook: an "ask" is then a refusal)
            gate = ToolGate(
                path=self.path,
                bus=self.bus,
                policy=None,
                approver=st.spec.approver,
                approval_timeout=st.spec.approval_timeout,
                pre=None,
                post=None,
            )
        self.gate = gate.judged(self.judge)

    def judge(self, req: ToolCallRequest) -> tuple[str, str] | None:
        """None, or what a call to a sensitive tool that carries taint needs."""
        provider = self.provider
        if not provider.sensitive or not provider.is_sensitive(req.name):
            return None
        found = self.taint.find(req.arguments)
        if found is None:
            return None
        place, sources = found
        action = provider.on_taint
        if self.bus.active:
            self.bus.publish(
                TaintBlocked(
                    path=self.path,
                    tool=req.name,
                    call_id=req.id,
                    argument=place,
                    sources=sources,
                    action=action,
                )
            )
        why = (
            f"tool {req.name!r} was not run: its argument {place!r} holds text from the "
            f"untrusted tool(s) {', '.join(sources)}, and the security provider denies that"
        )
        return action, why

    def recalled(self, items: Sequence[tuple[int, str, str]]) -> None:
        """Items (id, source, text) a memory recalled into the phase: those kept from
        an untrusted tool's result taint it, as that result did (each item once)."""
        provider = self.provider
        if not provider.untrusted:
            return
        for item_id, source, text in items:
            if item_id not in self.recalled_ids and provider.is_untrusted(source):
                self.recalled_ids.add(item_id)
                self.taint.add(source, text)

    def saw(self, results: Sequence[ToolResult]) -> None:
        """Taint what the turn's untrusted tools returned."""
        provider = self.provider
        if not provider.untrusted:
            return
        for result in results:
            if provider.is_untrusted(result.name):
                self.taint.add(result.name, result.content)

    def hide(self, text: str) -> str:
        """*text*, a tool call's arguments or result as an event's preview shows
        them, redacted by the provider's sanitiser (no event: it is not an answer)."""
        return self.provider.redact(text)[0]

    def sanitise(self, text: str) -> str:
        """*text* redacted by the provider's sanitiser (as it is without one)."""
        clean, rules, count = self.provider.redact(text)
        if count and self.bus.active:
            self.bus.publish(OutputSanitised(path=self.path, rules=rules, count=count))
        return clean
