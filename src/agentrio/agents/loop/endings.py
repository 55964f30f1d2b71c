"""How a phase's turn ends when the model calls no tool (continuation, a typed answer
refused, a final answer, a stall), and how a phase goes on after a crash: a mixin of
`Phase`, on its tool turns."""

from __future__ import annotations

import inspect
from array import array
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from ...messages import (
    ChatMessage,
    ContinuationInjected,
    ModelReply,
    PhaseResumed,
    Stalled,
    StopReason,
)
from ...providers.tokens import message_tokens
from ..tools.output import TypedAnswer
from .continuation import CONTINUATION_PROMPT, looks_unfinished
from .tool_turns import ToolTurns

if TYPE_CHECKING:
    from ...messages import ToolCallRequest, ToolResult
    from ...providers.base import ToolSchema
    from .seams import PhaseRecording


__all__ = ["FINAL_ANSWER_PROMPT", "Endings"]

FINAL_ANSWER_PROMPT = (
    "You are repeating yourself. Give your best final answer now, without calling any tools."
)


_CUT: dict[str, StopReason] = {
    "length": "max_output_tokens",
    "content_filter": "content_filter",
    "refusal": "refusal",
}


def _summary(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


class Endings(ToolTurns):
    """`Phase`'s methods for how its turns end (the state is the phase's)."""

    __slots__ = (
        "calls",
        "continued",
        "final_text",
        "iterations",
        "pending",
        "sizes",
        "timestamps",
        "total",
    )

    if TYPE_CHECKING:  # (the phase's working state: see Phase.__init__)
        calls: list[ToolResult]
        continued: int
        final_text: str
        iterations: int
        pending: Sequence[ToolCallRequest]
        sizes: list[int]
        timestamps: array[float]
        total: int
        history: list[ChatMessage]
        typed: TypedAnswer | None

        async def _turn(
            self, schemas: Sequence[ToolSchema], *, final: bool = False, again: bool = False
        ) -> ModelReply | None: ...

    def _restore(self, rec: PhaseRecording) -> None:
        """Go on from what the phase recorded before a crash: the history it read,
        then its own recorded turns (no new user turn)."""
        resume = rec.resume
        assert resume is not None
        estimate = self.st.info.estimator
        for m in resume.messages:
            self.history.append(m)
        self.timestamps = array("d", resume.timestamps)
        self.sizes = [message_tokens(estimate, m) for m in self.history]
        self.total = sum(self.sizes)
        self.calls = list(resume.calls)
        if self.cmd.direct_tool_calls is None:
            self.iterations = sum(1 for m in resume.messages if m.role == "assistant")
        for m in reversed(resume.messages):
            if m.role == "assistant":
                self.final_text = m.content
                break
        rec.started(self)
        rec.upto = len(self.history)
        resume.going_on = True  # (_run or _direct goes on from its last turn)
        if self.bus.active:
            self.bus.publish(
                PhaseResumed(
                    path=self.path,
                    phase_id=rec.id,
                    turns=len(resume.messages),
                    restart=resume.restart,
                )
            )

    def _may_continue(self) -> bool:
        """May a continuation message be added (Limits.max_continuation_turns: a
        mode's, else the spec's)?"""
        limit = self.cmd.max_continuation_turns
        if limit is None:
            limit = self.st.spec.limits.max_continuation_turns
        return self.continued < limit

    async def _resumed(self) -> bool:
        """Go on from the turn the phase last recorded before a crash: run the calls
        it had asked for (their recorded results replayed), or take its last
        reply as it was taken then. True if the phase ends there."""
        rec = self.rec
        assert rec is not None and rec.resume is not None
        resume = rec.resume
        last = resume.messages[-1]
        if last.role != "assistant":
            return False  # (its last turn was tool results: the next model call)
        if last.tool_calls:
            self.pending = last.tool_calls
            await self._run_tools(last.tool_calls, model_driven=True)
            if self._tools_end_phase(last.tool_calls):
                return True
            if self.stall:
                await self._stalled()
                return True
            return False
        # A reply without tool calls, recorded before the crash: what came next.
        if self._may_continue() and await self._continued(last.content):
            return False
        if self.reason == "error":
            return True
        self.reason = "done"
        return not (self.typed is not None and await self._answer_refused(last.content))

    async def _answer_refused(self, text: str) -> bool:
        """Check the answer *text* against the spec's output type, then its output
        validators: True if it was refused and the model is asked for another (a
        user turn says why).

        Past ``output_retries`` refusals, or with no model call left, the phase
        ends with ``"error"`` (``OutputInvalid``); and so it does, with the
        exception, if a validator raises anything but ``ModelRetry``.
        """
        typed = self.typed
        assert typed is not None
        calls_left = self.iterations < self.cmd.max_iterations
        verdict = typed.check(text, calls_left)
        if verdict is None and typed.validators:
            try:
                verdict = await typed.validate(calls_left)
            except Exception as exc:
                typed.value = None
                self._error(exc)
                return False
        if verdict is None:
            return False
        if not isinstance(verdict, str):
            self._error(verdict)
            return False
        self._append(ChatMessage("user", verdict))
        return True

    async def _continued(self, text: str) -> bool:
        """Go on after a reply without tool calls? If its *text* reads as
        unfinished, add the continuation message and say so (True).

        Only while the phase has a model call left: the continued turn is one
        of its ``max_iterations``.
        """
        if self.iterations >= self.cmd.max_iterations:
            return False
        detector = self.st.spec.continuation_detector or looks_unfinished
        try:
            unfinished = detector(text)
            if inspect.isawaitable(unfinished):
                unfinished = await unfinished
        except Exception as exc:
            self._error(exc)
            return False
        if unfinished is not True:
            return False
        self.continued += 1
        self._append(ChatMessage("user", CONTINUATION_PROMPT))
        if self.bus.active:
            self.bus.publish(
                ContinuationInjected(
                    path=self.path, iteration=self.iterations, count=self.continued, text=text
                )
            )
        return True

    async def _final_turn(self) -> None:
        # An answered last call leaves the reason (max_iterations, stalled) as
        # it is, unless its answer was cut (max_output_tokens, content_filter,
        # refusal); one that could not be made or failed says why:
        # stop_requested, budget_exhausted or error.
        reply = await self._turn((), final=True)
        if reply is not None and reply.finish_reason in _CUT:
            self.reason = _CUT[reply.finish_reason]

    async def _stalled(self) -> None:
        if self.bus.active:
            self.bus.publish(Stalled(path=self.path, why=self.stall))
        self._append(ChatMessage("user", FINAL_ANSWER_PROMPT))
        self.reason = "stalled"
        await self._final_turn()

    async def _on_step(
        self,
        tool_name: str | None,
        summary: str,
        arguments: dict[str, object] | None,
        tokens: int,
    ) -> bool:
        """Tell the spec's on_step hook (set) of step ``self.step``; False if it raised.

        *tokens* is the history's estimated size up to this step.
        """
        hook = self.st.spec.on_step
        assert hook is not None
        from .spec import StepInfo

        info = StepInfo(
            self.path,
            self.step,
            tool_name,
            _summary(summary),
            iteration=self.iterations,
            max_iterations=self.cmd.max_iterations,
            tool_arguments=None if arguments is None else MappingProxyType(arguments),
            tokens=tokens,
        )
        try:
            result = hook(info)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            self._error(exc)
            return False
        return True
