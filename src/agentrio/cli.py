"""The ``agentrio`` command."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import pathlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

import trio

from ._version import __version__

if TYPE_CHECKING:
    from .agents.loop.spec import AgentSpec
    from .agents.tools.tool import Tool
    from .demo import DemoProgress
    from .tracing.view import Trace

__all__ = ["main"]


def _checked(
    kind: Callable[[str], float], what: str, bounds: str, ok: Callable[[float], bool]
) -> Callable[[str], float]:
    """An argparse type: *kind* of the text (else "expected *what*"), within *bounds*."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {bounds}, got {value}")
        return value

    return parse


_positive = _checked(int, "a whole number", "a number >= 1", lambda v: v >= 1)
_share = _checked(float, "a number", "a share between 0 and 1", lambda v: 0.0 <= v <= 1.0)
_seconds = _checked(float, "seconds", "seconds >= 0", lambda v: v >= 0.0)
_port = _checked(int, "a port number", "a port from 0 to 65535", lambda v: 0 <= v <= 65535)


def _add_fake_llm(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fake = commands.add_parser(
        "fake-llm",
        allow_abbrev=False,
        help="serve the built-in scripted model over the OpenAI, Anthropic and Ollama APIs",
        description="A fake LLM server for trying providers and clients without a real model. "
        "Fault rates are shares of requests, from 0 to 1.",
    )
    fake.add_argument("--port", type=_port, default=8000, help="0 picks a free one (default 8000)")
    fake.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    fake.add_argument("--seed", type=int, default=0, help="seed of the fault draws (default 0)")
    fake.add_argument("--api-key", default=None, help="require this key (default: none)")
    rates = [
        ("--rate-limit", "answer 429 with Retry-After"),
        ("--server-error", "answer 500"),
        ("--truncate", "cut streamed answers short"),
        ("--malformed", "send tool-call arguments as broken JSON"),
        ("--garbage", "answer 200 with a body that is not JSON"),
        ("--reset", "reset the connection without answering"),
        ("--delay", "delay answers by --delay-seconds"),
    ]
    for flag, what in rates:
        fake.add_argument(flag, type=_share, default=0.0, metavar="R", help=f"share to {what}")
    fake.add_argument("--delay-seconds", type=_seconds, default=1.0, metavar="S")
    fake.add_argument("--retry-after", type=_seconds, default=1.0, metavar="S")
    fake.add_argument(
        "--context-window",
        type=_positive,
        default=None,
        metavar="N",
        help="answer a request over N tokens as each API answers one over the model's window",
    )


_AGENTS = 1000  # the demo's swarm on the scripted model...
_AGENTS_ON_INSTANCE = 10  # ...and on a provider instance, most likely a paid API


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run many agents at once on the built-in scripted model",
        description="Run many agents at once, each one phase of three model calls and two "
        "tool calls, and report what they did. Progress goes to stderr, the report to stdout; "
        "the exit status is 1 if any run failed.",
        allow_abbrev=False,
    )
    demo.add_argument(
        "--agents",
        type=_positive,
        default=None,
        help=f"how many (default {_AGENTS}; {_AGENTS_ON_INSTANCE} with --model INSTANCE:MODEL)",
    )
    demo.add_argument(
        "--max-total-tokens",
        type=_positive,
        default=None,
        help="a budget for the whole swarm (default: none)",
    )
    demo.add_argument(
        "--base-url",
        default=None,
        help="a real OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 for a local "
        "Ollama (default: the built-in fake LLM server on 127.0.0.1)",
    )
    demo.add_argument(
        "--model",
        default="demo",
        help="the model name to ask for (default: demo); without --base-url, INSTANCE:MODEL "
        "(openai:gpt-5-mini, anthropic:MODEL, ollama:MODEL, or an instance of agentrio.toml) "
        "runs the demo on that real provider, set by its environment variables "
        "(OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OLLAMA_HOST)",
    )
    demo.add_argument(
        "--kind",
        choices=["openai", "anthropic", "ollama", "openai-responses"],
        default=None,
        help="the wire format at --base-url (default: openai); only with --base-url",
    )
    demo.add_argument(
        "--api-key-env",
        default=None,
        help="the environment variable holding the API key; only with --base-url",
    )
    demo.add_argument(
        "--in-process",
        action="store_true",
        help="run the scripted model in process, without HTTP (measures the runtime alone)",
    )
    demo.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="write every event to FILE, one JSON line each (read it with agentrio trace FILE)",
    )


