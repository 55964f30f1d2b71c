"""The entry point: AgentRef.respond (route, Routed event, mode, tier, one escalation),
a per-run model (run(model=...)), and background runs (continue_in_background,
start_background): awaited later, watched through events, ended with the runtime."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    Config,
    Limits,
    Mode,
    ModelReply,
    PhaseResult,
    ProviderConfig,
    Route,
    RuleRouter,
    ToolCallRequest,
    Usage,
)
from agentrio.agents.composition.respond import BACKGROUND_PROMPT
from agentrio.testing import FakeLLMServer, FakeRequest, FunctionModel, Reply, open_fake_llm

if TYPE_CHECKING:
    from conftest import TaskTracker


@pytest.fixture(autouse=True)
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No agentrio.toml anywhere: a runtime without config= uses the defaults."""
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


@agentrio.tool
async def step(n: int) -> str:
    """Do step n."""
    await trio.lowlevel.checkpoint()
    return f"step {n} done"


class Steps:
    """A model that needs *total* tool calls (one per turn), then answers.

    Offered no tools (the final answer at the cap), it says how far it got.
    Each call's messages are kept.
    """

    def __init__(self, total: int, seconds: float = 0) -> None:
        self.total = total
        self.seconds = seconds
        self.seen: list[list[ChatMessage]] = []

    async def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        self.seen.append(list(messages))
        await trio.sleep(self.seconds)
        done = sum(m.role == "tool" for m in messages)
        if not tools:
            return Reply(text=f"{done} of {self.total} steps done so far")
        if done < self.total:
            return Reply(tool_calls=[ToolCallRequest("step", {"n": done + 1})])
        return Reply(text=f"all {done} steps done")


def worker(model: Steps, **kw: object) -> AgentSpec:
    return AgentSpec("worker", FunctionModel(model), tools=[step], **kw)  # type: ignore[arg-type]


# -- respond: route, event, mode -------------------------------------------------------------


async def test_respond_routes_runs_and_says_why(
    autojump_clock: trio.testing.MockClock, record_events: object
) -> None:
    model = Steps(2)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)  # type: ignore[operator]
        agent = await rt.spawn_agent(worker(model))
        response = await agent.respond("Do both steps.")
        await trio.testing.wait_all_tasks_blocked()
    reason = "5 estimated tokens (short_request_tokens: 20)"
    assert response.route == Route("inline", None, reason)
    assert response.mode == Mode.inline()
    assert (response.tier, response.escalated, response.can_continue) == (None, False, False)
    assert (response.agent, response.context_label) == ("worker", None)
    assert response.result.final_text == "all 2 steps done"
    assert response.result.stop_reason == "done"
    routed = [e for e in events if isinstance(e, agentrio.events.Routed)]
    assert routed == [
        agentrio.events.Routed(path="worker", mode="inline", tier=None, reason=reason)
    ]
    # the decision comes before the phase it decided
    kinds = [type(e) for e in events if e.path == "worker"]
    assert kinds.index(agentrio.events.Routed) < kinds.index(agentrio.events.PhaseStarted)


async def test_a_request_routed_to_background_runs_in_that_mode(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = Steps(12)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(model))
        inline = await agent.respond("Do the steps.", context_label="a")
        background = await agent.respond("Draft the steps.", context_label="b")
    assert inline.route.mode == "inline"
    assert (inline.result.stop_reason, inline.can_continue) == ("max_iterations", True)
    assert len(inline.result.tool_calls) == 5
    assert background.route == Route("background", None, "background keyword 'draft'")
    assert background.mode == Mode.background()
    assert (background.result.final_text, background.can_continue) == ("all 12 steps done", False)


async def test_a_custom_router_sync_or_async(autojump_clock: trio.testing.MockClock) -> None:
    asked: list[str] = []

    def sync(request: str) -> Route:
        asked.append(request)
        return Route("background", None, "mine")

    async def thinks(request: str) -> Route:
        await trio.sleep(2)
        asked.append(request)
        return Route("inline", None, "thought about it")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(7)))
        first = await agent.respond("one", router=sync, context_label="1")
        second = await agent.respond("two", router=thinks, context_label="2")
    assert asked == ["one", "two"]
    assert (first.route.reason, first.mode.name, first.result.stop_reason) == (
        "mine",
        "background",
        "done",
    )
    assert (second.route.reason, second.mode.name, second.result.stop_reason) == (
        "thought about it",
        "inline",
        "max_iterations",
    )


