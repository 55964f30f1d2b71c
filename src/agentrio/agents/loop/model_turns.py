"""A phase's model turns: `Phase`'s base for its turns' model calls.

A turn: the history's window, the budget reserved before the call (``_call``),
the call, its reply settled and added (``_took``), or its failure (``_failed``:
an error, no budget, or a request over the context window, compacted and made
again). The phase's own loop (``Phase._run``) awaits the call in its one frame;
the other turns (a final answer, a call made again) go through ``_turn``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

import msgspec
import trio

from ..._text import valid_reply
from ...errors import ContextTooLong
from ...messages import (
    BudgetExhausted,
    ChatMessage,
    ContextTruncated,
    ModelReply,
    ModelSettings,
    PhaseError,
    TextDelta,
    ToolCallRequest,
    TurnEnded,
    TurnStarted,
    Usage,
    Waited,
)
from .context import fit_window
from .endings import Endings
from .metering import _Meter, _usage_invalid, settle_reply
from .stream import RunBus

if TYPE_CHECKING:
    from ...actors.actor import ActorRef
    from ...providers.base import ToolSchema
    from ..budgets.budget import Lease
    from .extensions import PhaseGuard

__all__ = ["ModelTurns"]


def _numbered(history: Sequence[ChatMessage]) -> int:
    """How many calls *history* holds, or more if an id ``call_<n>`` is higher.

    The highest ``n`` matters after a compaction, which left out calls: a new
    ``call_<count + 1>`` could then repeat an id the history still holds.
    """
    n = 0
    for m in history:
        for c in m.tool_calls:
            n += 1
            number = c.id[5:]
            # (isdecimal: what int() reads; 18 digits at most: int() of a huge
            # one is slow, or refused)
            if c.id.startswith("call_") and number.isdecimal() and len(number) <= 18:
                n = max(n, int(number))
    return n


async def _raising(exc: Exception) -> object:
    raise exc


class ModelTurns(Endings):
    """`Phase`'s methods for its turns' model calls (the state is the phase's)."""

    __slots__ = (
        "base",
        "compaction_off",
        "cost",
        "ctx",
        "error",
        "estimate",
        "id_base",
        "lease",
        "max_out",
        "meter",
        "overflow",
    )

    if TYPE_CHECKING:  # (the phase's working state: see Phase.__init__)
        ctx: ActorRef | None
        base: int
        compaction_off: bool
        error: tuple[str, str] | None
        id_base: int | None
        settings: ModelSettings | None
        lease: Lease | None
        meter: _Meter | None
        estimate: int
        max_out: int
        cost: float
        overflow: ContextTooLong | None
        guard: PhaseGuard | None  # (#26: AgentSpec.security)

        async def _compact(self, window: int | None = None) -> bool: ...

    def fix_call_numbers(self) -> None:
        """Number the calls still to come from what the history holds now, before a
        compaction takes calls out of it: ids must not repeat ones it keeps."""
        if self.id_base is None:
            self.id_base = _numbered(self.history[: self.base])

    def _window(self) -> tuple[list[ChatMessage], int]:
        limit = self.st.window
        total = self.total
        if total <= limit:
            return self.history, total
        kept, dropped, after = fit_window(self.history, self.sizes, limit)
        if dropped and self.bus.active:
            self.bus.publish(
                ContextTruncated(
                    path=self.path,
                    context_label=self.cmd.context_label,
                    dropped=dropped,
                    tokens_before=total,
                    tokens_after=after,
                )
            )
        return kept, after

    async def _turn(
        self, schemas: Sequence[ToolSchema], *, final: bool = False, again: bool = False
    ) -> ModelReply | None:
        """One model call and its reply, added to the history; None if the phase ends
        there (its reason set). *again*: the call is made again after a compaction
        (its request was over the model's context window). (The phase's own loop,
        in _run, takes these steps without this frame.)"""
        made = await self._call(schemas)
        if made is None:
            return None
        try:
            reply = self._valid(await made)
        except BaseException as exc:
            if not self._failed(exc, again):
                if not isinstance(exc, Exception):
                    raise
                return None
            reply = None  # (compacted below, out of the except block)
        return await self._answered(reply, schemas, final)

    async def _call(self, schemas: Sequence[ToolSchema]) -> Awaitable[object] | None:
        """Make a turn's model call: the history's window, the budget reserved (kept
        on the phase: lease, meter, estimate, max_out, cost, for what follows the
        call); the call's awaitable, not awaited, or None if the phase ends first."""
        st = self.st
        if self._stop_requested():
            return None
        if self.rec is not None and self.rec.sync_turns:
            # (durability="turn": the turns so far are on disk before the next call)
            await self.rec.synced()
        if self.bus.active and type(self.bus) is RunBus and self.bus.held:
            # A streamed run whose reader is behind: it waits for the reader
            # here, before the call's reservation (see agents/loop/stream.py).
            await self.bus.drain()
        if st.compact_at is not None and self.total > st.compact_at:
            await self._compact()
        view, estimate = self._window()
        if st.recall is not None:  # memory, context providers (#26: loop/recall.py)
            view, estimate = await st.recall.before_call(self, view, estimate)
        settings = self.settings
        if not schemas:
            schemas, settings = self._no_tool_offer(view) or (schemas, settings)
        max_out = st.spec.limits.max_output_tokens
        # Never a bare reserve(): it would let this call take room that an
        # earlier call is queued for, and a stream of small calls could starve a
        # big one (reserve_now and acquire both respect the queue).
        cost = st.pricing.reserve(estimate, max_out) if st.pricing else 0.0
        # (reserve_now first: the common case, room and no queue, needs no
        # acquire() coroutine. A cancelled phase must not reserve, nor count a
        # request it never made: hence the check before.)
        await trio.lowlevel.checkpoint_if_cancelled()
        lease = st.budget.reserve_now(estimate, max_out, cost)
        if lease is None:
            lease = await st.budget.acquire(
                estimate,
                max_out,
                cost,
                waited=self.budget_waited if self.bus.active or st.services.otel else None,
            )
        if lease is None:
            self._no_budget(st.budget.exhausted(estimate, max_out, cost))
            return None
        self.iterations += 1
        if self.bus.active:
            self.bus.publish(TurnStarted(path=self.path, iteration=self.iterations))
        meter = _Meter(st, lease, estimate, max_out, cost) if st.metered else None
        self.lease, self.meter, self.estimate, self.max_out, self.cost = (
            lease,
            meter,
            estimate,
            max_out,
            cost,
        )
        try:
            if (
                meter is None
                and not st.laned
                and settings is None
                and self.typed is None
                and not (st.streams and self.bus.active)
            ):
                if st.services.otel is None:
                    return st.model.complete(view, schemas, max_output_tokens=max_out)
                return st.services.otel.chat(  # (in a "chat" span; without _complete's coroutine)
                    self,
                    view,
                    max_out,
                    st.model.complete(view, schemas, max_output_tokens=max_out),
                )
            return self._complete(view, schemas, max_out, meter, settings)
        except Exception as exc:  # (a model whose complete raises before its coroutine)
            return _raising(exc)

    def _valid(self, reply: object) -> ModelReply:
        """The model call's *reply*, checked; TypeError if it is not a ModelReply."""
        if not isinstance(reply, ModelReply):
            raise TypeError(f"the model returned {type(reply).__name__}, not a ModelReply")
        # (a Model of the application's may give lone surrogates; a typed
        # answer's text is left to its own check, which refuses them)
        return valid_reply(reply, text=self.typed is None)

    def _failed(self, exc: BaseException, again: bool) -> bool:
        """The model call raised *exc*: its reservation released; True if the
        history is to be compacted and the call made again (``self.overflow``),
        False if the phase ends (its reason set) or *exc* is not an Exception."""
        lease, meter = self.lease, self.meter
        assert lease is not None
        self.lease = self.meter = None
        lease.settle(None)
        st = self.st
        st.count(None)
        if not isinstance(exc, Exception):
            return False
        if meter is not None and meter.refused:
            # The retry did not fit: the provider gave up with the attempt's error.
            self._no_budget(meter.refused)
        elif isinstance(exc, ContextTooLong) and not again and st.summariser is not None:
            self.overflow = exc
            return True
        else:
            self._error(exc)
        return False

    async def _answered(
        self, reply: ModelReply | None, schemas: Sequence[ToolSchema], final: bool
    ) -> ModelReply | None:
        """The turn after its call: *reply* settled and added (None: the call was
        over the context window, compacted and made again); the reply with its
        calls numbered, or None if the phase ends."""
        if reply is None:
            overflow, self.overflow = self.overflow, None
            assert overflow is not None
            return await self._overflowed(overflow, schemas, final)
        took = self._took(reply, final)
        if took is None:
            return None
        if self.st.spec.on_step is not None and not await self._on_step(
            None, took.text or f"{len(took.tool_calls)} tool call(s)", None, self.total
        ):
            return None
        return took

    def _took(self, reply: ModelReply, final: bool) -> ModelReply | None:
        """Settle the call's lease with *reply* and add the reply to the history; the
        reply with its calls numbered, or None if the phase ends (a usage not valid)."""
        st = self.st
        lease = self.lease
        assert lease is not None
        attempts = 0 if self.meter is None else 1  # (the answered ones: 1 for a metered call)
        self.lease = self.meter = None  # (settled below: not kept while the tools run)
        pricing = st.pricing
        if pricing is None and type(reply.usage) is Usage:  # (settle_reply's common case)
            charged = reply if lease.settle(reply.usage, attempts=attempts) else None
        else:
            charged = settle_reply(lease, reply, pricing, attempts)
        if charged is None:
            # Not a Usage, or negative, NaN or infinite: the reservation was charged.
            st.count(Usage(self.estimate, self.max_out, self.cost), 1, attempts)
            self._error(_usage_invalid(st.model, reply.usage))
            return None
        reply = charged
        st.count(reply.usage, 1, attempts)
        calls = () if final else self._number(reply.tool_calls)
        # (A refusal sent apart from the text is what the model said.)
        text = reply.text or reply.refusal
        if self.guard is not None and text:  # (#26) redacted before anyone sees it
            text = self.guard.sanitise(text)
            if reply.text and text != reply.text:
                reply = msgspec.structs.replace(reply, text=text)
        if reply.thinking or reply.blocks:  # kept, to be sent back with the tool results
            self._append(
                ChatMessage(
                    "assistant",
                    text,
                    tool_calls=calls,
                    thinking=reply.thinking,
                    blocks=reply.blocks,
                )
            )
        else:
            self._append(ChatMessage("assistant", text, tool_calls=calls))
        self.final_text = text
        if self.rec is not None:
            self.rec.turn(self)
        if self.bus.active:
            if type(self.bus) is RunBus:  # its stream has the text, streamed or not
                self.bus.reply_text(self.path, text)
            self.bus.publish(
                TurnEnded(
                    path=self.path,
                    iteration=self.iterations,
                    usage=reply.usage,
                    tool_calls=len(calls),
                )
            )
        if calls is not reply.tool_calls:
            reply = msgspec.structs.replace(reply, tool_calls=calls)
        self.step += 1
        return reply

    async def _overflowed(
        self, exc: ContextTooLong, schemas: Sequence[ToolSchema], final: bool
    ) -> ModelReply | None:
        """The call's request was over the model's context window (*exc*): compact the
        history and make the call once more, as the same turn; if nothing could be
        compacted, the phase ends with the error."""
        # (Whatever the threshold says: the server has just said the window is full.)
        if not await self._compact(exc.limit):
            self._error(exc)
            return None
        self.iterations -= 1  # (the same turn, made again)
        return await self._turn(schemas, final=final, again=True)

    def _no_tool_offer(
        self, view: list[ChatMessage]
    ) -> tuple[Sequence[ToolSchema], ModelSettings] | None:
        """What a call that may call no tool offers, when its model's API refuses tool
        calls and results in a call that defines no tools (Anthropic's): the tools
        (the phase's, else the agent's that *view* names), with the settings that
        say none may be called (``tool_choice="none"``). None: offer nothing (the
        provider then sends the tool turns as text, if it must)."""
        model, info = self.st.model, self.st.info
        if not info.schemas or not getattr(model, "needs_tools_for_tool_turns", False):
            return None
        if self.typed is not None and self.typed.schema_for(model) is not None:
            return None  # (the answer's own tool is offered: the call defines tools)
        named = {c.name for m in view for c in m.tool_calls}
        named.update(m.name for m in view if m.role == "tool" and m.name)
        if not named:
            return None
        schemas = info.schemas_for(self.allowed) or info.schemas_for(
            frozenset(named) & info.tool_set
        )
        if not schemas:
            return None
        return schemas, ModelSettings(tool_choice="none").over(self.settings)

    async def _complete(
        self,
        view: list[ChatMessage],
        schemas: Sequence[ToolSchema],
        max_out: int,
        meter: _Meter | None,
        settings: ModelSettings | None,
    ) -> ModelReply:
        """The model call with the keywords the model takes: ``on_text``, ``meter``,
        ``lane``, ``settings`` (checked at spawn and run to be taken),
        ``output_schema``."""
        options: dict[str, object] = {}
        if self.st.streams and self.bus.active:
            options["on_text"] = self._text
        if meter is not None:
            options["meter"] = meter
        if self.st.laned:
            options["lane"] = self.cmd.lane or self.st.spec.lane
        if settings is not None:
            options["settings"] = settings
        typed = self.typed
        if typed is not None:
            schema = typed.schema_for(self.st.model)
            if schema is not None:
                options["output_schema"] = schema
        # (No local for the OpenTelemetry: this frame waits on each agent's model call.)
        if self.st.services.otel is None:
            return await self.st.model.complete(view, schemas, max_output_tokens=max_out, **options)
        return await self.st.services.otel.chat(  # the call in a "chat" span
            self,
            view,
            max_out,
            self.st.model.complete(view, schemas, max_output_tokens=max_out, **options),
        )

    def budget_waited(self, seconds: float) -> None:
        """Publish the model call's wait for the budget (it did wait), and record it
        with the OpenTelemetry."""
        if self.bus.active:
            self.bus.publish(Waited(path=self.path, what="budget", seconds=seconds))
        if self.st.services.otel is not None:
            self.st.services.otel.waited(self.st, "budget", seconds)

    def _no_budget(self, limit: str) -> None:
        self.reason = "budget_exhausted"
        if self.bus.active:
            self.bus.publish(BudgetExhausted(path=self.path, limit=limit or "budget"))

    def _text(self, piece: str) -> None:
        if self.bus.active:
            self.bus.publish(TextDelta(path=self.path, text=piece))

    def _number(self, calls: tuple[ToolCallRequest, ...]) -> tuple[ToolCallRequest, ...]:
        for c in calls:  # (a loop, not all() of a generator: this runs every turn)
            if not c.id:
                break
        else:
            return calls
        # Ids are unique in the whole conversation, not just this phase: a
        # provider pairs results with calls by id (Anthropic refuses repeats).
        n = self.id_base if self.id_base is not None else _numbered(self.history[: self.base])
        n += len(self.calls) + (len(self.batch) if self.batch else 0)
        out = []
        for i, c in enumerate(calls):
            out.append(c if c.id else msgspec.structs.replace(c, id=f"call_{n + i + 1}"))
        return tuple(out)

    def _error(self, exc: BaseException) -> None:
        self.reason = "error"
        # (The same strings in the result as in the event: a provider's error
        # is already redacted when it is raised.)
        error_type, error = self.error = (type(exc).__name__, str(exc))
        if self.bus.active:
            self.bus.publish(PhaseError(path=self.path, error_type=error_type, error=error))
