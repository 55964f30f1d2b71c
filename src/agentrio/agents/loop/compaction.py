"""Compaction: a context's older turns replaced by a summary that a model writes.

When a phase is about to call its model and the history's estimate has passed
``Compaction.threshold`` of the model's context window, the turns between the
first user message and the recent ones (but not the phase's own user message)
are sent to the summary model, and replaced by its answer: in the phase's copy
at once, and in the context actor
by one ``ContextCompact`` message (for the turns it already holds). A failed
summary changes nothing: the call goes on with the view cut to fit the window
(``fit_window``), as without compaction.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ...errors import ActorError
from ...messages import (
    ChatMessage,
    CompactionFailed,
    ContextCompact,
    ContextCompacted,
    DocumentPart,
    ImagePart,
    ModelReply,
    Usage,
)
from ...providers.base import context_window
from ...providers.tokens import TokenEstimator, arguments_text, message_text
from .context import turn_units
from .metering import _Meter, _usage_invalid, settle_reply
from .summary import SUMMARY_PREFIX, Summariser

if TYPE_CHECKING:
    from .model_turns import ModelTurns as Phase  # (the phase's model turns: what is compacted)

__all__ = ["compact", "plan"]

# -- what is replaced -------------------------------------------------------------------


def plan(
    messages: Sequence[ChatMessage],
    sizes: Sequence[int],
    keep_recent: int,
    tail_room: int,
    keep: int | None = None,
) -> tuple[int, int] | None:
    """The span ``(start, end)`` of *messages* to replace with a summary, or None.

    Kept: everything up to the first user message (the system prompt and
    that message), ``messages[keep]`` (the current phase's user message: the
    request being worked on), and the newest turns: at most *keep_recent*
    of them, no more than fit in *tail_room* tokens, and always the newest.
    A turn with tool calls is kept or replaced whole, with its results.
    When ``messages[keep]`` lies between, the span is the part before it or
    the part after it, whichever holds more tokens. None when fewer than two
    messages are left to replace (one message summarised is no gain, and a
    summary alone would be summarised again at every call).
    """
    head = next((i + 1 for i, m in enumerate(messages) if m.role == "user"), None)
    if head is None:
        return None
    tail = len(messages)
    kept = tokens = 0
    for start, end in reversed(turn_units(messages)):
        if start < head or kept == keep_recent:
            break
        size = sum(sizes[start:end])
        if kept and tokens + size > tail_room:
            break
        tail, kept, tokens = start, kept + 1, tokens + size
    if keep is not None and head <= keep < tail:
        spans = [s for s in ((head, keep), (keep + 1, tail)) if s[1] - s[0] >= 2]
        return max(spans, key=lambda s: sum(sizes[s[0] : s[1]]), default=None)
    if tail - head < 2:
        return None
    return head, tail


def _line(msg: ChatMessage) -> str:
    if msg.role == "tool":
        return f"[tool result of {msg.name or 'a tool'}] {msg.content}"
    text = f"[{msg.role}] {msg.content}"
    for part in msg.parts:
        # The summary model reads the transcript as text: it is told what was
        # attached, not shown it.
        if isinstance(part, ImagePart):
            text += f"\n[{msg.role} attached an image ({part.media_type or 'by URL'})]"
        elif isinstance(part, DocumentPart):
            named = f" {part.name!r}" if part.name else ""
            text += f"\n[{msg.role} attached a document{named} ({part.media_type})]"
    for c in msg.tool_calls:
        text += f"\n[{msg.role} called {c.name}({arguments_text(c.arguments)})]"
    return text


def summary_request(
    prompt: str, older: Sequence[ChatMessage], estimator: TokenEstimator, room: int
) -> tuple[list[ChatMessage], int]:
    """The summary call's messages (the prompt, then *older* as one transcript) and
    their estimate.

    The transcript is text, not the messages themselves: the summary call
    offers no tools, and a provider refuses tool calls without tools. If it
    would pass *room* tokens (the summary model's window), its oldest lines
    are left out, but not a summary made before, which stands for all of them.
    """
    system = ChatMessage("system", prompt)
    lines = [_line(m) for m in older]
    sizes = [estimator(line) for line in lines]
    budget = room - estimator(prompt)
    keep_first = older[0].role == "user" and older[0].content.startswith(SUMMARY_PREFIX)
    cut = 1 if keep_first else 0
    left_out = 0
    total = sum(sizes)
    while total > budget and cut + left_out < len(lines) - 1:
        total -= sizes[cut + left_out]
        left_out += 1
    if left_out:
        note = f"[{left_out} earlier messages left out: they did not fit]"
        lines[cut : cut + left_out] = [note]
    user = ChatMessage("user", "\n\n".join(lines))
    return [system, user], estimator(prompt) + estimator(user.content)


# -- the compaction ---------------------------------------------------------------------


async def compact(phase: Phase, window: int | None = None) -> bool:
    """Compact *phase*'s history if there is something to replace (its estimate
    has passed the threshold, or the model's server said the request was over
    its context window, of *window* tokens if it said); True if part of it was
    replaced by a summary."""
    st = phase.st
    summariser = st.summariser
    limit = st.compact_at
    assert summariser is not None and limit is not None
    if window is not None:
        # The server's window, smaller than the model's says: the turns kept must
        # fit the real one.
        limit = min(limit, max(1, int(window * summariser.settings.threshold)))
    history = phase.history
    # (the phase's own user message: the first at or after base, which a
    # compaction, never replacing it, keeps pointing at)
    own = next((i for i in range(phase.base, len(history)) if history[i].role == "user"), None)
    span = plan(history, phase.sizes, summariser.settings.keep_recent, limit // 2, own)
    if span is None:
        return False
    reply = await _summarise(phase, summariser, *span)
    return reply is not None and await _apply(phase, *span, reply, limit)


async def _summarise(
    phase: Phase, summariser: Summariser, start: int, end: int
) -> ModelReply | None:
    """Make the summary call, budgeted like any model call; None if it was not made
    or failed (a ``CompactionFailed`` event says why)."""
    st = phase.st
    model = summariser.model
    if model is None:
        model, metered, pricing = st.model, st.metered, st.pricing
    else:
        metered, pricing = summariser.metered, summariser.pricing
    limits = st.spec.limits
    max_out = limits.max_output_tokens
    room = max(1, int(context_window(model) * limits.context_fill))
    request, estimate = summary_request(
        summariser.settings.prompt, phase.history[start:end], st.info.estimator, room
    )
    cost = pricing.reserve(estimate, max_out) if pricing else 0.0
    await trio.lowlevel.checkpoint_if_cancelled()
    lease = st.budget.reserve_now(estimate, max_out, cost)
    if lease is None:
        waited = phase.budget_waited if phase.bus.active or st.services.otel else None
        lease = await st.budget.acquire(estimate, max_out, cost, waited=waited)
    if lease is None:
        limit = st.budget.exhausted(estimate, max_out, cost) or "budget"
        _failed(phase, "BudgetExhausted", f"no room in the budget for the summary call ({limit})")
        return None
    meter = _Meter(st, lease, estimate, max_out, cost, model, pricing) if metered else None
    try:
        options: dict[str, object] = {}
        if meter is not None:
            options["meter"] = meter
        if summariser.laned if summariser.model is not None else st.laned:
            # (the phase's lane: the summary call is part of this run's work)
            options["lane"] = phase.cmd.lane or st.spec.lane
        if options:
            reply = await model.complete(request, (), max_output_tokens=max_out, **options)
        else:
            reply = await model.complete(request, (), max_output_tokens=max_out)
        if not isinstance(reply, ModelReply):
            raise TypeError(f"the model returned {type(reply).__name__}, not a ModelReply")
    except BaseException as exc:
        lease.settle(None)
        st.count(None)
        if not isinstance(exc, Exception):
            raise
        _failed(phase, type(exc).__name__, str(exc))
        return None
    attempts = 0 if meter is None else 1
    charged = settle_reply(lease, reply, pricing, attempts)
    if charged is None:
        st.count(Usage(estimate, max_out, cost), 1, attempts)
        problem = _usage_invalid(model, reply.usage)
        _failed(phase, type(problem).__name__, str(problem))
        return None
    reply = charged
    st.count(reply.usage, 1, attempts)
    if not reply.text.strip():
        _failed(phase, "ValueError", "the summary model answered with no text")
        return None
    return reply


async def _apply(phase: Phase, start: int, end: int, reply: ModelReply, limit: int) -> bool:
    """Replace ``history[start:end]`` with the summary: in the context actor (the
    part it holds) and then in the phase's copy (*limit*: the threshold's tokens);
    False if the context actor did not apply it (nothing was replaced)."""
    summary = ChatMessage("user", SUMMARY_PREFIX + reply.text.strip())
    base = phase.base
    phase.fix_call_numbers()  # (while the history still holds the calls of the span)
    if start < base:
        # The context holds history[:base]: what it holds of the span goes in one
        # message, applied only if nothing was written to it since it was read.
        ctx = phase.ctx
        assert ctx is not None
        try:
            applied = await ctx.ask(ContextCompact(start, min(end, base), (summary,), base))
        except ActorError as exc:
            applied, why = False, f"the context actor could not apply it: {exc}"
        else:
            why = "the stored history changed while the summary was made"
        if not applied:
            _failed(phase, "ContextChanged", why)
            return False
        phase.base = start + 1 + max(0, base - end)
    before = phase.total
    size = phase.st.info.estimator(message_text(summary))
    phase.history[start:end] = [summary]
    phase.sizes[start:end] = [size]
    # The phase's times are those of history[base:], its own new turns: the
    # part of the span among them is gone (in the context actor, with the
    # summary), or replaced by the summary, made now.
    stamps = phase.timestamps
    if start < base:
        del stamps[: max(0, end - base)]
    else:
        stamps[start - base : end - base] = array("d", [time.time()])
    phase.total = sum(phase.sizes)
    if phase.total > limit:  # (the kept turns alone are that big)
        phase.compaction_off = True  # another summary would not get it under either
    if phase.bus.active:
        phase.bus.publish(
            ContextCompacted(
                path=phase.path,
                context_label=phase.cmd.context_label,
                replaced=end - start,
                tokens_before=before,
                tokens_after=phase.total,
                usage=reply.usage,
            )
        )
    return True


def _failed(phase: Phase, error_type: str, error: str) -> None:
    # Not tried again in this phase: a summary model that failed once would
    # most likely fail again, and each try costs a call.
    phase.compaction_off = True
    if phase.bus.active:
        phase.bus.publish(
            CompactionFailed(
                path=phase.path,
                context_label=phase.cmd.context_label,
                error_type=error_type,
                error=error,
            )
        )
