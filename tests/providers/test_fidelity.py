"""What real APIs send and expect, end to end: a Provider and an agent on top of it.

Each server here answers with bodies in the exact shapes the API references
document (OpenAI's chat completions, Anthropic's messages, Ollama's /api/chat),
through ``httpx.MockTransport`` (which records the requests as sent) or the fake
server over 127.0.0.1: finish and stop reasons reach the ``PhaseResult``, usage of
every kind reaches the budget and its price, thinking goes back with the tool
results, failed results carry ``is_error``, and settings reach the request body
and headers from the provider's config, the spec and the run.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing

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
)
from agentrio.providers.provider import Kind
from agentrio.testing import open_fake_llm
from agentrio.types import ThinkingBlock

BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}
HI = [ChatMessage("user", "hi")]


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    if key == "missing":
        raise KeyError(key)
    return f"{key} is 1"


class Recorder:
    """An httpx MockTransport handler: answers with *bodies* in turn, keeps each request."""

    def __init__(self, *bodies: dict[str, Any] | str) -> None:
        self.bodies = list(bodies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = self.bodies[len(self.requests) - 1]
        if isinstance(body, str):  # a stream
            return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=body)

    def sent(self, i: int = -1) -> dict[str, Any]:
        value = json.loads(self.requests[i].content)
        assert isinstance(value, dict)
        return value


def mocked(kind: Kind, recorder: Recorder, **options: Any) -> Provider:
    client = httpx.AsyncClient(transport=httpx.MockTransport(recorder))
    config = ProviderConfig(
        name="p", kind=kind, base_url="https://api.example.test" + BASE[kind], **options
    )
    return Provider(config, client=client)


def openai_completion(message: dict[str, Any], finish_reason: str, **usage: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "o3-mini",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 128,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
            **usage,
        },
    }


def anthropic_message(*content: dict[str, Any], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 50,
            "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 3000,
            "output_tokens": 200,
        },
    }


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


# -- the answer's end reaches the PhaseResult ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "stop_reason", "final_text"),
    [
        (
            openai_completion(
                {"role": "assistant", "content": "The answer is", "refusal": None}, "length"
            ),
            "max_output_tokens",
            "The answer is",
        ),
        (
            openai_completion(
                {"role": "assistant", "content": "Here", "refusal": None}, "content_filter"
            ),
            "content_filter",
            "Here",
        ),
        (
            openai_completion(
                {"role": "assistant", "content": None, "refusal": "I can't help with that."},
                "stop",
            ),
            "refusal",
            "I can't help with that.",
        ),
    ],
)
async def test_openai_cut_answers_and_refusals_are_not_done(
    autojump_clock: trio.testing.MockClock,
    body: dict[str, Any],
    stop_reason: str,
    final_text: str,
) -> None:
    async with mocked("openai", Recorder(body)) as p, agentrio.open_runtime() as rt:
        limits = agentrio.Limits(max_continuation_turns=2)
        agent = await rt.spawn_agent(AgentSpec("a", p.model("o3-mini"), limits=limits))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == (stop_reason, final_text)


@pytest.mark.parametrize(
    ("stop", "stop_reason"), [("max_tokens", "max_output_tokens"), ("refusal", "refusal")]
)
async def test_anthropic_cut_answers_and_refusals_are_not_done(
    autojump_clock: trio.testing.MockClock, stop: str, stop_reason: str
) -> None:
    body = anthropic_message({"type": "text", "text": "Well"}, stop_reason=stop)
    async with mocked("anthropic", Recorder(body)) as p, agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", p.model("claude")))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == (stop_reason, "Well")


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_final_answer_cut_at_the_output_limit_over_http(
    autojump_clock: trio.testing.MockClock, kind: Kind, stream: bool
) -> None:
    cut = ModelReply(text="In short, the", usage=Usage(20, 16), finish_reason="length")
    async with open_fake_llm([cut]) as server:
        config = ProviderConfig(
            name="p", kind=kind, base_url=server.base_url + BASE[kind], stream=stream
        )
        async with Provider(config) as p, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(AgentSpec("a", p.model("m")))
            result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("max_output_tokens", "In short, the")


async def test_anthropic_pause_turn_is_continued(autojump_clock: trio.testing.MockClock) -> None:
    paused = anthropic_message({"type": "text", "text": "Searching."}, stop_reason="pause_turn")
    done = anthropic_message({"type": "text", "text": "Found it."}, stop_reason="end_turn")
    recorder = Recorder(paused, done)
    async with mocked("anthropic", recorder) as p, agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", p.model("claude")))
        result = await agent.run("go")
    assert (result.stop_reason, result.final_text) == ("done", "Found it.")
    # The paused turn went back as it was, last, for the server to go on from
    # (with the rolling cache breakpoint on its end).
    assert recorder.sent(1)["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Searching.", "cache_control": {"type": "ephemeral"}}],
    }


# -- usage of every kind, counted and priced -------------------------------------------------


PRICES = {
    "usd_per_million_input_tokens": 3.0,
    "usd_per_million_output_tokens": 15.0,
    "usd_per_million_cached_input_tokens": 0.3,
    "usd_per_million_cache_write_tokens": 3.75,
}


async def test_anthropic_cache_tokens_are_counted_and_priced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = anthropic_message({"type": "text", "text": "ok"}, stop_reason="end_turn")
    async with mocked("anthropic", Recorder(body), **PRICES) as p, agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", p.model("claude")))
        await agent.run("go")
        totals = rt.usage()
    # input_tokens (50) left the cache out: the whole input is 4,050.
    assert (totals.input_tokens, totals.output_tokens) == (4050, 200)
    assert (totals.cached_input_tokens, totals.cache_write_tokens) == (3000, 1000)
    assert agent.usage().cache_write_tokens == 1000
    expected = (50 * 3.0 + 3000 * 0.3 + 1000 * 3.75 + 200 * 15.0) / 1e6
    assert totals.cost_usd == pytest.approx(expected)


async def test_openai_cached_and_reasoning_tokens_are_counted_and_priced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = openai_completion({"role": "assistant", "content": "ok", "refusal": None}, "stop")
    async with mocked("openai", Recorder(body), **PRICES) as p, agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(AgentSpec("a", p.model("o3-mini")))
        await agent.run("go")
        totals = rt.usage()
    assert (totals.input_tokens, totals.cached_input_tokens) == (2006, 1920)
    assert (totals.output_tokens, totals.reasoning_tokens) == (300, 128)
    # Reasoning tokens are output tokens, priced as such.
    assert totals.cost_usd == pytest.approx((86 * 3.0 + 1920 * 0.3 + 300 * 15.0) / 1e6)


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_details_through_the_fake_server(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    used = Usage(500, 60, cached_input_tokens=300, cache_write_tokens=100)
    async with open_fake_llm([ModelReply(text="ok", usage=used)]) as server:
        config = ProviderConfig(
            name="p", kind="anthropic", base_url=server.base_url + "/v1", stream=stream
        )
        async with Provider(config) as p, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(AgentSpec("a", p.model("m")))
            await agent.run("go")
            totals = rt.usage()
    assert (totals.input_tokens, totals.cached_input_tokens, totals.cache_write_tokens) == (
        500,
        300,
        100,
    )


def test_cache_prices_make_a_four_price_pricing() -> None:
    plain = ProviderConfig(
        name="p",
        kind="openai",
        base_url="http://h",
        usd_per_million_input_tokens=2.0,
        usd_per_million_output_tokens=8.0,
    )
    cached = ProviderConfig(
        name="p",
        kind="openai",
        base_url="http://h",
        usd_per_million_input_tokens=2.0,
        usd_per_million_output_tokens=8.0,
        usd_per_million_cached_input_tokens=0.5,
    )
    assert Provider(plain).model("m").pricing == (2e-6, 8e-6)
    # An unset cache price is the input price.
    assert Provider(cached).model("m").pricing == (2e-6, 8e-6, 5e-7, 2e-6)
    with pytest.raises(ConfigError, match="usd_per_million_cache_write_tokens must be >= 0"):
        ProviderConfig(
            name="p", kind="openai", base_url="http://h", usd_per_million_cache_write_tokens=-1
        )


# -- thinking and failed tool results go back ------------------------------------------------


SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


async def test_thinking_goes_back_with_the_tool_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    thinking = {"type": "thinking", "thinking": "I should look a up.", "signature": SIGNATURE}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    calls = [
        {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"key": "a"}},
        {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {"key": "missing"}},
    ]
    first = anthropic_message(thinking, redacted, *calls, stop_reason="tool_use")
    second = anthropic_message({"type": "text", "text": "a is 1"}, stop_reason="end_turn")
    recorder = Recorder(first, second)
    settings = ModelSettings(extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    async with mocked("anthropic", recorder) as p, agentrio.open_runtime() as rt:
        spec = AgentSpec("a", p.model("claude"), tools=[lookup], settings=settings)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("what is a?")
        history = [t.message for t in await agent.history()]
    assert result.stop_reason == "done"
    sent = recorder.sent(1)
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assistant, results = sent["messages"][1:3]
    assert assistant == {"role": "assistant", "content": [thinking, redacted, *calls]}
    assert results["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": "a is 1",
    }
    assert results["content"][1]["is_error"] is True
    # The history keeps the thinking too, for the next phase.
    assert history[1].thinking == (
        ThinkingBlock("I should look a up.", SIGNATURE),
        ThinkingBlock(redacted="EmwKAhgBEgy3va3pzix"),
    )


async def test_streamed_thinking_goes_back_too(autojump_clock: trio.testing.MockClock) -> None:
    thought = (ThinkingBlock("hmm", SIGNATURE),)
    replies = [
        ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "b"}),), thinking=thought),
        ModelReply(text="b is 1"),
    ]
    async with open_fake_llm(replies) as server:
        config = ProviderConfig(
            name="p", kind="anthropic", base_url=server.base_url + "/v1", stream=True
        )
        async with Provider(config) as p, agentrio.open_runtime() as rt:
            agent = await rt.spawn_agent(AgentSpec("a", p.model("m"), tools=[lookup]))
            await agent.run("what is b?")
        second = server.requests[1].body
    assert isinstance(second, dict)
    content = second["messages"][1]["content"]  # type: ignore[index]
    assert content[0] == {"type": "thinking", "thinking": "hmm", "signature": SIGNATURE}


# -- settings from the config, the spec and the run --------------------------------------


async def test_settings_reach_the_body_and_headers_from_every_level(
    autojump_clock: trio.testing.MockClock,
) -> None:
    done = openai_completion({"role": "assistant", "content": "ok", "refusal": None}, "stop")
    recorder = Recorder(done, done)
    provider_level = ModelSettings(
        temperature=0.1, extra_headers={"x-team": "blue"}, extra_body={"user": "u-1"}
    )
    spec_level = ModelSettings(
        seed=5, tool_choice="lookup", extra_headers={"x-trace": "spec"}, extra_body={"store": True}
    )
    async with (
        mocked("openai", recorder, settings=provider_level) as p,
        agentrio.open_runtime() as rt,
    ):
        spec = AgentSpec("a", p.model("gpt"), tools=[lookup], settings=spec_level)
        agent = await rt.spawn_agent(spec)
        await agent.run("one")
        run_level = ModelSettings(temperature=0.9, extra_headers={"x-trace": "run"})
        await agent.run("two", settings=run_level)
    first, second = recorder.sent(0), recorder.sent(1)
    for body in (first, second):
        assert (body["seed"], body["user"], body["store"]) == (5, "u-1", True)
        assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert (first["temperature"], second["temperature"]) == (0.1, 0.9)
    headers = [r.headers for r in recorder.requests]
    assert [h["x-team"] for h in headers] == ["blue", "blue"]
    assert [h["x-trace"] for h in headers] == ["spec", "run"]


async def test_settings_a_wire_cannot_send_are_refused_early(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(ConfigError, match=r"provider 'p': settings: ModelSettings\.seed is not"):
        ProviderConfig(
            name="p", kind="anthropic", base_url="http://h", settings=ModelSettings(seed=1)
        )
    async with mocked("ollama", Recorder()) as p, agentrio.open_runtime() as rt:
        spec = AgentSpec("a", p.model("m"), settings=ModelSettings(parallel_tool_calls=False))
        with pytest.raises(InvalidArgument, match=r"ModelSettings\.parallel_tool_calls is not"):
            await rt.spawn_agent(spec)
        agent = await rt.spawn_agent(AgentSpec("b", p.model("m")))
        with pytest.raises(InvalidArgument, match=r"settings: ModelSettings\.tool_choice is not"):
            await agent.run("go", settings=ModelSettings(tool_choice="auto"))


async def test_a_provider_called_directly_checks_its_settings() -> None:
    async with mocked("anthropic", Recorder()) as p:
        with pytest.raises(InvalidArgument, match=r"ModelSettings\.keep_alive"):
            await p.complete("m", HI, [], max_output_tokens=5, settings=ModelSettings(keep_alive=1))


async def test_the_anthropic_version_is_configurable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = anthropic_message({"type": "text", "text": "ok"}, stop_reason="end_turn")
    default, pinned = Recorder(body), Recorder(body)
    async with mocked("anthropic", default) as p:
        await p.complete("m", HI, [], max_output_tokens=5)
    async with mocked("anthropic", pinned, anthropic_version="2099-01-01") as p:
        await p.complete("m", HI, [], max_output_tokens=5)
    assert default.requests[0].headers["anthropic-version"] == "2023-06-01"
    assert pinned.requests[0].headers["anthropic-version"] == "2099-01-01"
    with pytest.raises(ConfigError, match="anthropic_version must be a non-empty str"):
        ProviderConfig(name="p", kind="anthropic", base_url="http://h", anthropic_version="")


async def test_openai_sends_max_completion_tokens_unless_told_otherwise(
    autojump_clock: trio.testing.MockClock,
) -> None:
    done = openai_completion({"role": "assistant", "content": "ok", "refusal": None}, "stop")
    new, old = Recorder(done), Recorder(done)
    async with mocked("openai", new) as p:
        await p.complete("m", HI, [], max_output_tokens=5)
    async with mocked("openai", old, max_tokens_field="max_tokens") as p:
        await p.complete("m", HI, [], max_output_tokens=5)
    assert new.sent()["max_completion_tokens"] == 5 and "max_tokens" not in new.sent()
    assert old.sent()["max_tokens"] == 5 and "max_completion_tokens" not in old.sent()
    with pytest.raises(ConfigError, match="max_tokens_field must be one of"):
        ProviderConfig(name="p", kind="openai", base_url="http://h", max_tokens_field="max")  # type: ignore[arg-type]


@agentrio.tool
async def other() -> str:
    """Another tool."""
    await trio.lowlevel.checkpoint()
    return "other"


async def test_a_named_tool_choice_the_phase_does_not_offer_ends_it_with_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder()
    settings = ModelSettings(tool_choice="lookup")
    async with mocked("openai", recorder) as p, agentrio.open_runtime() as rt:
        spec = AgentSpec("a", p.model("gpt"), tools=[lookup, other], settings=settings)
        agent = await rt.spawn_agent(spec)
        result = await agent.run("go", tool_names=["other"])
    assert (result.stop_reason, result.error_type) == ("error", "InvalidArgument")
    assert "tool_choice names tool 'lookup'" in result.error and recorder.requests == []
