"""The tool calls of a phase's turns: run (lone, in a batch, on lanes), settled into the
history, watched for stalls; a mixin of `Phase`, whose working state it shares."""

from __future__ import annotations

import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING

import msgspec
import trio

from ..._text import PREVIEW_SCAN
from ...messages import (
    BudgetExhausted,
    ChatMessage,
    ToolCallRequest,
    ToolEnded,
    ToolResult,
    ToolStarted,
)
from ...providers.tokens import arguments_text
from ..tools.lanes import ToolLanes
from ..tools.tool import ToolContext
from ..tools.tool_call import (
    ToolLane,
    ToolRunner,
    hide_env,
    refuse,
    start_batch,
    tool_result,
)

if TYPE_CHECKING:
    from ...actors import EventBus
    from ...messages import RunPhase, StopReason
    from .extensions import PhaseGuard
    from .seams import PhaseRecording
    from .state import _AgentState


__all__ = ["PREVIEW_CHARS", "ToolTurns"]

# The most characters of a ToolEnded event's previews of arguments and output.
PREVIEW_CHARS = 200

# The calls a phase has seen are a list up to this many, then a set (see _watch).
_SEEN_AS_LIST = 8


_NUMBERS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _spelled(n: int) -> str:
    return _NUMBERS[n - 2] if n - 2 < len(_NUMBERS) else str(n)


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _call_key(result: ToolResult) -> bytes:
    """The call of *result* as one bytes object: the JSON of [name, arguments]."""
    return msgspec.json.encode((result.name, result.arguments), order="sorted")


def _made_before(seen: list[ToolResult], result: ToolResult) -> bytes | None:
    """The key of *result*'s call if a call in *seen* was the same one, else None.

    The same call: the same name and arguments of the same JSON (`_call_key`),
    as in the set the list becomes. The list holds the results themselves (the
    phase keeps them anyway), not their keys, of some 60 bytes each on every
    agent in flight: the JSON is made only for an earlier call of equal
    arguments (``==`` says ``1 == 1.0 == True``, the JSON does not).
    """
    name, arguments = result.name, result.arguments
    key = None
    for earlier in seen:
        if earlier.name == name and earlier.arguments == arguments:
            if key is None:
                key = _call_key(result)
            if _call_key(earlier) == key:
                return key
    return None


