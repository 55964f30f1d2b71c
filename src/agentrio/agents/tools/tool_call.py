"""ToolRunner: one tool invocation, with its timeout, turning every failure into a result.

A runner is a plain object, not an actor: it is made for one
[`ToolCallRequest`][agentrio.ToolCallRequest] and ends with its
[`ToolResult`][agentrio.ToolResult]. A turn's only call runs in the agent's
own task, timed by a runtime alarm (``agentrio.actors.interrupt_after``: at
the deadline the agent's phase is interrupted and delivered again, and goes
on with the call as a timeout); several run as tasks of a nursery the agent
opens for the batch, each under a cancel scope of its own, and the agent is
woken once, when the last of them finishes.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import msgspec
import trio

from ..._log import log_extra
from ..._text import scrub
from ...actors import interrupt_after
from ...errors import ToolError
from ...messages import (
    ConfirmationReceived,
    ConfirmationRequired,
    PermissionDenied,
    ToolCallRequest,
    ToolDeadLetter,
    ToolResult,
    ToolRetry,
    ToolStatus,
)
from ...providers.limiter import LANES, lane_index
from .lanes import LanePolicy, ToolLanes
from .policy import (
    Approval,
    Approver,
    Defer,
    Deny,
    PermissionPolicy,
    PostToolUse,
    PreToolUse,
    ask_approver,
)
from .tool import Tool, ToolArgumentsInvalid, ToolContext, ToolResultInvalid, result_parts

if TYPE_CHECKING:
    from ...actors import Alarm
    from ...actors.actor import ActorRef
    from ...actors.bus import EventBus


Judge = Callable[[ToolCallRequest], "tuple[str, str] | None"]
"""A second judge of a gate's calls: None (no objection), or ``("ask", "")`` or
``("deny", why)``."""


class Journal(Protocol):
    """What records a durable agent's approvals (``checkpoint._Durable``)."""

    def approval(self, call_id: str) -> tuple[bool, str] | None: ...
    def asked(self, req: ToolCallRequest) -> None: ...
    def answered(self, req: ToolCallRequest, approved: bool, reason: str) -> None: ...
    def defer(self, req: ToolCallRequest, kind: str, note: str) -> bool: ...


class Recorder(Protocol):
    """What records a durable phase's tool calls (``checkpoint.PhaseRecorder``)."""

    def begin_tool(self, runner: ToolRunner) -> Awaitable[object] | None: ...
    def defer(self, req: ToolCallRequest, kind: str, note: str) -> bool: ...


__all__ = ["ToolGate", "ToolLane", "ToolRunner", "start_batch"]

_REQUEST_IDS = itertools.count(1)
# What _confirm answers for a decision deferred (agentrio.Defer) by the approver of
# a durable phase: the phase parks after its batch (durability/deferred.py).
_DEFERRED = "\x00deferred"
_NOT_DURABLE = (
    "{who} deferred {what} (agentrio.Defer), which only a durable agent can wait for "
    "(a runtime with a checkpoint store: open_runtime(store=...))"
)
# Tool calls given up (dead letters): the tool's name, never its arguments.
_log = logging.getLogger("agentrio.agents.tools.tool_call")


def tool_result(req: ToolCallRequest, status: ToolStatus, content: str) -> ToolResult:
    """The result of the call *req*; *content* scrubbed (`agentrio._text.scrub`).

    Every result a call ends with is made here (a tool's text, an error's message,
    a refusal's reason), so none holds a lone surrogate: a tool's text comes from
    outside (``os.listdir`` gives one for a file name that is not UTF-8), and one
    in the history would fail every later request, trace line and checkpoint.
    """
    return ToolResult(
        id=req.id,
        name=req.name,
        arguments=req.arguments,
        status=status,
        content=content if content.isascii() else scrub(content),
    )


def refuse(bus: EventBus, path: str, req: ToolCallRequest, why: str) -> ToolResult:
    """A denied result for *req*, audited with a ``PermissionDenied`` event."""
    if bus.active:
        bus.publish(PermissionDenied(path=path, tool=req.name, reason=why))
    return tool_result(req, "denied", why)


