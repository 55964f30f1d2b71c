"""The ``agentrio`` command: the demo as a real subprocess (its report, its
progress, its failures), argument errors, and ``fake-llm``'s listen errors."""

from __future__ import annotations

import io
import json
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import msgspec
import pytest

import agentrio
from agentrio import events
from agentrio.cli import _Progress, main
from agentrio.demo import DemoProgress
from agentrio.tracing import MAX_LINE_BYTES, TraceRecord


def agentrio_cmd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrio.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


@contextmanager
def fake_llm_process(*args: str) -> Iterator[str]:
    """``agentrio fake-llm --port 0 *args`` in a process of its own; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentrio.cli", "fake-llm", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("agentrio fake LLM server on http://127.0.0.1:"), line
        yield line.split()[5]
    finally:
        process.terminate()
        process.communicate(timeout=30)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " running, " in line]


def test_demo_subprocess() -> None:
    result = agentrio_cmd("demo", "--agents", "50")
    assert result.returncode == 0, result.stderr
    assert "agentrio demo: 50 agents" in result.stdout
    assert "done=50" in result.stdout
    assert "model calls   150" in result.stdout
    assert "tool calls    100" in result.stdout
    # The summary says which path it measured, and what to try next.
    assert "  path          HTTP: each model call is a request through a Provider" in result.stdout
    assert "  try           --in-process, to measure the runtime alone" in result.stdout
    assert "--base-url http://127.0.0.1:11434/v1" in result.stdout
    # Progress went to stderr (a pipe here: plain lines, no \r), ending with the totals.
    lines = progress_lines(result.stderr)
    assert lines and lines[-1].startswith("agentrio demo: 0 running, 50/50 finished, ")
    assert "9,500 tokens" in lines[-1]
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    assert progress_lines(result.stderr) == result.stderr.splitlines()  # nothing else


def test_demo_in_process_flag() -> None:
    result = agentrio_cmd("demo", "--agents", "50", "--in-process")
    assert result.returncode == 0, result.stderr
    assert "done=50" in result.stdout
    assert "  path          in-process: each model call is a function call, no HTTP" in (
        result.stdout
    )
    assert "  try           without --in-process, to measure the HTTP path too" in result.stdout


def test_fake_llm_context_window_answers_as_the_api_does() -> None:
    with fake_llm_process("--context-window", "5") as url:
        messages = [{"role": "user", "content": "x" * 35}]  # 11 tokens
        long = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": messages})
        short = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
    assert short.status_code == 200


def test_a_demo_refused_by_the_server_exits_1_and_says_why_once() -> None:
    key = "wrong-key-SECRET-1234"
    with fake_llm_process("--api-key", "the-right-key") as url:
        result = agentrio_cmd(
            "demo",
            "--agents",
            "40",
            "--base-url",
            f"{url}/v1",
            "--api-key-env",
            "DEMO_KEY",
            env={"DEMO_KEY": key},
        )
    assert result.returncode == 1
    assert "error=40" in result.stdout
    assert "agentrio demo: 40 of 40 runs failed:" in result.stderr
    assert "  AuthError, 40 runs:" in result.stderr
    # The cause, once (not once per run): the 401 and the server's message.
    assert result.stderr.count("refused the credentials (HTTP 401)") == 1
    assert "check DEMO_KEY; the server said: " in result.stderr
    assert "invalid or missing API key" in result.stderr
    assert "--api-key-env NAME" in result.stdout  # what to try
    assert key not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def only_these_variables(home: pathlib.Path, **variables: str) -> dict[str, str]:
    """An environment with no agentrio.toml to find and no provider variable but *variables*."""
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(home), **variables}


def test_the_demo_on_a_built_in_instance_with_only_variables_set(tmp_path: pathlib.Path) -> None:
    key = "sk-FAKE-SECRET-7f3a"
    with fake_llm_process("--api-key", key) as url:
        result = subprocess.run(
            [sys.executable, "-m", "agentrio", "demo", "--model", "openai:gpt-5-mini"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
            env=only_these_variables(tmp_path, OPENAI_API_KEY=key, OPENAI_BASE_URL=f"{url}/v1"),
        )
    assert result.returncode == 0, result.stderr
    # Ten agents by default on a provider instance (a real one costs money).
    assert "agentrio demo: 10 agents" in result.stdout
    assert f"  model         openai:gpt-5-mini at {url}/v1 (openai)" in result.stdout
    assert "done=10" in result.stdout and "model calls   30" in result.stdout
    assert key not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({}, "'OPENAI_API_KEY' (api_key_env) is not set"),
        ({"OPENAI_API_KEY": "sk-FAKE-SECRET-7f3a "}, "'OPENAI_API_KEY' (api_key_env) holds"),
        (
            {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "sk-FAKE-SECRET-7f3a"},
            "OPENAI_BASE_URL is not a usable URL",
        ),
    ],
)
def test_the_demo_names_an_unusable_variable(
    tmp_path: pathlib.Path, variables: dict[str, str], named: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentrio", "demo", "--model", "openai:gpt-5-mini"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=only_these_variables(tmp_path, **variables),
    )
    assert result.returncode == 1
    assert result.stderr.startswith("agentrio demo: provider 'openai': the environment variable ")
    assert named in result.stderr
    assert "sk-FAKE-SECRET" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_a_demo_against_an_unreachable_url_exits_1_and_names_it() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = agentrio_cmd("demo", "--agents", "20", "--base-url", url)
    assert result.returncode == 1
    assert "error=20" in result.stdout
    assert result.stderr.count("ProviderUnavailable") == 1
    causes = result.stderr.split("runs failed:\n", 1)[1].splitlines()
    assert causes[0] == "  ProviderUnavailable, 20 runs:"
    assert 2 <= len(causes) <= 4  # each distinct message once, at most 3
    assert all(f"ConnectError talking to {url}" in line for line in causes[1:])
    assert f"check that a server answers at {url}" in result.stdout
    assert "Traceback" not in result.stderr


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
    # What was reserved, and why it was refused.
    (budget,) = [line for line in out.splitlines() if line.startswith("  budget ")]
    assert "runs stopped: each model call first reserves its prompt's estimate plus " in budget
    assert "max_output_tokens (1,024) from max_total_tokens (500)" in budget
    assert "did not fit in the" in budget and "left" in budget
    assert "a larger --max-total-tokens" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "anthropic"], "error: --kind needs --base-url"),
        (["--api-key-env", "KEY"], "error: --api-key-env needs --base-url"),
        (
            ["--kind", "ollama", "--api-key-env", "K"],
            "error: --kind and --api-key-env need --base-url",
        ),
        (
            ["--in-process", "--base-url", "http://127.0.0.1:1/v1"],
            "error: --in-process and --base-url exclude each other",
        ),
        (
            ["--in-process", "--model", "openai:gpt-5-mini"],
            "error: --in-process and --model INSTANCE:MODEL exclude each other",
        ),
        (["--agnets", "5"], "error: unrecognized arguments: --agnets 5 (did you mean --agents?)"),
        # No abbreviations: --api-key is not taken for --api-key-env (it would hold a key).
        (["--api-key", "sk-1"], "error: unrecognized arguments: --api-key sk-1"),
        (["--agent", "5"], "error: unrecognized arguments: --agent 5 (did you mean --agents?)"),
    ],
)
def test_demo_flags_that_mean_nothing_are_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: agentrio demo ")  # the command's usage, not the top level's
    assert f"agentrio demo: {message}" in err


def test_fake_llm_unknown_flag_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fake-llm", "--prot", "8000"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "agentrio fake-llm: error: unrecognized arguments: --prot 8000 (did you mean --port?)"
        in err
    )


def test_an_unknown_flag_subprocess() -> None:
    result = agentrio_cmd("demo", "--foo")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "agentrio demo: error: unrecognized arguments: --foo"


def test_fake_llm_on_a_busy_port_says_so_in_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = agentrio_cmd("fake-llm", "--port", str(port))
    assert result.returncode == 2
    assert result.stderr == (
        f"agentrio fake-llm: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )
    assert result.stdout == ""


def test_fake_llm_on_an_address_not_here_says_so_in_one_line() -> None:
    # 192.0.2.1 is TEST-NET-1: never this machine's, and no network is needed to find out.
    result = agentrio_cmd("fake-llm", "--host", "192.0.2.1", "--port", "0")
    assert result.returncode == 2
    assert result.stderr == (
        "agentrio fake-llm: cannot listen on 192.0.2.1:0: cannot assign requested address\n"
    )


# -- the progress line -------------------------------------------------------------------------


def snap(finished: int, elapsed: float, *, final: bool = False) -> DemoProgress:
    return DemoProgress(100, 100, finished, elapsed, finished * 190, None, final)


def test_progress_on_a_terminal_is_one_line_redrawn() -> None:
    out = io.StringIO()
    show = _Progress(out, tty=True)
    for p in (snap(0, 0.5), snap(40, 1.0), snap(100, 1.2, final=True)):
        show(p)
    show.close()  # already closed by the final snapshot: no second newline
    lines = [snap(0, 0.5).line(), snap(40, 1.0).line(), snap(100, 1.2, final=True).line()]
    assert out.getvalue() == "".join(f"\r{line}\x1b[K" for line in lines) + "\n"


def test_progress_elsewhere_is_plain_lines_at_tenths_every_5_s_and_at_the_end() -> None:
    out = io.StringIO()
    show = _Progress(out, tty=False)
    shown = []
    for p in (
        snap(0, 0.5),  # nothing new
        snap(5, 1.0),  # not yet a tenth
        snap(12, 1.5),  # a tenth done: shown
        snap(19, 2.0),  # the same tenth
        snap(19, 6.5),  # 5 s since the last line: shown
        snap(19, 7.0),
        snap(55, 7.5),  # tenths 1 -> 5: shown once
        snap(100, 8.0, final=True),  # the end: always shown
    ):
        before = out.getvalue()
        show(p)
        if out.getvalue() != before:
            shown.append(p.finished)
    assert shown == [12, 19, 55, 100]
    assert "\r" not in out.getvalue() and out.getvalue().count("\n") == 4
    show.close()
    assert out.getvalue().count("\n") == 4  # nothing left open


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


def test_python_dash_m_agentrio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentrio", "demo", "--agents", "3", "--in-process"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "done=3" in result.stdout


def log_lines(stderr: str, level: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"{level} agentrio")]


@pytest.mark.parametrize("verbose", [[], ["-v"], ["-vv"]])
def test_the_demo_logs_warnings_on_stderr_and_more_with_v(verbose: list[str]) -> None:
    key = "sk-logs-DISTINCT-5e7a91"
    faults = ["--server-error", "0.1", "--rate-limit", "0.1", "--retry-after", "0"]
    with fake_llm_process("--api-key", key, *faults) as url:
        args = ["--agents", "20", "--base-url", f"{url}/v1", "--api-key-env", "DEMO_KEY"]
        result = agentrio_cmd("demo", *args, *verbose, env={"DEMO_KEY": key})
    assert result.returncode == 0, result.stderr
    warnings = log_lines(result.stderr, "WARNING")
    assert any(
        line.startswith("WARNING agentrio.providers: provider 'demo': attempt 1 failed (HTTP ")
        for line in warnings
    ), result.stderr
    debug = log_lines(result.stderr, "DEBUG")
    if verbose == ["-vv"]:
        assert any("agentrio.http: HTTP Request: POST http://127.0.0.1:" in x for x in debug)
    else:
        assert not debug
    assert key not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_v_may_come_before_the_command_too() -> None:
    with fake_llm_process() as url:
        result = agentrio_cmd("-vv", "demo", "--agents", "2", "--base-url", f"{url}/v1")
    assert result.returncode == 0, result.stderr
    assert log_lines(result.stderr, "DEBUG")


# -- agentrio trace ----------------------------------------------------------------------


def test_demo_trace_then_trace_and_html(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    html = tmp_path / "report.html"
    demo = agentrio_cmd("demo", "--agents", "30", "--in-process", "--trace", str(trace))
    assert demo.returncode == 0, demo.stderr
    shown = agentrio_cmd("trace", str(trace))
    assert shown.returncode == 0, shown.stderr
    assert "30 agents" in shown.stdout and "stop reasons: done 30" in shown.stdout
    assert "... 10 more" in shown.stdout
    assert agentrio_cmd("trace", str(trace), "--expand").stdout.count("phases 1 (done 1)") == 30
    only = agentrio_cmd("trace", str(trace), "--path", "agent-7").stdout
    assert only.count("phases 1") == 1
    wrote = agentrio_cmd("trace", str(trace), "--html", str(html))
    assert wrote.returncode == 0 and html.read_text().startswith("<!doctype html>")


def test_trace_to_perfetto_and_html_at_once(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    demo = agentrio_cmd("demo", "--agents", "12", "--in-process", "--trace", str(trace))
    assert demo.returncode == 0, demo.stderr
    html, perfetto = tmp_path / "report.html", tmp_path / "run.json"
    wrote = agentrio_cmd("trace", str(trace), "--perfetto", str(perfetto), "--html", str(html))
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout == f"agentrio trace: wrote {html}\nagentrio trace: wrote {perfetto}\n"
    assert html.read_text().startswith("<!doctype html>")
    slices = json.loads(perfetto.read_bytes())["traceEvents"]
    threads = [e["args"]["name"] for e in slices if e["name"] == "thread_name"]
    agents = [name for name in threads if "agent-" in name]
    assert len(agents) == 12 and agents.index("agent-2") < agents.index("agent-10")
    assert sum(e["name"] == "phase: done" for e in slices) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "run.json", "run.jsonl"]


def test_trace_to_perfetto_from_a_bad_trace_leaves_the_old_file(tmp_path: pathlib.Path) -> None:
    bad, out = tmp_path / "bad.jsonl", tmp_path / "run.json"
    write_trace(bad, synthetic(3), tail=b"not json\n")
    out.write_text("the old one")
    shown = agentrio_cmd("trace", str(bad), "--perfetto", str(out))
    assert shown.returncode == 1 and "line 13" in shown.stderr
    assert out.read_text() == "the old one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "run.json"]


def test_trace_never_writes_over_the_trace_or_one_output_over_the_other(
    tmp_path: pathlib.Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    write_trace(trace, synthetic(3))
    kept = trace.read_bytes()
    (tmp_path / "link.jsonl").symlink_to(trace)
    for option in ("--perfetto", "--html"):
        for out in (str(trace), str(tmp_path / "." / "run.jsonl"), str(tmp_path / "link.jsonl")):
            shown = agentrio_cmd("trace", str(trace), option, out)
            assert shown.returncode == 2 and "is the trace file itself" in shown.stderr
            assert shown.stdout == "" and trace.read_bytes() == kept
    both = str(tmp_path / "out")
    shown = agentrio_cmd("trace", str(trace), "--html", both, "--perfetto", both)
    assert shown.returncode == 2 and "name one file" in shown.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "run.jsonl"]


def test_trace_says_that_the_text_view_s_options_do_not_shape_the_files(
    tmp_path: pathlib.Path,
) -> None:
    trace, out = tmp_path / "run.jsonl", tmp_path / "run.json"
    write_trace(trace, synthetic(3))
    shown = agentrio_cmd("trace", str(trace), "--perfetto", str(out), "--path", "agent-1")
    assert shown.returncode == 0 and shown.stdout == f"agentrio trace: wrote {out}\n"
    assert shown.stderr == (
        "agentrio trace: --path shapes the text view only; --html and --perfetto show the"
        " whole run\n"
    )
    assert agentrio_cmd("trace", str(trace), "--perfetto", str(out)).stderr == ""


def test_trace_to_a_folder_that_does_not_exist_names_the_output(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    write_trace(trace, synthetic(3))
    out = tmp_path / "no" / "run.json"
    shown = agentrio_cmd("trace", str(trace), "--perfetto", str(out))
    assert shown.returncode == 1
    assert shown.stderr == f"agentrio trace: cannot write {str(out)!r}: no such file or directory\n"


def test_trace_of_a_missing_or_corrupt_file(tmp_path: pathlib.Path) -> None:
    missing = agentrio_cmd("trace", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1 and "nope.jsonl" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n{}\n")
    corrupt = agentrio_cmd("trace", str(bad))
    assert corrupt.returncode == 1 and "line 1" in corrupt.stderr


def synthetic(agents: int) -> list[TraceRecord]:
    """A trace of *agents* agents under team/, one phase each (4 events an agent)."""
    out: list[TraceRecord] = []
    for i in range(agents):
        path, t = f"team/agent-{i}", 1000.0 + i / 1000
        usage = agentrio.Usage(input_tokens=10, output_tokens=5)
        out.append(TraceRecord(t, events.PhaseStarted(path=path)))
        out.append(TraceRecord(t, events.TurnStarted(path=path, iteration=1)))
        out.append(TraceRecord(t, events.TurnEnded(path=path, iteration=1, usage=usage)))
        out.append(TraceRecord(t, events.PhaseEnded(path=path, stop_reason="done", iterations=1)))
    return out


def write_trace(path: pathlib.Path, records: list[TraceRecord], tail: bytes = b"") -> None:
    """*records* as a trace file, one JSON line each, then *tail*."""
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records) + tail)


def test_trace_of_a_hostile_file_is_an_error_not_a_traceback(tmp_path: pathlib.Path) -> None:
    deep = b'{"t":1,"e":{"type":"Stalled","path":"a","x":' + b"[" * 100_000 + b"]" * 100_000
    cases = {
        "utf8.jsonl": b'{"t":1,"e":{"type":"Stalled","path":"\xff","why":"x"}}\n',
        "deep.jsonl": deep + b"}}\n",
        "long.jsonl": b"x" * (MAX_LINE_BYTES + 10),
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        shown = agentrio_cmd("trace", str(tmp_path / name))
        assert shown.returncode == 1 and "Traceback" not in shown.stderr, shown.stderr
        assert shown.stderr.startswith(f"agentrio trace: trace file '{tmp_path / name}', line 1")
    zero = agentrio_cmd("trace", "/dev/zero")
    assert zero.returncode == 1 and "longer than 16777216 bytes" in zero.stderr, zero.stderr


def test_trace_escapes_control_characters(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    evil = "team/agent-1\x1b[2J\x1b]0;owned\x07"
    write_trace(
        trace,
        [
            TraceRecord(1.0, events.PhaseStarted(path=evil)),
            TraceRecord(1.0, events.PhaseError(path=evil, error_type="X", error="\x1b[31mred")),
            TraceRecord(2.0, events.PhaseEnded(path=evil, stop_reason="error", iterations=1)),
        ],
    )
    shown = agentrio_cmd("trace", str(trace), "--expand")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "agent-1\\x1b[2J\\x1b]0;owned\\x07" in shown.stdout
    assert "X: \\x1b[31mred" in shown.stdout


def test_trace_into_a_closed_pipe_exits_quietly(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    write_trace(trace, synthetic(5000))  # (more text than a pipe holds)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentrio.cli", "trace", str(trace), "--expand"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"trace: ")  # as `| head -1` does
    process.stdout.close()
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=120) == 141
    assert stderr == b""


def test_trace_says_when_a_filter_matches_nothing(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    write_trace(trace, synthetic(3))
    for flags in (["--path", "nobody"], ["--stop-reason", "timeout"], ["--error", "nope"]):
        shown = agentrio_cmd("trace", str(trace), *flags)
        assert shown.returncode == 1
        assert shown.stderr == f"agentrio trace: nothing matches {flags[0]} {flags[1]!r}\n"
        assert shown.stdout.startswith("trace: 12 events")  # the summary all the same
    found = agentrio_cmd("trace", str(trace), "--path", "team/agent-1")
    assert found.returncode == 0 and found.stderr == ""


def test_trace_notes_a_torn_last_line(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    write_trace(trace, synthetic(3), tail=b'{"t":3.0,"e":{"type":"Pha\xe2\x82')
    shown = agentrio_cmd("trace", str(trace))
    assert shown.returncode == 0 and "3 agents" in shown.stdout
    assert shown.stderr == (
        f"agentrio trace: {str(trace)!r}, line 13: torn (the writer stopped in the middle"
        " of it); left out\n"
    )


def test_trace_sorts_agents_naturally(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "run.jsonl"
    write_trace(trace, synthetic(12))
    shown = agentrio_cmd("trace", str(trace), "--expand").stdout.splitlines()
    names = [line.split()[0] for line in shown if line.startswith("  agent-")]
    assert names == [f"agent-{i}" for i in range(12)]
