"""The demo swarm: every agent finishes, and the usage adds up exactly."""

from __future__ import annotations

import socket
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from agentrio import Budget
from agentrio.demo import DemoProgress, DemoReport, demo_spec, run_demo, watch_progress
from agentrio.testing import open_fake_llm
from agentrio.types import UsageTotals

# Per agent: three model turns over 2, 4 and 6 messages (12 tokens each) with
# 12, 14 and 20 output tokens, and two tool calls.
INPUT_PER_AGENT = (2 + 4 + 6) * 12
OUTPUT_PER_AGENT = 12 + 14 + 20


async def test_a_hundred_agents_in_process() -> None:
    report = await run_demo(100, over_http=False)
    assert isinstance(report, DemoReport)
    assert report.agents == 100
    assert report.stop_reasons == {"done": 100}
    usage = report.usage
    assert usage.requests == 300
    assert usage.tool_calls == 200
    assert usage.input_tokens == 100 * INPUT_PER_AGENT
    assert usage.output_tokens == 100 * OUTPUT_PER_AGENT
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.overruns == 0
    table = report.table()
    assert "done=100" in table
    assert "model calls   300" in table
    assert "tool calls    200" in table


async def test_over_http_on_loopback() -> None:
    report = await run_demo(10)
    assert report.stop_reasons == {"done": 10}
    assert (report.usage.requests, report.usage.tool_calls) == (30, 20)
    assert "127.0.0.1" in report.model and report.path == "http"


async def test_a_key_in_the_base_url_is_not_shown() -> None:
    async with open_fake_llm() as server:
        url = f"{server.base_url}/v1?key=demo-SECRET-77"
        report = await run_demo(2, base_url=url)
    assert report.stop_reasons == {"done": 2}
    assert "key=[redacted]" in report.model and "SECRET" not in report.table()


async def test_a_budget_for_the_swarm_is_never_overspent() -> None:
    # each model call reserves its prompt estimate + 1024 output tokens
    report = await run_demo(20, max_total_tokens=4_000, over_http=False)
    assert report.usage.total_tokens <= 4_000
    assert sum(report.stop_reasons.values()) == 20
    assert report.stop_reasons["done"] > 0
    assert report.stop_reasons["budget_exhausted"] > 0
    assert set(report.stop_reasons) <= {"done", "budget_exhausted"}


def test_the_spec() -> None:
    spec = demo_spec()
    assert spec.name == "demo"
    assert [t.name for t in spec.tools] == ["lookup", "word_count"]
    assert spec.limits.max_iterations == 5


async def test_one_agent_answers_with_both_tool_results() -> None:
    import agentrio

    async with agentrio.open_runtime(budget=Budget()) as rt:
        agent = await rt.spawn_agent(demo_spec())
        result = await agent.run("Tell me about trio")
    assert result.stop_reason == "done"
    assert [r.name for r in result.tool_calls] == ["lookup", "word_count"]
    assert result.final_text == "the value of trio is 28 (6 words)"


def test_report_table_without_wall_time() -> None:
    report = DemoReport(3, {"done": 2, "error": 1}, UsageTotals(requests=4), 0.0)
    table = report.table()
    assert "done=2, error=1" in table
    assert "runs          3" in table
    assert "runs/s        -" in table


def test_run_demo_under_trio_run() -> None:
    report = trio.run(lambda: run_demo(5, over_http=False))
    assert report.stop_reasons == {"done": 5}


# -- progress, failures, the budget, what to try next --------------------------------------


def test_the_progress_line() -> None:
    p = DemoProgress(1000, 1000, 250, 0.5, 47_500)
    assert p.line() == (
        "agentrio demo: 750 running, 250/1,000 finished, 500 runs/s, 47,500 tokens, 0.5 s"
    )
    with_budget = DemoProgress(1000, 400, 100, 2.0, 50_000, max_total_tokens=200_000)
    assert with_budget.line() == (
        "agentrio demo: 300 running, 100/1,000 finished, 50 runs/s, 50,000 tokens, "
        "25% of max_total_tokens 200,000, 2.0 s"
    )
    assert "0/10 finished, - runs/s" in DemoProgress(10, 0, 0, 0.0, 0).line()


async def test_watch_progress_reports_on_trios_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[float] = []

    def snapshot() -> DemoProgress:
        return DemoProgress(1, 1, 0, trio.current_time(), 0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_progress, 0.5, snapshot, lambda p: seen.append(p.elapsed))
        await trio.sleep(1.6)
        nursery.cancel_scope.cancel()
    assert seen == [0.5, 1.0, 1.5]


async def test_run_demo_reports_progress_and_ends_with_the_totals() -> None:
    seen: list[DemoProgress] = []
    report = await run_demo(30, over_http=False, on_progress=seen.append)
    final = seen[-1]
    assert final.final and [p.final for p in seen].count(True) == 1
    assert (final.agents, final.started, final.finished) == (30, 30, 30)
    assert final.total_tokens == report.usage.total_tokens == 30 * 190
    assert all(p.finished <= p.started <= p.agents for p in seen)


