"""The docs are true: every Python block runs and prints what the page shows,
the API reference documents every public name, and docstrings are Markdown.

The conventions (CONTRIBUTING.md, "Writing the docs"):

- A ```python block is a complete program. It is run in a fresh process (a
  fork of a server that has imported agentrio), in an empty directory, with
  no network but 127.0.0.1, and what it prints (stdout) must be the ```text
  block that follows it (only blank lines between), exactly, but for
  trailing spaces. A block with no ```text block
  after it must print nothing.
- A block that is a test file says so on the line before its fence:
  ``<!-- docs-test: pytest -->``. It is run with pytest (pytest-trio in trio
  mode) and must pass; when a ```console block follows it, the summary pytest
  prints ("2 passed", its time left out) must be the last line shown.
- A block that cannot run alone (a fragment of a larger program, or one that
  needs a real server or a package agentrio does not install) says so in an
  HTML comment on the line before its fence: ``<!-- docs-test: skip (why) -->``.
  Skipped blocks are counted below: a new one is a decision.
- Every block that runs is also type-checked with ``mypy --strict``, as a
  user's program would be, but for its own functions, which may be left
  unannotated (``def model(messages, tools):`` reads better in an example);
  their bodies are checked all the same (--strict checks untyped defs). A
  block that runs but cannot type-check says why on the line before its
  fence, ``<!-- docs-test: no-typecheck (why) -->``, counted in NOT_TYPED.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentrio

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
REFERENCE = ROOT / "docs" / "reference"

# Every skipped block, by page: raise a number only with a reason in the page.
SKIPPED = {
    "docs/agents.md": 1,
    "docs/concepts.md": 1,
    "docs/fake_server.md": 2,
    # (they start Ray: tests/ray/test_howto.py runs one, test_kill.py does what the other shows)
    "docs/howto/cluster.md": 2,
    "docs/howto/durable.md": 1,  # (the PostgreSQL example needs a server)
    "docs/providers.md": 3,
}

# Every block that runs but is not type-checked, by page (keep it empty if you can).
NOT_TYPED: dict[str, int] = {}

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(
    r"^<!-- docs-test: (?:(?P<pytest>pytest)|skip \((?P<why>[^)]+)\)"
    r"|no-typecheck \((?P<untyped>[^)]+)\)) -->\s*$"
)


@dataclass
class Block:
    page: str  # relative to the repository, as in the test ids
    line: int  # of the opening fence
    code: str
    output: str | None  # the ```text (or, for a test file, ```console) block that follows
    skip: str | None  # the reason given, if the block is skipped
    pytest: bool = False  # a test file, run with pytest
    untyped: str | None = None  # the reason given, if the block is not type-checked

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _fences(lines: list[str]) -> list[tuple[int, int, str]]:
    """(opening line, closing line, language) of every top-level fenced block."""
    found = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"unclosed fence at line {i + 1}"
        found.append((i, end, match.group(1)))
        i = end + 1
    return found


def page_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    fences = _fences(lines)
    blocks = []
    for k, (start, end, lang) in enumerate(fences):
        if lang != "python":
            continue
        marker = MARKER.match(lines[start - 1]) if start else None
        is_test = bool(marker and marker.group("pytest"))
        output = None
        if k + 1 < len(fences):
            n_start, n_end, n_lang = fences[k + 1]
            between = lines[end + 1 : n_start]
            if n_lang == ("console" if is_test else "text") and not any(
                line.strip() for line in between
            ):
                output = "\n".join(lines[n_start + 1 : n_end])
        blocks.append(
            Block(
                page,
                start + 1,
                "\n".join(lines[start + 1 : end]) + "\n",
                output,
                marker.group("why") if marker else None,
                is_test,
                marker.group("untyped") if marker else None,
            )
        )
    return blocks


BLOCKS = [block for path in PAGES for block in page_blocks(path)]

# The child's first code: refuse any connection but to loopback.
GUARD = """\
import ipaddress, socket

def _loopback(host):
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

def _check(address):
    if isinstance(address, tuple) and not _loopback(address[0]):
        raise OSError(f"docs blocks may not reach the network: {address!r}")

_connect, _connect_ex, _getaddrinfo = (
    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo)

def _guarded_connect(self, address):
    _check(address)
    return _connect(self, address)

def _guarded_connect_ex(self, address):
    _check(address)
    return _connect_ex(self, address)

