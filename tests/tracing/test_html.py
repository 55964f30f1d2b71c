"""The HTML report: self-contained, hostile text kept inside its JSON, drawn in a real
browser (Chromium) without script errors.

The browser test is skipped only where Chromium cannot be had: under CI (``CI=true``)
on a machine with apt-get, a missing Chromium fails it, since ``.ci/run`` installs it
there.
"""

from __future__ import annotations

import html
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from agentrio import events
from agentrio.tracing import TraceRecord
from agentrio.tracing._spans import KINDS
from agentrio.tracing.html import report
from agentrio.tracing.view import build, totals

Make = Callable[..., list[TraceRecord]]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / ".artifacts"


def _data(page: str) -> dict[str, object]:
    match = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))  # type: ignore[no-any-return]


def test_self_contained_and_hostile_text_stays_in_its_json(make_trace: Make) -> None:
    page = report(make_trace(20), budget_tokens=500)
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "<img" not in page and page.count("</script>") == 2
    data = _data(page)
    marks = [m for a in data["agents"] for m in a["marks"]]  # type: ignore[attr-defined]
    assert any("</script><img" in m[2] for m in marks)  # the text itself, intact
    assert data["budget"] == 500 and data["stops"] == {
        "done": 13,
        "max_iterations": 4,
        "error": 3,
    }


def test_waits_are_drawn_and_the_budget_comes_from_the_trace(make_trace: Make) -> None:
    data = _data(report(make_trace(12, budget=900)))
    assert data["budget"] == 900  # the runtime's, recorded when it opened
    agents = {a["path"]: a for a in data["agents"]}  # type: ignore[attr-defined]
    waits = {p: [s for s in a["spans"] if s[0] == "wait"] for p, a in agents.items()}
    assert sorted(p for p, w in waits.items() if w) == sorted(
        f"team/agent-{i}" for i in (0, 3, 4, 6, 8, 9)
    )
    (budget, rate_limit) = waits["team/agent-6"] + waits["team/agent-8"]
    assert budget[1:3] == pytest.approx([0.0, 0.001]) and budget[3] == "for budget"
    # (times to the microsecond)
    assert rate_limit[1:3] == pytest.approx([0.008 / 3 - 0.0008, 0.008 / 3], abs=1e-6)
    assert rate_limit[3] == "for rate_limit at openai"
    assert waits["team/agent-4"][-1][3] == "for concurrency at openai"  # a wait like the others
    assert agents["team/agent-8"]["spans"][-1][0] == "wait"  # drawn over its model call
    assert _data(report(make_trace(12, budget=900), budget_tokens=50))["budget"] == 50
    assert _data(report(make_trace(12)))["budget"] is None


def test_the_header_is_the_text_views_summary(make_trace: Make) -> None:
    records = make_trace(20, budget=900)
    summary = _data(report(records))["summary"]
    sums = totals(build(records))
    assert summary == {
        "agents": 20,
        "actors": 20,
        "events": len(records),
        "seconds": pytest.approx(sums.seconds),
        "input_tokens": 200,
        "output_tokens": 100,
        "cost_usd": pytest.approx(0.02),
        "waits": [
            ["budget", 7, pytest.approx(sums.waited["budget"])],
            ["concurrency", 2, pytest.approx(sums.waited["concurrency"])],
            ["rate_limit", 3, pytest.approx(sums.waited["rate_limit"])],
        ],
        "errors": [["Boom", 3]],
        "lost": 0,
    }


def test_one_vocabulary_for_the_legend_and_the_tooltips(make_trace: Make) -> None:
    data = _data(report(make_trace(20, budget=900)))
    assert data["kinds"] == {kind: list(entry) for kind, entry in KINDS.items()}
    assert data["kinds"]["wait"][0] == "wait"  # each kind of wait: a wait (legend, tooltip)
    assert data["wait_kinds"] == ["budget", "concurrency", "rate_limit"]
    drawn = {s[0] for a in data["agents"] for s in a["spans"]}  # type: ignore[attr-defined]
    drawn |= {m[1] for a in data["agents"] for m in a["marks"]}  # type: ignore[attr-defined]
    assert drawn <= set(KINDS)


