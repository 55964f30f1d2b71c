"""Provider: retries and backoff, Retry-After, the circuit breaker, the shared 429
pause, the per-instance limits, timeouts, errors as typed ProviderErrors, agents
on top, and the API key kept out of everything.

Every test talks to the fake server over real 127.0.0.1 sockets; time is Trio's
MockClock (``autojump_clock``), so backoff and Retry-After waits are virtual.
The clock only jumps when every task is blocked; on loopback a sent request is
readable at once, so no timeout fires while a socket read is pending (the
default timeouts are minutes long, far beyond any wait here).
"""

from __future__ import annotations

import email.utils
import functools
import json
import logging
import math
import socket
import time
import traceback
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import msgspec
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    ConfigError,
    ModelReply,
    Provider,
    ProviderConfig,
    ProviderError,
    ToolCallRequest,
    Usage,
)
from agentrio.errors import AuthError, BadResponse, ProviderUnavailable, RateLimited
from agentrio.events import PhaseError, TextDelta
from agentrio.providers.provider import DEFAULT_POOL, Kind
from agentrio.providers.tokens import message_text
from agentrio.testing import FakeLLMServer, FakeRequest, Faults, ReplyHandler, open_fake_llm
from agentrio.types import ProviderModel

BASE = {"openai": "/v1", "anthropic": "/v1", "ollama": ""}
KINDS: list[Kind] = ["openai", "anthropic", "ollama"]
HI = [ChatMessage("user", "hi")]
OK = ModelReply(text="fine, thanks", usage=Usage(3, 2))


def ok(request: FakeRequest) -> ModelReply:
    return OK


def config(server: FakeLLMServer, kind: Kind = "openai", **options: Any) -> ProviderConfig:
    settings: dict[str, Any] = {"max_retries": 0, "seed": 1, **options}
    return ProviderConfig(name="p", kind=kind, base_url=server.base_url + BASE[kind], **settings)


@asynccontextmanager
async def serving(
    replies: ReplyHandler = ok,
    *,
    faults: Faults | None = None,
    kind: Kind = "openai",
    **options: Any,
) -> AsyncIterator[tuple[FakeLLMServer, Provider]]:
    async with (
        open_fake_llm(replies, faults=faults or Faults()) as server,
        Provider(config(server, kind, **options)) as provider,
    ):
        yield server, provider


async def ask(provider: Provider, max_output_tokens: int = 16) -> ModelReply:
    return await provider.complete("m", HI, [], max_output_tokens=max_output_tokens)


class Clocked:
    """A reply handler that notes the (virtual) time of every request it answers,
    and fails with a 500 while ``failing`` is set."""

    def __init__(self, *, failing: bool = False) -> None:
        self.times: list[float] = []
        self.failing = failing

    def __call__(self, request: FakeRequest) -> ModelReply:
        self.times.append(trio.current_time())
        if self.failing:
            raise RuntimeError("upstream down")  # the fake server answers 500
        return OK

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"name": ""}, "provider name"),
        ({"name": "a:b"}, "without ':'"),
        ({"kind": "gemini"}, "kind must be one of"),
        ({"base_url": "127.0.0.1:8080"}, "base_url must start with http"),
        ({"timeout": 0}, "timeout must be a number > 0"),
        ({"read_timeout": -1.0}, "read_timeout"),
        ({"connect_timeout": True}, "connect_timeout"),
        ({"backoff_initial": "1"}, "backoff_initial"),
        ({"circuit_failures": 0}, "circuit_failures must be an int > 0"),
        ({"circuit_failures": 2.5}, "circuit_failures must be an int"),
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"requests_per_minute": -5}, "requests_per_minute"),
        ({"tokens_per_minute": 1.5}, "tokens_per_minute"),
        ({"context_window": 0}, "context_window"),
        ({"max_retries": -1}, "max_retries must be an int >= 0"),
        ({"max_retries": False}, "max_retries"),
        ({"usd_per_million_input_tokens": -1}, "usd_per_million_input_tokens must be >= 0"),
        ({"usd_per_million_output_tokens": "3"}, "usd_per_million_output_tokens"),
        ({"usd_per_million_input_tokens": math.nan}, "usd_per_million_input_tokens must be >= 0"),
        ({"usd_per_million_output_tokens": math.inf}, "usd_per_million_output_tokens .* finite"),
        ({"usd_per_million_output_tokens": -0.5}, "usd_per_million_output_tokens"),
        ({"base_url": "http://[::1"}, "base_url is not a valid URL"),
        ({"base_url": "https://"}, "base_url has no host"),
        ({"base_url": 5}, "base_url must start with http"),
        ({"api_key_env": "sk-proj-abc"}, "api_key_env must name an environment variable"),
        ({"api_key_env": 5}, "api_key_env must name an environment variable"),
        ({"max_response_bytes": 0}, "max_response_bytes must be an int > 0"),
        ({"max_line_bytes": 1.5}, "max_line_bytes must be an int"),
        ({"max_reply_chars": -1}, "max_reply_chars must be an int > 0"),
        ({"max_retry_wait": 0}, "max_retry_wait must be a number > 0"),
        ({"max_retry_wait": math.nan}, "max_retry_wait"),
        ({"lane_concurrency": {"soon": 1}}, "lane_concurrency key must be one of"),
        ({"lane_concurrency": {"background": 0}}, r"lane_concurrency.background must be an int"),
        ({"lane_concurrency": {"query": 1.5}}, r"lane_concurrency.query must be an int"),
        ({"lane_concurrency": ["background"]}, "lane_concurrency must be a table"),
    ],
)
def test_config_errors_name_the_field(options: dict[str, object], match: str) -> None:
    settings: dict[str, object] = {"name": "p", "kind": "openai", "base_url": "http://h"}
    with pytest.raises(ConfigError, match=match):
        ProviderConfig(**{**settings, **options})  # type: ignore[arg-type]


def test_config_defaults() -> None:
    c = ProviderConfig(name="p", kind="ollama", base_url="http://h")
    assert (c.max_retries, c.circuit_failures, c.max_concurrent, c.stream) == (3, 5, None, False)
    assert c.api_key_env is None and c.tool_calls_in_text is None
    assert (c.max_response_bytes, c.max_line_bytes, c.max_reply_chars) == (
        64 << 20,
        1 << 20,
        1 << 20,
    )
    assert c.max_retry_wait == 60.0
    assert c.lane_concurrency is None


async def test_provider_needs_a_config_and_its_key() -> None:
    with pytest.raises(ConfigError, match="ProviderConfig"):
        Provider({"name": "p"})  # type: ignore[arg-type]
    c = ProviderConfig(
        name="p", kind="openai", base_url="http://h", api_key_env="AGENTRIO_SURELY_UNSET_KEY"
    )
    with pytest.raises(ConfigError, match="AGENTRIO_SURELY_UNSET_KEY"):
        Provider(c)


async def test_model_objects() -> None:
    c = ProviderConfig(name="p", kind="ollama", base_url="http://h", context_window=4096)
    async with Provider(c) as provider:
        model = provider.model("qwen2.5:0.5b")
        assert isinstance(model, ProviderModel) and isinstance(model, agentrio.Model)
        assert (model.provider, model.name, model.context_window) == (
            provider,
            "qwen2.5:0.5b",
            4096,
        )
        assert provider.model("m", context_window=8).context_window == 8
        assert repr(model) == "<ProviderModel p:qwen2.5:0.5b>"
        assert repr(provider) == "<Provider 'p' ollama http://h>"
        assert provider.name == "p"
        with pytest.raises(ConfigError, match="model name"):
            provider.model("")


async def test_priced_models_put_a_cost_on_usage(autojump_clock: trio.testing.MockClock) -> None:
    reply = ModelReply(text="priced", usage=Usage(1000, 500))
    prices = {"usd_per_million_input_tokens": 2.0, "usd_per_million_output_tokens": 10.0}
    async with serving(lambda _: reply, **prices) as (_, priced), serving() as (_, free):
        assert priced.model("m").pricing == (2e-6, 1e-5)
        assert free.model("m").pricing is None
        async with agentrio.open_runtime() as rt:
            await (await rt.spawn_agent(AgentSpec("a", priced.model("m")))).run("hi")
            assert rt.usage().cost_usd == pytest.approx(1000 * 2e-6 + 500 * 1e-5)


