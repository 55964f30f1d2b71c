"""Prompt caching that pays: Anthropic's rolling cache breakpoints and their TTL,
OpenAI's prompt_cache_key and retention, the usage fields that report the cache
(in the SDKs' names), the 1-hour write price, and the cache hit ratio; shown end to
end against the fake server, whose Anthropic wire caches what the breakpoints mark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    ConfigError,
    InvalidArgument,
    ModelReply,
    ModelSettings,
    Provider,
    ProviderConfig,
    ToolCallRequest,
    Usage,
    load_config,
)
from agentrio.agents.budgets.usage import UsageTotals, usage_problem
from agentrio.demo import DemoReport
from agentrio.events import TurnEnded
from agentrio.providers.anthropic import MAX_CACHE_MARKS, AnthropicWire
from agentrio.providers.base import Prices, model_pricing
from agentrio.providers.openai import OpenAIWire
from agentrio.testing import FakeRequest, open_fake_llm
from agentrio.tracing import view
from agentrio.tracing.reader import TraceRecord
from agentrio.types import ThinkingBlock, ToolSchema

WIRE = AnthropicWire()
LOOKUP = ToolSchema("lookup", "Look a key up.", {"type": "object", "properties": {}})
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
LONG = "the whole report, word after word " * 200  # ~1,700 tokens: worth caching


def conversation(turns: int) -> list[ChatMessage]:
    """A system prompt, a question, then *turns* rounds of a tool call and its result."""
    messages = [ChatMessage("system", "be brief"), ChatMessage("user", "what is a?")]
    for i in range(turns):
        call = ToolCallRequest("lookup", {"key": f"k{i}"}, id=f"c{i}")
        messages += [
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", f"k{i} is {i}", tool_call_id=f"c{i}", name="lookup"),
        ]
    return messages


def marked(body: dict[str, Any]) -> list[str]:
    """Where *body* has cache_control markers: ``tools[i]``, ``system``, ``messages[i][j]``."""
    where = [f"tools[{i}]" for i, t in enumerate(body.get("tools", ())) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list) and any("cache_control" in b for b in system):
        where.append("system")
    for i, turn in enumerate(body["messages"]):
        where += [
            f"messages[{i}][{j}]" for j, b in enumerate(turn["content"]) if "cache_control" in b
        ]
    return where


# -- Anthropic: where the breakpoints go ----------------------------------------------------


def test_breakpoints_by_default_on_tools_system_and_the_two_latest_user_turns() -> None:
    body = WIRE.body("claude", conversation(3), [LOOKUP], 64, False)
    # The turns: user, (assistant, user) x 3: the last user turn ends the call,
    # the one before it ended the previous call.
    assert marked(body) == ["tools[0]", "system", "messages[4][0]", "messages[6][0]"]
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]
    assert body["messages"][6]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "c2",
        "content": "k2 is 2",
        "cache_control": EPHEMERAL,
    }


@pytest.mark.parametrize("turns", [0, 1, 2, 5, 40])
@pytest.mark.parametrize("tools", [[], [LOOKUP]])
def test_never_more_than_four_breakpoints(turns: int, tools: list[ToolSchema]) -> None:
    body = WIRE.body("claude", conversation(turns), tools, 64, False)
    where = marked(body)
    assert len(where) <= MAX_CACHE_MARKS == 4
    last = len(body["messages"]) - 1
    assert f"messages[{last}][0]" in where  # the rolling breakpoint: always the last turn's end
    if turns:
        assert f"messages[{last - 2}][0]" in where  # and where the previous call put it


def test_the_first_call_has_one_rolling_breakpoint() -> None:
    body = WIRE.body("claude", [ChatMessage("user", "hi")], [], 64, False)
    assert marked(body) == ["messages[0][0]"]
    assert "system" not in body and "tools" not in body


def test_a_turn_ending_in_thinking_is_marked_on_its_last_other_block() -> None:
    # (A paused assistant turn goes last; the API refuses cache_control on thinking.)
    thought = ThinkingBlock("hmm", "sig")
    messages = [
        ChatMessage("user", "go"),
        ChatMessage("assistant", "Searching.", thinking=(thought,)),
    ]
    body = WIRE.body("claude", messages, [], 64, False)
    assert marked(body) == ["messages[0][0]", "messages[1][1]"]
    assert "cache_control" not in body["messages"][1]["content"][0]


def test_the_one_hour_ttl() -> None:
    body = WIRE.body("claude", conversation(1), [LOOKUP], 64, False, ModelSettings(cache="1h"))
    assert len(marked(body)) == 4
    assert body["tools"][0]["cache_control"] == HOUR
    assert body["system"][0]["cache_control"] == HOUR
    assert body["messages"][-1]["content"][-1]["cache_control"] == HOUR


def test_cache_off_sends_no_marker() -> None:
    settings = ModelSettings(cache="off", cache_control=EPHEMERAL)
    body = WIRE.body("claude", conversation(2), [LOOKUP], 64, False, settings)
    assert marked(body) == [] and body["system"] == "be brief"


def test_cache_control_is_the_marker_put_at_each_breakpoint() -> None:
    mark = {"type": "ephemeral", "ttl": "5m"}
    settings = ModelSettings(cache="1h", cache_control=mark)
    body = WIRE.body("claude", conversation(1), [LOOKUP], 64, False, settings)
    assert body["tools"][0]["cache_control"] == mark
    assert body["messages"][-1]["content"][-1]["cache_control"] == mark


def test_bad_cache_settings_are_named() -> None:
    with pytest.raises(InvalidArgument, match=r'ModelSettings\.cache must be "5m", "1h" or "off"'):
        ModelSettings(cache="10m")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="prompt_cache_key must be a non-empty str"):
        ModelSettings(prompt_cache_key="")
    with pytest.raises(InvalidArgument, match="prompt_cache_retention must be"):
        ModelSettings(prompt_cache_retention="1d")  # type: ignore[arg-type]


def test_each_wire_refuses_the_other_apis_cache_settings() -> None:
    with pytest.raises(InvalidArgument, match="prompt_cache_key is not a setting of the anthropic"):
        WIRE.check_settings(ModelSettings(prompt_cache_key="agent-a"))
    with pytest.raises(
        InvalidArgument, match=r"ModelSettings\.cache is not a setting of the openai"
    ):
        OpenAIWire().check_settings(ModelSettings(cache="1h"))
    with pytest.raises(ConfigError, match=r"ModelSettings\.cache is not a setting of the ollama"):
        ProviderConfig("o", "ollama", "http://127.0.0.1:1", settings=ModelSettings(cache="off"))


# -- OpenAI: prompt_cache_key and prompt_cache_retention ------------------------------------


def test_openai_prompt_cache_key_and_retention() -> None:
    wire = OpenAIWire()
    settings = ModelSettings(prompt_cache_key="researcher", prompt_cache_retention="24h")
    body = wire.body("gpt-5-mini", conversation(1), [LOOKUP], 64, False, settings)
    assert body["prompt_cache_key"] == "researcher"
    assert body["prompt_cache_retention"] == "24h"
    plain = wire.body("gpt-5-mini", conversation(1), [LOOKUP], 64, False)
    assert "prompt_cache_key" not in plain and "prompt_cache_retention" not in plain


async def test_openai_prompt_cache_key_from_the_spec_reaches_the_wire() -> None:
    async with open_fake_llm([ModelReply(text="ok", usage=Usage(5, 1))]) as server:
        config = ProviderConfig("o", "openai", server.base_url + "/v1")
        async with Provider(config) as p, agentrio.open_runtime() as rt:
            settings = ModelSettings(prompt_cache_key="researcher")
            agent = await rt.spawn_agent(AgentSpec("a", p.model("m"), settings=settings))
            await agent.run("hi")
    assert server.requests[0].body["prompt_cache_key"] == "researcher"


# -- the usage fields, in the SDKs' names ---------------------------------------------------


def test_anthropic_usage_with_writes_by_ttl_and_thinking_tokens() -> None:
    data = {
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 500,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 300},
            "output_tokens": 90,
            "output_tokens_details": {"thinking_tokens": 60},
        },
    }
    usage = WIRE.parse(data, "an", None).usage
    assert usage == Usage(
        2510,
        90,
        cached_input_tokens=2000,
        cache_write_tokens=500,
        reasoning_tokens=60,
        cache_write_1h_tokens=300,
    )


def test_anthropic_usage_with_only_the_breakdown_and_counts_out_of_range() -> None:
    data = {
        "content": [],
        "usage": {
            "input_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 99},
            "output_tokens": 3,
            "output_tokens_details": {"thinking_tokens": 50},
        },
    }
    usage = WIRE.parse(data, "an", None).usage
    # The writes are the breakdown's sum; no detail exceeds the total it is part of.
    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (
        104,
        103,
        99,
    )
    assert usage.reasoning_tokens == 3 and usage_problem(usage) == ""


def test_anthropic_streamed_usage_keeps_the_breakdown_and_the_thinking() -> None:
    parser = WIRE.stream_parser("an", None, None)
    start = {
        "input_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 40,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 40},
        "output_tokens": 1,
    }
    delta = {
        "output_tokens": 30,
        "output_tokens_details": {"thinking_tokens": 20},
        "input_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 40,
    }
    for event in (
        {"type": "message_start", "message": {"usage": start}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta},
        {"type": "message_stop"},
    ):
        parser.feed("data: " + json.dumps(event))
    usage = parser.finish().usage
    assert usage == Usage(
        145,
        30,
        cached_input_tokens=100,
        cache_write_tokens=40,
        reasoning_tokens=20,
        cache_write_1h_tokens=40,
    )


def openai_usage(**usage: object) -> dict[str, object]:
    return {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": usage,
    }


def test_openai_usage_cached_and_cache_write_tokens() -> None:
    details = {"cached_tokens": 1024, "cache_write_tokens": 300, "audio_tokens": 0}
    data = openai_usage(prompt_tokens=1500, completion_tokens=20, prompt_tokens_details=details)
    usage = OpenAIWire().parse(data, "o", None).usage
    assert usage == Usage(1500, 20, cached_input_tokens=1024, cache_write_tokens=300)


def test_deepseek_cache_hits_count_as_cached_input() -> None:
    data = openai_usage(
        prompt_tokens=900,
        completion_tokens=9,
        prompt_cache_hit_tokens=640,
        prompt_cache_miss_tokens=260,
    )
    assert OpenAIWire().parse(data, "o", None).usage.cached_input_tokens == 640


# -- the 1-hour price -----------------------------------------------------------------------


def test_one_hour_writes_are_priced_apart() -> None:
    # Anthropic's multipliers on a $3 input price: reads 0.1x, 5-minute writes
    # 1.25x, 1-hour writes 2x.
    prices = Prices(3e-6, 15e-6, 0.3e-6, 3.75e-6, 6e-6)
    usage = Usage(
        1000, 10, cached_input_tokens=500, cache_write_tokens=300, cache_write_1h_tokens=100
    )
    expected = 200 * 3e-6 + 500 * 0.3e-6 + 200 * 3.75e-6 + 100 * 6e-6 + 10 * 15e-6
    assert prices.cost(usage) == pytest.approx(expected)
    assert prices.reserve(1000, 10) == pytest.approx(1000 * 6e-6 + 10 * 15e-6)


def test_the_one_hour_price_in_a_providers_config() -> None:
    config = ProviderConfig(
        "claude",
        "anthropic",
        "https://api.anthropic.com",
        usd_per_million_input_tokens=3.0,
        usd_per_million_output_tokens=15.0,
        usd_per_million_cached_input_tokens=0.30,
        usd_per_million_cache_write_tokens=3.75,
        usd_per_million_cache_write_1h_tokens=6.0,
    )
    model = Provider(config).model("claude-sonnet-4-5")
    assert model.pricing == pytest.approx((3e-6, 15e-6, 0.3e-6, 3.75e-6, 6e-6))
    prices = model_pricing(model)
    assert prices is not None and prices.cache_write_1h == pytest.approx(6e-6)
    with pytest.raises(ConfigError, match="usd_per_million_cache_write_1h_tokens must be >= 0"):
        ProviderConfig(
            "c", "anthropic", "https://a.example", usd_per_million_cache_write_1h_tokens=-1
        )


def test_a_one_hour_count_beyond_the_writes_is_refused() -> None:
    usage = Usage(100, 1, cache_write_tokens=10, cache_write_1h_tokens=11)
    assert "cache_write_1h_tokens=11 is more than cache_write_tokens=10" in usage_problem(usage)


# -- the cache hit ratio --------------------------------------------------------------------


def test_the_cache_hit_ratio_of_usage_totals() -> None:
    assert UsageTotals().cache_hit_ratio == 0.0
    assert UsageTotals(input_tokens=400, cached_input_tokens=300).cache_hit_ratio == 0.75


def test_the_demo_report_shows_the_prompt_cache() -> None:
    usage = UsageTotals(input_tokens=1000, cached_input_tokens=250, cache_write_tokens=500)
    table = DemoReport(1, {"done": 1}, usage, 1.0).table()
    assert "  prompt cache  read=250 written=500 hit ratio=25.0%" in table
    assert "prompt cache" not in DemoReport(1, {"done": 1}, UsageTotals(), 1.0).table()


def test_the_trace_summary_shows_the_cache_hit_ratio() -> None:
    records = [
        TraceRecord(1.0, TurnEnded(path="a", iteration=1, usage=Usage(1000, 10))),
        TraceRecord(2.0, TurnEnded(path="a", iteration=2, usage=Usage(1000, 10, 0.0, 900))),
    ]
    lines = view.render(view.build(records))
    assert "tokens: 2020 (2000 in, 20 out), cost $0.0000, cache hit ratio 45.0%" in lines
    plain = view.render(view.build(records[:1]))
    assert not any("cache hit ratio" in line for line in plain)


# -- end to end: an agent's turns read what the previous turn wrote --------------------------


def three_turns(request: FakeRequest) -> ModelReply:
    """Two lookups, then the answer (usage small: the fake's cache sizes the prompt)."""
    done = sum(1 for m in request.messages if m.role == "tool")
    if done < 2:
        return ModelReply(
            tool_calls=(ToolCallRequest("lookup", {"key": f"k{done}"}),), usage=Usage(9, 3)
        )
    return ModelReply(text="k0 and k1", usage=Usage(9, 3))


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"{key} is known"


async def test_the_second_and_third_turns_read_from_the_cache(tmp_path: Path) -> None:
    turns: list[Usage] = []
    async with open_fake_llm(three_turns) as server:
        config = ProviderConfig("an", "anthropic", server.base_url, max_retries=0)
        async with Provider(config) as p, agentrio.open_runtime() as rt:
            spec = AgentSpec(
                "a", p.model("claude"), instructions="be brief", tools=[lookup], workspace=tmp_path
            )
            agent = await rt.spawn_agent(spec)
            async with agent.stream(LONG) as stream:
                turns += [item.usage async for item in stream if isinstance(item, TurnEnded)]
            totals = agent.usage()
    first, second, third = turns
    # Turn 1 writes the prompt (tools, system, the long question); turn 2 reads
    # all of it and writes its own end; turn 3 reads all of turn 2's prompt.
    assert first.cached_input_tokens == 0 and first.cache_write_tokens == first.input_tokens
    assert second.cached_input_tokens == first.input_tokens
    assert second.cache_write_tokens == second.input_tokens - first.input_tokens > 0
    assert third.cached_input_tokens == second.input_tokens
    assert totals.cache_hit_ratio == pytest.approx(
        (first.input_tokens + second.input_tokens) / totals.input_tokens
    )
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary["cache_hit_ratio"] == pytest.approx(totals.cache_hit_ratio)
    # On the wire: at most four markers, the rolling pair on the latest user turns.
    bodies = [r.body for r in server.requests]
    assert all(len(marked(b)) <= 4 for b in bodies)
    assert marked(bodies[2]) == ["tools[0]", "system", "messages[2][0]", "messages[4][0]"]
    assert len(bodies[2]["messages"]) == 5


async def test_the_previous_breakpoint_reads_past_a_long_turn() -> None:
    # 25 parallel calls add 50 blocks: more than the 20 the API looks back from
    # the last breakpoint; the one on the previous call's end still finds it.
    calls = tuple(ToolCallRequest("lookup", {"key": f"k{i}"}, id=f"c{i}") for i in range(25))
    results = [ChatMessage("tool", f"k{i} is known", tool_call_id=f"c{i}") for i in range(25)]
    first = [ChatMessage("user", LONG)]
    second = [*first, ChatMessage("assistant", "", tool_calls=calls), *results]
    replies = [ModelReply(text="x", usage=Usage(9, 3)), ModelReply(text="y", usage=Usage(9, 3))]
    async with open_fake_llm(replies) as server:
        config = ProviderConfig("an", "anthropic", server.base_url, max_retries=0)
        async with Provider(config) as p:
            one = await p.complete("claude", first, [LOOKUP], max_output_tokens=16)
            two = await p.complete("claude", second, [LOOKUP], max_output_tokens=16)
    assert one.usage.cache_write_tokens == one.usage.input_tokens
    assert two.usage.cached_input_tokens == one.usage.input_tokens


async def test_one_hour_breakpoints_are_written_to_the_one_hour_cache() -> None:
    replies = [ModelReply(text="x", usage=Usage(9, 3))]
    async with open_fake_llm(replies) as server:
        config = ProviderConfig(
            "an", "anthropic", server.base_url, settings=ModelSettings(cache="1h"), stream=True
        )
        async with Provider(config) as p:
            reply = await p.complete(
                "claude", [ChatMessage("user", LONG)], [], max_output_tokens=16
            )
    usage = reply.usage
    assert usage.cache_write_tokens == usage.cache_write_1h_tokens == usage.input_tokens > 1024


async def test_the_fake_refuses_more_than_four_markers_as_the_api_does() -> None:
    block = {"type": "text", "text": "x", "cache_control": EPHEMERAL}
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [block] * 5}]}
    async with open_fake_llm([]) as server, httpx.AsyncClient() as client:
        response = await client.post(server.base_url + "/v1/messages", json=body)
    assert response.status_code == 400
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in response.text


