"""The text view: summary at the top, collapsed for many agents, filters."""

from __future__ import annotations

from collections.abc import Callable

from agentrio import events
from agentrio.tracing import TraceRecord
from agentrio.tracing.view import build, natural, render, visible

Make = Callable[..., list[TraceRecord]]


def test_summary_and_tree(make_trace: Make) -> None:
    lines = render(build(make_trace(10)))
    text = "\n".join(lines)
    assert "10 agents" in lines[0]
    assert "stop reasons: done 7, max_iterations 2, error 1" in text
    assert "tokens: 150 (100 in, 50 out), cost $0.0100" in text
    assert "slowest: team/agent-9 0.01s" in text
    assert "errors by cause: Boom 1" in text
    assert "team\n  agent-0  phases 1 (done 1)  tokens 15" in text


def test_ten_thousand_agents_collapse_to_a_screen(make_trace: Make) -> None:
    trace = build(make_trace(10_000))
    lines = render(trace)
    assert len(lines) < 40
    assert lines[-1].startswith("... 9980 more")
    shown = [line for line in lines if line.startswith("  agent-")]
    assert len(shown) == 20 and all("errors 1" in line for line in shown)  # the erring first
    assert len(render(trace, expand=True)) > 10_000


def test_filters(make_trace: Make) -> None:
    trace = build(make_trace(50))
    by_stop = render(trace, stop_reason="max_iterations", expand=True)
    assert sum("max_iterations 1)" in line for line in by_stop) == 9  # (31 errs)
    by_path = render(trace, path="team/agent-4", expand=True)
    assert [line.split()[0] for line in by_path[-2:]] == ["team", "agent-4"]
    by_error = render(trace, error="onerror", expand=True)
    assert sum("errors 1" in line for line in by_error) == 7


def test_waits_and_the_budget(make_trace: Make) -> None:
    lines = render(build(make_trace(12, budget=900)), expand=True)
    text = "\n".join(lines)
    assert "budget: max_total_tokens 900" in text
    # agents 0, 3, 6, 9 waited for the budget (i/6 ms), 0 and 8 for a rate limit, 4 for a
    # slot of max_concurrent (i/10 ms)
    assert "waits: budget 4 (0.00s), rate_limit 2 (0.00s), concurrency 1 (0.00s)" in text
    (line,) = [line for line in lines if line.startswith("  agent-8 ")]
    assert line.endswith("waited rate_limit 1 (0.00s)")
    assert "waited" not in render(build(make_trace(12)))[-1]  # none recorded: none shown
    assert not any(line.startswith("budget:") for line in render(build(make_trace(12))))


def test_agents_sort_naturally(make_trace: Make) -> None:
    lines = render(build(make_trace(12)), expand=True)
    shown = [line.split()[0] for line in lines if line.startswith("  agent-")]
    assert shown == [f"agent-{i}" for i in range(12)]  # agent-2 before agent-10
    assert natural("team/agent-2") < natural("team/agent-10") < natural("team/agent-10/sub")
    assert natural("team/agent-10/sub") < natural("team/agent-10x") < natural("teamx")
    assert natural("a" + "9" * 5000) > natural("a" + "9" * 4999)  # (no int of 5000 digits)


def test_control_characters_from_the_trace_are_escaped() -> None:
    path = "team/evil\x1b[2J\u202e"
    records = [
        TraceRecord(1.0, events.PhaseStarted(path=path)),
        TraceRecord(
            2.0, events.PhaseError(path=path, error_type="X", error="\x1b]0;owned\x07\ud800")
        ),
        TraceRecord(2.0, events.PhaseEnded(path=path, stop_reason="error", iterations=1)),
    ]
    text = "\n".join(render(build(records), expand=True))
    assert not any(ch in text for ch in "\x1b\x07\u202e\ud800")
    assert "evil\\x1b[2J\\u202e" in text and "\\x1b]0;owned\\x07\\ud800" in text
    assert visible("tab\there") == "tab\\x09here"