async def test_an_injected_client_is_used_and_left_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sent: list[str] = []

    async def note(request: httpx.Request) -> None:
        sent.append(request.url.path)

    async with (
        open_fake_llm(ok) as server,
        httpx.AsyncClient(event_hooks={"request": [note]}, trust_env=False) as client,
    ):
        async with Provider(config(server), client=client) as provider:
            assert await ask(provider) == OK
        assert not client.is_closed
    assert sent == ["/v1/chat/completions"]


# -- each fault kind ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        ("rate_limit", RateLimited, 429),
        ("server_error", ProviderUnavailable, 500),
        ("garbage", BadResponse, None),
        ("reset", ProviderUnavailable, None),
    ],
)
async def test_each_failure_is_a_typed_error(
    autojump_clock: trio.testing.MockClock,
    kind: Kind,
    stream: bool,
    fault: str,
    error: type[ProviderError],
    status: int | None,
) -> None:
    faults = Faults(**{fault: 1.0})  # type: ignore[arg-type]
    async with serving(faults=faults, kind=kind, stream=stream) as (server, p):
        with pytest.raises(error) as info:
            await ask(p)
        assert server.statistics().faults[fault] == 1  # no retries were asked for
    assert type(info.value) is error
    assert info.value.provider == "p" and info.value.status == status
    assert "'p'" in str(info.value)
    if fault == "rate_limit":
        assert isinstance(info.value, RateLimited) and info.value.retry_after == 1.0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_truncated_stream_is_a_bad_response(
    autojump_clock: trio.testing.MockClock, kind: Kind
) -> None:
    async with serving(faults=Faults(truncate=1.0), kind=kind, stream=True) as (server, p):
        with pytest.raises(BadResponse, match="cut short") as info:
            await ask(p)
        assert server.statistics().faults["truncate"] == 1
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


async def test_truncate_does_not_touch_a_whole_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with serving(faults=Faults(truncate=1.0), stream=False) as (_, p):
        assert await ask(p) == OK


@pytest.mark.parametrize("kind", KINDS)
async def test_malformed_tool_json_is_repaired(
    autojump_clock: trio.testing.MockClock, kind: Kind
) -> None:
    reply = ModelReply(tool_calls=(ToolCallRequest("f", {"a": [1, "x"]}, id="c"),))
    async with serving(lambda _: reply, faults=Faults(malformed_tool_json=1.0), kind=kind) as (
        server,
        p,
    ):
        (call,) = (await ask(p)).tool_calls
        assert server.statistics().faults["malformed_tool_json"] == 1
    assert (call.arguments, call.error) == ({"a": [1, "x"]}, "")


async def test_delay_is_waited_out(autojump_clock: trio.testing.MockClock) -> None:
    faults = Faults(delay=1.0, delay_seconds=42)
    async with serving(faults=faults, timeout=60) as (_, p):
        assert await ask(p) == OK
    assert trio.current_time() == 42


async def test_an_attempt_past_its_timeout_is_abandoned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with serving(faults=Faults(delay=1.0, delay_seconds=100), timeout=5) as (_, p):
        with pytest.raises(ProviderUnavailable, match="no answer within 5"):
            await ask(p)
        assert trio.current_time() == 5
        assert p.statistics().in_flight == 0


async def test_the_read_timeout_counts_between_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with serving(faults=Faults(delay=1.0, delay_seconds=100), read_timeout=3) as (_, p):
        with pytest.raises(ProviderUnavailable, match="ReadTimeout") as info:
            await ask(p)
        assert trio.current_time() == 3
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)


async def test_nobody_listening(autojump_clock: trio.testing.MockClock) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    c = ProviderConfig(
        name="p", kind="openai", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2
    )
    async with Provider(c) as p:
        with pytest.raises(ProviderUnavailable, match="ConnectError") as info:
            await ask(p)
        stats = p.statistics()
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert (stats.requests, stats.retries, stats.failures) == (3, 2, 3)


async def test_401_is_an_auth_error_and_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_llm(ok, api_key="right") as server:
        async with Provider(config(server, max_retries=5), api_key="wrong") as p:
            with pytest.raises(AuthError, match="HTTP 401") as info:
                await ask(p)
        assert server.statistics().rejected == {401: 1}
    assert info.value.status == 401


async def test_an_auth_error_says_what_the_server_said_without_the_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        body = {"error": {"message": f"Incorrect API key provided: {key}"}}
        return httpx.Response(401, json=body)

    c = ProviderConfig(name="p", kind="openai", base_url="http://127.0.0.1:9/v1")
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client,
        Provider(c, client=client, api_key="sk-proj-WRONG-0123456789") as p,
    ):
        with pytest.raises(AuthError) as info:
            await ask(p)
    assert "(HTTP 401); check the API key; the server said: " in str(info.value)
    assert "Incorrect API key provided: [redacted]" in str(info.value)
    assert "WRONG" not in str(info.value)


async def test_an_extra_header_key_echoed_by_the_server_is_redacted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A settings' extra header may be a key of its own ("api-key"): a server that
    # echoes it in an error body must not put it in the error.
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=f"bad api-key {request.headers['api-key']}")

    settings = agentrio.ModelSettings(extra_headers={"api-key": "azure-SECRET-0123"})
    c = ProviderConfig(name="p", kind="openai", base_url="http://127.0.0.1:9/v1", settings=settings)
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client,
        Provider(c, client=client, api_key="sk-main-key") as p,
    ):
        with pytest.raises(agentrio.ProviderError) as info:
            await ask(p)
    assert "bad api-key [redacted]" in str(info.value)
    assert "azure-SECRET" not in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_key_is_sent_as_each_api_wants_it(
    autojump_clock: trio.testing.MockClock, kind: Kind
) -> None:
    async with (
        open_fake_llm(ok, api_key="k-1") as server,
        Provider(config(server, kind), api_key="k-1") as p,
    ):
        assert await ask(p) == OK


async def test_other_4xx_are_provider_errors_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_llm(ok) as server:
        c = ProviderConfig(name="p", kind="openai", base_url=server.base_url, max_retries=5)
        async with Provider(c) as p:  # no /v1: 404
            with pytest.raises(ProviderError, match="HTTP 404") as info:
                await ask(p)
        assert server.statistics().rejected == {404: 1}
    assert type(info.value) is ProviderError and info.value.status == 404


# -- retries and backoff ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_faults_are_retried_until_an_answer(
    autojump_clock: trio.testing.MockClock, kind: Kind, stream: bool
) -> None:
    faults = Faults(
        seed=11,
        rate_limit=0.15,
        retry_after=0,
        server_error=0.15,
        garbage=0.1,
        reset=0.1,
        truncate=0.2,
        delay=0.1,
        delay_seconds=2,
    )
    options: dict[str, Any] = {"max_retries": 30, "backoff_initial": 0.01, "circuit_failures": 1000}
    async with serving(faults=faults, kind=kind, stream=stream, **options) as (server, p):
        for _ in range(20):
            assert await ask(p) == OK
        injected = server.statistics().faults
        stats = p.statistics()
    failed = sum(
        injected[k] for k in ("reset", "rate_limit", "server_error", "garbage", "truncate")
    )
    assert failed > 5
    assert stats.retries == stats.failures == failed
    assert stats.requests == 20 + failed
    assert stats.rate_limited == injected["rate_limit"]
    assert (stats.breaker, stats.in_flight) == ("closed", 0)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
