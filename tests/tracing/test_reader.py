"""Reading a trace back: typed events, a torn last line ignored, a corrupt line named."""

from __future__ import annotations

import pathlib

import pytest

from agentrio import events
from agentrio.errors import TraceError
from agentrio.tracing import read_trace

GOOD = (
    b'{"t":1.5,"e":{"type":"PhaseStarted","path":"a","context_label":null}}\n'
    b'{"t":2.5,"e":{"type":"PhaseEnded","path":"a","stop_reason":"done","iterations":1}}\n'
)


def test_typed_events_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD)
    records = list(read_trace(path))
    assert [r.t for r in records] == [1.5, 2.5]
    assert records[1].e == events.PhaseEnded(path="a", stop_reason="done", iterations=1)


def test_a_torn_last_line_is_ignored(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b'{"t":3.0,"e":{"type":"Pha')
    assert len(list(read_trace(path))) == 2


def test_a_corrupt_line_names_file_and_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b"garbage\n" + GOOD)
    with pytest.raises(TraceError, match=r"t\.jsonl'?, line 3"):
        list(read_trace(path))


def test_a_missing_file_is_a_typed_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.jsonl"):
        list(read_trace(tmp_path / "nope.jsonl"))