async def test_the_runtimes_router_and_the_configurations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def always_background(request: str) -> Route:
        return Route("background", None, "the runtime's router")

    async with agentrio.open_runtime(router=always_background) as rt:
        agent = await rt.spawn_agent(worker(Steps(1)))
        assert (await agent.respond("hi")).route.reason == "the runtime's router"
        # a router given to respond() wins
        mine = await agent.respond("hi", router=lambda r: Route("inline", None, "mine"))
        assert mine.route.reason == "mine"
    config = Config(router=RuleRouter(short_request_tokens=1))
    async with agentrio.open_runtime(config=config) as rt:
        agent = await rt.spawn_agent(worker(Steps(1)))
        assert (await agent.respond("hi")).route.reason == "no rule matched"
    async with agentrio.open_runtime(config=config, modes=[Mode.inline(max_iterations=1)]) as rt:
        agent = await rt.spawn_agent(worker(Steps(3)))
        capped = await agent.respond("hi")
        assert (capped.mode.max_iterations, capped.result.stop_reason) == (1, "max_iterations")


@pytest.mark.parametrize(
    ("router", "match"),
    [
        (lambda r: "inline", "the router must return an agentrio.Route, got 'inline'"),
        (lambda r: Route("quick"), "the route's mode 'quick' is not a mode of this runtime"),
        ("inline", "router must be a callable"),
    ],
)
async def test_bad_routes_run_nothing(
    autojump_clock: trio.testing.MockClock, router: object, match: str
) -> None:
    model = Steps(1)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(model))
        with pytest.raises(agentrio.InvalidArgument, match=match):
            await agent.respond("hi", router=router)  # type: ignore[arg-type]
    assert model.seen == []


async def test_a_router_that_raises(autojump_clock: trio.testing.MockClock) -> None:
    def broken(request: str) -> Route:
        raise LookupError("no rules")

    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(1)))
        with pytest.raises(LookupError, match="no rules"):
            await agent.respond("hi", router=broken)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"request": 3}, "request must be a str"),
        ({"escalate": 1}, "escalate must be a bool"),
        ({"context_label": 1}, "context_label must be a str or None"),
    ],
)
async def test_bad_respond_arguments(
    autojump_clock: trio.testing.MockClock, kw: dict[str, object], match: str
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(1)))
        args = {"request": "hi", **kw}
        with pytest.raises(agentrio.InvalidArgument, match=match):
            await agent.respond(args.pop("request"), **args)  # type: ignore[arg-type]


# -- the inline cap, then the background -----------------------------------------------------


async def test_an_inline_run_at_its_cap_goes_on_in_the_background(
    autojump_clock: trio.testing.MockClock, record_events: object
) -> None:
    model = Steps(8, seconds=1)
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)  # type: ignore[operator]
        agent = await rt.spawn_agent(worker(model))
        response = await agent.respond("Do the eight steps.", context_label="chat")
        assert (response.result.stop_reason, response.can_continue) == ("max_iterations", True)
        assert response.result.final_text == "5 of 8 steps done so far"
        start = trio.current_time()
        bg = await agent.continue_in_background(response)
        assert trio.current_time() == start  # it returns at once
        assert (bg.done, bg.result, bg.context_label) == (False, None, "chat")
        assert bg.mode == Mode.background()
        assert bg.agent is agent
        await trio.sleep(1.5)  # ... the caller does something else ...
        assert not bg.done
        result = await bg.wait()  # and awaits it later
        assert (bg.done, bg.result) == (True, result)
        assert await bg.wait() == result  # as often as it likes
        await trio.testing.wait_all_tasks_blocked()
    assert (result.stop_reason, result.final_text) == ("done", "all 8 steps done")
    assert [r.content for r in result.tool_calls] == [f"step {n} done" for n in (6, 7, 8)]
    # the same context: the background phase saw the inline phase's turns, then its prompt
    first_background_call = model.seen[6]
    assert [m.content for m in first_background_call if m.role == "tool"] == [
        f"step {n} done" for n in range(1, 6)
    ]
    assert first_background_call[-1] == ChatMessage("user", BACKGROUND_PROMPT)
    # watched through events: the agent's path, the phase's label
    phases = [
        (type(e).__name__, e.context_label)
        for e in events
        if isinstance(e, (agentrio.events.PhaseStarted, agentrio.events.PhaseEnded))
        and e.path == "worker"
    ]
    assert phases == [("PhaseStarted", "chat"), ("PhaseEnded", "chat")] * 2
    ended = [e for e in events if isinstance(e, agentrio.events.PhaseEnded)]
    assert [e.stop_reason for e in ended] == ["max_iterations", "done"]
    # its actor started, and stopped once its phase was done
    runner = [e for e in events if e.path == bg.path]
    assert [type(e).__name__ for e in runner] == ["ActorStarted", "ActorExited"]
    assert bg.path == "worker.background-" + bg.path.rsplit("-", 1)[1]


