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
from collections.abc import Coroutine, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING

import trio

from ...errors import ContextTooLong, InvalidArgument
from ...messages import (
    ChatMessage,
    ContextAppend,
    ContextRead,
    ContextReset,
    PhaseEnded,
    PhaseResult,
    PhaseStarted,
    RunPhase,
    StopReason,
    ToolCallRequest,
    ToolResult,
)
from ...providers.limiter import lane_index
from ...providers.tokens import message_text, message_tokens, parts_tokens
from ..tools.output import TypedAnswer
from ..tools.tool_call import ToolRunner
from .compaction import compact
from .endings import _CUT
from .model_turns import ModelTurns
from .seams import Parked
from .stream import RUN_BUSES

if TYPE_CHECKING:
    from ...actors.actor import ActorRef
    from ..budgets.budget import Lease
    from .extensions import PhaseGuard
    from .state import _AgentState

from .metering import _Meter

__all__ = ["Phase", "phase_tools"]

# The agent whose phase is running tools now; set only for agents that hold an
# agent tool, which spawns its child under the caller.
CALLER: ContextVar[_AgentState | None] = ContextVar("agentrio_calling_agent", default=None)


def _as_history(read: object) -> list[ChatMessage]:
    """The history a context actor answered a ContextRead with, as a list."""
    assert isinstance(read, tuple)
    return list(read)


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


def phase_tools(st: _AgentState, cmd: RunPhase) -> frozenset[str]:
    """The tools a phase of *cmd* may call: the run's ``tool_names`` (else the
    agent's), within the ceiling its parent's phase set."""
    names = cmd.tool_names
    allowed = st.info.tool_set if names is None else frozenset(names)
    if st.ceiling is not None:  # started during a narrowed phase of its parent
        allowed = allowed & st.ceiling
    return allowed


async def _shielded(write: Coroutine[object, None, None]) -> None:
    # Once a phase has ended, a cancel must not cut it short (it would end twice).
    with trio.CancelScope(shield=True):
        await write


class Phase(ModelTurns):
    """The working state of one phase; `run` returns its result."""

    __slots__ = (
        "allowed",
        "bus",
        "cmd",
        "deadline",
        "escalating",
        "guard",
        "history",
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
        # The list holds the calls' results, which the phase holds anyway (in
        # calls); the set, each call as one bytes object, the JSON of [name,
        # arguments] (see ToolTurns._watch).
        self.seen: list[ToolResult] | set[bytes] = []
        # How often each repeated call was made, once one is (only with
        # Limits.max_identical_calls > 2: at 2 the first repeat is the stall).
        self.repeats: dict[bytes, int] | None = None
        self.last_result: ToolResult | None = None  # (its tool and content)
        self.same_results = 0  # results in a row equal to last_result, it included
        self.stall = ""
        self.continued = 0  # continuation messages added (Limits.max_continuation_turns)
        self.parse_failures = 0
        names = cmd.tool_names  # (phase_tools' rule, inline: this runs for every phase)
        allowed = st.info.tool_set if names is None else frozenset(names)
        if st.ceiling is not None:  # started during a narrowed phase of its parent
            allowed = allowed & st.ceiling
        self.allowed = allowed
        # The phase's security (#26: AgentSpec.security), made once its history is read.
        self.guard: PhaseGuard | None = None
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
                self.history = _as_history(await ctx.ask(ContextRead()))
            self._load()
            if st.info.skills is not None:  # (#26) skills active in the history narrow it
                st.info.skills.narrow(self, None)
            if st.spec.security is not None:  # (#26) taint from the history, sanitising
                self.guard = st.spec.security.guard(self)
        token = CALLER.set(st) if st.info.needs_caller else None
        try:
            with self._deadline() as scope:
                if self._lane_refused():
                    pass  # (the phase ends with the error)
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
                            # (No locals for the finish reason or the limit: this
                            # frame waits on each of 10k agents' calls.)
                            if reply.finish_reason != "stop":
                                if reply.finish_reason == "pause_turn":
                                    continue  # the server paused a long turn: the next call goes on
                                # an answer the model did not end itself
                                self.reason = _CUT[reply.finish_reason]
                                break
                            if self._may_continue() and await self._continued(reply.text):
                                continue
                            if self.reason == "error":  # (the continuation detector raised)
                                break
                            self.reason = "done"
                            if self.typed is None or not await self._answer_refused(reply.text):
                                break
                            continue  # refused: the model is told why, and answers again
                        self.pending = reply.tool_calls
                        # (_run_tools' steps: a lone call, the common case, awaited in
                        # this frame; a batch in _run_batch's)
                        runners = await self._tool_batch(reply.tool_calls, True)
                        if len(runners) == 1:
                            self._lone_done(runners[0], await self._lone(runners[0]))
                            steps = self._tools_ran()
                            if steps is not None:
                                await steps
                        else:
                            await self._run_batch(runners)
                        del runners  # (not kept while the next model call waits)
                        if st.info.skills is not None:  # (#26) a skill activated now narrows
                            st.info.skills.narrow(self, self.calls[-len(reply.tool_calls) :])
                            schemas = st.info.schemas_for(self.allowed)
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
        except Parked:  # its state is in the store (a deferred decision, #27)
            self.reason = "deferred"
            return self._ended()
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

    def _lane_refused(self) -> bool:
        """Does the phase end at once with an error, for a lane that does not exist?
        (run() checks it; a RunPhase sent as is may not.)"""
        if self.cmd.lane is not None:
            try:
                lane_index(self.cmd.lane, "RunPhase.lane")
            except InvalidArgument as exc:
                self._error(exc)
                return True
        return False

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

    async def _compact(self, window: int | None = None) -> bool:
        """Compact the history (if there is something to replace); True if it was.
        *window*: the context window the model's server said it has, if it did.
        (Here, not in ModelTurns: compaction.py takes the model turns' phase.)"""
        if self.compaction_off:
            return False
        return await compact(self, window)

    # -- tool calls --------------------------------------------------------------------
