"""Planned runs (AgentSpec.planning): a typed plan, its steps, revisions, goals, and the
limits of any phase (budget, deadline, stop request, a cancelled caller)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import msgspec
import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, Budget, Planning, ToolCallRequest
from agentrio.errors import InvalidArgument, PlanFailed
from agentrio.events import (
    ActorExited,
    Event,
    GoalAchieved,
    GoalExtracted,
    GoalProgress,
    PhaseEnded,
    PlanningEnded,
    PlanningStarted,
    StepEnded,
    StepStarted,
    TaskUpdated,
)
from agentrio.testing import FunctionModel, Reply, ScriptedModel

Recorder = Callable[[agentrio.Runtime], list[Event]]


def plan(*tasks: str, goal: str = "", criteria: Sequence[str] = ()) -> Reply:
    body = {"goal": goal, "criteria": list(criteria), "tasks": [{"description": t} for t in tasks]}
    return Reply(text=json.dumps(body))


@agentrio.tool
async def search(query: str) -> str:
    """Search."""
    return f"found {query}"


@agentrio.tool
async def crawl() -> str:
    """Crawl for an hour."""
    await trio.sleep(3600)
    return "crawled"


def of(events: list[Event], kind: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_step_that_fails_gets_a_revised_plan(record_events: Recorder) -> None:
    model = ScriptedModel(
        [
            plan("search x", "search y"),
            Reply(tool_calls=[ToolCallRequest("search", {"query": "x"})]),
            Reply(text="x is 1"),
            Reply(text="FAILED: y is nowhere"),
            plan("search z instead"),
            Reply(text="z is 2"),
            Reply(text="Report: x=1, z=2"),
        ]
    )
    spec = AgentSpec("lead", model, tools=[search], planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("Write a report on x and y")
        history = await agent.history()
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text) == ("done", "Report: x=1, z=2")
    assert [c.content for c in result.tool_calls] == ["found x"]
    ends = of(events, StepEnded)
    assert [(e.task_id, e.status, e.why) for e in ends] == [  # type: ignore[attr-defined]
        ("t1", "done", ""),
        ("t2", "failed", "FAILED: y is nowhere"),
        ("t3", "done", ""),
    ]
    assert [e.revision for e in of(events, PlanningStarted)] == [0, 1]  # type: ignore[attr-defined]
    last = of(events, TaskUpdated)[-1]
    assert [(t.id, t.status) for t in last.tasks] == [  # type: ignore[attr-defined]
        ("t1", "done"),
        ("t2", "failed"),
        ("t3", "done"),
    ]
    # The planner was told what failed, and what is done with its result.
    revision = model.calls[4][-1].content
    assert "Task t2 failed: FAILED: y is nowhere" in revision
    assert "t1 [done] search x\n  result: x is 1" in revision
    # The agent's own conversation: the request with the results, and its answer.
    assert history[0].message.content.startswith("Write a report on x and y\n")
    assert "- t3 [done] search z instead\n  result: z is 2" in history[0].message.content
    assert history[-1].message.content == "Report: x=1, z=2"


async def test_revisions_are_bounded_then_the_run_fails() -> None:
    model = ScriptedModel([plan("a", "b"), Reply(text="FAILED: no a"), Reply(text="unused")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on", max_revisions=0))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        result = await agent.run("do a then b")
    assert (result.stop_reason, result.error_type) == ("error", "PlanFailed")
    assert result.error == "task t1 failed after 0 revisions of the plan: FAILED: no a"
    assert result.output is None
    with pytest.raises(PlanFailed, match="task t1 failed"):
        result.raise_for_error()
    assert len(model.calls) == 2  # the planner, the step: no revision, no final answer


async def test_goals_are_tracked_to_achievement(record_events: Recorder) -> None:
    model = ScriptedModel(
        [
            plan("one", "two", goal="two things done", criteria=["both"]),
            Reply(text="did one"),
            Reply(text="did two"),
            Reply(text="both done"),
        ]
    )
    spec = AgentSpec("lead", model, planning=Planning(mode="on", goal_tracking=True))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        await (await rt.spawn_agent(spec)).run("do one, then two")
        await trio.testing.wait_all_tasks_blocked()
    goals = [e for e in events if isinstance(e, GoalExtracted | GoalProgress | GoalAchieved)]
    assert goals[0] == GoalExtracted("lead", "two things done", ("both",))
    assert [(g.completed, g.total, g.progress) for g in goals[1:3]] == [  # type: ignore[attr-defined]
        (1, 2, 0.5),
        (2, 2, 1.0),
    ]
    assert isinstance(goals[3], GoalAchieved)
    assert (goals[3].goal, goals[3].total_steps) == ("two things done", 2)
    assert len(goals) == 4


async def test_a_run_without_a_plan_is_one_tracked_step(record_events: Recorder) -> None:
    model = ScriptedModel([Reply(text="hi")])
    spec = AgentSpec("lead", model, planning=Planning(mode="off", goal_tracking=True))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        result = await (await rt.spawn_agent(spec)).run("say hi")
        await trio.testing.wait_all_tasks_blocked()
    assert result.final_text == "hi"
    assert not of(events, PlanningStarted)
    assert [type(e).__name__ for e in events if "Goal" in type(e).__name__] == [
        "GoalExtracted",
        "GoalProgress",
        "GoalAchieved",
    ]
    assert of(events, GoalExtracted)[0].goal == "say hi"  # type: ignore[attr-defined]


async def test_auto_plans_what_the_rule_says_needs_a_plan() -> None:
    model = ScriptedModel(
        [Reply(text="short answer"), plan("a"), Reply(text="a"), Reply(text="ok")]
    )
    spec = AgentSpec("lead", model, planning=Planning())  # mode "auto", looks_multi_step
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        first = await agent.run("What is 2 + 2?")
        second = await agent.run("Find the file, then fix the bug")
    assert first.final_text == "short answer"
    assert second.final_text == "ok"
    assert len(model.calls) == 4
    assert model.calls[1][-1].content == "Request:\nFind the file, then fix the bug"


async def test_the_auto_rule_is_pluggable_and_may_be_async() -> None:
    asked: list[str] = []

    async def needs_plan(request: str) -> bool:
        asked.append(request)
        return request.startswith("plan:")

    model = ScriptedModel([plan("a"), Reply(text="a"), Reply(text="ok"), Reply(text="plain")])
    spec = AgentSpec("lead", model, planning=Planning(needs_plan=needs_plan))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        assert (await agent.run("plan: it")).final_text == "ok"
        assert (await agent.run("just it")).final_text == "plain"
    assert asked == ["plan: it", "just it"]


def test_the_default_rules() -> None:
    assert Planning.looks_multi_step("1. a\n2. b")
    assert Planning.looks_multi_step("- a\n- b")
    assert Planning.looks_multi_step("Read it and then summarise")
    assert Planning.looks_multi_step("x" * 601)
    assert not Planning.looks_multi_step("What is the capital of France?")
    task = agentrio.types.PlanTask("t1", "a")
    done = agentrio.PhaseResult("fine", (), "done")
    assert Planning.failed_step(task, done) is None
    assert (
        Planning.failed_step(task, agentrio.PhaseResult("failed: no", (), "done")) == "failed: no"
    )
    cut = agentrio.PhaseResult("", (), "max_iterations")
    assert Planning.failed_step(task, cut) == "it ended with max_iterations"


async def test_run_planning_overrides_the_mode_for_one_run() -> None:
    model = ScriptedModel([Reply(text="one phase"), plan("a"), Reply(text="a"), Reply(text="ok")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        assert (await agent.run("x", planning="off")).final_text == "one phase"
        assert (await agent.run("x")).final_text == "ok"
        with pytest.raises(InvalidArgument, match="'auto', 'on' or 'off'"):
            agent.run("x", planning="sometimes")  # type: ignore[arg-type]
        plain = await rt.spawn_agent(AgentSpec("plain", ScriptedModel([])))
        with pytest.raises(InvalidArgument, match=r"needs an agent whose AgentSpec.planning"):
            plain.run("x", planning="on")


def test_planning_is_checked() -> None:
    model = ScriptedModel([])
    with pytest.raises(InvalidArgument, match=r"Planning.mode"):
        Planning(mode="always")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"Planning.max_tasks"):
        Planning(max_tasks=0)
    with pytest.raises(InvalidArgument, match=r"at most 100"):
        Planning(max_tasks=101)
    with pytest.raises(InvalidArgument, match=r"Planning.max_revisions"):
        Planning(max_revisions=-1)
    with pytest.raises(InvalidArgument, match=r"Planning.needs_plan"):
        Planning(needs_plan="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"goes in AgentSpec.planning"):
        AgentSpec("a", model, delegation=Planning())
    with pytest.raises(InvalidArgument, match=r"AgentSpec.planning must be"):
        AgentSpec("a", model, planning="on")  # type: ignore[arg-type]


async def test_a_hostile_plan_is_refused_then_bounded(record_events: Recorder) -> None:
    too_many = plan(*[f"task {i}" for i in range(5)])
    huge = plan("x" * 50_000)
    model = ScriptedModel([too_many, huge, Reply(text="done it"), Reply(text="ok")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on", max_tasks=2))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        result = await (await rt.spawn_agent(spec)).run("go")
        await trio.testing.wait_all_tasks_blocked()
    assert result.final_text == "ok"
    refused = model.calls[1][-1].content
    assert "the plan has 5 tasks; give at most 2" in refused
    (started,) = of(events, StepStarted)
    assert len(started.description) == 1000  # type: ignore[attr-defined]
    assert started.description.endswith("x…")  # type: ignore[attr-defined]


async def test_a_typed_agent_plans_in_text_and_answers_typed() -> None:
    class Answer(msgspec.Struct):
        total: int

    model = ScriptedModel([plan("add"), Reply(text="it is 4"), Reply(text='{"total": 4}')])
    spec = AgentSpec("lead", model, output_type=Answer, planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        result = await (await rt.spawn_agent(spec)).run("add 2 and 2")
    assert result.output == Answer(4)


# -- the limits of any phase -----------------------------------------------------------


async def test_the_budget_stops_a_plan_midway(record_events: Recorder) -> None:
    model = ScriptedModel([plan("a", "b", "c"), Reply(text="a"), Reply(text="b"), Reply(text="c")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec, budget=Budget(max_requests=3))
        result = await agent.run("a, then b, then c")
        history = await agent.history()
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "budget_exhausted"
    assert len(model.calls) == 3  # the planner, a, b: c was refused before its call
    assert [(e.task_id, e.status) for e in of(events, StepEnded)] == [  # type: ignore[attr-defined]
        ("t1", "done"),
        ("t2", "done"),
        ("t3", "stopped"),
    ]
    assert history == ()  # no final answer


async def test_one_deadline_for_the_whole_run(autojump_clock: trio.testing.MockClock) -> None:
    @agentrio.tool
    async def slow() -> str:
        """Ten seconds."""
        await trio.sleep(10)
        return "slow"

    def model(messages, tools):  # type: ignore[no-untyped-def]
        last = messages[-1]
        if "Request:" in last.content and not tools:
            return plan("one", "two")
        if last.role == "tool":
            return Reply(text="step done")
        return Reply(tool_calls=[ToolCallRequest("slow")])

    spec = AgentSpec("lead", FunctionModel(model), tools=[slow], planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        start = trio.current_time()
        result = await agent.run("one then two", timeout=15)
    assert result.stop_reason == "timeout"
    assert trio.current_time() - start == pytest.approx(15)
    assert [c.status for c in result.tool_calls] == ["ok", "timeout"]


async def test_a_stop_request_ends_the_plan(record_events: Recorder) -> None:
    agent_box: list[agentrio.AgentRef[str]] = []

    @agentrio.tool
    async def stop_now() -> str:
        """Asks the lead to stop."""
        await agent_box[0].request_stop()
        return "asked"

    model = ScriptedModel(
        [plan("a", "b"), Reply(tool_calls=[ToolCallRequest("stop_now")]), Reply(text="x")]
    )
    spec = AgentSpec("lead", model, tools=[stop_now], planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        agent_box.append(agent)
        result = await agent.run("a then b")
        again = await agent.run("again", planning="off")  # the request was used up
        await trio.testing.wait_all_tasks_blocked()
    assert (again.stop_reason, again.final_text) == ("done", "x")
    assert result.stop_reason == "stop_requested"
    assert [(e.task_id, e.status) for e in of(events, StepEnded)] == [("t1", "stopped")]  # type: ignore[attr-defined]


async def test_cancelling_the_caller_cancels_the_plan(record_events: Recorder) -> None:
    model = ScriptedModel([plan("crawl"), Reply(tool_calls=[ToolCallRequest("crawl")])])
    spec = AgentSpec("lead", model, tools=[crawl], planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.run, "crawl the site")
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        exited = {e.path: e.reason for e in of(events, ActorExited)}  # type: ignore[attr-defined]
        # The lead is not cancelled: it takes its next run.
        assert agent.statistics().state == "running"
    steps = [e for e in of(events, PhaseEnded) if e.path.startswith("lead.steps")]
    assert [e.stop_reason for e in steps] == ["cancelled"]  # type: ignore[attr-defined]
    assert exited[steps[0].path] == "cancelled"
    planner = next(p for p in exited if p.startswith("lead.planner"))
    assert exited[planner] == "cancelled"


# -- over HTTP ----------------------------------------------------------------------------


async def test_a_plan_revised_over_http(record_events: Recorder) -> None:
    script = [
        plan("look it up"),
        Reply(text="FAILED: not found"),
        plan("ask again"),
        Reply(text="found it"),
        Reply(text="the answer"),
    ]
    async with agentrio.testing.open_fake_llm(script) as server:
        config = agentrio.ProviderConfig(name="p", kind="openai", base_url=server.base_url + "/v1")
        async with agentrio.Provider(config) as provider:
            spec = AgentSpec("lead", provider.model("m"), planning=Planning(mode="on"))
            async with agentrio.open_runtime() as rt:
                events = record_events(rt)
                result = await (await rt.spawn_agent(spec)).run("find the answer")
                await trio.testing.wait_all_tasks_blocked()
        requests = server.requests
    assert (result.stop_reason, result.final_text) == ("done", "the answer")
    assert [r.output_schema is not None for r in requests] == [True, False, True, False, False]
    assert [e.status for e in of(events, StepEnded)] == ["failed", "done"]  # type: ignore[attr-defined]
    assert [len(e.tasks) for e in of(events, PlanningEnded)] == [1, 2]  # type: ignore[attr-defined]


def test_sync_code_plans_too() -> None:
    model = ScriptedModel([Reply(text="one phase"), plan("a"), Reply(text="a"), Reply(text="ok")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on"))
    assert agentrio.run_sync(spec, "x", planning="off").final_text == "one phase"
    with agentrio.open_runtime_sync() as rt:
        assert rt.spawn_agent(spec).run("x").final_text == "ok"


async def test_a_stop_requested_before_the_run_ends_it_before_the_plan() -> None:
    model = ScriptedModel([plan("a"), Reply(text="a"), Reply(text="ok")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on"))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec)
        await agent.request_stop()
        stopped = await agent.run("a")
        again = await agent.run("a")
    assert (stopped.stop_reason, again.stop_reason, again.final_text) == (
        "stop_requested",
        "done",
        "ok",
    )
    assert len(model.calls) == 3  # none before the stop: the planner was not asked


async def test_what_a_rule_raises_run_raises(record_events: Recorder) -> None:
    def judge(task: agentrio.types.PlanTask, result: agentrio.PhaseResult[object]) -> None:
        raise ValueError("the judge is out")

    model = ScriptedModel([plan("a"), Reply(text="a")])
    spec = AgentSpec("lead", model, planning=Planning(mode="on", step_failed=judge))
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(spec)
        with pytest.raises(ValueError, match="the judge is out"):
            await agent.run("a")
        await trio.testing.wait_all_tasks_blocked()
    exited = {e.path: e.reason for e in of(events, ActorExited)}  # type: ignore[attr-defined]
    children = {p: r for p, r in exited.items() if p.startswith(("lead.planner", "lead.steps"))}
    assert len(children) >= 2 and set(children.values()) == {"cancelled"}
