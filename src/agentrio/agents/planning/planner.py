"""``Planning``: when a run is planned, how, and what is tracked of it.

``AgentSpec(planning=Planning(...))`` makes each ``run()`` of the agent a
planned run when its mode says so (``"on"``; ``"auto"`` and the
``needs_plan`` rule says the request needs one; ``run(planning=...)`` for
one run). The run itself is ``steps.PlannedRun``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import attrs

from ..._checks import check_int
from ...errors import InvalidArgument
from ...messages import PhaseResult, PlanningMode, PlanTask, RunPhase
from ...providers.base import Model, check_model
from ..loop.ref import AgentRef
from ..loop.spec import AgentSpec
from .plan import looks_multi_step
from .plan import step_failed as default_step_failed
from .steps import PlannedRun

if TYPE_CHECKING:
    from ..loop.extensions import PhaseRunner

__all__ = ["NeedsPlan", "Planning", "StepCheck"]

NeedsPlan = Callable[[str], "bool | Awaitable[bool]"]
"""``needs_plan(request) -> bool`` (plain or async): does a request need a plan?"""

StepCheck = Callable[[PlanTask, PhaseResult[Any]], "Awaitable[str | None] | str | None"]
"""``step_failed(task, result) -> why | None`` (plain or async): why a step failed."""

MODES = ("auto", "on", "off")


def _check_mode(value: object, argument: str) -> None:
    if value not in MODES:
        raise InvalidArgument(f"{argument} must be 'auto', 'on' or 'off', got {value!r}")


@attrs.frozen
class Planning:
    """When an agent's runs are planned, and how; set as ``AgentSpec(planning=...)``.

    A planned run asks a planner (a subagent of the agent, on the agent's
    model unless *model* says otherwise, with no tools) for a typed
    [`Plan`][agentrio.types.Plan] of tasks; runs each task as a step (its
    own, in a worker subagent of the agent's spec, one conversation for
    all the steps; or a delegate's, when the planner assigned it one);
    when a step fails, asks the planner for a revised plan of what is left,
    at most *max_revisions* times; then gives the final answer as a phase
    of the agent's own, in its conversation, with the steps' results. All
    of it draws on the agent's budget, runs its rules, approver and hooks,
    stops with its stop request, and ends with its caller. See
    [Planning][planning].

    Attributes:
        mode: ``"auto"`` (plan when *needs_plan* says so), ``"on"``, ``"off"``;
            ``run(planning=...)`` overrides it for one run.
        goal_tracking: publish ``GoalExtracted``, ``GoalProgress`` and
            ``GoalAchieved`` for each run (a run without a plan is one step,
            its goal the request).
        max_tasks: the most tasks a plan may have (a plan with more is
            refused and the planner told so), 1 to 100.
        max_revisions: how many times a failed step gets a revised plan;
            past them the run ends with ``"error"`` (``PlanFailed``).
        model: the planner's model: a model object, a tier name or an
            ``"instance:model"`` string (None: the agent's).
        needs_plan: ``fn(request) -> bool``, plain or async: the rule of
            ``"auto"`` (default
            [`Planning.looks_multi_step`][agentrio.Planning.looks_multi_step]).
        step_failed: ``fn(task, result) -> why | None``, plain or async: why a
            step failed, or None if it did not (default
            [`Planning.failed_step`][agentrio.Planning.failed_step]).

    Raises:
        InvalidArgument: a bad field, named in the message.
    """

    mode: PlanningMode = "auto"
    goal_tracking: bool = False
    max_tasks: int = 8
    max_revisions: int = 2
    model: Model | str | None = None
    needs_plan: NeedsPlan = looks_multi_step
    step_failed: StepCheck = default_step_failed
    # The planner's and the worker's specs by (agent spec, model), made once each
    # (see steps.PlannedRun.child_specs); a few entries, never more.
    specs: dict[tuple[int, int], tuple[object, ...]] = attrs.field(
        factory=dict, init=False, eq=False, hash=False, repr=False
    )

    @staticmethod
    def looks_multi_step(request: str) -> bool:
        """The default ``needs_plan``: does *request* read as several steps?

        True when its first 20,000 characters hold a list of two or more
        items (lines starting ``1.``, ``2)``, ``-``, ``*``), a word of sequence
        (``then``, ``after that``, ``afterwards``, ``and finally``, ``step by
        step``, ``first,``, ``next,``), or when it is longer than 600 characters.
        """
        return looks_multi_step(request)

    @staticmethod
    def failed_step(task: PlanTask, result: PhaseResult[Any]) -> str | None:
        """The default ``step_failed``: why the step of *task* failed, or None.

        A step fails when its phase did not end ``"done"`` (an error, its
        ``max_iterations``, a stall...; the reason names the stop reason and
        the error), or when its answer begins with ``FAILED`` (any case), as
        each step is told to answer when it cannot do its task (the reason is
        that answer, cut to 300 characters).
        """
        return default_step_failed(task, result)

    def __attrs_post_init__(self) -> None:
        _check_mode(self.mode, "Planning.mode")
        if not isinstance(self.goal_tracking, bool):
            raise InvalidArgument(
                f"Planning.goal_tracking must be a bool, got {self.goal_tracking!r}"
            )
        check_int("Planning.max_tasks", self.max_tasks, 1)
        if self.max_tasks > 100:
            raise InvalidArgument(f"Planning.max_tasks must be at most 100, got {self.max_tasks}")
        check_int("Planning.max_revisions", self.max_revisions, 0)
        if self.model is not None:
            if isinstance(self.model, str):
                if not self.model:
                    raise InvalidArgument("Planning.model must not be empty")
            else:
                check_model(self.model, "Planning.model")
        for name in ("needs_plan", "step_failed"):
            if not callable(getattr(self, name)):
                raise InvalidArgument(f"Planning.{name} must be callable")

    async def wants_plan(self, request: str, mode: str | None) -> bool:
        """Does a run of *request* get a plan, in *mode* (None: this planning's)?"""
        mode = mode or self.mode
        if mode != "auto":
            return mode == "on"
        answer = self.needs_plan(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer is True

    # -- the loop's RunDriver --------------------------------------------------------

    def check_spec(self, spec: AgentSpec[object]) -> None:
        """Raise ``InvalidArgument`` if *spec* holds this elsewhere than in ``planning``."""
        if spec.planning is not self:
            raise InvalidArgument("an agentrio.Planning goes in AgentSpec.planning")

    def check_run(self, planning: object) -> None:
        """Raise ``InvalidArgument`` unless *planning* is None or a mode."""
        if planning is not None:
            _check_mode(planning, "planning")

    def drive(
        self,
        agent: AgentRef[object],
        cmd: RunPhase,
        run_phase: PhaseRunner,
        planning: str | None,
    ) -> Coroutine[object, None, PhaseResult[object]]:
        """Run *cmd* on *agent*: planned, handed to a delegate, or as one phase."""
        return PlannedRun(self, agent, cmd, run_phase).run(planning)
