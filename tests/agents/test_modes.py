"""Per-run limits (run(timeout=..., max_iterations=...)) and modes: the presets, their
overrides in code, in open_runtime and in agentrio.toml, and how a mode, a run's
own arguments and the spec's limits combine."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, ChatMessage, Config, Limits, Mode, ToolCallRequest
from agentrio.testing import FunctionModel, Reply


@pytest.fixture(autouse=True)
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No agentrio.toml anywhere: a runtime without config= uses the presets."""
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


@agentrio.tool
async def nap(seconds: float, n: int) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return f"rested {n}"


@agentrio.tool
async def step(n: int) -> str:
    """Do step n."""
    await trio.lowlevel.checkpoint()
    return f"step {n}"


def endless(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
    """Asks for another step as long as it is offered tools."""
    if not tools:
        return Reply(text="summary")
    n = sum(m.role == "tool" for m in messages)
    return Reply(tool_calls=[ToolCallRequest("step", {"n": n + 1})])


def napper(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
    """Naps 10 s per tool call, forever."""
    n = sum(m.role == "tool" for m in messages)
    return Reply(tool_calls=[ToolCallRequest("nap", {"seconds": 10, "n": n})])


def counting(fn: object) -> tuple[FunctionModel, list[int]]:
    calls: list[int] = []

    def body(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
        calls.append(len(tools))
        return fn(messages, tools)  # type: ignore[operator, no-any-return]

    return FunctionModel(body), calls


def spec(model: object, limits: Limits | None = None, **kw: object) -> AgentSpec:
    return AgentSpec(
        "a",
        model,  # type: ignore[arg-type]
        tools=[nap, step],
        limits=limits or Limits(tool_timeout=1000),
        **kw,  # type: ignore[arg-type]
    )


# -- the presets ---------------------------------------------------------------------------


def test_the_presets() -> None:
    assert Mode.inline() == Mode("inline", 5, 30.0, None, "interactive")
    assert Mode.background() == Mode("background", 20, 180.0, 3, "background")
    # overridable in code: the presets with some fields changed
    assert Mode.inline(max_iterations=8).max_iterations == 8
    assert Mode.inline(max_iterations=8).timeout == 30.0
    assert attrs.evolve(Mode.background(), timeout=600).timeout == 600
    assert Mode("deep").max_iterations is None  # a field left None is the spec's


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"name": ""}, "Mode.name must be a non-empty str"),
        ({"name": "x", "max_iterations": 0}, r"Mode.max_iterations must be an int >= 1"),
        ({"name": "x", "max_iterations": True}, r"Mode.max_iterations must be an int >= 1"),
        ({"name": "x", "timeout": 0}, r"Mode.timeout must be > 0 seconds"),
        ({"name": "x", "timeout": math.nan}, r"Mode.timeout must be > 0 seconds"),
        ({"name": "x", "timeout": "30"}, r"Mode.timeout must be a number of seconds"),
        ({"name": "x", "max_continuation_turns": -1}, "Mode.max_continuation_turns must be"),
        ({"name": "x", "lane": ""}, "Mode.lane must be one of"),
        ({"name": "x", "lane": "fast"}, "Mode.lane must be one of"),
    ],
)
def test_bad_modes(kw: dict[str, object], match: str) -> None:
    with pytest.raises(agentrio.InvalidArgument, match=match):
        Mode(**kw)  # type: ignore[arg-type]


# -- per-run limits ------------------------------------------------------------------------


async def test_a_run_sets_its_own_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(FunctionModel(napper), Limits(timeout=100)))
        start = trio.current_time()
        quick = await agent.run("go", timeout=25)
        quick_took = trio.current_time() - start
        start = trio.current_time()
        long = await agent.run("go", timeout=65, max_iterations=20)
        long_took = trio.current_time() - start
        start = trio.current_time()
        default = await agent.run("go", max_iterations=20)
        default_took = trio.current_time() - start
    assert (quick.stop_reason, quick_took) == ("timeout", 25)
    assert [r.status for r in quick.tool_calls] == ["ok", "ok", "timeout"]
    assert (long.stop_reason, long_took, len(long.tool_calls)) == ("timeout", 65, 7)
    # the spec's timeout still holds for a run that sets none
    assert (default.stop_reason, default_took) == ("timeout", 100)


async def test_a_run_without_a_deadline(autojump_clock: trio.testing.MockClock) -> None:
    model, calls = counting(napper)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model, Limits(timeout=15, final_answer=False)))
        result = await agent.run("go", timeout=math.inf, max_iterations=4)
    assert result.stop_reason == "max_iterations"
    assert len(calls) == 4


