"""Sessions continued, and deferred decisions given, by a runtime of another process
on the same store: directory, SQLite and PostgreSQL (#27)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from agentrio.agents.durability.summary import PhaseSummary
from agentrio.types import StoreReader

from . import pg
from .session_life import store_of

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


async def _phases(kind: str, where: str) -> list[PhaseSummary]:
    async with StoreReader(store_of(kind, where)) as reader:  # type: ignore[arg-type]
        return await reader.phases()


def life(kind: str, where: str, *args: str, archive: bool = False) -> dict[str, object]:
    env = {**os.environ, "AGENTRIO_TEST_ARCHIVE": "1" if archive else "0"}
    done = subprocess.run(
        [sys.executable, str(LIFE), kind, where, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


ARCHIVE = pytest.mark.parametrize("archive", [False, True], ids=["live", "archived"])


@KINDS
@ARCHIVE
def test_a_session_is_continued_by_another_process(
    kind: str, archive: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With the archive (``retention=Retention()``), the session's earlier phases
    are in the store's archive when the next process opens it."""
    where = _where(kind, tmp_path, request)
    said = life(kind, where, "say", "my number is 42", archive=archive)
    assert said == {"text": "heard: my number is 42"}
    [summary] = trio.run(_phases, kind, where)
    assert (summary.session, summary.archived) == ("user-42", archive)
    assert life(kind, where, "say", "what is my number?", archive=archive) == {
        "text": "heard: my number is 42 | what is my number?"
    }
    assert life(kind, where, "say", "thanks", archive=archive) == {
        "text": "heard: my number is 42 | what is my number? | thanks"
    }


@KINDS
@ARCHIVE
def test_a_deferred_approval_is_decided_in_another_process(
    kind: str, archive: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A parked phase stays in the live area (with the archive too)."""
    where = _where(kind, tmp_path, request)
    assert life(kind, where, "defer", archive=archive) == {
        "stop_reason": "deferred",
        "pending": [["p-1", "pay", "the treasurer decides"]],
    }
    assert life(kind, where, "approve", archive=archive) == {
        "text": "the tool said: paid A-7",
        "effects": ["paid A-7"],
    }


def _tree(root: Path) -> bytes:
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError, PermissionError):
                out.append((Path(folder) / name).read_bytes())
    return b"".join(out)


def store_bytes(kind: str, root: Path) -> bytes:
    """Every byte of the files the store's records live in (PostgreSQL's: the
    server's data files, after a CHECKPOINT)."""
    if kind == "directory":
        return _tree(root / "ckpt")
    if kind == "sqlite":
        return b"".join(p.read_bytes() for p in root.iterdir() if p.name.startswith("ckpt.db"))
    import psycopg

    assert pg.DSN is not None
    with psycopg.connect(pg.DSN, autocommit=True) as db:
        (data,) = db.execute("SHOW data_directory").fetchone()  # type: ignore[misc]
        db.execute("CHECKPOINT")
    return _tree(Path(data) / "base")


@KINDS
def test_a_deleted_session_leaves_none_of_its_bytes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = _where(kind, tmp_path, request)
    secret = f"PIN-{kind}-{os.getpid()}-8513"
    kept = f"KEEP-{kind}-{os.getpid()}"
    life(kind, where, "say-as", f"gone-{kind}:my {secret}", archive=True)  # (archived)
    life(kind, where, "say-as", f"kept-{kind}:{kept}", archive=True)
    life(kind, where, "say-as", f"gone-{kind}:again {secret}")
    everything = store_bytes(kind, tmp_path)
    assert secret.encode() in everything and kept.encode() in everything
    assert life(kind, where, "delete", f"gone-{kind}") == {
        "deleted": 2,
        "sessions": [f"kept-{kind}"],
    }
    everything = store_bytes(kind, tmp_path)
    assert secret.encode() not in everything
    assert f"gone-{kind}".encode() not in everything
    assert kept.encode() in everything
    assert life(kind, where, "say-as", f"gone-{kind}:hello") == {"text": "heard: hello"}
