"""Reading a trace back: typed events, a torn last line noted, a corrupt line named, a
hostile file a TraceError in bounded memory."""

from __future__ import annotations

import os
import pathlib
import tracemalloc

import pytest

from agentrio import events
from agentrio.errors import TraceError
from agentrio.tracing import MAX_LINE_BYTES, read_trace

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
    with pytest.raises(TraceError, match="embedded null byte"):
        list(read_trace(tmp_path / "a\0b.jsonl"))


# -- hostile files: a TraceError each, in bounded memory ---------------------------------


def test_a_torn_last_line_is_noted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b'{"t":3.0,"e":{"type":"Pha')
    reader = read_trace(path)
    assert len(list(reader)) == 2 and reader.torn == 3
    path.write_bytes(GOOD)
    reader = read_trace(path)
    assert len(list(reader)) == 2 and reader.torn is None


def test_a_last_line_without_its_newline_that_is_a_record_is_read(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD.rstrip(b"\n"))
    reader = read_trace(path)
    assert [r.t for r in reader] == [1.5, 2.5] and reader.torn is None


def test_a_torn_last_line_that_is_not_utf8_is_noted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b'{"t":3.0,"e":{"type":"\xe2\x82')
    reader = read_trace(path)
    assert len(list(reader)) == 2 and reader.torn == 3


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b'{"t":1,"e":{"type":"Stalled","path":"\xff\xfe","why":"x"}}', "not UTF-8"),
        (
            b'{"t":1,"e":{"type":"Stalled","path":"a","x":'
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}}",
            "nested too deep",
        ),
        (b'{"t":1,"e":{"type":"Nope sk-SECRET","path":"a"}}', "a value not shown"),
        (b'{"t":1,"e":{"type":"PhaseEnded","stop_reason":"sk-SECRET"}}', "a value not shown"),
    ],
    ids=["not-utf8", "nested-100k", "unknown-type", "bad-value"],
)
def test_a_bad_line_is_a_trace_error_that_does_not_quote_it(
    tmp_path: pathlib.Path, line: bytes, why: str
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + line + b"\n")
    with pytest.raises(TraceError, match=r"line 3: not a trace record") as caught:
        list(read_trace(path))
    assert why in str(caught.value) and "SECRET" not in str(caught.value)


def test_a_line_past_the_limit_is_never_read_whole(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b'{"t":1,"e":{"type":"Stalled","path":"a","why":"' + b"x" * 200)
    with pytest.raises(TraceError, match=r"line 3: longer than 100 bytes \(max_line_bytes\)"):
        list(read_trace(path, max_line_bytes=100))
    assert len(list(read_trace(path))) == 2  # (under the default limit: a torn last line)


def test_a_gigabyte_line_is_refused_in_bounded_memory(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as file:
        file.truncate(1 << 30)  # a sparse GiB of zero bytes, no newline
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match=r"line 1: longer than 16777216 bytes"):
            list(read_trace(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert MAX_LINE_BYTES == 16 * 1024 * 1024 and peak < 3 * MAX_LINE_BYTES


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_dev_zero_is_a_trace_error() -> None:
    with pytest.raises(TraceError, match=r"'/dev/zero', line 1: longer than"):
        next(iter(read_trace("/dev/zero")))
