"""One phase of the agent loop: bounded model turns and tool calls.

Each iteration: check the stop request and the budget -> fit the history to
the context window -> reserve, call the model, settle -> run the allowed tool
calls in parallel, each a ToolRunner -> check for a stall -> loop. The
phase's new messages go back to the ContextActor once, at the end.

A model that retries on its own (a provider's) gets a ``_Meter``: each failed
attempt is charged as it fails, and a retry is made only if the budget has
room for it.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Awaitable, Coroutine, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING

import msgspec
import trio

from ..._text import valid_reply
from ...errors import ContextTooLong, InvalidArgument
from ...messages import (
    BudgetExhausted,
    ChatMessage,
    ContextAppend,
    ContextRead,
    ContextReset,
    ContextTruncated,
    ModelReply,
    ModelSettings,
    PhaseEnded,
    PhaseError,
    PhaseResult,
    PhaseStarted,
    RunPhase,
    StopReason,
    TextDelta,
    ToolCallRequest,
    ToolResult,
    TurnEnded,
    TurnStarted,
    Usage,
    Waited,
)
from ...providers.limiter import lane_index
from ...providers.tokens import message_text, message_tokens, parts_tokens
from ..tools.output import TypedAnswer
from ..tools.tool_call import ToolRunner
from .context import fit_window
from .endings import _CUT, Endings
from .stream import RUN_BUSES, RunBus

if TYPE_CHECKING:
    from ...actors.actor import ActorRef
    from ...providers.base import ToolSchema
    from ..budgets.budget import Lease
    from .agent import _AgentState

from .metering import _Meter, _usage_invalid, settle_reply

__all__ = ["Phase"]

# The agent whose phase is running tools now; set only for agents that hold an
# agent tool, which spawns its child under the caller.
CALLER: ContextVar[_AgentState | None] = ContextVar("agentrio_calling_agent", default=None)


# How a phase ends on a reply without tool calls that the model did not end
# by itself (a "pause_turn" reply is not one: the phase calls again).
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


class _Untimed:
    """The deadline's scope of a phase without one: ``with`` it does nothing."""

    __slots__ = ()

    # (Static: `with` then holds the function itself while the phase runs, not a
    # bound method made for each phase.)
    @staticmethod
    def __enter__() -> None:
        return None

    @staticmethod
    def __exit__(*exc: object) -> None:
        return None


_UNTIMED = _Untimed()


async def _raising(exc: Exception) -> object:
    raise exc


async def _shielded(write: Coroutine[object, None, None]) -> None:
    # Once a phase has ended, a cancel must not cut it short (it would end twice).
    with trio.CancelScope(shield=True):
        await write


