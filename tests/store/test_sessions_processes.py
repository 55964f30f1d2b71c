"""Sessions continued, and deferred decisions given, by a runtime of another process
on the same store: directory, SQLite and PostgreSQL (#27)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from . import pg

LIFE = Path(__file__).with_name("session_life.py")
KINDS = pytest.mark.parametrize("kind", ["directory", "sqlite", "postgres"])


def _where(kind: str, root: Path, request: pytest.FixtureRequest) -> str:
    if kind == "directory":
        return str(root / "ckpt")
    if kind == "sqlite":
        return str(root / "ckpt.db")
    request.getfixturevalue("postgres_dsn")
    assert pg.DSN is not None
    return f"{pg.DSN}|{root.name}"


def life(kind: str, where: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(LIFE), kind, where, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@KINDS
def test_a_session_is_continued_by_another_process(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = _where(kind, tmp_path, request)
    assert life(kind, where, "say", "my number is 42") == {"text": "heard: my number is 42"}
    assert life(kind, where, "say", "what is my number?") == {
        "text": "heard: my number is 42 | what is my number?"
    }
    assert life(kind, where, "say", "thanks") == {
        "text": "heard: my number is 42 | what is my number? | thanks"
    }


@KINDS
def test_a_deferred_approval_is_decided_in_another_process(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = _where(kind, tmp_path, request)
    assert life(kind, where, "defer") == {
        "stop_reason": "deferred",
        "pending": [["p-1", "pay", "the treasurer decides"]],
    }
    assert life(kind, where, "approve") == {
        "text": "the tool said: paid A-7",
        "effects": ["paid A-7"],
    }