class ToolGate:
    """What stands between an agent's tool call and the tool: policy, approval, hooks.

    One gate per agent (shared by its calls); an agent without a policy,
    approver or hooks has none, and its calls pay nothing for it.
    """

    __slots__ = (
        "approval_timeout",
        "approver",
        "bus",
        "journal",
        "judge",
        "path",
        "policy",
        "post",
        "pre",
    )

    def __init__(
        self,
        *,
        path: str,
        bus: EventBus,
        policy: PermissionPolicy | None,
        approver: Approver | ActorRef | None,
        approval_timeout: float | None,
        pre: PreToolUse | None,
        post: PostToolUse | None,
    ) -> None:
        self.path = path
        self.bus = bus
        self.policy = policy
        self.approver = approver
        self.approval_timeout = approval_timeout
        self.pre = pre
        self.post = post
        # A durable agent's (see checkpoint.py): its approvals are recorded, and
        # a resumed phase's recorded answers are given again without asking.
        self.journal: Journal | None = None
        # A second judge of each call beside the policy (a phase's taint check,
        # #26): None, or "ask" or "deny" with why; None when unused.
        self.judge: Judge | None = None

    def judged(self, judge: Judge) -> ToolGate:
        """A copy of this gate whose calls *judge* also judges (stricter wins)."""
        gate = ToolGate(
            path=self.path,
            bus=self.bus,
            policy=self.policy,
            approver=self.approver,
            approval_timeout=self.approval_timeout,
            pre=self.pre,
            post=self.post,
        )
        gate.journal = self.journal
        gate.judge = judge
        return gate

    def _decide(self, req: ToolCallRequest) -> tuple[str, str]:
        """The policy's decision on *req*, made stricter by the judge's; and the
        judge's reason for a deny."""
        decision = self.policy.decide(req.name, req.arguments) if self.policy else "allow"
        if self.judge is None or decision == "deny":
            return decision, ""
        verdict = self.judge(req)
        if verdict is None:
            return decision, ""
        if verdict[0] == "deny":
            return "deny", verdict[1]
        return "ask", ""

    def _refuse(self, req: ToolCallRequest, why: str) -> ToolResult:
        return refuse(self.bus, self.path, req, why)

    async def admit(self, req: ToolCallRequest) -> ToolCallRequest | ToolResult:
        """The call to make (maybe rewritten by ``pre_tool_use``), or a denied result."""
        decision, why = self._decide(req)
        if decision == "deny":
            return self._refuse(req, why or f"tool {req.name!r} is denied by the permission policy")
        if decision == "ask":
            why = await self._confirm(req)
            if why:
                return self._refused(req, why)
        if self.pre is not None:
            verdict = await self.pre(req)
            if isinstance(verdict, Deny):
                return self._refuse(req, verdict.reason or "refused by the pre_tool_use hook")
            if isinstance(verdict, ToolCallRequest) and verdict != req:
                return await self._recheck(req, verdict, decision)
        return req

    async def _recheck(
        self, req: ToolCallRequest, rewritten: ToolCallRequest, decision: str
    ) -> ToolCallRequest | ToolResult:
        """A call rewritten by ``pre_tool_use`` is judged again: the hook cannot launder it."""
        if rewritten.name != req.name:
            return self._refuse(
                req, "the pre_tool_use hook may rewrite a call's arguments, not its tool"
            )
        if rewritten.id != req.id:
            rewritten = msgspec.structs.replace(rewritten, id=req.id)
        again, why = self._decide(rewritten)
        if again == "deny":
            return self._refuse(
                req,
                why or f"tool {req.name!r} with the rewritten arguments is denied by the policy",
            )
        if again == "ask" and decision != "ask":
            why = await self._confirm(rewritten)
            if why:
                return self._refused(req, why)
        return rewritten

    def _refused(self, req: ToolCallRequest, why: str) -> ToolResult:
        """A refusal, or the stand-in result of a call whose decision is deferred
        (never settled: its phase parks before that)."""
        if why is _DEFERRED:
            return tool_result(req, "denied", "the approver deferred the decision")
        return self._refuse(req, why)

    async def _confirm(self, req: ToolCallRequest) -> str:
        """Ask the approver; "" if approved, else why not."""
        if self.approver is None:
            return f"tool {req.name!r} needs approval and this agent has no approver"
        journal = self.journal
        if journal is not None:
            known = journal.approval(req.id)
            if known is not None:  # answered before a crash: not asked again
                approved, reason = known
                journal.answered(req, approved, reason)
                if approved:
                    return ""
                return f"the approver refused {req.name!r}" + (f": {reason}" if reason else "")
            journal.asked(req)
        request_id = next(_REQUEST_IDS)
        request = ConfirmationRequired(
            path=self.path, tool_call=req, agent=self.path, request_id=request_id
        )
        if self.bus.active:
            self.bus.publish(request)
        approved, reason = False, f"no answer from the approver within {self.approval_timeout} s"
        timeout = self.approval_timeout if self.approval_timeout is not None else math.inf
        with trio.move_on_after(timeout):
            answer = await ask_approver(self.approver, request)
            if isinstance(answer, Defer):
                if journal is not None and journal.defer(req, "approval", answer.note):
                    return _DEFERRED
                answer = Approval(False, _NOT_DURABLE.format(who="the approver", what="it"))
            approved, reason = answer.approved, answer.reason
        if journal is not None:
            journal.answered(req, approved, reason)
        if self.bus.active:
            self.bus.publish(
                ConfirmationReceived(
                    path=self.path,
                    tool=req.name,
                    request_id=request_id,
                    approved=approved,
                    reason=reason,
                )
            )
        if approved:
            return ""
        return f"the approver refused {req.name!r}" + (f": {reason}" if reason else "")

    async def after(self, req: ToolCallRequest, result: ToolResult) -> ToolResult:
        """The result as ``post_tool_use`` rewrites it (its content scrubbed), or as it is."""
        assert self.post is not None
        rewritten = await self.post(req, result)
        if not isinstance(rewritten, ToolResult):
            return result
        content = scrub(rewritten.content)
        if content is rewritten.content:
            return rewritten
        return msgspec.structs.replace(rewritten, content=content)