async def test_an_inline_run_at_its_timeout_goes_on_in_the_background(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = Steps(8, seconds=12)  # the inline mode's 30 s cap comes before its 5 turns
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(model))
        response = await agent.respond("Do the eight steps.", context_label="chat")
        assert response.mode.name == "inline"
        assert (response.result.stop_reason, response.can_continue) == ("timeout", True)
        bg = await agent.continue_in_background(response)
        result = await bg.wait()
    assert (result.stop_reason, result.final_text) == ("done", "all 8 steps done")
    assert ChatMessage("user", BACKGROUND_PROMPT) in model.seen[-1]


async def test_a_message_of_ones_own_and_the_tier_carries_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = Steps(6)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(model))
        response = await agent.respond("Do them.")
        bg = await agent.continue_in_background(response, message="Bitte weitermachen.")
        await bg.wait()
    assert model.seen[6][-1] == ChatMessage("user", "Bitte weitermachen.")


async def test_only_a_capped_response_of_this_agent_continues(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(1)))
        other = await rt.spawn_agent(worker(Steps(9)), name="other")
        done = await agent.respond("Do it.")
        capped = await other.respond("Do them.")
        with pytest.raises(agentrio.InvalidArgument, match="cannot be continued: its run ended"):
            await agent.continue_in_background(done)
        with pytest.raises(agentrio.InvalidArgument, match="is agent 'other'"):
            await agent.continue_in_background(capped)
        with pytest.raises(
            agentrio.InvalidArgument, match=r"must be the agentrio\.types\.Response"
        ):
            await agent.continue_in_background(done.result)  # type: ignore[arg-type]
        with pytest.raises(agentrio.InvalidArgument, match="message must be a str or None"):
            await other.continue_in_background(capped, message=3)  # type: ignore[arg-type]
        background = await other.respond("Draft them.", router=lambda r: Route("background"))
    assert background.result.stop_reason == "done"
    assert not background.can_continue


async def test_a_background_run_that_hits_its_cap_cannot_be_continued_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(100)))
        response = await agent.respond("hi", router=lambda r: Route("background"))
    assert (response.result.stop_reason, response.can_continue) == ("max_iterations", False)


async def test_cancelling_a_wait_leaves_the_phase_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(3, seconds=10)))
        bg = await agent.start_background("Do them.")
        with trio.move_on_after(5):
            await bg.wait()
        result = await bg.wait()
    assert (result.stop_reason, result.final_text) == ("done", "all 3 steps done")


async def test_background_runs_queue_behind_other_phases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = Steps(0, seconds=1)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(model))
        first = await agent.start_background("one", context_label="x")
        second = await agent.start_background("two", context_label="y", mode=None)
        third = await agent.run("three", context_label="z")
        results = [await first.wait(), await second.wait()]
    assert second.mode is None
    assert [r.stop_reason for r in results] == ["done", "done"]
    assert third.stop_reason == "done"
    assert [m[-1].content for m in model.seen] == ["one", "two", "three"]


async def test_start_background_checks_its_arguments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(1)))
        with pytest.raises(agentrio.InvalidArgument, match="mode 'later' is not a mode"):
            await agent.start_background("hi", mode="later")
        with pytest.raises(agentrio.InvalidArgument, match="timeout must be > 0 seconds"):
            await agent.start_background("hi", timeout=0)
        assert [c.name for c in rt.children()] == ["worker"]  # nothing was spawned


async def test_no_background_run_under_a_stopped_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        agent = await rt.spawn_agent(worker(Steps(1)), under=team)
        response = await agent.respond("Do it.", router=lambda r: Route("inline"))
        await team.stop()
        with pytest.raises(agentrio.errors.RuntimeClosed):
            await agent.start_background("again")
    assert response.result.stop_reason == "done"


async def test_a_bad_runtime_router() -> None:
    with pytest.raises(agentrio.InvalidArgument, match="router must be a callable"):
        async with agentrio.open_runtime(router="rules"):  # type: ignore[arg-type]
            pass


def test_background_run_has_no_public_constructor() -> None:
    with pytest.raises(TypeError, match="no public constructor"):
        agentrio.types.BackgroundRun()


# -- the runtime ends, the background run ends with it ---------------------------------------


