"""The ``agentrio`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import trio

from . import __version__

__all__ = ["main"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        report = trio.run(lambda: run_demo(args.agents, max_total_tokens=args.max_total_tokens))
        print(f"agentrio demo: {args.agents} agents on the scripted model, one phase each")
        print(report.table())
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