def test_agents_in_natural_order(make_trace: Make) -> None:
    paths = [a["path"] for a in _data(report(make_trace(12)))["agents"]]  # type: ignore[attr-defined]
    assert paths == [f"team/agent-{i}" for i in range(12)]


def test_ten_thousand_agents_each_get_a_timeline_in_a_page_of_a_few_megabytes(
    make_trace: Make,
) -> None:
    page = report(make_trace(10_000, budget=10**6))
    data = _data(page)
    assert len(data["agents"]) == 10_000 and data["hidden"] == 0  # type: ignore[arg-type]
    assert len(page.encode()) < 3_000_000  # 2.2 MB when measured (240 kB gzipped)


def test_what_the_trace_left_open_is_drawn_to_its_end() -> None:
    records = [  # the process died in a model call
        TraceRecord(1.0, events.PhaseStarted(path="a")),
        TraceRecord(1.5, events.TurnStarted(path="a", iteration=1)),
        TraceRecord(3.0, events.Stalled(path="b", why="loop")),
    ]
    (agent, _) = _data(report(records))["agents"]  # type: ignore[misc]
    assert agent["spans"] == [
        ["phase", 0.0, 2.0, "still open when the trace ended"],
        ["model", 0.5, 2.0, "still open when the trace ended"],
    ]


def test_many_agents_are_capped(make_trace: Make) -> None:
    data = _data(report(make_trace(1000), limit=50))
    assert len(data["agents"]) == 50 and data["hidden"] == 950  # type: ignore[arg-type]


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def _need_chromium() -> None:
    """Skip the calling test without Chromium, unless CI could have installed it:
    then fail, so that a browser test never goes silently unrun in CI."""
    if shutil.which(CHROMIUM) is not None:
        return
    if os.environ.get("CI") == "true" and shutil.which("apt-get") is not None:
        pytest.fail(
            f"no Chromium at {CHROMIUM} under CI=true on a machine with apt-get: "
            ".ci/run installs it (apt-get install chromium)"
        )
    pytest.skip(f"no Chromium at {CHROMIUM} (and no apt-get to install it under CI)")


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_chromium_fails_under_ci_where_apt_get_exists(
    ci: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", ci)
    found = {"apt-get": "/usr/bin/apt-get"}
    monkeypatch.setattr(shutil, "which", found.get)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="no Chromium"):
        _need_chromium()


def test_a_missing_chromium_skips_where_no_package_manager_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="no apt-get"):
        _need_chromium()


def _selftest(page: pathlib.Path) -> tuple[str, dict[str, Any]]:
    """The body tag and what the page's self-test (``#selftest``) saw: it
    dispatches a Ctrl+wheel on the timelines, a drag, a double-click and a
    wheel over the axis (the time range after each), and hovers over each kind
    of bar and mark (the tooltips), as a person would."""
    window = "--window-size=1280,900"  # the axis: a tick every 100 pixels or so
    dom = _chromium("--virtual-time-budget=5000", window, "--dump-dom", page.as_uri() + "#selftest")
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body is not None, dom.stdout[:500] + dom.stderr[-2000:]
    seen = re.search(r'<pre id="selftest" hidden="">(.*?)</pre>', dom.stdout, re.S)
    assert seen is not None, body.group(0)
    return body.group(0), json.loads(html.unescape(seen.group(1)))


def test_renders_in_a_real_browser(make_trace: Make, tmp_path: pathlib.Path) -> None:
    _need_chromium()
    page = tmp_path / "report.html"
    # The budget is the one the trace recorded; a third of the agents wait for it.
    page.write_text(report(make_trace(300, budget=6000)), encoding="utf-8")
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri()).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None, dom[:500]
    assert 'data-rendered="ok"' in body.group(0) and "data-error" not in body.group(0)
    header = re.search(r'<div id="summary">(.*?)</div></div>', dom, re.S)
    assert header is not None
    cards = re.sub(r"<[^>]+>", " ", header.group(0))
    for shown in ("300 agents", "299 ms wall time", "3,000 tokens in", "1,500 tokens out"):
        assert shown in " ".join(cards.split()), cards
    assert "$0.3000" in cards and "done 205, max_iterations 52, error 43" in cards
    assert "budget 6000" in dom  # the budget's line on the tokens chart
    shot = tmp_path / "trace-report.png"
    _chromium("--screenshot=" + str(shot), "--window-size=1280,900", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 1000
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "trace-report.png")