async def test_no_background_run_outlives_the_runtime(
    autojump_clock: trio.testing.MockClock, task_tracker: TaskTracker, record_events: object
) -> None:
    model = Steps(3, seconds=1000)  # much longer than the runtime's shutdown_timeout
    before = set(task_tracker.spawned)
    async with agentrio.open_runtime(shutdown_timeout=5) as rt:
        events = record_events(rt)  # type: ignore[operator]
        agent = await rt.spawn_agent(worker(model))
        bg = await agent.start_background("Do them.")
        await trio.sleep(10)
        closing = trio.current_time()
    assert trio.current_time() - closing == 5  # the graceful stop's deadline, then cancelled
    assert bg.done and bg.result is None
    with pytest.raises(agentrio.ActorStopped, match="was cancelled before it ended") as info:
        await bg.wait()
    assert (info.value.path, info.value.reason) == ("worker", "cancelled")
    ours = [t for t in task_tracker.spawned if t not in before and "collect" not in t.name]
    assert ours and task_tracker.alive(ours) == []
    # the agent was cancelled at the deadline, its phase with it
    await trio.testing.wait_all_tasks_blocked()
    exits = [(e.path, e.reason) for e in events if isinstance(e, agentrio.events.ActorExited)]
    assert (bg.path, "cancelled") in exits
    assert ("worker", "cancelled") in exits


async def test_a_graceful_stop_lets_a_background_run_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime(shutdown_timeout=5) as rt:
        agent = await rt.spawn_agent(worker(Steps(2, seconds=1)))
        bg = await agent.start_background("Do them.")
    assert (await bg.wait()).final_text == "all 2 steps done"


async def test_a_cancelled_runtime_cancels_its_background_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.move_on_after(100):
        async with agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(worker(Steps(3, seconds=1000)))
            bg = await agent.start_background("Do them.")
            await trio.sleep_forever()
    with pytest.raises(agentrio.ActorStopped):
        await bg.wait()


async def test_a_stopped_agent_fails_its_background_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(worker(Steps(3, seconds=1000)))
        bg = await agent.start_background("Do them.")
        await trio.sleep(1)
        agent.cancel()
        with pytest.raises(agentrio.ActorStopped, match="cancelled"):
            await bg.wait()
        with pytest.raises(agentrio.ActorStopped, match="has cancelled"):
            await agent.start_background("again")


# -- tiers: a per-run model, and one escalation ----------------------------------------------


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"nothing about {key}"


def by_model(request: FakeRequest) -> ModelReply:
    """The small model repeats one call (a stall); the big one answers; "own" is the agent's."""
    if request.model in ("big", "own"):
        return ModelReply(text=f"{request.model} answers", usage=Usage(50, 5))
    if not request.tools:  # the final turn after a stall
        return ModelReply(text="I am stuck", usage=Usage(40, 3))
    return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "x"}),), usage=Usage(30, 4))


def tiers_config(server: FakeLLMServer) -> Config:
    local = ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
    return Config(
        providers={"local": local},
        tiers={"fast": "local:small", "smart": "local:big", "best": "local:best"},
        escalation=["fast", "smart"],
    )


def on(tier: str | None) -> RuleRouter:
    return RuleRouter(simple_tier=tier, default_tier=tier, complex_tier=tier)


async def test_respond_escalates_a_stall_on_the_routed_tier_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_llm(by_model) as server:
        async with agentrio.open_runtime(config=tiers_config(server)) as rt:
            spec = AgentSpec("a", "local:own", tools=[lookup])
            agent = await rt.spawn_agent(spec)
            response = await agent.respond("q", router=on("fast"))
            later = await agent.run("again")
        models = [r.model for r in server.requests]
    assert response.route.tier == "fast"
    assert (response.tier, response.escalated) == ("smart", True)
    assert (response.result.stop_reason, response.result.final_text) == ("done", "big answers")
    # two calls and the final turn on fast, the retry on smart; then the agent's own model
    assert models == ["small", "small", "small", "big", "own"]
    assert later.final_text == "own answers"
    # the retry saw the stalled attempt (the same context)
    retry = server.requests[3]
    assert sum(m.role == "tool" for m in retry.messages) == 2


@pytest.mark.parametrize(
    ("tier", "escalate", "models"),
    [
        ("fast", False, ["small"] * 3),  # not asked for
        ("smart", True, ["big"]),  # no stall
        ("best", True, ["best"]),  # a tier with nothing after it in escalation
    ],
)
async def test_respond_without_escalation(
    autojump_clock: trio.testing.MockClock, tier: str, escalate: bool, models: list[str]
) -> None:
    def reply(request: FakeRequest) -> ModelReply:
        return by_model(request) if request.model != "best" else ModelReply(text="best")

    async with open_fake_llm(reply) as server:
        async with agentrio.open_runtime(config=tiers_config(server)) as rt:
            agent = await rt.spawn_agent(AgentSpec("a", "local:own", tools=[lookup]))
            response = await agent.respond("q", router=on(tier), escalate=escalate)
        assert [r.model for r in server.requests] == models
    assert (response.tier, response.escalated) == (tier, False)