def _guarded_getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if not _loopback(name):
        raise OSError(f"docs blocks may not reach the network: {name!r}")
    return _getaddrinfo(host, *args, **kwargs)

def guard():
    socket.socket.connect = _guarded_connect
    socket.socket.connect_ex = _guarded_connect_ex
    socket.getaddrinfo = _guarded_getaddrinfo
"""

# One interpreter per block, as a user runs it, costs 0.4 s of imports each.
# So a fork server imports agentrio once, and forks a fresh child per block:
# it reads one job (JSON) per line, answers the child's pid, then its exit code.
FORK_SERVER = (
    GUARD
    + """
import json, os, runpy, sys, traceback
import agentrio, agentrio.testing, httpx, msgspec, trio

for line in sys.stdin:
    job = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(job["cwd"])
            for fd, name, flags in ((0, os.devnull, os.O_RDONLY), (1, job["out"], os.O_WRONLY),
                                    (2, job["err"], os.O_WRONLY)):
                os.dup2(os.open(name, flags | (os.O_CREAT if fd else 0)), fd)
            sys.stdin = open(os.devnull)
            guard()
            sys.argv = [job["script"]]
            runpy.run_path(job["script"], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps(pid), flush=True)
    print(json.dumps(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])), flush=True)
"""
)

# A test file (and any block where there is no fork) runs in an interpreter of its own.
ALONE = (
    GUARD
    + """
import runpy, sys
guard()
if sys.argv[1] == "pytest":
    import pytest
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-o", "trio_mode=true", sys.argv[2]]))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
)

TIMEOUT = 120  # seconds a block may take


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "NO_COLOR": "1"}
    src = str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


class ForkServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORK_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_env(),
            text=True,
        )

    def run(self, script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        out, err = script.with_suffix(".out"), script.with_suffix(".err")
        job = {"script": str(script), "cwd": str(cwd), "out": str(out), "err": str(err)}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())
        timer = threading.Timer(TIMEOUT, os.kill, (pid, signal.SIGKILL))
        timer.start()
        try:
            code = json.loads(self.proc.stdout.readline())
        finally:
            timer.cancel()
        stdout, stderr = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
        return subprocess.CompletedProcess([str(script)], code, stdout, stderr)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer | None]:
    if not hasattr(os, "fork"):
        yield None
        return
    server = ForkServer()
    yield server
    server.close()


def _run(
    block: Block, tmp_path: Path, fork_server: ForkServer | None
) -> subprocess.CompletedProcess[str]:
    """Run *block* in an empty directory of its own; what it printed, and its exit code."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    script = tmp_path / ("test_block.py" if block.pytest else "block.py")
    script.write_text(block.code, encoding="utf-8")
    if fork_server is not None and not block.pytest:
        return fork_server.run(script, cwd)
    args = ["pytest", str(script)] if block.pytest else [str(script)]
    return subprocess.run(
        [sys.executable, "-c", ALONE, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.skip is None], ids=str)
def test_block_prints_what_the_page_shows(
    block: Block, tmp_path: Path, fork_server: ForkServer | None
) -> None:
    result = _run(block, tmp_path, fork_server)
    assert result.returncode == 0, f"{block} failed:\n{result.stdout}{result.stderr}"
    if block.pytest:
        if block.output is not None:
            summary = re.sub(r" in [\d.]+s$", "", _tidy(result.stdout).splitlines()[-1])
            assert summary == _tidy(block.output).splitlines()[-1], result.stdout
        return
    assert _tidy(result.stdout) == _tidy(block.output or ""), (
        f"{block} printed something else than the page shows"
    )


def test_skipped_blocks_are_counted() -> None:
    counted: dict[str, int] = {}
    for block in BLOCKS:
        if block.skip is not None:
            counted[block.page] = counted.get(block.page, 0) + 1
    assert counted == SKIPPED


def test_blocks_are_found() -> None:
    # Guards the tests above against passing because they found nothing.
    pages = {block.page for block in BLOCKS}
    assert {"README.md", "docs/tutorial.md", "docs/agents.md"} <= pages
    assert len(BLOCKS) > 50
    assert all(block.output for block in BLOCKS if block.page == "docs/tutorial.md")


# -- The blocks type-check ----------------------------------------------------

MYPY = (
    "--strict",
    # The blocks' own functions may be unannotated (their bodies are checked).
    "--allow-untyped-defs",
    "--allow-incomplete-defs",
    "--allow-untyped-calls",
    "--python-version",
    "3.11",
    "--no-error-summary",
    "--show-error-codes",
)
MYPY_LINE = re.compile(r"^(?P<file>[\w.]+\.py):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")
TYPED = [b for b in BLOCKS if b.skip is None and b.untyped is None]


def _module(block: Block) -> str:
    return "block_" + re.sub(r"\W", "_", block.page.removesuffix(".md")) + f"_{block.line}.py"


def mypy_errors(blocks: list[Block], where: Path) -> dict[str, list[str]]:
    """What ``mypy --strict`` (as MYPY says) finds in each of *blocks*, each a module
    of its own in *where*: ``str(block)`` to ``"page:line: error: ..."``."""
    by_file = {_module(block): block for block in blocks}
    for name, block in by_file.items():
        (where / name).write_text(block.code, encoding="utf-8")
    cache = ROOT / ".mypy_cache" / "docs-blocks"  # (kept apart from src/'s)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *MYPY, "--cache-dir", str(cache), *sorted(by_file)],
        cwd=where,  # (no pyproject.toml there: MYPY is the whole configuration)
        capture_output=True,
        text=True,
        timeout=600,
    )
    found: dict[str, list[str]] = {str(block): [] for block in blocks}
    for line in result.stdout.splitlines():
        match = MYPY_LINE.match(line)
        assert match is not None and match.group("file") in by_file, result.stdout + result.stderr
        block = by_file[match.group("file")]
        at = block.line + int(match.group("line"))
        found[str(block)].append(f"{block.page}:{at}: {match.group('kind')}: {match.group('text')}")
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return found


@pytest.fixture(scope="module")
def typed_blocks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy's verdict on every block to type-check, in one run (about 15 s cold)."""
    return mypy_errors(TYPED, tmp_path_factory.mktemp("typed"))