class Phase(Endings):
    """The working state of one phase; `run` returns its result."""

    __slots__ = (
        "allowed",
        "base",
        "bus",
        "cmd",
        "compaction_off",
        "cost",
        "ctx",
        "deadline",
        "error",
        "escalating",
        "estimate",
        "history",
        "id_base",
        "lease",
        "max_out",
        "meter",
        "overflow",
        "path",
        "rec",
        "settings",
        "st",
        "typed",
    )

    def __init__(self, st: _AgentState, cmd: RunPhase) -> None:
        self.st = st
        self.cmd = cmd
        bus = st.services.bus
        if RUN_BUSES:  # some run streams (AgentRef.stream): is it this one?
            bus = RUN_BUSES.get(id(cmd), bus)
        self.bus = bus
        assert st.ref is not None
        self.path = st.ref.path
        self.history: list[ChatMessage] = []
        self.sizes: list[int] = []
        # When each message of history[base:] was made: the phase's new turns
        # go to the context with their times (see AgentRef.history). (An array,
        # not a list: a list's float is an object of 24 bytes, on each of 10k
        # agents' turns in flight; the array's append costs a few hundred
        # instructions more a run.)
        self.timestamps = array("d")
        self.total = 0  # sum(self.sizes), kept as messages are added
        self.base = 0
        self.calls: list[ToolResult] = []
        self.final_text = ""
        self.reason: StopReason = "done"
        self.error: tuple[str, str] | None = None  # (type, message) of an "error" end
        self.iterations = 0
        self.step = 0
        self.batch: list[ToolRunner | ToolResult] | None = None
        # (A list while it is short, not a set: a phase makes a handful of
        # calls, and an empty set is 216 bytes on each of 10k agents in flight.)
        # Each call is kept as one bytes object, the JSON of [name, arguments]
        # (not a (name, arguments) tuple: one object less per call in flight).
        self.seen: list[bytes] | set[bytes] = []
        # How often each repeated call was made, once one is (only with
        # Limits.max_identical_calls > 2: at 2 the first repeat is the stall).
        self.repeats: dict[bytes, int] | None = None
        self.last_result: tuple[str, str] | None = None  # (tool, content)
        self.same_results = 0  # results in a row equal to last_result, it included
        self.stall = ""
        self.continued = 0  # continuation messages added (Limits.max_continuation_turns)
        self.parse_failures = 0
        names = cmd.tool_names
        allowed = st.info.tool_set if names is None else frozenset(names)
        if st.ceiling is not None:  # started during a narrowed phase of its parent
            allowed = allowed & st.ceiling
        self.allowed = allowed
        self.ctx: ActorRef | None = None
        # The turn's lone tool call while it runs in the agent's task, timed
        # by an alarm; if the alarm goes off, the phase is interrupted and
        # delivered again, and run() goes on from that call (see AgentActor).
        self.lone: ToolRunner | None = None
        self.pending: Sequence[ToolCallRequest] = ()  # the calls of the turn in progress
        self.deadline: float | None = None  # of the whole phase, once it has begun
        self.escalating = False  # the first phase of an escalating pair
        # A summary failed, or one left the history still over the threshold:
        # not tried again in this phase (each try is a model call).
        self.compaction_off = False
        self.id_base: int | None = None  # see fix_call_numbers
        # The model call under way (set by _call): its reservation, for what
        # follows the call. (On the phase, not in a frame of the turn's: the
        # phase's loop awaits the call in its own frame.)
        self.lease: Lease | None = None
        self.meter: _Meter | None = None
        self.estimate = self.max_out = 0
        self.cost = 0.0
        self.overflow: ContextTooLong | None = None  # a call over the context window
        # The request settings of this phase's model calls: the run's over the spec's.
        settings = st.spec.settings
        if cmd.settings is not None:
            settings = cmd.settings.over(settings)
        self.settings = settings
        # The answer's parsing and validation, when the spec has an output_type.
        output = st.info.output
        validators = st.spec.output_validators
        self.typed = (
            None
            if output is None and not validators
            else TypedAnswer(output, st.spec.output_retries, validators)
        )
        # A durable agent's phase records its turns (agents/durability/checkpoint.py);
        # without a checkpoint store, nothing (one test per phase, one per turn).
        checkpoints = st.services.checkpoints
        self.rec = None if checkpoints is None else checkpoints.recorder(self)

    # -- the phase ---------------------------------------------------------------------

    def run(self) -> Coroutine[object, None, PhaseResult[object]]:
        """Run the phase; called again to go on from a lone tool call whose alarm went off."""
        otel = self.st.services.otel
        if otel is not None:  # (the phase's span is current while it runs)
            return otel.run_phase(self, self._run())
        return self._run()

    async def _run(self) -> PhaseResult[object]:
        # The whole phase in one coroutine: its start, its turns and its end (one
        # frame on each waiting agent's stack: the turns' loop is not a coroutine
        # of its own, nor is the deadline's scope).
        cmd, st = self.cmd, self.st
        # The phase under way: a child it starts gets no more than its tools
        # (compose.spawn_child), and if it is interrupted, the message
        # delivered again finds it here (AgentActor.handle).
        st.phase = self
        if self.lone is None:
            if self.bus.active:
                self.bus.publish(PhaseStarted(path=self.path, context_label=cmd.context_label))
            ctx = self.ctx = st.context(cmd.context_label)
            # One read per phase, and none when the history is known to be
            # empty: a context this agent has not made yet, or one it is told
            # to reset. (The read is here, not in _load: no coroutine for it.)
            if ctx is not None and cmd.continue_context:
                history = await ctx.ask(ContextRead())
                assert isinstance(history, tuple)
                self.history = list(history)
            self._load()
        token = CALLER.set(st) if st.info.needs_caller else None
        try:
            with self._deadline() as scope:
                refused = self._lane_refused()
                if refused is not None:
                    self._error(refused)
                elif cmd.direct_tool_calls is not None:
                    await self._direct(cmd.direct_tool_calls)
                elif not await self._went_on():
                    # (Each pass makes one model call or ends the phase.)
                    schemas = st.info.schemas_for(self.allowed)
                    while self.iterations < cmd.max_iterations:
                        # A turn, as _turn makes it, without _turn's frame: the
                        # model call is awaited here, in the phase's one frame.
                        made = await self._call(schemas)
                        if made is None:
                            break
                        try:
                            reply = self._valid(await made)
                        except BaseException as exc:
                            if not self._failed(exc, again=False):
                                if not isinstance(exc, Exception):
                                    raise
                                break
                            reply = None  # (compacted below, out of the except block)
                        made = None  # (a coroutine that has returned keeps its frame's memory)
                        if reply is not None and st.spec.on_step is None:
                            reply = self._took(reply, final=False)  # (no coroutine)
                        else:
                            reply = await self._answered(reply, schemas, final=False)
                        if reply is None:
                            break
                        if not reply.tool_calls:
                            finish = reply.finish_reason
                            if finish != "stop":
                                if finish == "pause_turn":
                                    continue  # the server paused a long turn: the next call goes on
                                self.reason = _CUT[finish]  # an answer the model did not end itself
                                break
                            limit = cmd.max_continuation_turns  # (a mode's, else the spec's)
                            if limit is None:
                                limit = st.spec.limits.max_continuation_turns
                            if self.continued < limit and await self._continued(reply.text):
                                continue
                            if self.reason == "error":  # (the continuation detector raised)
                                break
                            self.reason = "done"
                            if self.typed is None or not await self._answer_refused(reply.text):
                                break
                            continue  # refused: the model is told why, and answers again
                        self.pending = reply.tool_calls
                        # (_run_tools' two steps: only the second waits on the calls)
                        await self._run_batch(await self._tool_batch(reply.tool_calls, True))
                        if self._tools_end_phase(reply.tool_calls):
                            break
                        if self.stall:
                            await self._stalled()
                            break
                    else:
                        self.reason = "max_iterations"
                        if st.spec.limits.final_answer:
                            await self._final_turn()
            if scope is not None and scope.cancelled_caught:
                self.reason = "timeout"
                if self.batch is not None:
                    self._settle_batch("the phase timed out while the tool ran")
        finally:
            if token is not None:
                CALLER.reset(token)
        self._persist()
        summary = st.phase_done(self.reason)
        if summary is not None:
            await _shielded(summary)
        return self._ended()

    async def cancelled(self) -> PhaseResult[object]:
        """End the phase, interrupted, with ``"cancelled"``: its caller was cancelled
        (``agentrio.actors.withdrawn``), or something else interrupted it.

        What it did so far stays: the turns it completed go to its context, the
        model call in flight was settled as it unwound, and the tool calls it
        cut short are recorded as such (status ``"timeout"``).
        """
        self.reason = "cancelled"
        self.lone = None  # (a lone call whose alarm went off too is cut short all the same)
        if self.batch is not None:
            self._settle_batch("the phase was cancelled while the tool ran")
        self._persist()
        summary = self.st.phase_done(self.reason)
        if summary is not None:
            await _shielded(summary)
        return self._ended()

    def lone_expired(self) -> bool:
        """Was the phase interrupted by its lone tool call's alarm (the call's timeout)?"""
        lone = self.lone
        return lone is not None and lone.expired

    def _ended(self) -> PhaseResult[object]:
        """Say that the phase ended; its result."""
        self.st.phase = None
        otel = self.st.services.otel
        if otel is not None:
            otel.phase_ended(self)
        if self.bus.active:
            self.bus.publish(
                PhaseEnded(
                    path=self.path,
                    context_label=self.cmd.context_label,
                    stop_reason=self.reason,
                    iterations=self.iterations,
                )
            )
        error = self.error
        text, reason = self.final_text, self.reason
        result: PhaseResult[object]
        if reason == "error" and error is not None:
            result = PhaseResult(text, tuple(self.calls), "error", error[0], error[1])
        elif self.typed is None or self.typed.kind is None:  # (text: validated, or not)
            result = PhaseResult(
                text, tuple(self.calls), reason, "", "", text if reason == "done" else None
            )
        else:
            output = self.typed.value if reason == "done" else None
            result = PhaseResult(text, tuple(self.calls), reason, "", "", output)
        if self.rec is not None:  # (what _persist wrote, if anything: the same test)
            wrote = len(self.history) > self.base and bool(self.iterations or self.calls)
            self.rec.done(self, result, wrote)
        return result

    def _deadline(self) -> AbstractContextManager[trio.CancelScope | None]:
        """The scope of the phase's deadline, or one that does nothing if it has none."""
        timeout = self.cmd.timeout  # this run's (run(timeout=...), a mode's), else the spec's
        if timeout is None:
            timeout = self.st.spec.limits.timeout
        if timeout is None or timeout == math.inf:
            return _UNTIMED
        if self.deadline is None:  # (set once: the phase may be delivered again)
            self.deadline = trio.current_time() + timeout
        return trio.CancelScope(deadline=self.deadline)

    def _lane_refused(self) -> InvalidArgument | None:
        """A lane that does not exist (run() checks it; a RunPhase sent as is may not)."""
        if self.cmd.lane is not None:
            try:
                lane_index(self.cmd.lane, "RunPhase.lane")
            except InvalidArgument as exc:
                return exc
        return None

    async def _went_on(self) -> bool:
        """Go on from a lone tool call cut short by its alarm, or after a crash;
        True if the phase ends there."""
        if self.lone is not None:  # going on after a lone tool call's timeout
            await self._resume_tools()
            if self._tools_end_phase(self.pending):
                return True
            if self.stall:
                await self._stalled()
                return True
        elif self.rec is not None and self.rec.resume is not None and self.rec.resume.going_on:
            self.rec.resume.going_on = False
            return await self._resumed()  # going on after a crash
        return False

    def _load(self) -> None:
        """Size the history read (if any) or start one, then add the user's turn."""
        self.base = len(self.history)
        info = self.st.info
        rec = self.rec
        if rec is not None and rec.resume is not None and rec.resume.messages:
            self._restore(rec)
            return
        if self.history:
            estimate = info.estimator
            self.sizes = [message_tokens(estimate, m) for m in self.history]
            self.total = sum(self.sizes)
        elif info.system is not None:  # a new context starts with the system prompt
            self.history.append(info.system[0])
            self.sizes.append(info.system[1])
            self.timestamps.append(time.time())
            self.total = info.system[1]
        parts = self.cmd.parts
        if not parts:
            self._append(ChatMessage("user", self.cmd.user_message))
        else:
            self._append(ChatMessage("user", self.cmd.user_message, parts=parts))
            size = parts_tokens(parts)  # (its text is counted by _append)
            self.sizes[-1] += size
            self.total += size
        if rec is not None:
            rec.started(self)

    def _persist(self) -> None:
        ctx = self.ctx
        new = tuple(self.history[self.base :])
        if not new or (self.iterations == 0 and not self.calls):
            # Nothing happened (stopped, or no budget, before the first call):
            # the context is left as it was.
            return
        if ctx is None:
            # The context's actor is made when it has a first history to hold.
            ctx = self.st.new_context(self.cmd.context_label)
        elif not self.cmd.continue_context:
            # The reset goes with the new history: a phase that did nothing
            # (returned above) leaves the old one as it was.
            ctx.send_nowait(ContextReset())
        # A context actor is inline: the write is done when this returns.
        ctx.send_nowait(ContextAppend(new, tuple(self.timestamps)))

    def _append(self, msg: ChatMessage, now: float | None = None) -> None:
        """Add *msg* to the history, made at *now* (default: the clock's time now)."""
        self.history.append(msg)
        self.timestamps.append(time.time() if now is None else now)
        size = self.st.info.estimator(message_text(msg))
        self.sizes.append(size)
        self.total += size

    # -- model turns -------------------------------------------------------------------

    async def _compact(self, window: int | None = None) -> bool:
        """Compact the history (if there is something to replace); True if it was.
        *window*: the context window the model's server said it has, if it did."""
        if self.compaction_off:
            return False
        from .compaction import compact  # (here: it imports this module)

        return await compact(self, window)

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

    # -- tool calls --------------------------------------------------------------------