async def test_backoff_doubles_with_jitter(
    autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    handler = Clocked(failing=True)
    options: dict[str, Any] = {
        "max_retries": 5,
        "backoff_initial": 1.0,
        "backoff_max": 6.0,
        "seed": seed,
    }
    async with serving(handler, circuit_failures=100, **options) as (_, p):
        with pytest.raises(ProviderUnavailable, match="HTTP 500") as info:
            await ask(p)
    assert info.value.status == 500
    caps = [1.0, 2.0, 4.0, 6.0, 6.0]  # doubling, up to backoff_max
    gaps = handler.gaps()
    assert len(gaps) == len(caps)
    for gap, cap in zip(gaps, caps, strict=True):
        assert cap / 2 <= gap <= cap  # jittered down by up to half
    assert gaps != [c * 0.75 for c in caps]  # not one fixed factor


async def test_jitter_differs_between_seeds(autojump_clock: trio.testing.MockClock) -> None:
    seen = set()
    for seed in range(4):
        handler = Clocked(failing=True)
        async with serving(handler, max_retries=3, backoff_initial=1.0, seed=seed) as (_, p):
            with pytest.raises(ProviderUnavailable):
                await ask(p)
        seen.add(tuple(round(g, 6) for g in handler.gaps()))
    assert len(seen) == 4


async def test_retry_after_wins_over_backoff(autojump_clock: trio.testing.MockClock) -> None:
    sent: list[float] = []

    async def note(request: httpx.Request) -> None:
        sent.append(trio.current_time())

    faults = Faults(rate_limit=1.0, retry_after=7)
    async with open_fake_llm(ok, faults=faults) as server:
        c = config(server, max_retries=3, backoff_initial=0.01)
        async with (
            httpx.AsyncClient(event_hooks={"request": [note]}, trust_env=False) as client,
            Provider(c, client=client) as p,
        ):
            with pytest.raises(RateLimited) as info:
                await ask(p)
            # Pauses even after the last attempt: other agents must not hammer the key.
            assert p.statistics().paused_for == 7
    assert sent == [0, 7, 14, 21]
    assert info.value.retry_after == 7 and p.statistics().rate_limited == 4


# -- the circuit breaker ---------------------------------------------------------------


async def test_the_breaker_opens_fails_fast_half_opens_and_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Clocked(failing=True)
    async with serving(handler, circuit_failures=3, circuit_cooldown=30) as (server, p):
        for _ in range(3):
            with pytest.raises(ProviderUnavailable, match="HTTP 500"):
                await ask(p)
        assert p.statistics().breaker == "open"
        # Open: no request goes out, the error says why, and no time passes.
        sent = server.statistics().http_requests
        with pytest.raises(ProviderUnavailable, match="circuit breaker is open") as info:
            await ask(p)
        assert info.value.status is None and info.value.provider == "p"
        assert server.statistics().http_requests == sent and trio.current_time() == 0
        # ... naming the failure that opened it, not only that it is open.
        assert "after 3 failures in a row; the last: provider 'p' failed (HTTP 500)" in str(
            info.value
        )

        await trio.sleep(30)
        assert p.statistics().breaker == "half_open"
        with pytest.raises(ProviderUnavailable, match="HTTP 500"):
            await ask(p)  # the trial fails: open again at once
        assert p.statistics().breaker == "open"
        with pytest.raises(ProviderUnavailable, match="circuit breaker"):
            await ask(p)

        await trio.sleep(30)
        handler.failing = False
        assert await ask(p) == OK  # the trial succeeds: closed
        assert p.statistics().breaker == "closed"
        assert [await ask(p) for _ in range(3)] == [OK] * 3


async def test_half_open_allows_a_single_trial(autojump_clock: trio.testing.MockClock) -> None:
    release = trio.Event()
    failing = [True]

    async def handler(request: FakeRequest) -> ModelReply:
        if failing[0]:
            raise RuntimeError("down")
        await release.wait()
        return OK

    async with serving(handler, circuit_failures=1, circuit_cooldown=10) as (_, p):
        with pytest.raises(ProviderUnavailable):
            await ask(p)
        await trio.sleep(10)
        failing[0] = False
        results: list[ModelReply] = []
        async with trio.open_nursery() as nursery:

            async def trial() -> None:
                results.append(await ask(p))

            nursery.start_soon(trial)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(ProviderUnavailable, match="circuit breaker"):
                await ask(p)  # the trial holds the only slot
            release.set()
        assert results == [OK] and p.statistics().breaker == "closed"


async def test_a_cancelled_trial_frees_the_slot(autojump_clock: trio.testing.MockClock) -> None:
    calls = [0]

    async def handler(request: FakeRequest) -> ModelReply:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("down")
        await trio.sleep(1000)
        return OK

    async with serving(handler, circuit_failures=1, circuit_cooldown=10, timeout=5000) as (_, p):
        with pytest.raises(ProviderUnavailable):
            await ask(p)
        await trio.sleep(10)
        with trio.move_on_after(1):
            await ask(p)  # the trial, cancelled: neither a success nor a failure
        stats = p.statistics()
        assert (stats.in_flight, stats.breaker) == (0, "half_open")
        with trio.move_on_after(1):
            await ask(p)  # so another trial may go
    assert calls[0] == 3


async def test_retries_stop_when_the_breaker_opens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Clocked(failing=True)
    async with serving(handler, max_retries=10, circuit_failures=3, backoff_initial=0.1) as (_, p):
        with pytest.raises(ProviderUnavailable, match="circuit breaker is open"):
            await ask(p)
    assert len(handler.times) == 3


async def test_rate_limits_do_not_open_the_breaker(autojump_clock: trio.testing.MockClock) -> None:
    faults = Faults(rate_limit=1.0, retry_after=0)
    async with serving(faults=faults, max_retries=6, circuit_failures=2) as (server, p):
        with pytest.raises(RateLimited):
            await ask(p)
        assert server.statistics().faults["rate_limit"] == 7
        assert p.statistics().breaker == "closed"


# -- the shared 429 pause ----------------------------------------------------------------

# Faults(seed=4, rate_limit=0.5): the first request is answered 429 and the next
# three are not (the test checks it, in case the fake server's draws change).
PAUSE_SEED = 4


async def test_a_429_pauses_every_agent_of_the_instance(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Clocked()
    faults = Faults(seed=PAUSE_SEED, rate_limit=0.5, retry_after=5)
    async with serving(handler, faults=faults, max_retries=3) as (server, p):
        async with agentrio.open_runtime() as rt:
            spec = AgentSpec(name="a", model=p.model("m"))
            first = await rt.spawn_agent(spec, name="first")
            second = await rt.spawn_agent(spec, name="second")
            results = {}

            async def run(agent: agentrio.AgentRef, after: float) -> None:
                await trio.sleep(after)
                results[agent.name] = await agent.run("hi")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, first, 0)
                nursery.start_soon(run, second, 1)
                await trio.sleep(1)
                await trio.testing.wait_all_tasks_blocked()
                stats = p.statistics()
                assert stats.rate_limited == 1 and stats.paused_for == 4
                assert stats.in_flight == 0  # the second agent waits before sending
        assert server.statistics().faults["rate_limit"] == 1
    # Both went out when the pause ended; the second had never been limited itself.
    assert handler.times == [5, 5]
    assert {k: r.stop_reason for k, r in results.items()} == {"first": "done", "second": "done"}


async def test_a_429_without_retry_after_pauses_for_the_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # retry_after=0 in Faults: the header says 0, so there is no pause at all.
    faults = Faults(seed=PAUSE_SEED, rate_limit=0.5, retry_after=0)
    handler = Clocked()
    async with serving(handler, faults=faults, max_retries=1) as (_, p):
        assert await ask(p) == OK
    assert handler.times == [0]


# -- the ceiling on waits: max_retry_wait ---------------------------------------------------


def test_max_retry_wait_defaults_to_a_minute() -> None:
    assert ProviderConfig(name="p", kind="openai", base_url="http://h").max_retry_wait == 60


@pytest.mark.parametrize(("retry_after", "options"), [(86400, {}), (7, {"max_retry_wait": 5})])
async def test_a_retry_after_beyond_the_ceiling_fails_at_once(
    autojump_clock: trio.testing.MockClock, retry_after: int, options: dict[str, Any]
) -> None:
    faults = Faults(rate_limit=1.0, retry_after=retry_after)
    async with serving(faults=faults, max_retries=3, **options) as (server, p):
        with pytest.raises(RateLimited, match="max_retry_wait") as info:
            await ask(p)
        assert trio.current_time() == 0 and server.statistics().faults["rate_limit"] == 1
        stats = p.statistics()
        # The others hold off too, but never beyond the ceiling.
        assert stats.paused_for == p.config.max_retry_wait
    assert info.value.retry_after == retry_after and info.value.status == 429
    assert (stats.requests, stats.retries, stats.failures, stats.rate_limited) == (1, 0, 1, 1)
    assert stats.breaker == "closed"


async def test_the_pause_never_outlasts_the_ceiling(autojump_clock: trio.testing.MockClock) -> None:
    handler = Clocked()
    faults = Faults(seed=PAUSE_SEED, rate_limit=0.5, retry_after=86400)
    async with serving(handler, faults=faults) as (_, p):
        with pytest.raises(RateLimited):
            await ask(p)
        assert await ask(p) == OK  # another call waits out the pause: a minute, not a day
    assert handler.times == [60]


def _answering(*responses: httpx.Response, **options: Any) -> tuple[Provider, list[float]]:
    """A provider whose requests get *responses* in turn (then OK), noting when each went."""
    sent: list[float] = []
    ok = httpx.Response(
        200, json={"choices": [{"message": {"content": "fine, thanks"}}], "usage": {}}
    )

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(trio.current_time())
        return responses[len(sent) - 1] if len(sent) <= len(responses) else ok

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    c = ProviderConfig(name="p", kind="openai", base_url="http://127.0.0.1:9/v1", **options)
    return Provider(c, client=client), sent


async def test_a_5xx_retry_after_beyond_the_ceiling_fails_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    down = httpx.Response(503, headers={"retry-after": "3600"}, text="maintenance")
    p, sent = _answering(down, max_retries=3, circuit_failures=1)
    with pytest.raises(ProviderUnavailable, match="max_retry_wait") as info:
        await ask(p)
    assert sent == [0] and info.value.status == 503 and "maintenance" in str(info.value)
    stats = p.statistics()
    assert (stats.failures, stats.retries, stats.breaker) == (1, 0, "open")
    # Within the ceiling it is waited for, as before.
    p, sent = _answering(httpx.Response(503, headers={"retry-after": "60"}), max_retries=1)
    assert (await ask(p)).text == "fine, thanks" and sent == [0, 60]


async def test_an_http_date_beyond_the_ceiling_fails_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tomorrow = email.utils.formatdate(time.time() + 86400, usegmt=True)
    p, sent = _answering(httpx.Response(429, headers={"retry-after": tomorrow}), max_retries=3)
    with pytest.raises(RateLimited) as info:
        await ask(p)
    assert sent == [0] and info.value.retry_after is not None and info.value.retry_after > 86000


async def test_the_backoff_never_exceeds_the_ceiling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Clocked(failing=True)
    options: dict[str, Any] = {"backoff_initial": 10.0, "backoff_max": 100.0, "max_retry_wait": 3}
    async with serving(handler, max_retries=4, circuit_failures=100, **options) as (_, p):
        with pytest.raises(ProviderUnavailable):
            await ask(p)
    assert all(1.5 <= gap <= 3 for gap in handler.gaps()) and len(handler.gaps()) == 4


# -- every wait counts against the phase's deadline ---------------------------------------------


async def test_a_phase_does_not_wait_for_a_retry_after_beyond_the_ceiling(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    faults = Faults(rate_limit=1.0, retry_after=86400)
    async with serving(faults=faults, max_retries=3) as (_, p), agentrio.open_runtime() as rt:
        events = record_events(rt)
        spec = AgentSpec("a", p.model("m"), limits=agentrio.Limits(timeout=3600))
        result = await (await rt.spawn_agent(spec)).run("hi")
        assert trio.current_time() == 0
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "error"
    (error,) = [e for e in events if isinstance(e, PhaseError)]
    assert error.error_type == "RateLimited" and "max_retry_wait" in error.error


@pytest.mark.parametrize("wait", ["pause", "backoff", "budget"])
async def test_every_wait_counts_against_the_phase_deadline(
    autojump_clock: trio.testing.MockClock, wait: str
) -> None:
    async def holding(request: FakeRequest) -> ModelReply:
        if request.messages[-1].content == "hold":
            await trio.sleep(1000)
        return OK

    settings: dict[str, Any] = {
        "pause": {"faults": Faults(rate_limit=1.0, retry_after=50), "max_retries": 3},
        "backoff": {"faults": Faults(server_error=1.0), "max_retries": 3, "backoff_initial": 40},
        "budget": {"timeout": 5000},
    }[wait]
    budget = agentrio.Budget(max_total_tokens=100)
    async with (
        serving(holding, **settings) as (_, p),
        agentrio.open_runtime(budget=budget) as rt,
    ):
        limits = agentrio.Limits(max_output_tokens=70)
        spec = AgentSpec("a", p.model("m"), token_estimator=len, limits=limits)
        if wait == "budget":  # a call in flight holds the room this one needs
            holder = await rt.spawn_agent(spec, name="holder")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(holder.run, "hold")
                await trio.testing.wait_all_tasks_blocked()
                assert p.statistics().in_flight == 1
                result = await _timed_phase(rt, spec)
                nursery.cancel_scope.cancel()
        else:
            result = await _timed_phase(rt, spec)
    assert result.stop_reason == "timeout"


async def _timed_phase(rt: agentrio.Runtime, spec: AgentSpec) -> agentrio.PhaseResult:
    timed = attrs.evolve(spec, limits=attrs.evolve(spec.limits, timeout=30))
    agent = await rt.spawn_agent(timed, name="timed")
    t0 = trio.current_time()
    result = await agent.run("go")
    assert trio.current_time() - t0 == 30
    return result


# -- limits shared by every agent ------------------------------------------------------


async def _concurrently(provider: Provider, n: int, max_output_tokens: int = 16) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(ask, provider, max_output_tokens)


async def test_requests_per_minute(autojump_clock: trio.testing.MockClock) -> None:
    handler = Clocked()
    async with serving(handler, requests_per_minute=2) as (_, p):
        await _concurrently(p, 5)
    assert sorted(handler.times) == [0, 0, 60, 60, 120]


async def test_tokens_per_minute(autojump_clock: trio.testing.MockClock) -> None:
    # Each call is estimated at max_output_tokens (+ a quarter of the prompt's
    # characters: 0 for "hi") and really uses as much: two fit in 100 a minute.
    handler = Clocked()

    def reply(request: FakeRequest) -> ModelReply:
        handler(request)
        return ModelReply(text="x", usage=Usage(10, 30))

    async with serving(reply, tokens_per_minute=100) as (_, p):
        await _concurrently(p, 5, max_output_tokens=40)
    assert sorted(handler.times) == [0, 0, 60, 60, 120]


async def test_tokens_per_minute_settles_what_was_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Clocked()

    def reply(request: FakeRequest) -> ModelReply:
        handler(request)
        return ModelReply(text="x", usage=Usage(5, 5))  # 10 used of the 40 estimated

    async with serving(reply, tokens_per_minute=100) as (_, p):
        for _ in range(8):
            await ask(p, max_output_tokens=39)
    # After k calls the window holds 10k; one more needs room for its 40 (39 of
    # output, 1 for "hi"): k <= 6.
    assert handler.times == [0] * 7 + [60]


@pytest.mark.parametrize(
    ("prompt", "times"), [("语" * 60, [0, 60, 120]), ("a" * 60, [0, 0, 0])], ids=["cjk", "ascii"]
)
async def test_tokens_per_minute_estimates_as_the_agent_does(
    autojump_clock: trio.testing.MockClock, prompt: str, times: list[int]
) -> None:
    # A call in flight holds its estimate: each non-ASCII character is a token,
    # as agentrio.estimate_tokens counts it (1 + 61 for 60 CJK characters; they
    # were 15, characters / 4, and three calls went at once).
    async def slow(request: FakeRequest) -> ModelReply:
        handler(request)
        await trio.sleep(1)
        return OK  # 5 tokens settled

    handler = Clocked()
    messages = [ChatMessage("user", prompt)]
    async with serving(slow, tokens_per_minute=100) as (_, p), trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(
                functools.partial(p.complete, "m", messages, [], max_output_tokens=1)
            )
    assert handler.times == times


@pytest.mark.parametrize(("limit", "peak"), [(3, 3), (None, DEFAULT_POOL)])
async def test_max_concurrent(
    autojump_clock: trio.testing.MockClock, limit: int | None, peak: int
) -> None:
    active = [0, 0]  # now, most

    async def handler(request: FakeRequest) -> ModelReply:
        active[0] += 1
        active[1] = max(active)
        await trio.sleep(1)
        active[0] -= 1
        return OK

    async with serving(handler, max_concurrent=limit) as (_, p), trio.open_nursery() as nursery:
        nursery.start_soon(_concurrently, p, peak * 2 + 1)
        await trio.sleep(0.5)
        assert p.statistics().in_flight == peak
    assert active[1] == peak
    assert trio.current_time() == 3  # three rounds of one second


# -- lanes: who goes first while a limit is full -------------------------------------------


class Served:
    """A reply handler that notes the user's text (a name) and the time of every request,
    taking *seconds* (virtual) to answer each."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds
        self.names: list[str] = []
        self.times: list[float] = []

    async def __call__(self, request: FakeRequest) -> ModelReply:
        self.names.append(request.messages[-1].content)
        self.times.append(trio.current_time())
        await trio.sleep(self.seconds)
        return OK


async def _ask_in_order(p: Provider, askers: list[tuple[str, str | None]]) -> None:
    """Ask (name, lane) in this order, each once the one before waits."""

    async def one(name: str, lane: str | None) -> None:
        await p.complete("m", [ChatMessage("user", name)], [], max_output_tokens=8, lane=lane)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        for name, lane in askers:
            nursery.start_soon(one, name, lane)
            await trio.testing.wait_all_tasks_blocked()


async def test_a_full_provider_serves_the_interactive_lane_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Served()
    async with serving(handler, max_concurrent=1) as (_, p):
        askers = [
            ("first", None),
            ("bg1", "background"),
            ("bg2", "background"),
            ("exec", "execute"),
            ("query", "query"),
            ("default", None),  # no lane: the query lane
            ("bg3", "background"),
            ("urgent", "interactive"),
            ("control", "control"),  # another name for the interactive lane
        ]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask_in_order, p, askers)
            await trio.sleep(0.5)
            assert p.statistics().waiting == 8 and p.statistics().in_flight == 1
    assert handler.names == [
        "first", "urgent", "control", "query", "default", "exec", "bg1", "bg2", "bg3"
    ]  # fmt: skip
    assert handler.times == list(range(9))


async def test_lane_concurrency_keeps_room_for_the_lanes_above(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Served(seconds=10)
    async with serving(handler, max_concurrent=3, lane_concurrency={"background": 2}) as (_, p):
        askers = [(f"bg{i}", "background") for i in range(4)] + [("urgent", "interactive")]
        await _ask_in_order(p, askers)
    # Two background requests at once, never three: the third slot waits for the interactive one.
    assert handler.names[:3] == ["bg0", "bg1", "urgent"]
    assert handler.times == [0, 0, 0, 10, 10]


async def test_a_rate_limited_provider_serves_the_interactive_lane_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    handler = Served(seconds=0)
    async with serving(handler, requests_per_minute=1) as (_, p):
        askers = [("first", None), ("bg", "background"), ("q", "query"), ("urgent", "interactive")]
        await _ask_in_order(p, askers)
    assert handler.names == ["first", "urgent", "q", "bg"]
    assert handler.times == [0, 60, 120, 180]


async def test_an_unknown_lane_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    async with serving() as (_, p):
        with pytest.raises(agentrio.InvalidArgument, match="lane must be one of"):
            await p.complete("m", HI, [], max_output_tokens=8, lane="soon")  # type: ignore[arg-type]
        assert p.statistics().requests == 0


async def test_an_interactive_phase_waits_less_than_background_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Five background agents fill a provider that answers one request a second; an
    # interactive phase started after them is served as soon as the one in flight ends.
    handler = Served()
    ended: dict[str, float] = {}

    async def run(agent: agentrio.AgentRef, lane: str | None = None) -> None:
        result = await agent.run(agent.name, lane=lane)  # type: ignore[arg-type]
        assert result.stop_reason == "done"
        ended[agent.name] = trio.current_time()

    async with serving(handler, max_concurrent=1) as (_, p), agentrio.open_runtime() as rt:
        background = AgentSpec("bg", p.model("m"), lane="background")
        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(run, await rt.spawn_agent(background, name=f"bg{i}"))
                await trio.testing.wait_all_tasks_blocked()
            chat = await rt.spawn_agent(AgentSpec("chat", p.model("m")))
            nursery.start_soon(run, chat, "interactive")
    assert handler.names == ["bg0", "chat", "bg1", "bg2", "bg3", "bg4"]
    assert ended["chat"] == 2  # one second of waiting, one of answering
    assert sorted(ended.values()) == [1, 2, 3, 4, 5, 6]


# -- every attempt is billed (the meter) ------------------------------------------------


class Meter:
    """An AttemptMeter that notes what it is told, and allows *retries* retries."""

    def __init__(self, retries: int = 100) -> None:
        self.failed_attempts: list[tuple[int | None, int | None, str]] = []
        self.asked = 0
        self.retries = retries

    def failed(self, input_tokens: int | None, output_tokens: int | None, received: str) -> None:
        self.failed_attempts.append((input_tokens, output_tokens, received))

    async def retry(self) -> bool:
        self.asked += 1
        return self.asked <= self.retries


LONG = "a fairly long answer, streamed in pieces"  # 40 characters: pieces of 14, 14, 12


@pytest.mark.parametrize(
    ("kind", "reported"),
    [
        ("openai", (None, None, LONG[:28])),  # usage comes last: none before the cut
        ("anthropic", (4, None, LONG[:14])),  # the input is in message_start
        ("ollama", (None, None, LONG[:28])),  # usage comes with "done": true
    ],
)
async def test_a_cut_stream_reports_what_it_had_received(
    autojump_clock: trio.testing.MockClock,
    kind: Kind,
    reported: tuple[int | None, int | None, str],
) -> None:
    reply = ModelReply(text=LONG, usage=Usage(4, 9))
    meter = Meter()
    async with serving(
        lambda _: reply, faults=Faults(truncate=1.0), kind=kind, stream=True, max_retries=1
    ) as (_, p):
        with pytest.raises(BadResponse, match="cut short"):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
    assert meter.failed_attempts == [reported, reported]
    assert meter.asked == 1  # before the one retry; not after the last attempt


@pytest.mark.parametrize("fault", ["rate_limit", "server_error", "garbage"])
async def test_an_attempt_that_generated_nothing_reports_zero(
    autojump_clock: trio.testing.MockClock, fault: str
) -> None:
    faults = Faults(retry_after=0, **{fault: 1.0})  # type: ignore[arg-type]
    meter = Meter()
    async with serving(faults=faults, max_retries=2, backoff_initial=0.01) as (server, p):
        with pytest.raises(ProviderError):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
        assert server.statistics().faults[fault] == 3
    assert meter.failed_attempts == [(0, 0, "")] * 3
    assert meter.asked == 2


CUT = (None, 0, "")  # the agent's estimate of the input, no output


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("faults", "options"),
    [
        (Faults(reset=1.0), {}),
        (Faults(delay=1.0, delay_seconds=100), {"timeout": 5}),
        (Faults(delay=1.0, delay_seconds=100), {"read_timeout": 3}),
    ],
    ids=["reset", "timeout", "read_timeout"],
)
async def test_an_attempt_cut_short_once_sent_reports_its_input(
    autojump_clock: trio.testing.MockClock,
    faults: Faults,
    options: dict[str, Any],
    stream: bool,
) -> None:
    # The server had the request: it was billed for its input, most likely for
    # output too (it was charged 0 tokens, so a flaky server ran up a bill the
    # budget never saw).
    meter = Meter()
    async with serving(faults=faults, max_retries=1, stream=stream, **options) as (server, p):
        with pytest.raises(ProviderUnavailable):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
        assert server.statistics().by_api["openai"] == 2
    assert meter.failed_attempts == [CUT, CUT]


async def test_a_connection_that_could_not_be_made_reports_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    meter = Meter()
    url = f"http://127.0.0.1:{port}/v1"
    c = ProviderConfig(name="p", kind="openai", base_url=url, max_retries=1)
    async with Provider(c) as p:
        with pytest.raises(ProviderUnavailable, match="ConnectError"):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
    assert meter.failed_attempts == [(0, 0, "")] * 2


@asynccontextmanager
async def answering_only(head: bytes, *, hang_up: bool) -> AsyncIterator[str]:
    """A raw HTTP/1.1 server on 127.0.0.1 that reads a request and sends only the
    status line and headers *head*: then it hangs up, or sends nothing more. Yields
    its base URL."""

    async def handle(conn: trio.SocketStream) -> None:
        async with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await conn.receive_some()
            await conn.send_all(head + b"\r\n")
            if not hang_up:
                await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        yield f"http://127.0.0.1:{listener.socket.getsockname()[1]}/v1"
        nursery.cancel_scope.cancel()


OK_STREAM = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
OK_JSON = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n"
FAILED = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 500\r\n"


@pytest.mark.parametrize("hang_up", [False, True], ids=["silent", "hung_up"])
@pytest.mark.parametrize(
    ("head", "stream", "reported"),
    [(OK_STREAM, True, CUT), (OK_JSON, False, CUT), (FAILED, False, (0, 0, ""))],
    ids=["200_stream", "200_json", "500"],
)
async def test_an_answer_cut_before_its_first_byte_reports_its_input_unless_an_error(
    autojump_clock: trio.testing.MockClock,
    head: bytes,
    stream: bool,
    reported: tuple[int | None, int | None, str],
    hang_up: bool,
) -> None:
    # A 200 came, then nothing of the answer (no event of a stream): the model
    # was at work. An error status tells of nothing generated.
    meter = Meter()
    async with answering_only(head, hang_up=hang_up) as url:
        c = ProviderConfig(
            name="p", kind="openai", base_url=url, stream=stream, read_timeout=3, max_retries=0
        )
        async with Provider(c) as p:
            with pytest.raises(ProviderError):
                await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
    assert meter.failed_attempts == [reported]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_call_cancelled_once_sent_reports_its_input(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    meter = Meter()
    faults = Faults(delay=1.0, delay_seconds=100)
    async with serving(faults=faults, stream=stream) as (server, p):
        with trio.move_on_after(10) as scope:
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
        assert scope.cancelled_caught and server.statistics().by_api["openai"] == 1
        assert p.statistics().in_flight == 0
    assert meter.failed_attempts == [CUT]
    assert meter.asked == 0


async def test_a_call_cancelled_mid_stream_reports_what_it_had_received(
    autojump_clock: trio.testing.MockClock,
) -> None:
    words = ["word "] * 50

    async def serve(conn: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await conn.receive_some()
        await conn.send_all(OK_STREAM + b"\r\n")
        for word in words:
            line = b"data: " + json.dumps({"choices": [{"delta": {"content": word}}]}).encode()
            chunk = line + b"\n\n"
            await conn.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await trio.sleep_forever()

    meter = Meter()
    received: list[str] = []
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}/v1"
        c = ProviderConfig(name="p", kind="openai", base_url=url, stream=True)
        async with Provider(c) as p:
            with trio.move_on_after(10):
                await p.complete(
                    "m", HI, [], max_output_tokens=1000, meter=meter, on_text=received.append
                )
        nursery.cancel_scope.cancel()
    assert "".join(received) == "".join(words)
    assert meter.failed_attempts == [(None, None, "".join(words))]


async def test_a_call_cancelled_before_it_was_sent_reports_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meter = Meter()
    faults = Faults(delay=1.0, delay_seconds=100)
    async with serving(faults=faults, max_concurrent=1) as (_, p), trio.open_nursery() as nursery:
        nursery.start_soon(ask, p)  # holds the one connection
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(10):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
        nursery.cancel_scope.cancel()
    assert meter.failed_attempts == []


async def test_no_retry_unless_the_meter_allows_it(autojump_clock: trio.testing.MockClock) -> None:
    meter = Meter(retries=1)
    faults = Faults(server_error=1.0)
    async with serving(faults=faults, max_retries=5, backoff_initial=0.01) as (server, p):
        with pytest.raises(ProviderUnavailable):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
        assert server.statistics().faults["server_error"] == 2
        assert p.statistics().retries == 1
    assert meter.asked == 2 and len(meter.failed_attempts) == 2


async def test_an_answer_is_not_reported_to_the_meter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meter = Meter()
    async with serving() as (_, p):
        assert await p.complete("m", HI, [], max_output_tokens=16, meter=meter) == OK
    assert meter.failed_attempts == [] and meter.asked == 0


async def test_a_json_answer_of_the_wrong_shape_is_charged_the_whole_room() -> None:
    def wrong_shape(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"not": "a completion"})

    meter = Meter()
    transport = httpx.MockTransport(wrong_shape)
    cfg = ProviderConfig(name="p", kind="openai", base_url="http://127.0.0.1:9", max_retries=0)
    async with httpx.AsyncClient(transport=transport) as client, Provider(cfg, client=client) as p:
        with pytest.raises(BadResponse, match=r"body\.choices"):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
    assert meter.failed_attempts == [(None, 16, "")]  # it may have said anything


def _billed(request: FakeRequest) -> Usage:
    """What the fake server bills a request answered "ok": its prompt and its
    output as agentrio estimates them. A cut attempt is charged the estimate of
    its prompt and of what it received ("o" or "ok", half the stream: 1 token
    either way), so the budget's total can be compared exactly."""
    prompt = sum(agentrio.estimate_tokens(message_text(m)) for m in request.messages)
    return Usage(prompt, agentrio.estimate_tokens("ok"))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_swarm_with_retries_is_billed_for_every_attempt_within_its_limits(
    autojump_clock: trio.testing.MockClock, kind: Kind
) -> None:
    billed: list[Usage] = []

    def handler(request: FakeRequest) -> ModelReply:
        billed.append(_billed(request))
        return ModelReply(text="ok", usage=billed[-1])

    faults = Faults(
        seed=5,
        truncate=0.35,
        server_error=0.1,
        rate_limit=0.1,
        retry_after=0,
        reset=0.05,
        garbage=0.05,
    )
    options: dict[str, Any] = {
        "stream": True,
        "max_retries": 6,
        "backoff_initial": 0.01,
        "circuit_failures": 10_000,
    }
    budget = agentrio.Budget(max_total_tokens=600, max_requests=70)
    async with (
        serving(handler, faults=faults, kind=kind, **options) as (server, p),
        agentrio.open_runtime(budget=budget) as rt,
    ):
        spec = AgentSpec("a", p.model("m"), limits=agentrio.Limits(max_output_tokens=100))
        agents = [await rt.spawn_agent(spec, name=f"a{i}") for i in range(120)]
        reasons: dict[int, str] = {}

        async def one(i: int) -> None:
            reasons[i] = (await agents[i].run(f"task number {i:03d}")).stop_reason

        async with trio.open_nursery() as nursery:
            for i in range(len(agents)):
                nursery.start_soon(one, i)
        injected = server.statistics().faults
        attempts = p.statistics().requests
    usage = rt.usage()
    assert injected["truncate"] > 10 and sum(injected.values()) > 30
    assert {"done", "budget_exhausted"} <= set(reasons.values())
    # the limits hold, with every attempt charged...
    assert usage.total_tokens <= 600 and usage.requests <= 70
    assert budget.reserved_tokens == 0 and usage.overruns == 0
    # ...and the budget's total is what the server billed, attempt by attempt; a
    # reset (the fake server read the request, then dropped the connection) is
    # charged its prompt: the client cannot tell whether the model had begun
    # (every prompt has the same size here)
    prompt = billed[0].input_tokens
    assert all(u.input_tokens == prompt for u in billed) and injected["reset"] > 0
    assert usage.total_tokens == sum(u.total_tokens for u in billed) + injected["reset"] * prompt
    assert usage.attempts == attempts > usage.requests
    assert usage.attempts == sum(a.usage().attempts for a in agents)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_agent_is_charged_the_input_of_attempts_that_timed_out(
    autojump_clock: trio.testing.MockClock, stream: bool
) -> None:
    # Two attempts time out (the server works on them for 100 s), the third
    # answers: the timed-out ones were charged 0 tokens.
    calls = 0

    async def handler(request: FakeRequest) -> ModelReply:
        nonlocal calls
        calls += 1
        if calls < 3:
            await trio.sleep(100)
        return ModelReply(text="ok", usage=Usage(1000, 500))

    options: dict[str, Any] = {"timeout": 5, "max_retries": 3, "backoff_initial": 0.01}
    async with (
        serving(handler, stream=stream, **options) as (_, p),
        agentrio.open_runtime() as rt,
    ):
        agent = await rt.spawn_agent(AgentSpec("a", p.model("m")))
        prompt = "hi " * 400
        assert (await agent.run(prompt)).stop_reason == "done"
    usage = rt.usage()
    estimate = agentrio.estimate_tokens(prompt)
    assert (usage.input_tokens, usage.output_tokens) == (2 * estimate + 1000, 500)
    assert (usage.requests, usage.attempts) == (1, 3)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retry_past_the_budget_is_not_sent(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    kind: Kind,
) -> None:
    # Each attempt reserves 11 (1 for "hi", 10 of output) and, cut short after
    # "o" or "ok", is charged 2: after the third, 6 + 11 no longer fits in 15.
    reply = ModelReply(text="ok", usage=Usage(1, 1))
    options: dict[str, Any] = {"stream": True, "max_retries": 5, "backoff_initial": 0.01}
    limits = agentrio.Limits(max_output_tokens=10)
    async with (
        serving(lambda _: reply, faults=Faults(truncate=1.0), kind=kind, **options) as (server, p),
        agentrio.open_runtime(budget=agentrio.Budget(max_total_tokens=15)) as rt,
    ):
        events = record_events(rt)
        agent = await rt.spawn_agent(AgentSpec("a", p.model("m"), limits=limits))
        result = await agent.run("hi")
        await trio.testing.wait_all_tasks_blocked()
        sent = server.statistics().by_api[kind]
    assert result.stop_reason == "budget_exhausted"
    assert sent == 3
    usage = rt.usage()
    assert (usage.total_tokens, usage.requests, usage.attempts) == (6, 1, 3)
    assert [e.limit for e in events if isinstance(e, agentrio.events.BudgetExhausted)] == [
        "max_total_tokens"
    ]


# -- agents on providers -----------------------------------------------------------------


async def test_a_failed_model_call_ends_the_phase_with_error(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    async with (
        serving(faults=Faults(server_error=1.0), max_retries=1) as (_, down),
        serving() as (_, up),
        agentrio.open_runtime() as rt,
    ):
        events = record_events(rt)
        bad = await rt.spawn_agent(AgentSpec(name="bad", model=down.model("m")))
        good = await rt.spawn_agent(AgentSpec(name="good", model=up.model("m")))
        first = await bad.run("hi")
        assert (await good.run("hi")).stop_reason == "done"
        again = await bad.run("hi")  # the agent did not crash: it runs again
        await trio.testing.wait_all_tasks_blocked()
        assert rt.statistics().restarts == 0
    assert first.stop_reason == again.stop_reason == "error"
    errors = [e for e in events if isinstance(e, PhaseError)]
    assert [(e.path, e.error_type) for e in errors] == [("bad", "ProviderUnavailable")] * 2
    assert "HTTP 500" in errors[0].error


async def test_auth_errors_reach_the_phase(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    async with (
        open_fake_llm(ok, api_key="right") as server,
        Provider(config(server), api_key="wrong") as p,
        agentrio.open_runtime() as rt,
    ):
        events = record_events(rt)
        result = await (await rt.spawn_agent(AgentSpec("a", p.model("m")))).run("hi")
        await trio.testing.wait_all_tasks_blocked()
    assert result.stop_reason == "error"
    (error,) = [e for e in events if isinstance(e, PhaseError)]
    assert error.error_type == "AuthError"


@pytest.mark.parametrize("kind", KINDS)
async def test_streamed_text_arrives_as_text_deltas(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    kind: Kind,
) -> None:
    text = "a fairly long answer, streamed in pieces"
    reply = ModelReply(text=text, usage=Usage(4, 9))
    async with (
        serving(lambda _: reply, kind=kind, stream=True) as (_, p),
        agentrio.open_runtime() as rt,
    ):
        events = record_events(rt)
        result = await (await rt.spawn_agent(AgentSpec("a", p.model("m")))).run("hi")
        await trio.testing.wait_all_tasks_blocked()
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and {e.path for e in deltas} == {"a"}
    assert "".join(e.text for e in deltas) == result.final_text == text


async def test_no_text_deltas_without_a_stream(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    async with serving(stream=False) as (_, p), agentrio.open_runtime() as rt:
        events = record_events(rt)
        await (await rt.spawn_agent(AgentSpec("a", p.model("m")))).run("hi")
        await trio.testing.wait_all_tasks_blocked()
    assert not [e for e in events if isinstance(e, TextDelta)]


# -- the API key appears nowhere -----------------------------------------------------------

KEY = "sk-agentrio-SECRET-6f1d2c9e"
WRONG_KEY = "sk-agentrio-WRONG-0b8a7e44"


def _texts(exc: BaseException) -> list[str]:
    """str, repr and the formatted traceback of *exc* and of its causes and contexts."""
    out = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out += [str(e), repr(e), repr(getattr(e, "args", ()))]
        if isinstance(e, BaseExceptionGroup):
            stack += list(e.exceptions)
        stack += [e.__cause__, e.__context__]
    return out


@agentrio.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await trio.lowlevel.checkpoint()
    return f"value of {key}"


def _scripted(request: FakeRequest) -> ModelReply:
    # Call the tool until there is a result, then answer.
    if any(m.role == "tool" for m in request.messages):
        return ModelReply(text="the value is known", usage=Usage(20, 5))
    return ModelReply(tool_calls=(ToolCallRequest("lookup", {"key": "k"}),), usage=Usage(10, 5))


async def test_the_api_key_appears_in_no_event_log_repr_or_error(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    monkeypatch.setenv("AGENTRIO_TEST_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "agentrio", "trio"):
        caplog.set_level(logging.DEBUG, logger=name)
    faults = Faults(
        seed=5,
        rate_limit=0.15,
        retry_after=0,
        server_error=0.15,
        garbage=0.1,
        reset=0.05,
        truncate=0.15,
        malformed_tool_json=0.2,
    )
    texts: list[str] = []
    async with open_fake_llm(_scripted, faults=faults, api_key=KEY) as server:
        providers = []
        for kind in KINDS:
            for stream in (False, True):
                c = ProviderConfig(
                    name=f"{kind}{int(stream)}",
                    kind=kind,
                    base_url=server.base_url + BASE[kind],
                    api_key_env="AGENTRIO_TEST_API_KEY",
                    stream=stream,
                    max_retries=1,
                    backoff_initial=0.01,
                )
                providers.append(Provider(c))
        wrong = Provider(config(server), api_key=WRONG_KEY)
        async with agentrio.open_runtime() as rt:
            events = record_events(rt)
            async with trio.open_nursery() as nursery:
                for i, p in enumerate([*providers, wrong] * 3):
                    spec = AgentSpec("a", p.model("m"), tools=[lookup])
                    agent = await rt.spawn_agent(spec, name=f"a{i}")

                    async def run(agent: agentrio.AgentRef = agent) -> None:
                        result = await agent.run("look k up")
                        texts.append(msgspec.json.encode(result).decode())

                    nursery.start_soon(run)
            # Errors raised straight from the providers, with their causes.
            for p in [*providers, wrong]:
                for _ in range(4):
                    try:
                        await p.complete("m", HI, [], max_output_tokens=8)
                    except ProviderError as exc:
                        texts += _texts(exc)
            await trio.testing.wait_all_tasks_blocked()
        for p in [*providers, wrong]:
            texts += [repr(p), repr(p.model("m")), repr(p.config), repr(p.statistics())]
            texts.append(msgspec.json.encode(p.statistics()).decode())
            await p.aclose()
        faulted = server.statistics().faults

    assert sum(faulted.values()) > 10  # the faults did happen...
    assert any(isinstance(e, PhaseError) for e in events)  # ...and some reached the agents
    assert any(r.name == "agentrio.http" for r in caplog.records)
    texts += [msgspec.json.encode(e).decode() for e in events]
    texts += [r.getMessage() for r in caplog.records]
    texts += [repr(r.args) for r in caplog.records]
    texts.append(caplog.text)
    for secret in (KEY, WRONG_KEY):
        leaks = [t for t in texts if secret in t]
        assert not leaks, leaks[:3]


def test_a_key_straddling_the_cut_is_still_redacted() -> None:
    key = "sk-SECRET-0123456789"
    provider = agentrio.Provider(
        agentrio.ProviderConfig(name="p", kind="openai", base_url="http://127.0.0.1:9/v1"),
        api_key=key,
    )
    text = "x" * 295 + key + " tail"
    shown = provider._redact(text)
    assert "sk-S" not in shown and "SECRET" not in shown
    assert len(shown) <= 300


async def test_tokens_per_minute_counts_an_image_as_the_agent_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # An image is estimated at 3,000 tokens: two calls with one fit in 7,000
    # a minute at once, and the third waits for the next minute.
    image = agentrio.ImagePart(data=b"\x89PNG\r\n\x1a\n", media_type="image/png")
    messages = [ChatMessage("user", "hi", parts=(image,))]

    async def slow(request: FakeRequest) -> ModelReply:
        handler(request)
        await trio.sleep(1)
        return OK

    handler = Clocked()
    async with serving(slow, tokens_per_minute=7000) as (_, p), trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(
                functools.partial(p.complete, "m", messages, [], max_output_tokens=1)
            )
    assert handler.times == [0, 0, 60]


# -- logs ------------------------------------------------------------------------------------


def provider_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agentrio.providers"]


async def test_a_retry_is_logged_with_its_wait_and_a_call_given_up_too(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio.providers")
    handler = Clocked(failing=True)
    async with serving(handler, max_retries=2, backoff_initial=1, circuit_failures=10) as (_, p):
        with pytest.raises(ProviderUnavailable):
            await ask(p)
    gaps = handler.gaps()
    assert provider_lines(caplog) == [
        f"provider 'p': attempt 1 failed (HTTP 500); retry 1 of 2 in {gaps[0]:.2f} s",
        f"provider 'p': attempt 2 failed (HTTP 500); retry 2 of 2 in {gaps[1]:.2f} s",
        "provider 'p' gave up after 3 attempts (the last: HTTP 500)",
    ]
    assert {r.levelno for r in caplog.records} == {logging.WARNING}


async def test_a_429_logs_the_shared_pause_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio.providers")
    faults = Faults(rate_limit=1.0, retry_after=7)
    async with serving(faults=faults, max_retries=1) as (_, p), trio.open_nursery() as nursery:
        for _ in range(3):  # three calls 429'd at once: one pause, one line
            nursery.start_soon(_rate_limited, p)
    lines = provider_lines(caplog)
    pauses = [line for line in lines if "pauses" in line]
    assert (
        pauses
        == [
            "provider 'p' is rate limiting (HTTP 429): every request of the instance pauses for "
            "7.00 s"
        ]
        * 2
    )  # the first 429s, then the retries' 429s once the pause is over
    retry = "provider 'p': attempt 1 failed (HTTP 429); retry 1 of 1 after the pause (7.00 s)"
    assert [line for line in lines if "retry" in line] == [retry] * 3
    assert lines.count("provider 'p' gave up after 2 attempts (the last: HTTP 429)") == 3


async def _rate_limited(p: Provider) -> None:
    with pytest.raises(RateLimited):
        await ask(p)


async def test_the_breaker_opening_is_logged_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio.providers")
    handler = Clocked(failing=True)
    async with serving(handler, circuit_failures=2, circuit_cooldown=30) as (_, p):
        for _ in range(4):
            with pytest.raises(ProviderUnavailable):
                await ask(p)
        await trio.sleep(30)  # half-open: the trial fails, and the breaker opens again
        with pytest.raises(ProviderUnavailable):
            await ask(p)
        await trio.sleep(30)
        handler.failing = False
        caplog.set_level(logging.INFO, logger="agentrio.providers")
        await ask(p)  # the trial succeeds: closed again
    opened = [line for line in provider_lines(caplog) if "breaker" in line]
    assert opened == [
        "provider 'p': circuit breaker open: 2 failure(s) in a row (the last: HTTP 500); "
        "no request for 30 s",
        "provider 'p': circuit breaker open: its trial request failed (the last: HTTP 500); "
        "no request for 30 s",
        "provider 'p': circuit breaker closed: a request succeeded",
    ]


async def test_a_call_failed_at_once_by_a_long_retry_after_is_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio.providers")
    async with serving(faults=Faults(rate_limit=1.0, retry_after=120), max_retries=3) as (_, p):
        with pytest.raises(RateLimited):
            await ask(p)
    assert provider_lines(caplog) == [
        "provider 'p' gave up at once: HTTP 429, Retry-After 120 s, not retried",
        "provider 'p' is rate limiting (HTTP 429): every request of the instance pauses for "
        "60.00 s",
    ]


async def test_each_request_is_logged_at_debug_only(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentrio")
    async with serving() as (_, p):
        await ask(p)
        assert not caplog.records  # (nothing at INFO for a request that went well)
        caplog.set_level(logging.DEBUG, logger="agentrio")
        await ask(p)
    (record,) = caplog.records
    assert record.name == "agentrio.http" and record.levelno == logging.DEBUG
    assert (
        record.getMessage().startswith("HTTP Request: POST http://127.0.0.1:")
        and '/v1/chat/completions "HTTP/1.1 200 OK" (' in record.getMessage()
    )


@pytest.mark.parametrize("own_client", [False, True])
async def test_no_key_nor_content_is_logged_at_debug(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, own_client: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrio")
    content, answer = "the secret plan is PLUM-7731", "the answer is QUINCE-2208"
    faults = Faults(seed=3, rate_limit=0.3, retry_after=0, server_error=0.3, garbage=0.1)
    reply = ModelReply(text=answer, usage=Usage(3, 2))
    async with (
        open_fake_llm(lambda request: reply, faults=faults, api_key=KEY) as server,
        httpx.AsyncClient() as client,
    ):
        c = config(server, max_retries=4, circuit_failures=3, circuit_cooldown=1)
        async with Provider(c, api_key=KEY, client=client if own_client else None) as p:
            for _ in range(8):
                try:
                    await p.complete("m", [ChatMessage("user", content)], [], max_output_tokens=8)
                except ProviderError:
                    await trio.sleep(1)
        assert sum(server.statistics().faults.values()) > 3
    assert any(r.name == "agentrio.http" for r in caplog.records)
    assert any(r.name == "agentrio.providers" for r in caplog.records)
    logged = caplog.text + "".join(repr(r.args) + r.getMessage() for r in caplog.records)
    for secret in (KEY, "PLUM-7731", "QUINCE-2208"):
        assert secret not in logged


# -- waits are told to the meter (an agent publishes them: Waited) ------------------------


class WaitMeter(Meter):
    """A Meter that also notes the waits it is told of."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[str, float, str]] = []

    def waited(self, what: str, seconds: float, provider: str) -> None:
        self.waits.append((what, seconds, provider))


async def test_a_call_that_waits_for_nothing_tells_no_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meter = WaitMeter()
    async with serving(max_concurrent=1, requests_per_minute=10, tokens_per_minute=1000) as (_, p):
        for _ in range(3):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
    assert meter.waits == []


async def test_the_429_pause_and_a_retry_backoff_are_told(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meter = WaitMeter()
    faults = Faults(seed=PAUSE_SEED, rate_limit=0.5, retry_after=5)
    async with serving(faults=faults, max_retries=3) as (_, p):
        assert await p.complete("m", HI, [], max_output_tokens=16, meter=meter) == OK
    assert meter.waits == [("rate_limit", 5, "p")]
    meter = WaitMeter()
    async with serving(
        faults=Faults(server_error=1.0), max_retries=1, backoff_initial=2, seed=1
    ) as (_, p):
        with pytest.raises(ProviderUnavailable):
            await p.complete("m", HI, [], max_output_tokens=16, meter=meter)
    ((what, seconds, provider),) = meter.waits
    assert (what, provider) == ("retry", "p") and 1 <= seconds <= 2  # the backoff, jittered


@pytest.mark.parametrize(
    ("options", "what", "seconds"),
    [
        ({"max_concurrent": 1}, "concurrency", 3),
        ({"requests_per_minute": 1}, "requests_per_minute", 60),
        ({"tokens_per_minute": 30}, "tokens_per_minute", 60),
    ],
)
async def test_a_wait_for_a_limit_is_told(
    autojump_clock: trio.testing.MockClock, options: dict[str, Any], what: str, seconds: float
) -> None:
    async def slow(request: FakeRequest) -> ModelReply:
        await trio.sleep(3)
        return OK

    meters = [WaitMeter(), WaitMeter()]
    async with serving(slow, **options) as (_, p), trio.open_nursery() as nursery:
        for meter in meters:
            call = functools.partial(p.complete, max_output_tokens=16, meter=meter)
            nursery.start_soon(call, "m", HI, [])
            await trio.testing.wait_all_tasks_blocked()
    assert meters[0].waits == [] and meters[1].waits == [(what, seconds, "p")]


async def test_agents_publish_the_waits_at_their_provider(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    faults = Faults(seed=PAUSE_SEED, rate_limit=0.5, retry_after=5)
    async with serving(faults=faults, max_retries=3) as (_, p), agentrio.open_runtime() as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(AgentSpec(name="a", model=p.model("m")))
        assert (await agent.run("hi")).stop_reason == "done"
        await trio.testing.wait_all_tasks_blocked()
    waits = [e for e in events if isinstance(e, agentrio.events.Waited)]
    assert waits == [agentrio.events.Waited(path="a", what="rate_limit", seconds=5, provider="p")]
