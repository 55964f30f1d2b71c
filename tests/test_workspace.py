"""Workspace: folders made on first use, safe file names, atomic run summaries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrio import InvalidArgument, Workspace
from agentrio.workspace import write_atomic


def test_folders_are_made_on_first_use(tmp_path: Path) -> None:
    root = tmp_path / "agent"
    ws = Workspace(root)
    assert ws.root == root
    assert not root.exists()
    assert ws.artifacts == root / "artifacts"
    assert sorted(p.name for p in root.iterdir()) == ["artifacts"]
    assert ws.logs.is_dir() and ws.memory.is_dir()
    assert sorted(p.name for p in root.iterdir()) == ["artifacts", "logs", "memory"]
    (ws.memory / "note.txt").write_text("kept")
    assert (ws.memory / "note.txt").read_text() == "kept"  # using it again keeps what is there


def test_str_and_pathlike_roots(tmp_path: Path) -> None:
    assert Workspace(str(tmp_path)).root == tmp_path
    assert repr(Workspace("runs/a")) == "Workspace('runs/a')"


@pytest.mark.parametrize("root", ["", 3, None, b"bytes"])
def test_bad_root(root: object) -> None:
    with pytest.raises(InvalidArgument, match="workspace must be a non-empty path"):
        Workspace(root)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("../etc/passwd", "etc_passwd"),
        ("a b?c", "a_b_c"),
        ("", "unnamed"),
        ("...", "unnamed"),
        ("..", "unnamed"),
        (":..", "unnamed"),  # not "..": that would leave the folder
        (":.", "unnamed"),
        ("_.x", "x"),
        ("__init__", "init"),
        ("/", "unnamed"),
        (".hidden", "hidden"),
        ("report: final?.md", "report_final_.md"),
        ("C:\\Windows\\x", "C_Windows_x"),
        ("ok-name_1.txt", "ok-name_1.txt"),
        ("naïve", "na_ve"),
        ("a\x00b", "a_b"),
    ],
)
def test_filename(name: str, safe: str) -> None:
    assert Workspace.filename(name) == safe


def test_filename_length() -> None:
    assert Workspace.filename("x" * 500) == "x" * 120
    assert Workspace.filename("abcdef", max_length=3) == "abc"


def test_filename_needs_a_str() -> None:
    with pytest.raises(InvalidArgument, match="name must be a str"):
        Workspace.filename(3)  # type: ignore[arg-type]


@given(st.text())
def test_filename_is_always_safe(name: str) -> None:
    safe = Workspace.filename(name)
    assert safe
    assert len(safe) <= 120
    assert "/" not in safe and "\\" not in safe and "\x00" not in safe
    assert not safe.startswith(".")  # (so never "." or "..")
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in safe)


# -- run_summary.json and write_atomic --------------------------------------------------


def test_write_summary(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "deep" / "agent")
    path = ws.write_summary({"phases": 1, "total_tokens": 10})
    assert path == tmp_path / "deep" / "agent" / "run_summary.json"
    assert json.loads(path.read_text()) == {"phases": 1, "total_tokens": 10}
    assert path.read_text().endswith("\n")
    ws.write_summary({"phases": 2, "total_tokens": 25})
    assert json.loads(path.read_text()) == {"phases": 2, "total_tokens": 25}
    assert sorted(p.name for p in path.parent.iterdir()) == ["run_summary.json"]


def test_a_summary_that_cannot_be_encoded_leaves_the_old_one(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    path = ws.write_summary({"phases": 1})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        ws.write_summary({"phases": 2, "bad": object()})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_summary.json"]


def test_write_atomic_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    write_atomic(path, b"one")
    write_atomic(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run_summary.json"
    write_atomic(path, b'{"old": true}')
    written: list[bytes] = []
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        # The new bytes are in the temporary file by now: fail "midway".
        written.append(b"synced")
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, b'{"new": true, "padding": "' + b"x" * 100_000 + b'"}')
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert written == [b"synced"]
    assert path.read_bytes() == b'{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["run_summary.json"]


def test_data_that_cannot_be_written_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "run_summary.json"
    write_atomic(path, b"old")
    with pytest.raises(TypeError):
        write_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["run_summary.json"]


def test_a_failed_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.json"
    write_atomic(path, b"old")

    def failing_replace(src: str, dst: object) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(PermissionError):
        write_atomic(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]
