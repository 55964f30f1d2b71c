"""The plan a planner answers with, the prompts that ask for it, and the default rules.

The plan is a typed output (``output_type=Plan``), so the planner's answer
is parsed and validated as any typed answer is, and refused answers are
sent back with why. It is the model's text all the same: each text is
scrubbed and cut (a task's description to 1,000 characters, the goal to
500, at most 10 criteria of 300) before anything else reads it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from ..._text import scrub
from ...errors import ModelRetry
from ...messages import PhaseResult, PlanTask

__all__ = [
    "Plan",
    "PlannedTask",
    "looks_multi_step",
    "plan_checker",
    "planner_instructions",
    "step_failed",
]

TASK_CHARS = 1_000
GOAL_CHARS = 500
CRITERIA = 10
CRITERION_CHARS = 300
RESULT_CHARS = 1_000  # of a step's answer, as the planner and the final answer see it
_READ_CHARS = 20_000  # the default rules read at most this much of a request


class PlannedTask(msgspec.Struct, frozen=True):
    """One task of a [`Plan`][agentrio.types.Plan], as the planner gives it.

    Attributes:
        description: what to do, as an instruction to the agent.
        agent: the name of the delegate to hand it to (``AgentSpec.delegation``),
            or None: the agent does it. An unknown name counts as None.
    """

    description: str
    agent: str | None = None


class Plan(msgspec.Struct, frozen=True):
    """What a planner answers (the ``output_type`` of its call).

    Attributes:
        tasks: the tasks, in the order they are to be done (1 to
            ``Planning.max_tasks``).
        goal: what the request wants achieved, in a sentence.
        criteria: how to tell the goal is met.
    """

    tasks: tuple[PlannedTask, ...]
    goal: str = ""
    criteria: tuple[str, ...] = ()


def clip(text: str, chars: int) -> str:
    """*text* scrubbed, stripped and cut to *chars* characters (``…`` last if cut)."""
    text = scrub(text).strip()
    return text if len(text) <= chars else text[: chars - 1] + "…"


def plan_checker(max_tasks: int) -> object:
    """An output validator refusing a plan of no task, more than *max_tasks*, or an
    empty description (the model is told which, and plans again)."""

    def check(plan: Plan) -> None:
        if not plan.tasks:
            raise ModelRetry("the plan has no task; give at least one")
        if len(plan.tasks) > max_tasks:
            raise ModelRetry(f"the plan has {len(plan.tasks)} tasks; give at most {max_tasks}")
        if any(not t.description.strip() for t in plan.tasks):
            raise ModelRetry("a task has an empty description")

    return check


def planner_instructions(max_tasks: int, tools: Sequence[str], delegates: Sequence[str]) -> str:
    """The planner's system prompt: *tools* are the agent's tool names, *delegates*
    ``"name: description"`` lines."""
    parts = [
        "You plan work for an agent; you do not do the work. Split the request into at "
        f"most {max_tasks} tasks, in the order they must be done, each one an instruction "
        "the agent can carry out on its own. Answer with JSON only: "
        '{"goal": "<what the request wants achieved>", "criteria": ["<how to tell it is '
        'achieved>"], "tasks": [{"description": "<the task>", "agent": null}]}.'
    ]
    if tools:
        parts.append("The agent's tools: " + ", ".join(tools) + ".")
    if delegates:
        parts.append(
            'A task may be given to one of these agents instead (set "agent" to its name):\n'
            + "\n".join(f"- {line}" for line in delegates)
        )
    return "\n\n".join(parts)


_LIST_ITEM = re.compile(r"^\s*(?:\d{1,3}[.)]|[-*\u2022])\s+\S", re.MULTILINE)
_SEQUENCE = re.compile(
    # ("first," and "next," end with their comma: no \b after it, which a comma
    # followed by a space never meets)
    r"\b(?:then|after that|afterwards|and finally|step by step)\b|\b(?:first|next),",
    re.IGNORECASE,
)
_LONG = 600


def looks_multi_step(request: str) -> bool:
    """The default ``Planning.needs_plan`` of ``mode="auto"``: does *request* read
    as several steps?

    True when its first 20,000 characters hold a list of two or more items
    (lines starting ``1.``, ``2)``, ``-``, ``*``), a word of sequence
    (``then``, ``after that``, ``afterwards``, ``and finally``, ``step by
    step``, ``first,``, ``next,``), or when it is longer than 600 characters.
    """
    text = request[:_READ_CHARS]
    if len(_LIST_ITEM.findall(text)) >= 2 or _SEQUENCE.search(text) is not None:
        return True
    return len(request) > _LONG


def step_failed(task: PlanTask, result: PhaseResult[object]) -> str | None:
    """The default ``Planning.step_failed``: why the step of *task* failed, or None.

    A step fails when its phase did not end ``"done"`` (an error, its
    ``max_iterations``, a stall...), or when its answer begins with
    ``FAILED`` (any case), as each step is told to answer when it cannot do
    its task.
    """
    if result.stop_reason != "done":
        why = f"it ended with {result.stop_reason}"
        if result.error_type:
            why += f" ({result.error_type}: {result.error[:200]})"
        return why
    text = result.final_text.lstrip()
    if text[:6].upper() == "FAILED":
        return clip(text, 300)
    return None
