"""Print the import graph's circles among agentrio's modules.

Every import counts, wherever it is written: at module level, in a function or a
method, in a class body, under ``if TYPE_CHECKING:``. The circles are the graph's
strongly connected components of two or more modules. ``--depth N`` first merges each
module into its package N levels deep (``--depth 3`` with the agent layer's rooms:
``agentrio.agents.loop``), so the circles between rooms show.

Run: python tools/import_cycles.py [--src src] [--depth N] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import sys
from collections.abc import Iterator, Mapping

ROOT = "agentrio"

# The circles are found as the layering tests find them (Tarjan's algorithm there).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from _imports import strongly_connected  # noqa: E402


def modules_of(src: pathlib.Path) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every module of the package under *src*."""
    found: dict[str, pathlib.Path] = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(module: str, path: pathlib.Path, known: Mapping[str, pathlib.Path]) -> Iterator[str]:
    """The agentrio modules *module* imports (a name taken from a module counts as
    that module; a parent package, which Python runs too, does not)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            if base.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in known else base


def import_graph(src: pathlib.Path, depth: int = 0) -> dict[str, set[str]]:
    """Module (or package, at *depth*) -> what it imports among agentrio's."""
    known = modules_of(src)

    def node(name: str) -> str:
        return ".".join(name.split(".")[:depth]) if depth else name

    graph: dict[str, set[str]] = {node(m): set() for m in known}
    for module, path in known.items():
        for target in _imported(module, path, known):
            if target in known and node(target) != node(module):
                graph[node(module)].add(node(target))
    return graph


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=pathlib.Path, default=pathlib.Path("src"))
    ap.add_argument("--depth", type=int, default=0, help="merge modules into packages")
    ap.add_argument("--json", action="store_true", help="one JSON list of the circles")
    args = ap.parse_args(argv)
    circles = strongly_connected(import_graph(args.src, args.depth))
    if args.json:
        print(json.dumps(circles))
    else:
        print(f"{len(circles)} circle(s)")
        for circle in circles:
            print(f"  ({len(circle)}) " + " ".join(circle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
