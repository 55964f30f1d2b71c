"""The HTML report: self-contained, hostile text kept inside its JSON, drawn in a real
browser (Chromium) without script errors.

The browser test is skipped only where Chromium cannot be had: under CI (``CI=true``)
on a machine with apt-get, a missing Chromium fails it, since ``.ci/run`` installs it
there.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable

import pytest

from agentrio import events
from agentrio.tracing import TraceRecord
from agentrio.tracing.html import report

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
    assert budget[1:3] == pytest.approx([0.0, 0.001]) and budget[3] == "waited for budget"
    assert rate_limit[1:3] == pytest.approx([0.008 / 3 - 0.0008, 0.008 / 3])
    assert rate_limit[3] == "waited for rate_limit at openai"
    assert agents["team/agent-8"]["spans"][-1][0] == "wait"  # drawn over its model call
    assert _data(report(make_trace(12, budget=900), budget_tokens=50))["budget"] == 50
    assert _data(report(make_trace(12)))["budget"] is None


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


def test_renders_in_a_real_browser(make_trace: Make, tmp_path: pathlib.Path) -> None:
    _need_chromium()
    page = tmp_path / "report.html"
    # The budget is the one the trace recorded; a third of the agents wait for it.
    page.write_text(report(make_trace(300, budget=6000)), encoding="utf-8")
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri()).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None, dom[:500]
    assert 'data-rendered="ok"' in body.group(0) and "data-error" not in body.group(0)
    assert dom.count("<rect") > 300  # the timelines were drawn
    assert dom.count('class="wait"') > 100  # the waits too (of the 200 agents drawn)
    assert "budget 6000" in dom  # the budget's line on the tokens chart
    shot = tmp_path / "trace-report.png"
    _chromium("--screenshot=" + str(shot), "--window-size=1280,900", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 1000
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "trace-report.png")


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
