"""The demo swarm: every agent finishes, and the usage adds up exactly."""

from __future__ import annotations

import trio

from agentrio import Budget
from agentrio.demo import DemoReport, demo_spec, run_demo
from agentrio.testing import open_fake_llm

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
    assert "127.0.0.1" in report.model


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
    from agentrio import UsageTotals

    report = DemoReport(3, {"done": 2, "error": 1}, UsageTotals(requests=4), 0.0)
    table = report.table()
    assert "done=2, error=1" in table
    assert "runs          3" in table
    assert "runs/s        -" in table


def test_run_demo_under_trio_run() -> None:
    report = trio.run(lambda: run_demo(5, over_http=False))
    assert report.stop_reasons == {"done": 5}