class ToolTurns:
    """`Phase`'s methods for its turns' tool calls (the state is the phase's)."""

    __slots__ = (
        "batch",
        "last_result",
        "lone",
        "parse_failures",
        "reason",
        "repeats",
        "same_results",
        "seen",
        "stall",
        "step",
    )

    if TYPE_CHECKING:  # (the phase's working state: see Phase.__init__)
        st: _AgentState
        cmd: RunPhase
        bus: EventBus
        path: str
        history: list[ChatMessage]
        sizes: list[int]
        total: int
        calls: list[ToolResult]
        reason: StopReason
        step: int
        batch: list[ToolRunner | ToolResult] | None
        seen: list[ToolResult] | set[bytes]
        repeats: dict[bytes, int] | None
        last_result: ToolResult | None
        same_results: int
        stall: str
        parse_failures: int
        allowed: frozenset[str]
        lone: ToolRunner | None
        rec: PhaseRecording | None
        guard: PhaseGuard | None

        def _append(self, msg: ChatMessage, now: float | None = None) -> None: ...
        def _error(self, exc: BaseException) -> None: ...
        def _number(self, calls: tuple[ToolCallRequest, ...]) -> tuple[ToolCallRequest, ...]: ...
        async def _on_step(
            self,
            tool_name: str | None,
            summary: str,
            arguments: dict[str, object] | None,
            tokens: int,
        ) -> bool: ...

    async def _direct(self, calls: tuple[ToolCallRequest, ...]) -> None:
        if self.lone is not None:  # going on after the lone call's timeout
            await self._resume_tools()
        elif self.rec is not None and self.rec.resume is not None and self.rec.resume.going_on:
            self.rec.resume.going_on = False
            pending = self.rec.resume.pending()  # (the calls whose results are not recorded)
            if pending:
                await self._run_tools(pending, model_driven=False)
        else:
            if self._stop_requested():
                return
            numbered = self._number(calls)
            self._append(ChatMessage("assistant", "", tool_calls=numbered))
            if self.rec is not None:
                self.rec.turn(self, totals=False)
            await self._run_tools(numbered, model_driven=False)
        if self.reason != "error":
            self.reason = "done"

    def _stop_requested(self) -> bool:
        """Take a pending stop request; True (the phase ends ``stop_requested``) if one was."""
        st = self.st
        if not st.stop_requested:
            return False
        st.stop_requested = False
        self.reason = "stop_requested"
        return True

    def _tools_end_phase(self, calls: Sequence[ToolCallRequest]) -> bool:
        """After a model's turn of *calls*: must the phase end (an on_step hook
        raised after a tool call, or too many turns of unreadable arguments)?"""
        cap = self.st.spec.limits.max_tool_calls_per_turn
        if len(calls) > cap:
            calls = calls[:cap]  # (the calls past the cap were not run: not read either)
        return self.reason == "error" or self._parse_failed(calls)

    def _parse_failed(self, calls: Sequence[ToolCallRequest]) -> bool:
        """Count turns in a row with unparseable arguments; True when the phase must end."""
        for c in calls:  # (a loop, not any() of a generator: this runs every turn)
            if c.error:
                break
        else:
            self.parse_failures = 0
            return False
        self.parse_failures += 1
        if self.parse_failures < self.st.spec.limits.max_parse_retries:
            return False
        self._error(
            ValueError(
                f"the model's tool-call arguments could not be parsed "
                f"{self.parse_failures} turns in a row"
            )
        )
        return True

    async def _run_tools(self, calls: Sequence[ToolCallRequest], *, model_driven: bool) -> None:
        """Run a turn's tool calls (the phase's loop takes the two steps itself)."""
        await self._run_batch(await self._tool_batch(calls, model_driven))

    async def _tool_batch(
        self, calls: Sequence[ToolCallRequest], model_driven: bool
    ) -> list[ToolRunner]:
        """The turn's batch (``self.batch``: a runner per call to run, a result for
        each other one, in call order); the runners. (Its locals are not kept
        while the calls run: _run_batch runs them.)"""
        st, limits = self.st, self.st.spec.limits
        batch: list[ToolRunner | ToolResult] = []
        runners: list[ToolRunner] = []
        not_run: list[ToolResult] = []
        if model_driven and len(calls) > limits.max_tool_calls_per_turn:
            calls, not_run = self._over_cap(calls, limits.max_tool_calls_per_turn)
        rec = self.rec
        resume = None if rec is None else rec.resume
        gate = st.gate if self.guard is None else self.guard.gate  # (#26: taint judged)
        for req in calls:
            if resume is not None:  # the calls a crash cut short: replayed, or not run again
                known = st.info.tools.get(req.name)
                replayed = resume.replay(req, known is not None and known.idempotent)
                if replayed is not None:
                    batch.append(replayed)
                    continue
            if req.error:
                why = f"tool {req.name!r} was not run: {req.error}"
                batch.append(tool_result(req, "failed", why))
                continue
            tool = st.info.tools.get(req.name)
            if tool is None or req.name not in self.allowed:
                # (an allowlist refusal is audited like a policy one)
                why = f"tool {req.name!r} is not allowed here"
                batch.append(refuse(self.bus, self.path, req, why))
                continue
            if model_driven:
                # (wait_tool_call: only a leased budget waits for a refill; else False at once)
                if not st.budget.take_tool_call() and not await st.budget.wait_tool_call():
                    if self.bus.active:
                        self.bus.publish(BudgetExhausted(path=self.path, limit="max_tool_calls"))
                    batch.append(tool_result(req, "denied", "the tool-call budget is exhausted"))
                    continue
                st.count_tool_call()
            # (No local for the OpenTelemetry: this frame waits on each agent's tool.)
            if st.services.otel is None:
                runner = ToolRunner(tool, req, limits.tool_timeout, gate)
            else:  # (the call in an "execute_tool" span)
                phase = self
                runner = st.services.otel.runner(phase, tool, req, limits.tool_timeout, gate)
            if tool.context_param is not None:
                runner.context = self._tool_context(req, len(batch))
            if rec is not None:
                runner.rec = rec
            batch.append(runner)
            runners.append(runner)
            if self.bus.active:
                runner.started = trio.current_time()  # (for its ToolEnded's duration)
                self.bus.publish(ToolStarted(path=self.path, tool=req.name, call_id=req.id))
        lanes = st.services.tool_lanes
        if lanes is not None and runners:
            self._in_lane(runners, lanes)
        batch += not_run  # (the tail: the batch stays in call order)
        self.batch = batch
        return runners

    async def _run_batch(self, runners: list[ToolRunner]) -> None:
        """Run the batch's *runners*; record the batch."""
        if len(runners) == 1:
            # A batch of one needs no parallelism: the call runs in the
            # agent's task, which saves a task, a nursery and two wake-ups per
            # tool call; and its timeout is a runtime alarm rather than a
            # cancel scope (agentrio.actors.interrupt_after): if it goes off, the
            # agent's phase is interrupted and delivered again, and goes on
            # from here (see lone_expired and _resume_tools).
            self._lone_done(runners[0], await self._lone(runners[0]))
        elif runners:
            # (A durable phase records each call of the batch as it ends.)
            done = self._tool_done if self.rec is None else self._tool_recorded
            async with trio.open_nursery() as nursery:
                start_batch(nursery, runners, self.st.spec.limits.max_parallel_tools, done)
        steps = self._tools_ran()
        if steps is not None:
            await steps

    def _lone(self, runner: ToolRunner) -> Coroutine[object, None, ToolResult]:
        """The call of a batch of one, made in the agent's task: its coroutine (the
        phase's loop awaits it in its own frame)."""
        runner.agent = self.st.ref
        self.lone = runner
        return runner.run()

    def _lone_done(self, runner: ToolRunner, result: ToolResult) -> None:
        """The lone call of the batch has ended with *result*."""
        self.lone = None
        self._tool_done(runner, result)

    def _in_lane(self, runners: list[ToolRunner], lanes: ToolLanes) -> None:
        """Put the turn's calls in the phase's lane (the runtime's lanes limit or retry them).

        Not an agent tool's: its child's own calls take the slots, and one
        held by the parent while its child waits for another could deadlock.
        """
        st = self.st
        lane = ToolLane(lanes, self.cmd.lane or st.spec.lane, self.bus, self.path, st.spec.env)
        for runner in runners:
            if not runner.tool.needs_caller:
                runner.lane = lane

    def _tool_context(self, req: ToolCallRequest, index: int) -> ToolContext:
        """The context of the call *req*, at *index* in the turn's batch.

        Its step is the one ``on_step`` gives its result: the batch's results
        are numbered in call order after the model's turn.
        """
        st = self.st
        workspace = st.workspace
        return ToolContext(
            agent=self.path,
            context_label=self.cmd.context_label,
            call_id=req.id,
            step=self.step + index + 1,
            workspace=workspace.root if workspace is not None else None,
            env=st.spec.env,
        )

    @staticmethod
    def _over_cap(
        calls: Sequence[ToolCallRequest], cap: int
    ) -> tuple[Sequence[ToolCallRequest], list[ToolResult]]:
        """The first *cap* calls of a model's reply, and denied results for the rest.

        The calls past the cap are not run (nor counted against the budget's
        ``max_tool_calls``), but each has its result: the model sees why, and
        a provider refuses a call without one.
        """
        why = (
            f"was not run: this reply asked for {len(calls)} tool calls, and at most {cap} "
            f"are run per turn (Limits.max_tool_calls_per_turn); ask for it again in a later "
            f"turn if it is still needed"
        )
        return calls[:cap], [
            tool_result(req, "denied", f"tool {req.name!r} {why}") for req in calls[cap:]
        ]

    def _tools_ran(self) -> Coroutine[object, None, None] | None:
        """Record the batch; the on_step hook's calls to await, if the spec has one.
        A batch with a deferred call (agentrio.Defer, #27) is not settled: the
        phase parks (the coroutine returned raises ``seams.Parked``)."""
        rec = self.rec
        if rec is not None and rec.parked is not None:
            return rec.park(self)
        results = self._settle_batch("")
        if self.st.recall is not None:  # what the memory keeps (#26: loop/recall.py)
            return self._remembered(results)
        if self.st.spec.on_step is None:
            self.step += len(results)
            return None
        return self._steps(results)

    async def _remembered(self, results: list[ToolResult]) -> None:
        assert self.st.recall is not None
        await self.st.recall.tools_done(self, results)
        if self.st.spec.on_step is None:
            self.step += len(results)
        else:
            await self._steps(results)

    async def _steps(self, results: list[ToolResult]) -> None:
        # The results are the history's last messages: each step's estimate
        # counts the results up to its own.
        sizes = self.sizes
        tokens = self.total - sum(sizes[len(sizes) - len(results) :])
        for n, result in enumerate(results, len(sizes) - len(results)):
            self.step += 1
            tokens += sizes[n]
            summary = f"{result.status}: {result.content}"
            if not await self._on_step(result.name, summary, result.arguments, tokens):
                return

    async def _resume_tools(self) -> None:
        """Go on after the lone call whose alarm went off: it is a timeout."""
        runner, self.lone = self.lone, None
        assert runner is not None
        self._tool_done(runner, await runner.timed_out())
        steps = self._tools_ran()
        if steps is not None:
            await steps

    def _tool_done(self, runner: ToolRunner, result: ToolResult) -> None:
        if self.bus.active:
            started = runner.started
            runner.started = None  # (its ToolEnded is published: see _settle_batch)
            self.bus.publish(
                ToolEnded(
                    path=self.path,
                    tool=result.name,
                    call_id=result.id,
                    status=result.status,
                    duration=0.0 if started is None else trio.current_time() - started,
                    arguments_preview=self._shown(arguments_text(result.arguments)),
                    output_preview=self._shown(result.content),
                )
            )

    def _tool_recorded(self, runner: ToolRunner, result: ToolResult) -> None:
        """A call of a durable phase's parallel batch ended: record it, say it."""
        assert self.rec is not None
        self.rec.tool_done(result)
        self._tool_done(runner, result)

    def _shown(self, text: str) -> str:
        """*text* as a ``ToolEnded`` preview: the agent's env values hidden, and what
        its security provider's rules redact (#26), then cut."""
        env = self.st.spec.env
        text = text[:PREVIEW_SCAN]  # (not a megabyte of result scanned for 200 characters)
        if self.guard is not None:
            text = self.guard.hide(text)
        return _preview(hide_env(text, env) if env else text)

    def _settle_batch(self, interrupted: str) -> list[ToolResult]:
        """Record the batch's results in call order (interrupted calls as timeouts)."""
        assert self.batch is not None
        # The calls of a model's reply past Limits.max_tool_calls_per_turn (the
        # batch's tail) were not run: not watched for stalls either, or a model
        # asking again for them would look like one repeating itself (and
        # their refusals alike, like three identical results).
        if self.cmd.direct_tool_calls is None:
            watched = self.st.spec.limits.max_tool_calls_per_turn
        else:
            watched = len(self.batch)
        results = []
        # The turn's results are added together, all made when its last call
        # ended: one reading of the clock for all of them (see "Reading a history").
        now = time.time()
        for n, item in enumerate(self.batch):
            if isinstance(item, ToolRunner):
                unread = n >= watched
                if item.result is None or (interrupted and item.started is not None):
                    # Cut short by the phase's end (in the tool, or in a hook
                    # after it): it ends here, as every call that started does.
                    result = item.interrupted(interrupted)
                    self._tool_done(item, result)
                    item = result
                else:
                    item = item.result
            else:
                # A ready "failed" result is a call whose arguments could not be read:
                # not watched for stalls (its {} makes any two such calls look the
                # same); Limits.max_parse_retries bounds those turns instead.
                unread = n >= watched or item.status == "failed"
            results.append(item)
            self.calls.append(item)
            self._append(
                ChatMessage(
                    "tool",
                    item.content,
                    tool_call_id=item.id,
                    name=item.name,
                    is_error=item.status != "ok",
                    parts=item.parts,
                ),
                now,
            )
            if not unread:
                self._watch(item)
        self.batch = None
        if self.rec is not None:
            self.rec.tools(self, results, now)
        if self.guard is not None:  # (#26) what untrusted tools returned is tainted
            self.guard.saw(results)
        return results

    def _watch(self, result: ToolResult) -> None:
        """Stall detection: ``Limits.max_identical_calls`` (the same call made
        that many times in the phase) and ``max_identical_results`` (that many
        identical results in a row); each may be off (None)."""
        limits = self.st.spec.limits
        most = limits.max_identical_calls
        if most is not None:
            seen = self.seen
            key: bytes | None
            if isinstance(seen, set):
                key = _call_key(result)
                if key not in seen:
                    seen.add(key)
                    key = None
            else:
                key = _made_before(seen, result)
                if key is None:
                    if len(seen) < _SEEN_AS_LIST:
                        seen.append(result)
                    else:
                        # Past a handful of calls, a set: each check is then O(1), and a
                        # phase's calls cost time linear in their number, not quadratic.
                        self.seen = {*map(_call_key, seen), _call_key(result)}
            if key is not None and not self.stall and self._repeated(key, most):
                times = "" if most == 2 else f" {_spelled(most)} times"
                args = msgspec.json.encode(result.arguments, order="sorted").decode()
                self.stall = f"repeated call {result.name}({args}){times}"
        most = limits.max_identical_results
        if most is not None:
            # (The result itself is kept, not a (name, content) tuple: the phase
            # holds it anyway, in calls.)
            last = self.last_result
            if last is not None and last.name == result.name and last.content == result.content:
                self.same_results += 1
            else:
                self.last_result, self.same_results = result, 1
            if self.same_results >= most and not self.stall:
                self.stall = f"{_spelled(most)} identical results from {result.name}"

    def _repeated(self, key: bytes, most: int) -> bool:
        """*key*, a call made before, is made again: is that the ``most``-th time?"""
        if most == 2:
            return True
        repeats = self.repeats
        if repeats is None:
            repeats = self.repeats = {}
        made = repeats[key] = repeats.get(key, 1) + 1
        return made >= most
