"""The examples run. (That the API reference documents every public name is
tests/test_docs.py's to check.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# A line each example must print: proof that it got to the end and did its job.
EXPECTED = {
    "supervised_pool.py": "jobs: 30, answered: 26, crashed: 4",
    "research_agent.py": "synthesis: 3 subtopics, 4 contexts, 0 leaks",
    "helpers.py": (
        "whitelist denied: 2, approvals asked: 2, approved: 1, "
        "files left: ['notes.txt', 'src/main.py']"
    ),
    "coordinator.py": (
        "coordinator: 100 subagents ended, the budget stopped the rest, budget not exceeded"
    ),
    "fastapi_app.py": "POST /run/stream: result 'The capital of Japan is Tokyo.'",
    "mcp_tools.py": "mcp: 4 tools, 2 ok, 1 denied, 1 failed, 1 restart",
    "typed_output.py": "typed outputs: 3 wire formats, 3 retries, map: 3 movies",
    "image_input.py": (
        "image_input: 2 phases answered, 2 requests, the URL refused before sending"
    ),
    "server_tools.py": (
        "server_tools: 4 requests, server_tool_use + web_search_tool_result + text sent back, "
        "the chart's image in its tool_result"
    ),
    "stream_tokens.py": "done: done, 3 pieces of text",
    "logging_demo.py": "logging: retries logged: True, records with the key or content: 0",
    "otel_console.py": "otel: 7 spans in 1 trace, 2 phases, tokens in 170, out 43",
}

# Examples that need an extra: skipped when it is not installed.
NEEDS = {"fastapi_app.py": ("fastapi", "uvicorn"), "otel_console.py": ("opentelemetry.sdk",)}


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.py"))


def test_every_example_has_an_expected_line() -> None:
    assert _examples(), "no examples found"
    assert sorted(p.name for p in _examples()) == sorted(EXPECTED)


@pytest.mark.parametrize("example", _examples(), ids=lambda p: p.name)
def test_example_runs(example: Path) -> None:
    for module in NEEDS.get(example.name, ()):
        pytest.importorskip(module)
    result = subprocess.run(
        [sys.executable, str(example)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert EXPECTED[example.name] in result.stdout.splitlines(), result.stdout


def _load(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_supervised_pool_main(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load(EXAMPLES / "supervised_pool.py")
    assert module.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert EXPECTED["supervised_pool.py"] in lines
    assert "pool: 4 workers, 26 messages handled, 4 restarts" in lines
    assert (
        "events: ActorExited=5, ActorFailed=4, ActorRestarted=4, ActorStarted=9, DeadLetter=4"
        in lines
    )


def test_examples_type_check() -> None:
    # A user's program is type-checked: an example must pass what it would (review of
    # #21: three examples did not, and CI checked src/ only).
    result = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict", "--no-error-summary"),
            *("--cache-dir", str(ROOT / ".mypy_cache" / "examples"), str(EXAMPLES)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