def test_the_axis_the_legend_and_the_tooltips_in_a_real_browser(
    make_trace: Make, tmp_path: pathlib.Path
) -> None:
    _need_chromium()
    page = tmp_path / "report.html"
    page.write_text(report(make_trace(300, budget=6000)), encoding="utf-8")
    body, seen = _selftest(page)
    assert 'data-rendered="ok"' in body and "data-error" not in body
    assert seen["axis"] == ["0 ms", "50 ms", "100 ms", "150 ms", "200 ms", "250 ms"]
    legend = dict(seen["legend"])
    assert legend["wait"] == "wait (for budget, concurrency, rate_limit)"
    tips = {(kind, tip.split("\n")[1]) for kind, tip in seen["tips"]}
    for kind, tip in tips:  # each tooltip names its bar or mark as the legend does
        assert tip.startswith(legend[kind].split(" (")[0] + ": "), (kind, tip)
    said = {tip.split(" (")[0] for _, tip in tips}
    assert {"wait: for budget", "wait: for concurrency at openai"} <= said
    assert "wait: for rate_limit at openai" in said and "phase: done" in said
    assert "budget refused: max_total_tokens" in said
    assert any(t.startswith("error: Boom: </script><img") for t in said)  # text, not markup
    assert {kind for kind, _ in tips} == {"phase", "model", "tool", "wait", "budget", "error"}


def test_zoom_in_a_real_browser_with_ten_thousand_agents(
    make_trace: Make, tmp_path: pathlib.Path
) -> None:
    _need_chromium()
    page = tmp_path / "report.html"
    page.write_text(report(make_trace(10_000, budget=10**6)), encoding="utf-8")
    body, seen = _selftest(page)
    assert 'data-rendered="ok"' in body and "data-error" not in body
    whole = pytest.approx([0, 9.999])
    assert seen["before"] == whole and seen["reset"] == whole
    (z0, z1), (p0, p1), (a0, a1) = seen["zoomed"], seen["panned"], seen["axisZoom"]
    assert 0 < z0 < z1 < 9.999 and z1 - z0 < 9.999 / 2  # Ctrl+wheel zoomed in,
    assert z0 < 9.999 / 4 < z1  # around the pointer (a quarter of the way)
    assert p0 > z0 and p1 - p0 == pytest.approx(z1 - z0)  # a drag to the left: later
    assert 0 < a0 < a1 < 9.999  # the wheel over the axis zooms, without Ctrl
    assert seen["view"] == "0.000000,9.999000"  # the page says what it shows
    ARTIFACTS.mkdir(exist_ok=True)
    for name, view in (("trace-report-10k", ""), ("trace-report-10k-zoomed", "#view=0,0.04")):
        shot = tmp_path / f"{name}.png"  # the whole run, then its first 40 ms
        _chromium("--screenshot=" + str(shot), "--window-size=1280,900", page.as_uri() + view)
        assert shot.exists() and shot.stat().st_size > 1000
        shutil.copy(shot, ARTIFACTS / f"{name}.png")
    opened = _chromium("--dump-dom", "--window-size=1280,900", page.as_uri() + "#view=0,0.04")
    assert 'data-view="0.000000,0.040000"' in opened.stdout  # opened on the range asked


def test_a_lone_surrogate_from_the_trace_is_drawn_as_a_replacement_character() -> None:
    path = "team/agent-10"
    records = [
        TraceRecord(1.0, events.PhaseStarted(path="team/agent-2")),
        TraceRecord(1.0, events.PhaseStarted(path=path)),
        TraceRecord(2.0, events.PhaseError(path=path, error_type="X", error="bad \ud800")),
        TraceRecord(2.0, events.PhaseEnded(path=path, stop_reason="error", iterations=1)),
        TraceRecord(2.0, events.PhaseEnded(path="team/agent-2", stop_reason="done", iterations=1)),
    ]
    data = _data(report(records))
    agents = data["agents"]
    assert isinstance(agents, list)
    assert [a["path"] for a in agents] == ["team/agent-2", "team/agent-10"]  # natural order
    assert agents[1]["marks"][0][2] == "X: bad \ufffd"