async def test_the_watcher_ends_with_the_demo(autojump_clock: trio.testing.MockClock) -> None:
    # A long interval: the demo must not wait for the watcher's next tick.
    seen: list[DemoProgress] = []
    await run_demo(5, over_http=False, on_progress=seen.append, progress_every=3600)
    assert [p.final for p in seen] == [True]
    assert trio.current_time() < 3600


async def test_failed_runs_are_grouped_by_kind(autojump_clock: trio.testing.MockClock) -> None:
    async with open_fake_llm(api_key="right") as server:
        report = await run_demo(12, base_url=f"{server.base_url}/v1")
    assert report.stop_reasons == {"error": 12}
    assert report.failed == 12
    ((kind, messages),) = report.failures.items()
    assert kind == "AuthError" and sum(messages.values()) == 12
    (message,) = messages
    assert "HTTP 401" in message and "invalid or missing API key" in message
    assert report.causes() == ["  AuthError, 12 runs:", f"    12x {message}"]
    assert report.path == "http" and report.base_url == f"{server.base_url}/v1"
    assert report.next_steps()[0].startswith("--api-key-env NAME")


async def test_an_unreachable_server_is_named(autojump_clock: trio.testing.MockClock) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    report = await run_demo(8, base_url=url)
    assert report.stop_reasons == {"error": 8}
    assert list(report.failures) == ["ProviderUnavailable"]
    assert all(
        f"ConnectError talking to {url}" in m for m in report.failures["ProviderUnavailable"]
    )
    assert report.next_steps()[0].startswith(f"check that a server answers at {url}")


def test_causes_show_at_most_three_messages_per_kind() -> None:
    failures = {"ProviderError": {f"HTTP 400: request {i}": 1 for i in range(5)}, "X": {"x": 9}}
    report = DemoReport(14, {"error": 14}, UsageTotals(), 1.0, failures=failures)
    assert report.causes() == [
        "  X, 9 runs:",
        "    9x x",
        "  ProviderError, 5 runs:",
        "    1x HTTP 400: request 0",
        "    1x HTTP 400: request 1",
        "    1x HTTP 400: request 2",
        "    ... and 2 other messages",
    ]


async def test_the_budget_note_says_what_was_reserved_and_why() -> None:
    report = await run_demo(20, max_total_tokens=4_000, over_http=False)
    spent = report.usage.total_tokens
    assert report.budget_note() == (
        f"{report.stop_reasons['budget_exhausted']} runs stopped: each model call first "
        "reserves its prompt's estimate plus max_output_tokens (1,024) from max_total_tokens "
        f"(4,000); {spent:,} were spent, and their next call did not fit in the "
        f"{4_000 - spent:,} left"
    )
    assert "  budget        " in report.table()
    assert "a larger --max-total-tokens, for every run to finish" in report.next_steps()
    # Without a refusal there is nothing to explain.
    assert (await run_demo(2, max_total_tokens=10_000, over_http=False)).budget_note() == ""


async def test_the_report_says_which_path_it_measured() -> None:
    in_process = await run_demo(3, over_http=False)
    assert in_process.path == "in-process"
    assert "path          in-process: each model call is a function call" in in_process.table()
    assert in_process.next_steps()[0] == "without --in-process, to measure the HTTP path too"
    over_http = await run_demo(3)
    assert over_http.path == "http"
    assert "path          HTTP: each model call is a request" in over_http.table()
    assert over_http.next_steps()[0] == "--in-process, to measure the runtime alone (no HTTP)"


async def test_on_a_built_in_instance_a_refused_key_names_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    async with open_fake_llm(api_key="the-right-key") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-FAKE-SECRET-7f3a")
        report = await run_demo(2, model="anthropic:claude-x")
    assert report.stop_reasons == {"error": 2}
    assert report.model == f"anthropic:claude-x at {server.base_url} (anthropic)"
    assert report.api_key_env == "ANTHROPIC_API_KEY"
    assert report.next_steps()[0] == (
        f"check the key in ANTHROPIC_API_KEY: {server.base_url} refused it"
    )
    assert "sk-FAKE-SECRET" not in repr(report) + "".join(report.causes())


async def test_on_an_instance_without_a_key_the_hints_name_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --api-key-env and --kind go only with --base-url: on --model ollama:MODEL,
    # what to try is the instance's table of agentrio.toml.
    monkeypatch.delenv("AGENTRIO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    async with open_fake_llm(api_key="the-right-key") as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        report = await run_demo(2, model="ollama:qwen3:8b")
    assert report.stop_reasons == {"error": 2}
    assert report.instance == "ollama" and report.api_key_env is None
    steps = report.next_steps()
    assert steps[0] == (
        "api_key_env in a [providers.ollama] table of agentrio.toml, naming the "
        f"environment variable that holds the key {server.base_url} accepts"
    )
    assert not any("--api-key-env" in step or "--kind" in step for step in steps)
    # Other failures on an instance name it too, never --kind.
    bad = attrs.evolve(report, failures={"BadResponse": {"x": 1}, "ProviderError": {"y": 1}})
    assert bad.next_steps()[:2] == [
        f"kind in a [providers.ollama] table of agentrio.toml: the wire format "
        f"{server.base_url} speaks",
        f"check the model in --model: {server.base_url} refused the requests",
    ]
