"""A planned run: the planning call, the steps, the revisions, the final answer.

``PlannedRun`` is made for one ``run()`` of an agent whose spec has a
``Planning``, and runs in the caller's task: the run is the caller's work,
and ends with it (each phase it asks for is a linked ask, and the children
it spawned, the planner and the worker, are cancelled when it is cut
short). It spends from the agent's budget only (its children draw on it),
runs within the run's ``timeout`` (one deadline for all its phases), and
ends at the first step cut short by the budget, a stop request or the
deadline, with that step's stop reason.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import msgspec
import trio

from ...messages import (
    Event,
    GoalAchieved,
    GoalExtracted,
    GoalProgress,
    PhaseResult,
    PlanningEnded,
    PlanningStarted,
    PlanTask,
    RunPhase,
    StepEnded,
    StepStarted,
    TaskStatus,
    TaskUpdated,
    TextPart,
    ToolResult,
)
from ..budgets.limits import Limits
from ..composition.compose import _release, spawn_child
from ..delegation.registry import Delegation, hand_over
from ..loop.ref import AgentRef
from ..loop.spec import AgentSpec
from .plan import (
    CRITERIA,
    CRITERION_CHARS,
    GOAL_CHARS,
    RESULT_CHARS,
    TASK_CHARS,
    Plan,
    clip,
    plan_checker,
    planner_instructions,
)

if TYPE_CHECKING:
    from ...providers.base import Model
    from ..loop.extensions import PhaseRunner

__all__ = ["PlannedRun"]

# A step that ends so ends the run (with its stop reason): no revision helps.
HARD_STOPS = frozenset({"budget_exhausted", "stop_requested", "timeout", "cancelled"})
FAILED_HINT = 'If you cannot do this task, answer with "FAILED: " and why.'
_PREVIEW = 200


class Settings(Protocol):
    """What a planned run reads of its ``planner.Planning`` (which imports this module)."""

    @property
    def goal_tracking(self) -> bool: ...
    @property
    def max_tasks(self) -> int: ...
    @property
    def max_revisions(self) -> int: ...
    @property
    def model(self) -> Model | str | None: ...
    @property
    def specs(self) -> dict[tuple[int, int], tuple[object, ...]]: ...

    def step_failed(self, task: PlanTask, result: PhaseResult[Any], /) -> object: ...

    async def wants_plan(self, request: str, mode: str | None) -> bool: ...


class PlannedRun:
    """One run of an agent whose spec has a ``Planning``."""

    def __init__(
        self,
        planning: Settings,
        agent: AgentRef[object],
        cmd: RunPhase,
        run_phase: PhaseRunner,
    ) -> None:
        self.planning = planning
        self.agent = agent
        self.cmd = cmd
        self.run_phase = run_phase
        self.bus = agent._state.services.bus
        delegation = agent.spec.delegation
        self.delegation = delegation if isinstance(delegation, Delegation) else None
        self.tasks: list[PlanTask] = []
        self.results: dict[str, str] = {}  # a done task's id -> its answer, clipped
        self.calls: list[ToolResult] = []  # the tool calls of every phase of the run
        self.goal = ""
        self.revision = 0
        self.numbered = 0  # tasks planned so far (their ids are t1, t2...)
        self.show_plan = True  # the next own step is told the plan (first, revised)
        self.planner: AgentRef[Plan] | None = None
        self.worker: AgentRef[object] | None = None
        self.started = self.deadline = 0.0

    # -- the run ---------------------------------------------------------------------

    async def run(self, mode: str | None) -> PhaseResult[object]:
        self.started = trio.current_time()
        timeout = self.cmd.timeout
        if timeout is None:
            timeout = self.agent.spec.limits.timeout
        self.deadline = math.inf if timeout is None else self.started + timeout
        request = self.cmd.user_message
        if self.delegation is not None and not self.cmd.parts:
            chosen = await self.delegation.choose(request)
            if chosen is not None:
                return await hand_over(
                    self.agent, chosen, request, self.cmd, timeout=self.child_timeout()
                )
        if not await self.planning.wants_plan(request, mode):
            return await self.unplanned()
        finished = False
        try:
            result = await self.planned()
            finished = True
            return result
        finally:
            # Answered: they stop. Cut short (cancelled, a failure): cancelled now.
            for child in (self.planner, self.worker):
                if child is not None:
                    _release(child, finished=finished)

    async def unplanned(self) -> PhaseResult[object]:
        """One phase, as without planning; a goal of its own when tracked."""
        if not self.planning.goal_tracking:
            return await self.run_phase(self.cmd)
        self.goal = clip(self.cmd.user_message, GOAL_CHARS)
        self.publish_goal(())
        result = await self.run_phase(self.cmd)
        if result.stop_reason == "done":
            self.publish_progress(1, 1)
            self.publish_achieved(1)
        return result

    async def planned(self) -> PhaseResult[object]:
        ended = await self.ask_planner(None)
        if ended is not None:
            return ended
        i = 0
        while i < len(self.tasks):
            if self.tasks[i].status == "pending":
                ended = await self.step(i)
                if ended is not None:
                    return ended
            i += 1
        return await self.final()

    # -- planning --------------------------------------------------------------------

    async def ask_planner(self, failed: tuple[PlanTask, str] | None) -> PhaseResult[object] | None:
        """Ask for a plan (*failed* None) or a revised one; None when the tasks are
        in place, else the result that ends the run (there is no plan)."""
        state = self.agent._state
        if state.stop_requested:  # (asked for before the run, or between steps: used up)
            state.stop_requested = False
            return self.stopped("stop_requested")
        timeout = self.remaining()
        if timeout <= 0:
            return self.stopped("timeout")
        request = self.cmd.user_message
        self.publish(PlanningStarted, clip(request, _PREVIEW), self.revision)
        planner = self.planner
        if planner is None:
            planner = self.planner = spawn_child(state, self.child_specs()[0])
        message = self.planner_message(failed)
        result = await planner.run(
            message, continue_context=False, timeout=timeout, lane=self.cmd.lane
        )
        plan = result.output
        if result.stop_reason == "stop_requested":
            state.stop_requested = False  # (the run saw it: used up)
        if result.stop_reason != "done" or plan is None:
            self.publish(
                PlanningEnded, self.revision, self.goal, tuple(self.tasks), result.stop_reason
            )
            return self.ended(result, final_text="")  # (the planner's text is no answer)
        self.adopt(plan)
        self.publish(PlanningEnded, self.revision, self.goal, tuple(self.tasks))
        self.publish(TaskUpdated, tuple(self.tasks))
        if self.revision == 0 and self.planning.goal_tracking:
            criteria = tuple(clip(c, CRITERION_CHARS) for c in plan.criteria[:CRITERIA])
            self.publish_goal(criteria)
        return None

    def adopt(self, plan: Plan) -> None:
        """Put *plan*'s tasks after the ones done (the pending ones are dropped)."""
        for i, task in enumerate(self.tasks):
            if task.status == "pending":
                self.tasks[i] = msgspec.structs.replace(task, status="dropped")
        for planned in plan.tasks:
            self.numbered += 1
            named = self.delegation.named(planned.agent) if self.delegation is not None else None
            self.tasks.append(
                PlanTask(
                    f"t{self.numbered}",
                    clip(planned.description, TASK_CHARS),
                    agent=None if named is None else named.name,
                )
            )
        if not self.goal:
            self.goal = clip(plan.goal, GOAL_CHARS) or clip(self.cmd.user_message, GOAL_CHARS)
        self.show_plan = True

    def child_specs(self) -> tuple[AgentSpec[Plan], AgentSpec[object]]:
        """The planner's spec and the worker's, for this agent's spec and model: made
        once and kept by the ``Planning`` (what is derived from a spec is worked out
        once per spec: a planned run is not to make two specs)."""
        state = self.agent._state
        cache = self.planning.specs
        key = (id(state.spec), id(state.model))
        found = cache.get(key)
        if found is None or found[0] is not state.spec or found[1] is not state.model:
            if len(cache) >= 16:  # (a spec's models: its own, an escalation's...)
                cache.clear()
            found = cache[key] = (state.spec, state.model, self.planner_spec(), self.worker_spec())
        return found[2], found[3]  # type: ignore[return-value]

    def planner_spec(self) -> AgentSpec[Plan]:
        state = self.agent._state
        delegates = () if self.delegation is None else self.delegation.delegates
        instructions = planner_instructions(
            self.planning.max_tasks,
            sorted(state.info.tools),
            [f"{d.name}: {clip(d.description, 300)}" for d in delegates],
        )
        return AgentSpec(
            "planner",
            self.planning.model if self.planning.model is not None else state.model,
            instructions=instructions,
            output_type=Plan,
            output_validators=[plan_checker(self.planning.max_tasks)],
            limits=Limits(max_iterations=3),
            lane=self.agent.spec.lane,
        )

    def planner_message(self, failed: tuple[PlanTask, str] | None) -> str:
        request = self.cmd.user_message
        if failed is None:
            return f"Request:\n{request}"
        task, why = failed
        lines = [f"Request:\n{request}", "", "The plan so far:"]
        lines += [self.task_line(t) for t in self.tasks if t.status != "dropped"]
        lines += [
            "",
            f"Task {task.id} failed: {why}",
            "Plan the rest of the work again: the tasks done stay done, do not repeat them.",
        ]
        return "\n".join(lines)

    def task_line(self, task: PlanTask) -> str:
        line = f"- {task.id} [{task.status}] {task.description}"
        result = self.results.get(task.id)
        return line if result is None else f"{line}\n  result: {result}"

    # -- steps -----------------------------------------------------------------------

    async def step(self, i: int) -> PhaseResult[object] | None:
        """Run task *i*; None to go on, else the result that ends the run."""
        state = self.agent._state
        if state.stop_requested:  # (asked for between steps: used up here)
            state.stop_requested = False
            return self.stopped("stop_requested", i)
        timeout = self.remaining()
        if timeout <= 0:
            return self.stopped("timeout", i)
        task = self.set_status(i, "running")
        number, total = self.position(i)
        delegate = None if self.delegation is None else self.delegation.named(task.agent)
        self.publish(StepStarted, task.id, task.description, number, total, task.agent)
        if delegate is not None:
            prompt = self.delegated_prompt(task)
            result = await hand_over(
                self.agent, delegate, prompt, self.cmd, timeout=self.child_timeout()
            )
        else:
            result = await self.own_step(task, number, timeout)
        self.calls.extend(result.tool_calls)
        if result.stop_reason in HARD_STOPS:
            if result.stop_reason == "stop_requested":
                state.stop_requested = False  # (the run saw it: used up, as a phase's)
            return self.stopped(result.stop_reason, i, result)
        why = self.planning.step_failed(task, result)
        if inspect.isawaitable(why):
            why = await why
        if why is None:
            self.results[task.id] = clip(result.final_text, RESULT_CHARS)
            self.end_step(i, "done", result, number, total)
            if self.planning.goal_tracking:
                # (a failed task was replaced by a revision: not one of the goal's)
                self.publish_progress(self.count("done"), self.count() - self.count("failed"))
            return None
        why = clip(str(why), 300)
        self.end_step(i, "failed", result, number, total, why)
        if self.revision >= self.planning.max_revisions:
            self.drop_pending()
            return self.ended(
                result,
                stop_reason="error",
                error_type="PlanFailed",
                error=f"task {task.id} failed after {self.revision} revisions of the plan: {why}",
            )
        self.revision += 1
        return await self.ask_planner((task, why))

    async def own_step(self, task: PlanTask, number: int, timeout: float) -> PhaseResult[object]:
        worker = self.worker
        if worker is None:
            worker = self.worker = spawn_child(self.agent._state, self.child_specs()[1])
        lines = []
        if self.show_plan:
            self.show_plan = False
            lines += [f"Request:\n{self.cmd.user_message}", "", "The plan:"]
            lines += [self.task_line(t) for t in self.tasks if t.status != "dropped"]
            lines.append("")
        lines += [f"Do task {task.id} now: {task.description}", FAILED_HINT]
        cmd = self.cmd
        return await worker.run(
            "\n".join(lines),
            tool_names=cmd.tool_names,
            max_iterations=cmd.max_iterations,
            timeout=timeout,
            lane=cmd.lane,
            settings=cmd.settings,
            model=cmd.model,
        )

    def worker_spec(self) -> AgentSpec[object]:
        """The agent's own spec, for its steps: plain text, no planning of its own; the
        agent's rules, approver and hooks are added as for any child."""
        state = self.agent._state
        return attrs.evolve(
            state.spec,
            name="steps",
            model=state.model,
            planning=None,
            delegation=None,
            output_type=None,
            output_validators=(),
            workspace=None,
            permissions=None,
            approver=None,
            approval_timeout=None,
            pre_tool_use=None,
            post_tool_use=None,
            escalate_on_stall=False,
        )

    def delegated_prompt(self, task: PlanTask) -> str:
        lines = [
            "You are given one task of a larger request.",
            f"Request:\n{self.cmd.user_message}",
        ]
        done = [t for t in self.tasks if t.id in self.results]
        if done:
            lines += ["Results so far:"] + [self.task_line(t) for t in done]
        lines += [f"Your task: {task.description}", FAILED_HINT]
        return "\n".join(lines)

    async def final(self) -> PhaseResult[object]:
        """The agent's own phase: the request, with the steps' results."""
        timeout = self.remaining()
        if timeout <= 0:
            return self.stopped("timeout")
        lines = ["", "[The tasks of your plan are done. Their results:"]
        lines += [self.task_line(t) for t in self.tasks if t.status == "done"]
        lines.append("Now give your final answer to the request above.]")
        extra = "\n".join(lines)
        cmd = self.cmd
        parts = (*cmd.parts, TextPart(extra)) if cmd.parts else ()
        final = msgspec.structs.replace(
            cmd, user_message=cmd.user_message + "\n" + extra, parts=parts, timeout=timeout
        )
        result = await self.run_phase(final)
        self.calls.extend(result.tool_calls)
        if result.stop_reason == "done" and self.planning.goal_tracking:
            self.publish_achieved(self.count("done"))
        return msgspec.structs.replace(result, tool_calls=tuple(self.calls))

    # -- the tasks -------------------------------------------------------------------

    def set_status(self, i: int, status: TaskStatus) -> PlanTask:
        task = self.tasks[i] = msgspec.structs.replace(self.tasks[i], status=status)
        self.publish(TaskUpdated, tuple(self.tasks))
        return task

    def end_step(
        self,
        i: int,
        status: TaskStatus,
        result: PhaseResult[object] | None,
        number: int,
        total: int,
        why: str = "",
    ) -> None:
        task = self.set_status(i, status)
        reason = "" if result is None else result.stop_reason
        self.publish(StepEnded, task.id, status, reason, number, total, why)

    def drop_pending(self) -> None:
        for i, task in enumerate(self.tasks):
            if task.status == "pending":
                self.tasks[i] = msgspec.structs.replace(task, status="dropped")
        self.publish(TaskUpdated, tuple(self.tasks))

    def position(self, i: int) -> tuple[int, int]:
        """Task *i*'s number among the live tasks (from 1), and how many there are."""
        live = [k for k, t in enumerate(self.tasks) if t.status != "dropped"]
        return live.index(i) + 1, len(live)

    def count(self, status: TaskStatus | None = None) -> int:
        """The live tasks (not dropped), or those of *status*."""
        if status is None:
            return sum(1 for t in self.tasks if t.status != "dropped")
        return sum(1 for t in self.tasks if t.status == status)

    # -- endings ---------------------------------------------------------------------

    def remaining(self) -> float:
        """Seconds left before the run's deadline (``math.inf``: none)."""
        return self.deadline - trio.current_time()

    def child_timeout(self) -> float | None:
        """A delegate's timeout: what is left of the run's (None: no deadline, so
        the delegate's own spec's)."""
        left = self.remaining()
        return None if math.isinf(left) else left

    def stopped(
        self, reason: Any, i: int | None = None, result: PhaseResult[object] | None = None
    ) -> PhaseResult[object]:
        """End the run with *reason*: task *i* (if any) stopped, the pending ones dropped."""
        if i is not None:
            number, total = self.position(i)
            self.end_step(i, "stopped", result, number, total)
        self.drop_pending()
        if result is not None:
            return self.ended(result)
        return PhaseResult("", tuple(self.calls), reason)

    def ended(self, result: PhaseResult[Any], **changes: Any) -> PhaseResult[object]:
        """*result* as the run's: every tool call of the run, no output."""
        return msgspec.structs.replace(result, tool_calls=tuple(self.calls), output=None, **changes)

    # -- events ----------------------------------------------------------------------

    def publish(self, kind: type[Event], *fields: Any) -> None:
        """Publish a *kind* event of *fields* (with the agent's path), if anyone listens."""
        if self.bus.active:
            self.bus.publish(kind(self.agent.path, *fields))

    def publish_goal(self, criteria: tuple[str, ...]) -> None:
        self.publish(GoalExtracted, self.goal, criteria)

    def publish_progress(self, completed: int, total: int) -> None:
        progress = completed / total if total else 1.0
        self.publish(GoalProgress, self.goal, completed, total, progress)

    def publish_achieved(self, steps: int) -> None:
        seconds = trio.current_time() - self.started
        self.publish(GoalAchieved, self.goal, steps, seconds)