async def test_a_run_sets_its_own_iteration_cap(autojump_clock: trio.testing.MockClock) -> None:
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model, Limits(max_iterations=3)))
        short = await agent.run("go", max_iterations=1)
        assert (short.stop_reason, len(calls)) == ("max_iterations", 2)  # + the final answer
        calls.clear()
        default = await agent.run("go")
        assert (default.stop_reason, len(calls)) == ("max_iterations", 4)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"timeout": 0}, r"^timeout must be > 0 seconds"),
        ({"timeout": -1}, r"^timeout must be > 0 seconds"),
        ({"timeout": "10"}, r"^timeout must be a number of seconds or None"),
        ({"max_iterations": 0}, r"^max_iterations must be an int >= 1"),
        ({"mode": "quick"}, r"^mode 'quick' is not a mode of this runtime; its modes are "),
        ({"mode": 5}, r"^mode must be a mode's name or an agentrio.Mode"),
        ({"model": ""}, r"^model must be a tier name or an 'instance:model' string"),
    ],
)
async def test_bad_per_run_arguments(
    autojump_clock: trio.testing.MockClock, kw: dict[str, object], match: str
) -> None:
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model))
        with pytest.raises(agentrio.InvalidArgument, match=match):
            await agent.run("go", **kw)  # type: ignore[arg-type]
    assert calls == []


# -- modes ---------------------------------------------------------------------------------


async def test_inline_and_background_modes(autojump_clock: trio.testing.MockClock) -> None:
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model))
        inline = await agent.run("go", mode="inline")
        assert (inline.stop_reason, len(calls)) == ("max_iterations", 6)  # 5 + the final answer
        calls.clear()
        background = await agent.run("go", mode="background")
        assert (background.stop_reason, len(calls)) == ("max_iterations", 21)
        calls.clear()
        # a Mode object is used as it is
        custom = await agent.run("go", mode=Mode.inline(max_iterations=2))
        assert (custom.stop_reason, len(calls)) == ("max_iterations", 3)


async def test_the_inline_mode_has_a_30_second_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(FunctionModel(napper)))
        start = trio.current_time()
        inline = await agent.run("go", mode="inline")
        inline_took = trio.current_time() - start
        start = trio.current_time()
        background = await agent.run("go", mode="background", max_iterations=100)
        background_took = trio.current_time() - start
    assert (inline.stop_reason, inline_took) == ("timeout", 30)
    assert (background.stop_reason, background_took) == ("timeout", 180)


async def test_a_runs_own_arguments_win_over_its_mode(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model))
        result = await agent.run("go", mode="inline", max_iterations=2)
        assert (result.stop_reason, len(calls)) == ("max_iterations", 3)
        start = trio.current_time()
        napping = await rt.spawn_agent(spec(FunctionModel(napper)), name="b")
        timed = await napping.run("go", mode="inline", timeout=12)
        assert (timed.stop_reason, trio.current_time() - start) == ("timeout", 12)


async def test_a_mode_field_left_none_is_the_specs(autojump_clock: trio.testing.MockClock) -> None:
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model, Limits(max_iterations=4)))
        result = await agent.run("go", mode=Mode("quick", timeout=10))
    assert (result.stop_reason, len(calls)) == ("max_iterations", 5)


def unfinished_then_done(messages: Sequence[ChatMessage], tools: Sequence[object]) -> Reply:
    """Says it will go on (a reply that reads as unfinished) until it is nudged 3 times."""
    nudges = sum(m.role == "user" and m.content.startswith("You stopped") for m in messages)
    return Reply(text="All done." if nudges == 3 else "Let me check the next file.")


async def test_continuation_is_on_in_the_background_preset_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with agentrio.open_runtime() as rt:
        events = rt.events()
        agent = await rt.spawn_agent(spec(FunctionModel(unfinished_then_done)))
        plain = await agent.run("go", continue_context=False)
        inline = await agent.run("go", mode="inline", continue_context=False)
        background = await agent.run("go", mode="background", continue_context=False)
        # an inline mode with continuation: the mode's value, over the spec's 0
        turned_on = await agent.run(
            "go", mode=Mode.inline(max_continuation_turns=1), continue_context=False
        )
    injected = [
        e.count async for e in events if isinstance(e, agentrio.events.ContinuationInjected)
    ]
    assert plain.final_text == inline.final_text == "Let me check the next file."
    assert background.final_text == "All done."  # three continuations
    assert turned_on.final_text == "Let me check the next file."
    assert injected == [1, 2, 3, 1]


async def test_a_mode_does_not_change_the_spec(autojump_clock: trio.testing.MockClock) -> None:
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec(model, Limits(max_iterations=2)))
        await agent.run("go", mode="background")
        calls.clear()
        after = await agent.run("go")
    assert (after.stop_reason, len(calls)) == ("max_iterations", 3)
    assert agent.spec.limits.max_iterations == 2


# -- the runtime's modes: open_runtime(modes=...) and agentrio.toml ------------------------


async def test_open_runtime_modes_replace_the_presets_by_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model, calls = counting(endless)
    modes = [Mode.inline(max_iterations=2), Mode("deep", max_iterations=7)]
    async with agentrio.open_runtime(modes=modes) as rt:
        agent = await rt.spawn_agent(spec(model))
        for name, expected in (("inline", 3), ("deep", 8), ("background", 21)):
            calls.clear()
            result = await agent.run("go", mode=name)
            assert (name, result.stop_reason, len(calls)) == (name, "max_iterations", expected)