async def test_a_short_prompt_is_not_cached() -> None:
    replies = [ModelReply(text="x", usage=Usage(9, 3))] * 2
    async with (
        open_fake_llm(replies) as server,
        Provider(ProviderConfig("an", "anthropic", server.base_url)) as p,
    ):
        for _ in range(2):
            reply = await p.complete("claude", [ChatMessage("user", "hi")], [], max_output_tokens=8)
            assert reply.usage == Usage(9, 3)


def test_the_cache_settings_and_the_one_hour_price_in_agentrio_toml(tmp_path: Path) -> None:
    path = tmp_path / "agentrio.toml"
    path.write_text(
        """
[providers.claude]
kind = "anthropic"
base_url = "https://api.anthropic.com"
usd_per_million_input_tokens = 3.0
usd_per_million_cache_write_1h_tokens = 6.0
settings = {cache = "1h"}

[providers.gpt]
kind = "openai"
base_url = "https://api.openai.com/v1"
settings = {prompt_cache_key = "researcher", prompt_cache_retention = "24h"}
"""
    )
    providers = load_config(path).providers
    claude, gpt = providers["claude"], providers["gpt"]
    assert claude.settings == ModelSettings(cache="1h")
    assert claude.usd_per_million_cache_write_1h_tokens == 6.0
    assert gpt.settings == ModelSettings(
        prompt_cache_key="researcher", prompt_cache_retention="24h"
    )
    path.write_text(path.read_text().replace('cache = "1h"', 'cache = "2h"'))
    with pytest.raises(ConfigError, match="cache"):
        load_config(path)


@pytest.mark.parametrize(
    ("cache", "later", "read"), [("5m", 299, True), ("5m", 301, False), ("1h", 3599, True)]
)
def test_the_fakes_cache_keeps_a_prefix_for_its_ttl(cache: str, later: float, read: bool) -> None:
    from agentrio.testing._fake_cache import PromptCache

    settings = ModelSettings(cache=cache)  # type: ignore[arg-type]
    body = WIRE.body("claude", [ChatMessage("user", LONG)], [], 8, False, settings)
    prompt_cache, reply = PromptCache(), ModelReply(text="x", usage=Usage(9, 3))
    first = prompt_cache.apply(body, reply, now=0.0).usage
    again = prompt_cache.apply(body, reply, now=later).usage
    assert first.cache_write_tokens == first.input_tokens > 1024
    assert again.cached_input_tokens == (first.input_tokens if read else 0)