def _add_trace(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trace = commands.add_parser(
        "trace",
        help="show a trace file: a summary and the tree of agents, an HTML report, a Perfetto file",
        description="Print a trace (written by open_runtime(trace=FILE) or agentrio demo "
        "--trace FILE): a summary, then the tree of supervisors, agents and helpers with "
        "their phases, stop reasons, tokens, cost and time. Collapsed to the erring and "
        "slowest agents unless --expand. --html writes a report to look at in a browser, "
        "--perfetto the Chrome trace event format for ui.perfetto.dev or chrome://tracing.",
        allow_abbrev=False,
    )
    trace.add_argument("file", help="the trace file")
    trace.add_argument("--html", default=None, metavar="OUT", help="write an HTML report to OUT")
    trace.add_argument(
        "--perfetto",
        default=None,
        metavar="OUT",
        help="write OUT in the Chrome trace event format (JSON), for ui.perfetto.dev",
    )
    trace.add_argument("--expand", action="store_true", help="show every agent")
    trace.add_argument("--path", default=None, help="only this path and what is under it")
    trace.add_argument("--stop-reason", default=None, help="only agents that stopped so")
    trace.add_argument("--error", default=None, help="only agents with an error containing TEXT")
    trace.add_argument(
        "--budget-tokens",
        type=_positive,
        default=None,
        help="draw this budget in the report (default: the one the trace recorded)",
    )


def _add_mcp_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "mcp-serve",
        help="serve agents as MCP tools, over stdio or streamable HTTP",
        description="Serve the agents of MODULE:NAME (an AgentSpec or a Tool, a list of "
        "them, or a function that returns either) as MCP tools, one per agent (or tool), "
        "each call a phase of a new agent: over stdin and stdout (the default), or over "
        "streamable HTTP with --port. Needs the mcp extra (and uvicorn for HTTP).",
        allow_abbrev=False,
    )
    serve.add_argument("target", metavar="MODULE:NAME", help="where the specs are")
    serve.add_argument(
        "--port", type=_port, default=None, help="serve streamable HTTP here (0: a free one)"
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--config", default=None, help="the runtime's agentrio.toml")
    serve.add_argument("--trace", default=None, metavar="FILE", help="write a trace to FILE")
    serve.add_argument(
        "--timeout", type=_seconds, default=None, metavar="S", help="each call's timeout"
    )
    serve.add_argument(
        "--body-timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="HTTP: seconds a request's body may take to arrive (default 30)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrio",
        description="Many concurrent LLM agents in one process.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"agentrio {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_demo(commands)
    _add_fake_llm(commands)
    _add_trace(commands)
    _add_mcp_serve(commands)
    _add_verbose(parser, 0)
    for command in commands.choices.values():  # (after the command too: demo -v)
        _add_verbose(command, argparse.SUPPRESS)
    return parser


def _add_verbose(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        help="log more on stderr: -v INFO, -vv DEBUG (default: warnings only)",
    )


def _log_to_stderr(verbose: int) -> None:
    """The command's log handler: plain lines on stderr, warnings only unless -v/-vv.

    (The library installs none: this is the program's to choose.)
    """
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The arguments and their command's parser (for errors in the command's words, under
    its usage); exits 2 naming any flag it does not know."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    command: argparse.ArgumentParser = commands.choices[args.command]
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}{_guess(extra, command)}")
    return args, command


def _guess(extra: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """`` (did you mean --agents?)`` for the first unknown flag near a known one."""
    # (argparse has no public list of a parser's flags.)
    known = [flag for action in parser._actions for flag in action.option_strings]
    for arg in extra:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def _check_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Flags that only mean something together; exits 2 naming them."""
    if args.base_url is None:
        given = [
            flag
            for flag, value in (("--kind", args.kind), ("--api-key-env", args.api_key_env))
            if value is not None
        ]
        if given:
            verb = "need" if len(given) > 1 else "needs"
            parser.error(
                f"{' and '.join(given)} {verb} --base-url: they describe the server there, "
                "and without it the demo uses its built-in one"
            )
    elif args.in_process:
        parser.error(
            "--in-process and --base-url exclude each other: --in-process runs the "
            "scripted model without any server"
        )
    if args.in_process and ":" in args.model:
        parser.error(
            "--in-process and --model INSTANCE:MODEL exclude each other: --in-process runs "
            "the scripted model without any server"
        )


def _interrupted(exc: BaseException) -> bool:
    """Is *exc* Ctrl-C (Trio may deliver it inside a group) and nothing else?"""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(KeyboardInterrupt)[1] is None
    return isinstance(exc, KeyboardInterrupt)


class _Progress:
    """The demo's progress on a stream: one line redrawn in place on a terminal,
    plain lines otherwise (at each tenth of the agents done, or every
    *plain_every* seconds, and at the end).
    """

    def __init__(self, stream: TextIO, *, tty: bool, plain_every: float = 5.0) -> None:
        self.stream = stream
        self.tty = tty
        self.plain_every = plain_every
        self._shown_at = 0.0  # elapsed seconds at the last plain line
        self._tenths = 0  # tenths of the agents done at the last plain line
        self._open = False  # a redrawn line is on the terminal, without its newline

    def __call__(self, progress: DemoProgress) -> None:
        if self.tty:
            self.stream.write(f"\r{progress.line()}\x1b[K")
            self._open = True
            if progress.final:
                self.close()
        elif progress.final or self._due(progress):
            self.stream.write(progress.line() + "\n")
            self._shown_at = progress.elapsed
            self._tenths = 10 * progress.finished // max(progress.agents, 1)
        self.stream.flush()

    def _due(self, progress: DemoProgress) -> bool:
        tenths = 10 * progress.finished // max(progress.agents, 1)
        return tenths > self._tenths or progress.elapsed - self._shown_at >= self.plain_every

    def close(self) -> None:
        """End a redrawn line, so that what follows starts on a line of its own."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .errors import AgentrioError

    progress = _Progress(sys.stderr, tty=sys.stderr.isatty())
    if args.agents is None:
        on_instance = args.base_url is None and ":" in args.model
        args.agents = _AGENTS_ON_INSTANCE if on_instance else _AGENTS
    demo = partial(
        run_demo,
        args.agents,
        max_total_tokens=args.max_total_tokens,
        base_url=args.base_url,
        model=args.model,
        kind=args.kind or "openai",
        api_key_env=args.api_key_env,
        over_http=not args.in_process,
        on_progress=progress,
        trace=args.trace,
    )
    try:
        report = trio.run(demo)
    except AgentrioError as exc:
        progress.close()
        print(f"agentrio demo: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:
        progress.close()
        if _interrupted(exc):
            print("agentrio demo: interrupted", file=sys.stderr)
            return 130
        raise
    print(f"agentrio demo: {args.agents} agents, one phase each")
    print(report.table())
    for i, step in enumerate(report.next_steps()):
        print(f"  {'try' if i == 0 else '':<13} {step}")
    if report.failed:
        print(f"agentrio demo: {report.failed} of {report.agents} runs failed:", file=sys.stderr)
        print(*report.causes(), sep="\n", file=sys.stderr)
        return 1
    return 0


async def _serve_fake_llm(args: argparse.Namespace) -> str:
    """Serve until cancelled; returns why it could not listen, if it could not."""
    from .testing.fake_server import FakeLLMServer, Faults, serve_fake_llm

    faults = Faults(
        seed=args.seed,
        rate_limit=args.rate_limit,
        retry_after=args.retry_after,
        server_error=args.server_error,
        delay=args.delay,
        delay_seconds=args.delay_seconds,
        truncate=args.truncate,
        malformed_tool_json=args.malformed,
        garbage=args.garbage,
        reset=args.reset,
    )
    serve = partial(
        serve_fake_llm,
        faults=faults,
        port=args.port,
        api_key=args.api_key,
        host=args.host,
        context_window=args.context_window,
    )
    async with trio.open_nursery() as nursery:
        try:
            server: FakeLLMServer = await nursery.start(serve)
        except OSError as exc:  # a port in use, an address not ours, a host unknown
            return f"cannot listen on {_address(args.host, args.port)}: {_why(exc)}"
        print(
            f"agentrio fake LLM server on {server.base_url} (OpenAI /v1/chat/completions, "
            "OpenAI Responses /v1/responses, Anthropic /v1/messages, Ollama /api/chat)",
            flush=True,
        )
    return ""  # pragma: no cover - the server runs until interrupted


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _why(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def _run_fake_llm(args: argparse.Namespace) -> int:
    try:
        why = trio.run(_serve_fake_llm, args)
    except BaseException as exc:
        if _interrupted(exc):  # Ctrl-C is the way to stop it
            return 0
        raise
    print(f"agentrio fake-llm: {why}", file=sys.stderr)
    return 2


def _load_served(target: str) -> tuple[list[AgentSpec[Any]], list[Tool]]:
    """The specs and tools at *target* (``module:name``), else UsageError saying why."""
    import importlib
    import inspect

    from .agents.loop.spec import AgentSpec
    from .agents.tools.tool import Tool
    from .errors import UsageError

    module_name, _, name = target.partition(":")
    if not module_name or not name:
        raise UsageError(f"expected MODULE:NAME, got {target!r}")
    sys.path.insert(0, os.getcwd())  # (as `python -m` does: the module beside you)
    try:
        value = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load {target!r}: {exc}") from exc
    finally:
        sys.path.pop(0)
    if inspect.isroutine(value):  # (a function that makes them; a Tool is callable too)
        value = value()
    items = [value] if isinstance(value, AgentSpec | Tool) else value
    if not isinstance(items, list | tuple) or not items:
        items = [None]  # (refused below)
    if not all(isinstance(item, AgentSpec | Tool) for item in items):
        raise UsageError(f"{target!r} is not an AgentSpec or a Tool, nor a list of them")
    specs = [item for item in items if isinstance(item, AgentSpec)]
    return specs, [item for item in items if isinstance(item, Tool)]


def _run_mcp_serve(args: argparse.Namespace) -> int:
    from .errors import UsageError

    try:
        served = _load_served(args.target)
        if args.port is None:
            trio.run(_serve_mcp_stdio, args, served)
        else:
            _serve_mcp_http(args, served)
    except UsageError as exc:  # (InvalidArgument, ConfigError too)
        print(f"agentrio mcp-serve: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:
        if _interrupted(exc):  # Ctrl-C is the way to stop it
            return 0
        raise
    return 0


async def _serve_mcp_stdio(
    args: argparse.Namespace, served: tuple[list[AgentSpec[Any]], list[Tool]]
) -> None:
    from . import mcp_server
    from .runtime import open_runtime

    specs, tools = served
    async with open_runtime(config=args.config, trace=args.trace) as rt:
        await mcp_server.serve_stdio(rt, specs, tools=tools, timeout=args.timeout)
        rt.cancel()  # stdin ended: the client is gone, and so are its calls


def _serve_mcp_http(
    args: argparse.Namespace, served: tuple[list[AgentSpec[Any]], list[Tool]]
) -> None:
    import socket

    import uvicorn

    from . import mcp_server
    from .host import open_runtime_sync

    sock = socket.create_server((args.host, args.port))
    with sock, open_runtime_sync(config=args.config, trace=args.trace) as rt:
        specs, tools = served
        app = mcp_server.streamable_http_app(
            rt, specs, tools=tools, timeout=args.timeout, body_timeout=args.body_timeout
        )
        host, port = sock.getsockname()[:2]
        print(f"agentrio mcp-serve: http://{host}:{port}/mcp", file=sys.stderr, flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        with _signals_end_the_server():
            server.run(sockets=[sock])
        # (The block then stops the runtime gracefully: its phases end, its trace is written.)


@contextlib.contextmanager
def _signals_end_the_server() -> Iterator[None]:
    """uvicorn shuts down on SIGINT or SIGTERM, then raises that signal again for
    the handlers it found: let those do nothing while it serves, so the process
    goes on to stop its runtime (and write its trace) rather than dying there."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda sig, frame: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _run_trace(args: argparse.Namespace) -> int:
    from .errors import TraceError
    from .tracing import read_trace
    from .tracing.view import build, render, visible

    records = read_trace(args.file)
    try:
        if args.html is not None or args.perfetto is not None:
            return _write_reports(args)
        trace = build(records)
    except (TraceError, OSError) as exc:
        print(visible(f"agentrio trace: {exc}"), file=sys.stderr)
        return 1
    _note_torn(records.torn, args.file)
    lines = render(
        trace, expand=args.expand, path=args.path, stop_reason=args.stop_reason, error=args.error
    )
    return _out("\n".join(lines), _matched(trace, args))


def _write_reports(args: argparse.Namespace) -> int:
    """Write ``--html`` and ``--perfetto``, each atomically (a temporary file renamed
    over OUT), reading the trace once for each."""
    from .tracing import read_trace
    from .tracing.html import report
    from .tracing.perfetto import chrome_trace, encode
    from .tracing.view import visible
    from .workspace import write_atomic

    given = ((args.html, False), (args.perfetto, True))
    outputs: list[tuple[str, bool]] = [(out, perf) for out, perf in given if out is not None]
    for out, perfetto in outputs:
        # (A typo that names the trace, or the other output, would overwrite it.)
        option = "--perfetto" if perfetto else "--html"
        if _same_file(out, args.file):
            why = f"{option} {out!r} is the trace file itself; nothing written"
            print(visible(f"agentrio trace: {why}"), file=sys.stderr)
            return 2
    if len(outputs) == 2 and _same_file(args.html, args.perfetto):
        print(
            visible(f"agentrio trace: --html and --perfetto name one file, {args.html!r}"),
            file=sys.stderr,
        )
        return 2
    ignored = [
        option
        for option, value in (
            ("--expand", args.expand),
            ("--path", args.path),
            ("--stop-reason", args.stop_reason),
            ("--error", args.error),
        )
        if value
    ]
    if ignored:  # (said, not silently dropped: the files hold the whole run)
        print(
            f"agentrio trace: {', '.join(ignored)} "
            f"{'shapes' if len(ignored) == 1 else 'shape'} the text view only; "
            "--html and --perfetto show the whole run",
            file=sys.stderr,
        )
    wrote = []
    for out, perfetto in outputs:
        records = read_trace(args.file)
        if perfetto:
            data = encode(chrome_trace(records))
        else:
            data = report(records, budget_tokens=args.budget_tokens).encode()
        try:
            write_atomic(pathlib.Path(out), data)
        except OSError as exc:  # (its message names the temporary file, not OUT)
            print(visible(f"agentrio trace: cannot write {out!r}: {_why(exc)}"), file=sys.stderr)
            return 1
        _note_torn(records.torn, args.file)
        wrote.append(visible(f"agentrio trace: wrote {out}"))
    return _out("\n".join(wrote), 0)


def _same_file(a: str, b: str) -> bool:
    """Do paths *a* and *b* name one file (one that exists, or the same path)?"""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _note_torn(torn: int | None, file: str) -> None:
    from .tracing.view import visible

    if torn is not None:
        print(
            visible(
                f"agentrio trace: {file!r}, line {torn}: torn (the writer stopped in the middle"
                " of it); left out"
            ),
            file=sys.stderr,
        )


def _matched(trace: Trace, args: argparse.Namespace) -> int:
    """0; or 1, said on stderr, when filters were given and nothing matches them."""
    from .tracing.view import select, visible

    given = {"--path": args.path, "--stop-reason": args.stop_reason, "--error": args.error}
    filters = " ".join(f"{flag} {value!r}" for flag, value in given.items() if value is not None)
    if not filters or select(
        trace, expand=args.expand, path=args.path, stop_reason=args.stop_reason, error=args.error
    ):
        return 0
    print(visible(f"agentrio trace: nothing matches {filters}"), file=sys.stderr)
    return 1


def _out(text: str, status: int) -> int:
    """Print *text* on stdout; returns *status*, or 141 (as a process killed by
    SIGPIPE) when the reader has gone (``agentrio trace FILE | head -1``)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull, or its flush at exit fails again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Exit statuses: 0 when all went well; 1 when ``demo`` had runs that failed
    (each kind of failure is printed once, on stderr) or could not start; 2
    for a usage error (an unknown flag is named) or when ``fake-llm`` cannot
    listen; 1 when ``trace`` cannot read its file, or its filters (``--path``,
    ``--stop-reason``, ``--error``) match nothing (said on stderr); 141 when
    ``trace``'s reader goes away (``| head``); 130 when the demo is interrupted;
    2 when ``mcp-serve`` cannot load its specs or serve them (said on stderr).
    """
    args, command = _parse(argv)
    _log_to_stderr(args.verbose)
    if args.command == "demo":
        _check_demo(args, command)
        return _run_demo(args)
    if args.command == "fake-llm":
        return _run_fake_llm(args)
    if args.command == "trace":
        return _run_trace(args)
    if args.command == "mcp-serve":
        return _run_mcp_serve(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