@pytest.mark.parametrize("block", TYPED, ids=str)
def test_block_type_checks(block: Block, typed_blocks: dict[str, list[str]]) -> None:
    errors = [line for line in typed_blocks[str(block)] if ": error: " in line]
    assert not errors, "mypy --strict:\n" + "\n".join(typed_blocks[str(block)])


def test_blocks_not_type_checked_are_counted() -> None:
    counted: dict[str, int] = {}
    for block in BLOCKS:
        if block.untyped is not None:
            counted[block.page] = counted.get(block.page, 0) + 1
    assert counted == NOT_TYPED
    assert len(TYPED) > 50


def test_the_type_check_sees_a_misuse_of_the_api(tmp_path: Path) -> None:
    # A list where a sequence is accepted passes; a wrong item is caught, and
    # so is a tool that is not one (AgentSpec.tools was typed object).
    code = (
        "import agentrio\n"
        "from agentrio.testing import Reply, ScriptedModel\n"
        "ok = Reply(tool_calls=[agentrio.ToolCallRequest('f', {})])\n"
        "spec = agentrio.AgentSpec('a', ScriptedModel([ok]), tools=[print])\n"
        "bad = Reply(tool_calls=['f'])\n"
        "agentrio.AgentSpec('b', 'm', tools=[42])\n"
        "agentrio.AgentSpec('c', 'm', env={'A': 1}, lane='fastest')\n"
    )
    block = Block("x.md", 10, code, None, None)
    (errors,) = mypy_errors([block], tmp_path).values()
    lines = [line.split(": ")[0] for line in errors if ": error: " in line]
    assert lines == ["x.md:15", "x.md:16", "x.md:17", "x.md:17"], errors


@pytest.fixture(params=["fork server", "own interpreter"])
def runner(request: pytest.FixtureRequest, fork_server: ForkServer | None) -> ForkServer | None:
    """Both ways a block may be run (the first is the second where there is no fork)."""
    return fork_server if request.param == "fork server" else None


def test_a_wrong_output_is_caught(tmp_path: Path, runner: ForkServer | None) -> None:
    block = Block("x.md", 1, "import os\nprint('hello', os.listdir())\n", "hullo", None)
    result = _run(block, tmp_path, runner)
    assert result.returncode == 0, result.stderr
    assert _tidy(result.stdout) == "hello []"  # and it ran in an empty directory
    assert _tidy(result.stdout) != _tidy(block.output or "")


