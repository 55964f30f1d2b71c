"""The ``agentrio`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial

import trio

from . import __version__

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrio", description="Many concurrent LLM agents in one process."
    )
    parser.add_argument("--version", action="version", version=f"agentrio {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="run many agents at once on the built-in scripted model"
    )
    demo.add_argument("--agents", type=_positive, default=1000, help="how many (default 1000)")
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
    demo.add_argument("--model", default="demo", help="the model name to ask for (default: demo)")
    demo.add_argument(
        "--kind",
        choices=["openai", "anthropic", "ollama"],
        default="openai",
        help="the wire format at --base-url (default: openai)",
    )
    demo.add_argument(
        "--api-key-env", default=None, help="the environment variable holding the API key"
    )
    demo.add_argument(
        "--in-process",
        action="store_true",
        help="run the scripted model in process, without HTTP (measures the runtime alone)",
    )
    _add_fake_llm(commands)
    return parser


async def _serve_fake_llm(args: argparse.Namespace) -> None:
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
        serve_fake_llm, faults=faults, port=args.port, api_key=args.api_key, host=args.host
    )
    async with trio.open_nursery() as nursery:
        server: FakeLLMServer = await nursery.start(serve)
        print(
            f"agentrio fake LLM server on {server.base_url} (OpenAI /v1/chat/completions, "
            "Anthropic /v1/messages, Ollama /api/chat)",
            flush=True,
        )


def _run_fake_llm(args: argparse.Namespace) -> int:
    try:
        trio.run(_serve_fake_llm, args)
    except BaseException as exc:
        # Ctrl-C is the way to stop it; Trio may deliver it inside a group.
        if isinstance(exc, BaseExceptionGroup):
            rest = exc.split(KeyboardInterrupt)[1]
            if rest is None:
                return 0
        elif isinstance(exc, KeyboardInterrupt):
            return 0
        raise
    return 0  # pragma: no cover - the server runs until interrupted


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        from .errors import AgentrioError

        try:
            report = trio.run(
                lambda: run_demo(
                    args.agents,
                    max_total_tokens=args.max_total_tokens,
                    base_url=args.base_url,
                    model=args.model,
                    kind=args.kind,
                    api_key_env=args.api_key_env,
                    over_http=not args.in_process,
                )
            )
        except AgentrioError as exc:
            print(f"agentrio demo: {exc}", file=sys.stderr)
            return 1
        print(f"agentrio demo: {args.agents} agents, one phase each")
        print(report.table())
        return 0
    if args.command == "fake-llm":
        return _run_fake_llm(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
