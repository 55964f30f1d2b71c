"""Tier fallback (#26, Helena's router): a tier declared without a model ("") runs on the
nearest configured tier below it in ``escalation``, with a TierFellBack event; escalation
skips it; a configuration in which one cannot fall back is refused when it is made."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

import agentrio
from agentrio import AgentSpec, Config, ModelReply, ProviderConfig, RuleRouter, Usage
from agentrio.config import Models
from agentrio.events import Routed, TierFellBack
from agentrio.testing import FakeLLMServer, FakeRequest, open_fake_llm

Recorder = Callable[[agentrio.Runtime], list[agentrio.events.Event]]


@pytest.fixture(autouse=True)
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


def named(request: FakeRequest) -> ModelReply:
    return ModelReply(text=f"{request.model} answers", usage=Usage(10, 2))


def ladder(server: FakeLLMServer, **tiers: str) -> Config:
    local = ProviderConfig(name="local", kind="ollama", base_url=server.base_url)
    given = {"fast": "local:small", "smart": "local:big", "cloud": ""} | tiers
    return Config(providers={"local": local}, tiers=given, escalation=["fast", "smart", "cloud"])


async def test_an_agent_on_a_tier_without_a_model_runs_on_the_one_below(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    async with open_fake_llm(named) as server:  # real HTTP on 127.0.0.1
        async with agentrio.open_runtime(config=ladder(server)) as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(AgentSpec("a", "cloud"))
            result = await agent.run("hi")
            await trio.testing.wait_all_tasks_blocked()
        assert [r.model for r in server.requests] == ["big"]
    assert result.final_text == "big answers"
    fell = [e for e in events if isinstance(e, TierFellBack)]
    assert fell == [TierFellBack(path="a", tier="cloud", to="smart")]


async def test_the_fallback_skips_tiers_without_a_model_down_the_ladder(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    async with open_fake_llm(named) as server:
        config = ladder(server, smart="")
        async with agentrio.open_runtime(config=config) as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(AgentSpec("a", "local:own"))
            result = await agent.run("hi", model="cloud")
            await agent.run("again")  # back on its own model
            await trio.testing.wait_all_tasks_blocked()
        assert [r.model for r in server.requests] == ["small", "own"]
    assert result.final_text == "small answers"
    assert [e for e in events if isinstance(e, TierFellBack)] == [
        TierFellBack(path="a", tier="cloud", to="fast")
    ]


async def test_respond_routes_to_a_tier_without_a_model(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    router = RuleRouter(simple_tier="cloud", default_tier="cloud", complex_tier="cloud")
    async with open_fake_llm(named) as server:
        async with agentrio.open_runtime(config=ladder(server)) as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(AgentSpec("a", "local:own"))
            response = await agent.respond("Where is order 12?", router=router)
            await trio.testing.wait_all_tasks_blocked()
        assert [r.model for r in server.requests] == ["big"]
    assert (response.route.tier, response.tier) == ("cloud", "smart")
    said = [e for e in events if isinstance(e, (Routed, TierFellBack))]
    assert [type(e) for e in said] == [Routed, TierFellBack]
    assert said[1] == TierFellBack(path="a", tier="cloud", to="smart")


async def test_no_event_and_no_fallback_for_a_configured_tier(
    autojump_clock: trio.testing.MockClock, record_events: Recorder
) -> None:
    async with open_fake_llm(named) as server:
        async with agentrio.open_runtime(config=ladder(server, cloud="local:huge")) as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(AgentSpec("a", "cloud"))
            await agent.run("hi")
            await trio.testing.wait_all_tasks_blocked()
        assert [r.model for r in server.requests] == ["huge"]
    assert not [e for e in events if isinstance(e, TierFellBack)]


def test_escalation_skips_a_tier_without_a_model() -> None:
    local = ProviderConfig(name="local", kind="ollama", base_url="http://127.0.0.1:1")
    config = Config(
        providers={"local": local},
        tiers={"fast": "local:small", "smart": "", "best": "local:best"},
        escalation=["fast", "smart", "best"],
    )
    models = Models(config)
    stronger = models.next_tier("fast")
    assert stronger is not None and stronger.name == "best"  # type: ignore[attr-defined]
    assert models.resolve("smart").name == "small"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("toml", "match"),
    [
        (  # nothing below it
            'escalation = ["cloud", "fast"]\n[tiers]\nfast = "ollama:m"\ncloud = ""',
            r'tiers\.cloud is "" \(no model\) and no tier below it',
        ),
        (  # not on the ladder
            '[tiers]\nfast = "ollama:m"\ncloud = ""',
            r'tiers\.cloud is "" \(no model\) but escalation does not list it',
        ),
    ],
)
def test_a_tier_that_cannot_fall_back_is_refused_when_the_file_is_read(
    toml: str, match: str
) -> None:
    with pytest.raises(agentrio.ConfigError, match=match) as info:
        agentrio.parse_config(tomllib.loads(toml), path="agentrio.toml")
    assert str(info.value).startswith("agentrio.toml: ")


def test_a_router_may_name_a_tier_without_a_model() -> None:
    toml = (
        'escalation = ["fast", "cloud"]\n[tiers]\nfast = "ollama:m"\ncloud = ""\n'
        '[router]\ncomplex_tier = "cloud"'
    )
    config = agentrio.parse_config(tomllib.loads(toml), path="agentrio.toml")
    assert config.router.complex_tier == "cloud" and config.tiers["cloud"] == ""
