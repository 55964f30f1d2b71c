"""The ``agentrio`` command: the demo as a real subprocess, and argument errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentrio
from agentrio.cli import main


def agentrio_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrio.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_subprocess() -> None:
    result = agentrio_cmd("demo", "--agents", "50")
    assert result.returncode == 0, result.stderr
    assert "agentrio demo: 50 agents" in result.stdout
    assert "done=50" in result.stdout
    assert "model calls   150" in result.stdout
    assert "tool calls    100" in result.stdout
    assert result.stderr == ""


def test_demo_in_process_flag() -> None:
    result = agentrio_cmd("demo", "--agents", "50", "--in-process")
    assert result.returncode == 0, result.stderr
    assert "done=50" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agents", "0"], "argument --agents: expected a number >= 1, got 0"),
        (["--agents", "-3"], "expected a number >= 1, got -3"),
        (["--agents", "many"], "argument --agents: expected a whole number, got 'many'"),
        (["--max-total-tokens", "0"], "argument --max-total-tokens: expected a number >= 1"),
    ],
)
def test_demo_bad_arguments_subprocess(args: list[str], message: str) -> None:
    result = agentrio_cmd("demo", *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "done=" not in result.stdout


def test_main_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--agents", "7", "--in-process"]) == 0
    out = capsys.readouterr().out
    assert "done=7" in out
    assert "model calls   21" in out


def test_main_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--agents", "10", "--in-process", "--max-total-tokens", "500"]) == 0
    out = capsys.readouterr().out
    assert "budget_exhausted=" in out


def test_main_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--agents", "0"])
    assert info.value.code == 2
    assert "expected a number >= 1, got 0" in capsys.readouterr().err


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "command" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentrio {agentrio.__version__}"