def hide_env(text: str, env: Mapping[str, str]) -> str:
    """*text* with the values of *env* (an agent's ``AgentSpec.env``) replaced by
    ``[redacted]``, as events show tool errors and previews.

    Longest first: one value may hold another. Values shorter than 4
    characters are left: hiding every "1" would garble the text and hide
    nothing.
    """
    for value in sorted(env.values(), key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, "[redacted]")
    return text


class ToolLane:
    """The lane of one turn's tool calls: the runtime's slots, the lane's retry
    policy, and where retries and dead letters are reported.

    Made only when the runtime's [`Lanes`][agentrio.Lanes] limit or retry
    tool calls; otherwise a call has no lane and pays nothing for lanes.
    """

    __slots__ = ("bus", "env", "index", "limiter", "name", "path", "policy")

    def __init__(
        self, lanes: ToolLanes, lane: str, bus: EventBus, path: str, env: Mapping[str, str]
    ) -> None:
        self.index = lane_index(lane)
        self.name = LANES[self.index]
        self.limiter = lanes.limiter
        self.policy: LanePolicy = lanes.policies[self.index]
        self.bus = bus
        self.path = path
        self.env = env

    def shown(self, exc: Exception) -> str:
        """*exc*'s message as events show it: the agent's env values hidden, 300 characters."""
        return hide_env(str(exc), self.env)[:300]

    def retrying(self, req: ToolCallRequest, attempt: int, delay: float, exc: Exception) -> None:
        if self.bus.active:
            self.bus.publish(
                ToolRetry(
                    path=self.path,
                    tool=req.name,
                    call_id=req.id,
                    lane=self.name,
                    attempt=attempt,
                    delay=delay,
                    error_type=type(exc).__name__,
                    error=self.shown(exc),
                )
            )

    def dead_letter(self, req: ToolCallRequest, attempts: int, exc: Exception) -> str:
        """Publish the call's ``ToolDeadLetter``; the refusal the model sees."""
        error = self.shown(exc)
        _log.warning(
            "%r: tool %r was given up after %d attempts (a dead letter of the %r lane; "
            "the last raised %s)",
            *(self.path, req.name, attempts, self.name, type(exc).__name__),
            extra=log_extra(self.path),
        )
        if self.bus.active:
            self.bus.publish(
                ToolDeadLetter(
                    path=self.path,
                    tool=req.name,
                    call_id=req.id,
                    lane=self.name,
                    attempts=attempts,
                    error_type=type(exc).__name__,
                    error=error,
                )
            )
        return (
            f"tool {req.name!r} was given up after {attempts} attempts (a dead letter of "
            f"the {self.name!r} lane); the last raised {type(exc).__name__}: {error}"
        )


