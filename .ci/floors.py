"""Print a pip constraints file that pins every ``>=`` floor of pyproject.toml.

``.ci/run`` installs agentrio with these constraints in a venv of its own and
runs the tests there, so a floor that does not work fails CI (issue #21).
The runtime dependencies and the extras named on the command line (default:
those ``dev`` pulls in) are read; ``name>=X`` becomes ``name==X``, with its
environment marker kept, its extras dropped (a constraint takes none). A
requirement with no ``>=`` floor is an error: every dependency states the
lowest version it works with.

Usage: python .ci/floors.py [EXTRA ...] > floors.txt
       python .ci/floors.py --check [EXTRA ...]   (in the venv installed with them:
       every floor is what is installed; needs ``packaging``, which pytest brings)
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?P<spec>[^;]*?)\s*(?:;\s*(?P<marker>.+?))?\s*$"
)
FLOOR = re.compile(r"^>=\s*(?P<version>[0-9][0-9A-Za-z.+!-]*)$")


def _requirements(project: dict[str, object], extras: list[str]) -> list[str]:
    """The runtime requirements and those of *extras*, following self-references."""
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    dependencies = project.get("dependencies", [])
    assert isinstance(dependencies, list)
    found = [str(requirement) for requirement in dependencies]
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            sys.exit(f"floors.py: pyproject.toml has no extra {extra!r}")
        for requirement in optional[extra]:
            own = re.fullmatch(rf"\s*{project['name']}\[(?P<extras>[^\]]+)\]\s*", requirement)
            if own:
                todo.extend(name.strip() for name in own.group("extras").split(","))
            else:
                found.append(requirement)
    return found


def constraint(requirement: str) -> str:
    """``name==floor[; marker]`` for the requirement ``name[extras]>=floor[; marker]``."""
    match = REQUIREMENT.match(requirement)
    floor = FLOOR.match(match.group("spec")) if match else None
    if match is None or floor is None:
        sys.exit(f"floors.py: {requirement!r} has no single '>=' floor")
    marker = f"; {match.group('marker')}" if match.group("marker") else ""
    return f"{match.group('name')}=={floor.group('version')}{marker}"


def check(constraints: list[str]) -> None:
    """Exit with a message unless each constraint (whose marker holds) is installed."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement
    from packaging.version import Version

    wrong = []
    for line in constraints:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        floor = Version(next(iter(requirement.specifier)).version)
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            installed = "nothing"
        if installed == "nothing" or Version(installed) != floor:
            wrong.append(f"{requirement.name}: {installed} installed, the floor is {floor}")
    if wrong:
        sys.exit("floors.py: not the floors:\n  " + "\n  ".join(wrong))
    print(f"floors.py: {len(constraints)} floors installed")


def main(argv: list[str]) -> None:
    checking = argv[:1] == ["--check"]
    extras = argv[1:] if checking else argv
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    constraints = [constraint(r) for r in _requirements(project, extras or ["dev"])]
    if checking:
        check(constraints)
    else:
        print("\n".join(constraints))


if __name__ == "__main__":
    main(sys.argv[1:])