@pytest.mark.parametrize(
    "code, status",
    [("raise ValueError('no')", 1), ("raise SystemExit(3)", 3), ("import sys; sys.exit()", 0)],
)
def test_a_block_exit_status_is_seen(
    code: str, status: int, tmp_path: Path, runner: ForkServer | None
) -> None:
    result = _run(Block("x.md", 1, code + "\n", None, None), tmp_path, runner)
    assert result.returncode == status, result.stderr


@pytest.mark.parametrize(
    "code",
    [
        "socket.create_connection(('example.com', 80), timeout=1)",
        "socket.socket().connect(('192.0.2.1', 80))",
        "trio.run(trio.open_tcp_stream, '192.0.2.1', 80)",
    ],
)
def test_blocks_cannot_reach_the_network(
    code: str, tmp_path: Path, runner: ForkServer | None
) -> None:
    program = f"import socket\nimport trio\n{code}\n"
    result = _run(Block("x.md", 1, program, None, None), tmp_path, runner)
    assert result.returncode != 0
    assert "may not reach the network" in result.stderr


def test_blocks_can_reach_loopback(tmp_path: Path, runner: ForkServer | None) -> None:
    program = (
        "import socket\n"
        "with socket.create_server(('127.0.0.1', 0)) as server:\n"
        "    socket.create_connection(server.getsockname()).close()\n"
        "print('ok')\n"
    )
    result = _run(Block("x.md", 1, program, "ok", None), tmp_path, runner)
    assert result.stdout == "ok\n", result.stderr


# -- The API reference --------------------------------------------------------

DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


NAMESPACES = (
    "actors",
    "supervisors",
    "events",
    "errors",
    "types",
    "testing",
    "mcp",
    "otel",
    "a2a",
    "mcp_server",
    "agui",
    "ray",
)  # documented whole, each


def public_names() -> dict[str, object]:
    """Every public name, as ``agentrio.X`` or ``agentrio.<namespace>.X``, and its object.

    The top level's names are its ``__all__`` if it has one, else those
    tests/test_exports.py finds; a namespace's are its ``__all__``.
    """
    top = getattr(agentrio, "__all__", None)
    if top is None:
        top = [
            name
            for name, value in vars(agentrio).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        ]
    names = {f"agentrio.{n}": getattr(agentrio, n) for n in top if n != "__version__"}
    for namespace in NAMESPACES:
        module = importlib.import_module(f"agentrio.{namespace}")
        names.update({f"{module.__name__}.{n}": getattr(module, n) for n in module.__all__})
    return names


def _resolve(path: str) -> object:
    """The object a ``::: path`` directive names: a module, or a name in one."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise AssertionError(f"no module in {path!r}")


@functools.cache
def documented_objects() -> tuple[tuple[str, object], ...]:
    """What the reference pages document: each ``::: path`` and, for a
    module, every name of its ``__all__``."""
    found: list[tuple[str, object]] = []
    for page in sorted(REFERENCE.glob("*.md")):
        for path in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            obj = _resolve(path)
            found.append((path, obj))
            if isinstance(obj, types.ModuleType):
                found.extend((f"{path}.{name}", getattr(obj, name)) for name in obj.__all__)
    return tuple(found)


def test_reference_directives_resolve() -> None:
    assert {"agentrio.open_runtime", "agentrio.Budget"} <= set(public_names())
    documented = documented_objects()
    assert len(documented) > 100
    paths = [path for path, _ in documented]
    assert len(paths) == len(set(paths)), "a name is documented twice"


@pytest.mark.parametrize("name", sorted(public_names()))
def test_public_name_is_in_the_reference(name: str) -> None:
    value = public_names()[name]
    assert any(obj is value for _, obj in documented_objects()), (
        f"{name} is in no docs/reference page (add '::: {name}' where a reader would look)"
    )


# -- Docstrings ---------------------------------------------------------------

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj):`")


def test_docstrings_have_no_sphinx_roles() -> None:
    # The reference renders docstrings as Markdown: link a public name as
    # [`Name`][agentrio.Name], write anything else as `code`.
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ROLE.search(line)
    ]
    assert not found, found


def test_docstrings_have_no_rest_literal_blocks() -> None:
    # A reST "::" before an indented block renders as a raw "::" in the
    # Markdown reference: fence the code (```python) instead.
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\w::$", line)
    ]
    assert not found, found