class ToolRunner:
    """Runs one tool call; whatever happens, `result` ends up set.

    Attributes:
        request: the call.
        result: its outcome, ``None`` while it runs.
        context: what the tool receives if it declares a ToolContext (else None).
        lane: the lane it runs in, when the runtime's lanes limit or retry
            tool calls (else None).
        agent: set for a turn's lone call, which runs in its agent's task:
            the agent's actor, which the call's alarm interrupts at its
            timeout (else None: the call keeps a cancel scope of its own).
        alarm: that alarm, once armed.
    """

    __slots__ = (
        "agent",
        "alarm",
        "context",
        "gate",
        "lane",
        "rec",
        "request",
        "result",
        "started",
        "timeout",
        "tool",
    )

    def __init__(
        self,
        tool: Tool,
        request: ToolCallRequest,
        timeout: float,
        gate: ToolGate | None = None,
        context: ToolContext | None = None,
    ) -> None:
        self.tool = tool
        self.request = request
        self.timeout = timeout
        self.gate = gate
        # Made by the phase only for a tool that declares it: the others' calls
        # build nothing for it.
        self.context = context
        self.result: ToolResult | None = None
        self.agent: ActorRef | None = None
        self.alarm: Alarm | None = None
        # When it started on Trio's clock, set only while the event bus has
        # subscribers (for its ToolEnded event's duration), and None again
        # once that event is published.
        self.started: float | None = None
        self.lane: ToolLane | None = None
        # A durable phase's recorder (else None): the call's start is recorded
        # (and synced, for a tool not declared idempotent) before it runs.
        self.rec: Recorder | None = None

    def _finish(self, status: ToolStatus, content: str, value: object = None) -> ToolResult:
        """The call's result; *value*, what the tool returned, may hold content parts."""
        result = tool_result(self.request, status, content)
        if value is not None and type(value) is not str:  # (a str is the fast path)
            if type(value) is Defer:
                return self._deferred(value)
            parts = result_parts(value, self.tool.name)
            if parts:
                result = msgspec.structs.replace(result, parts=parts)
        self.result = result
        return result

    def _deferred(self, value: Defer) -> ToolResult:
        """The tool returned ``Defer``: its result comes later (the phase parks), or,
        outside a durable phase, the call fails."""
        rec, req = self.rec, self.request
        if rec is None or not rec.defer(req, "result", value.note):
            who = f"tool {req.name!r}"
            return self._finish("failed", _NOT_DURABLE.format(who=who, what="its result"))
        result = self.result = tool_result(req, "ok", "the tool deferred its result")
        return result

    def run(self) -> Coroutine[object, None, ToolResult]:
        """Pass the gate, call the tool; a refusal, raise, timeout or bad input is the result.

        Returns the coroutine to await (without a gate, the call's own: one
        frame less on the stack of every agent waiting on a tool).
        """
        if self.gate is None:
            return self._call()
        return self._gated(self.gate)

    async def _gated(self, gate: ToolGate) -> ToolResult:
        try:
            admitted = await gate.admit(self.request)
        except Exception as exc:  # an approver or pre_tool_use hook failed: refuse
            admitted = gate._refuse(
                self.request, f"the permission check failed: {type(exc).__name__}: {exc}"
            )
        if isinstance(admitted, ToolResult):
            self.result = admitted
            return admitted
        self.request = admitted
        return await self._after(await self._call())

    async def _after(self, result: ToolResult) -> ToolResult:
        gate = self.gate
        if gate is not None and gate.post is not None:
            try:
                result = await gate.after(self.request, result)
            except Exception as exc:
                result = self._finish(
                    "failed", f"the post_tool_use hook raised {type(exc).__name__}: {exc}"
                )
            self.result = result
        return result

    @property
    def expired(self) -> bool:
        """Did its alarm go off (a lone call past its timeout, its agent interrupted)?"""
        alarm = self.alarm
        return alarm is not None and alarm.rang

    async def timed_out(self) -> ToolResult:
        """The result of a lone call whose alarm went off (its agent's phase was interrupted)."""
        return await self._after(self._timeout())

    def _timeout(self) -> ToolResult:
        return self._finish(
            "timeout", f"tool {self.request.name!r} timed out after {self.timeout} s"
        )

    async def _call(self) -> ToolResult:
        if self.rec is not None:
            synced = self.rec.begin_tool(self)  # (a tool not idempotent: its start synced)
            if synced is not None:
                await synced
        if self.lane is not None:
            return await self._laned(self.lane)
        agent = self.agent
        alarm = None if agent is None else interrupt_after(agent, self.timeout)
        if alarm is None:
            return await self._scoped()
        self.alarm = alarm
        # The tool runs in this frame (not in a helper coroutine): one frame
        # less for each of thousands of agents waiting on a tool.
        tool = self.tool
        try:
            # validate / invoke / encode rather than Tool.call: one frame less
            kwargs = tool.validate(self.request.arguments)
            if self.context is not None:
                self._give_context(kwargs)
            value = await tool.invoke(kwargs)
            content = tool.encode(value)
        except Exception as exc:
            result = self._failed(exc)
        else:
            result = self._finish("ok", content, value)
        finally:
            alarm.disarm()
        if alarm.rang:
            # The alarm went off, but the tool still returned (it shielded its
            # work, swallowed the cancel, or woke as the alarm went off): the
            # agent is already being interrupted. Let that happen here (this
            # raises trio.Cancelled), so the phase goes on the one way it
            # knows, with this call a timeout, as its deadline says.
            await trio.lowlevel.checkpoint_if_cancelled()
        return result

    async def _scoped(self) -> ToolResult:
        """The call under a cancel scope of its own (a call in a batch's task)."""
        with trio.CancelScope(deadline=trio.current_time() + self.timeout) as scope:
            tool = self.tool
            try:
                kwargs = tool.validate(self.request.arguments)
                if self.context is not None:
                    self._give_context(kwargs)
                value = await tool.invoke(kwargs)
                content = tool.encode(value)
            except Exception as exc:
                return self._failed(exc)
            return self._finish("ok", content, value)
        assert scope.cancelled_caught
        return self._timeout()

    async def _laned(self, lane: ToolLane) -> ToolResult:
        """The call in its lane: a slot for each attempt, and retries per the lane's policy.

        Only a tool that raised is retried: not bad arguments or an unusable
        result (they would fail again), nor a timeout (the attempt may still
        run on, as a sync tool's thread does, and must not run twice at once).
        """
        tool, policy = self.tool, lane.policy
        try:
            kwargs = tool.validate(self.request.arguments)
        except Exception as exc:
            return self._failed(exc)
        if self.context is not None:
            self._give_context(kwargs)
        attempt = 1
        while True:
            outcome = await self._attempt(lane, kwargs)
            if isinstance(outcome, ToolResult):
                return outcome
            if policy.attempts == 1 or isinstance(outcome, ToolError):
                return self._failed(outcome)
            if attempt >= policy.attempts:
                return self._finish("denied", lane.dead_letter(self.request, attempt, outcome))
            delay = policy.delay(attempt)
            lane.retrying(self.request, attempt, delay, outcome)
            await trio.sleep(delay)
            attempt += 1

    async def _attempt(self, lane: ToolLane, kwargs: dict[str, object]) -> ToolResult | Exception:
        """One attempt, in a slot of the lane (waited for outside the attempt's timeout)."""
        limiter = lane.limiter
        if limiter is not None:
            await limiter.acquire(lane.index)
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.timeout):
                try:
                    value = await self.tool.invoke(kwargs)
                    content = self.tool.encode(value)
                except Exception as exc:
                    return exc
                return self._finish("ok", content, value)
            return self._timeout()
        finally:
            if limiter is not None:
                limiter.release(lane.index)

    def _give_context(self, kwargs: dict[str, object]) -> None:
        """Add the call's ToolContext to the validated *kwargs*, under the tool's parameter.

        After validation: the model cannot send it (the schema has no such
        argument, and unknown arguments are refused).
        """
        param = self.tool.context_param
        assert param is not None, "a context for a tool that declares none"
        kwargs[param] = self.context

    def _failed(self, exc: Exception) -> ToolResult:
        if isinstance(exc, (ToolArgumentsInvalid, ToolResultInvalid)):
            return self._finish("failed", str(exc))
        name = self.request.name
        return self._finish("failed", f"tool {name!r} raised {type(exc).__name__}: {exc}")

    def interrupted(self, why: str) -> ToolResult:
        """The result of a call cut short by the end of its phase."""
        return self.result or self._finish("timeout", why)


def start_batch(
    nursery: trio.Nursery,
    runners: Sequence[ToolRunner],
    limit: int,
    on_done: Callable[[ToolRunner, ToolResult], None],
) -> None:
    """Start the tool calls of one model turn in *nursery*, at most *limit* at once.

    *on_done* sees each call and its result as the call ends. The nursery's
    exit waits for the last call and wakes the agent once, whatever the
    batch's size.
    """
    limiter = trio.Semaphore(limit) if len(runners) > limit else None
    for runner in runners:
        nursery.start_soon(_run_one, runner, limiter, on_done)


async def _run_one(
    runner: ToolRunner,
    limiter: trio.Semaphore | None,
    on_done: Callable[[ToolRunner, ToolResult], None],
) -> None:
    if limiter is None:
        result = await runner.run()
    else:
        async with limiter:
            if runner.started is not None:  # its duration starts when it gets a slot
                runner.started = trio.current_time()
            result = await runner.run()
    on_done(runner, result)