async def test_a_route_without_a_tier_runs_on_the_agents_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # ... where the spec's escalate_on_stall applies, as for run()
    async with open_fake_llm(by_model) as server:
        async with agentrio.open_runtime(config=tiers_config(server)) as rt:
            spec = AgentSpec("a", "fast", tools=[lookup], escalate_on_stall=True)
            agent = await rt.spawn_agent(spec)
            response = await agent.respond("q", router=on(None))
        assert [r.model for r in server.requests] == ["small"] * 3 + ["big"]
    assert (response.tier, response.escalated, response.result.final_text) == (
        None,
        False,
        "big answers",
    )


async def test_an_unknown_tier_is_a_config_error_before_anything_runs(
    autojump_clock: trio.testing.MockClock, record_events: object
) -> None:
    async with open_fake_llm(by_model) as server:
        async with agentrio.open_runtime(config=tiers_config(server)) as rt:
            events = record_events(rt)  # type: ignore[operator]
            agent = await rt.spawn_agent(AgentSpec("a", "local:own"))
            with pytest.raises(agentrio.ConfigError, match="'medium' is neither a tier"):
                await agent.respond("q", router=on("medium"))
            with pytest.raises(agentrio.ConfigError, match="'medium' is neither a tier"):
                await agent.run("q", model="medium")
            await trio.testing.wait_all_tasks_blocked()
        assert server.requests == []
    assert not [
        e for e in events if isinstance(e, (agentrio.events.Routed, agentrio.events.PhaseStarted))
    ]


async def test_a_per_run_model(autojump_clock: trio.testing.MockClock) -> None:
    async with open_fake_llm(by_model) as server:
        async with agentrio.open_runtime(config=tiers_config(server)) as rt:
            agent = await rt.spawn_agent(AgentSpec("a", "local:own"))
            results = [
                await agent.run("1", model="smart"),
                await agent.run("2"),
                await agent.run("3", model="local:big"),
                await agent.run("4"),
            ]
        assert [r.model for r in server.requests] == ["big", "own", "big", "own"]
    assert [r.final_text for r in results] == ["big answers", "own answers"] * 2


async def test_a_raw_run_phase_with_a_bad_model_ends_with_error(
    autojump_clock: trio.testing.MockClock, record_events: object
) -> None:
    async with agentrio.open_runtime(config=Config()) as rt:
        events = record_events(rt)  # type: ignore[operator]
        agent = await rt.spawn_agent(worker(Steps(1)))
        result = await agent.ref.ask(agentrio.RunPhase("hi", model="nowhere"))
        assert isinstance(result, PhaseResult)
        assert (result.stop_reason, result.error_type) == ("error", "ConfigError")
        assert "'nowhere' is neither a tier" in result.error
        assert (await agent.run("hi")).stop_reason == "done"  # the agent is fine
        await trio.testing.wait_all_tasks_blocked()
    (error,) = [e for e in events if isinstance(e, agentrio.events.PhaseError)]
    assert error.error_type == "ConfigError"


@agentrio.tool
async def slow_lookup(key: str) -> str:
    """Sleeps past its tool timeout."""
    await trio.sleep(100)
    return key


async def test_a_per_run_model_holds_across_a_lone_calls_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A lone tool call's timer cuts the agent's task short and the phase resumes:
    # on the run's model still, and the agent's own model after.
    def reply(request: FakeRequest) -> ModelReply:
        if any(m.role == "tool" for m in request.messages[-1:]):
            return ModelReply(text=f"{request.model} after the timeout")
        if request.model == "big":
            return ModelReply(tool_calls=(ToolCallRequest("slow_lookup", {"key": "k"}),))
        return ModelReply(text=f"{request.model} answers")

    async with open_fake_llm(reply) as server:
        async with agentrio.open_runtime(config=tiers_config(server)) as rt:
            spec = AgentSpec("a", "local:own", tools=[slow_lookup], limits=Limits(tool_timeout=5))
            agent = await rt.spawn_agent(spec)
            first = await agent.run("q", model="smart")
            second = await agent.run("q")
        assert [r.model for r in server.requests] == ["big", "big", "own"]
    assert first.final_text == "big after the timeout"
    assert [r.status for r in first.tool_calls] == ["timeout"]
    assert second.final_text == "own answers"