@pytest.mark.parametrize(
    ("modes", "match"),
    [
        ("inline", "modes must be a list of agentrio.Mode"),
        ([{"name": "inline"}], "modes must be a list of agentrio.Mode"),
        ([Mode("x"), Mode("x", max_iterations=2)], r"modes has two modes named \['x'\]"),
    ],
)
async def test_bad_runtime_modes(modes: object, match: str) -> None:
    with pytest.raises(agentrio.InvalidArgument, match=match):
        async with agentrio.open_runtime(modes=modes):  # type: ignore[arg-type]
            pass


TOML = """
[modes.inline]
max_iterations = 2

[modes.background]
timeout = inf

[modes.deep]
max_iterations = 4
max_continuation_turns = 1
lane = "background"
"""


def test_modes_in_agentrio_toml() -> None:
    config = agentrio.parse_config(tomllib.loads(TOML), path="agentrio.toml")
    assert config.modes == {
        "inline": Mode("inline", 2, 30.0, None, "interactive"),
        "background": Mode("background", 20, math.inf, 3, "background"),
        "deep": Mode("deep", 4, None, 1, "background"),
    }
    # without the tables: the presets
    assert agentrio.parse_config({}).modes == {
        "inline": Mode.inline(),
        "background": Mode.background(),
    }


async def test_the_runtime_runs_in_its_configurations_modes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = agentrio.parse_config(tomllib.loads(TOML), path="agentrio.toml")
    model, calls = counting(endless)
    # open_runtime(modes=...) goes over the file's
    async with agentrio.open_runtime(config=config, modes=[Mode("deep", max_iterations=1)]) as rt:
        agent = await rt.spawn_agent(spec(model))
        for name, expected in (("inline", 3), ("deep", 2), ("background", 21)):
            calls.clear()
            result = await agent.run("go", mode=name)
            assert (name, result.stop_reason, len(calls)) == (name, "max_iterations", expected)


async def test_a_found_agentrio_toml_sets_the_modes(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    (tmp_path / "work" / "agentrio.toml").write_text(TOML, encoding="utf-8")
    model, calls = counting(endless)
    async with agentrio.open_runtime() as rt:  # found in the current folder
        agent = await rt.spawn_agent(spec(model))
        result = await agent.run("go", mode="inline")
    assert (result.stop_reason, len(calls)) == ("max_iterations", 3)


@pytest.mark.parametrize(
    ("toml", "match"),
    [
        ("[modes.inline]\nmax_iterations = 0", "modes.inline.max_iterations must be an int >= 1"),
        ("[modes.inline]\ntimeout = 0", r"modes.inline.timeout must be > 0 seconds"),
        ("[modes.inline]\nname = 'x'", r"modes.inline.name is not a known key"),
        ("[modes.inline]\nsteps = 3", r"the keys of modes.inline are lane, max_continuation_turns"),
        ("[modes.inline]\ntimeout = '30'", r'modes.inline.timeout must be a number, got "30"'),
        ("modes = 3", "modes must be a table of"),
        ("[modes]\ninline = 3", "modes.inline must be a table of Mode fields"),
    ],
)
def test_bad_modes_in_agentrio_toml(toml: str, match: str) -> None:
    with pytest.raises(agentrio.ConfigError, match=match) as info:
        agentrio.parse_config(tomllib.loads(toml), path="agentrio.toml")
    assert str(info.value).startswith("agentrio.toml: ")


def test_modes_of_a_config_in_code_are_checked() -> None:
    with pytest.raises(agentrio.ConfigError, match=r"modes\['fast'\] must be an agentrio.Mode"):
        Config(modes={"fast": Mode("slow")})


class LaneModel:
    """A model whose ``complete`` takes ``lane``: it records each call's lane."""

    context_window = 10_000

    def __init__(self) -> None:
        self.lanes: list[str | None] = []

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[agentrio.types.ToolSchema],
        *,
        max_output_tokens: int,
        lane: str | None = None,
    ) -> agentrio.ModelReply:
        await trio.lowlevel.checkpoint()
        self.lanes.append(lane)
        return agentrio.ModelReply(text="ok", usage=agentrio.Usage(1, 1))


async def test_a_mode_runs_its_phase_in_its_lane_unless_run_names_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = LaneModel()
    async with agentrio.open_runtime(config=Config()) as rt:
        agent = await rt.spawn_agent(AgentSpec("a", model=model))
        await agent.run("spec's lane")
        await agent.run("inline", mode="inline")
        await agent.run("background", mode="background")
        await agent.run("own lane wins", mode="inline", lane="execute")
        await agent.run("a mode without one", mode=Mode("quiet", max_iterations=2))
        await agent.run("control", mode=Mode("ctl", lane="control"))
    assert model.lanes == ["query", "interactive", "background", "execute", "query", "interactive"]
