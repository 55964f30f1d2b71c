"""Guards on the agent layer's rooms: every module in a room, no import cycle between
two rooms, no import of a room a room may not use (``ROOMS`` in tests/_imports.py),
each room's one-line docstring, and docs/design.md's rooms block equal to the table.

Every import counts: module level, function bodies, class bodies, ``TYPE_CHECKING``.
Each rule is checked on the real tree and on small synthetic trees that break it.
"""

from __future__ import annotations

import ast
import pathlib
import re
import textwrap

import pytest
from _imports import (
    ROOMS,
    Tree,
    cycles_inside_rooms,
    pairs_inside_rooms,
    room_cycles,
    room_graph,
    room_violations,
    roomless,
)

REPO = pathlib.Path(__file__).resolve().parent.parent
SRC = REPO / "src"
AGENTS = SRC / "agentrio" / "agents"
DESIGN = REPO / "docs" / "design.md"


@pytest.fixture(scope="module")
def real() -> Tree:
    return Tree.read(SRC)


# -- the real tree -----------------------------------------------------------------------


def test_every_module_of_the_agent_layer_is_in_a_room(real: Tree) -> None:
    assert roomless(real) == [], "put these modules in a room (ROOMS in tests/_imports.py)"


def test_no_import_cycle_between_the_rooms(real: Tree) -> None:
    assert room_cycles(real) == []


# The one pair of modules inside a room that import each other: AgentRef's composing
# methods return the handles (handles.py), and each handle names its AgentRef. The
# loop's circle of 11 modules left from #25 is broken (the agent's state in state.py,
# the seams naming the loop's upper types as aliases, compaction's settings in
# summary.py); any other circle inside a room, a pair included, fails below.
ROOM_PAIRS = [["agentrio.agents.loop.handles", "agentrio.agents.loop.ref"]]


def test_no_import_circle_inside_a_room(real: Tree) -> None:
    assert cycles_inside_rooms(real) == []


def test_the_one_pair_inside_a_room_is_the_known_one(real: Tree) -> None:
    assert pairs_inside_rooms(real) == ROOM_PAIRS


def test_no_room_imports_a_room_it_may_not_use(real: Tree) -> None:
    problems = [str(v) for v in room_violations(real)]
    assert problems == [], "\n" + "\n".join(problems)


# The agent layer's modules hold one job each: none over MAX_LINES, but those
# listed, which may only shrink (tools/mcp.py: 722 lines since the move).
MAX_LINES = 700
LONGER = {"agentrio.agents.tools.mcp": 722}


def test_no_module_of_the_agent_layer_is_over_700_lines(real: Tree) -> None:
    sizes = {
        module: len(path.read_text().splitlines())
        for module, path in real.modules.items()
        if module.startswith("agentrio.agents.")
    }
    over = {m: n for m, n in sizes.items() if n > LONGER.get(m, MAX_LINES)}
    assert over == {}, "split these along a seam of their job"
    assert sizes, "no module read"


def test_the_reader_sees_the_rooms_imports(real: Tree) -> None:
    # Guards the tests above against passing because nothing was read.
    graph = room_graph(real)
    assert {"budgets", "tools", "routing"} <= graph["loop"]
    assert "loop" in graph["composition"]
    assert "loop" in graph["observation"]


def test_each_room_says_its_job_in_one_line() -> None:
    folders = sorted(p for p in AGENTS.iterdir() if (p / "__init__.py").exists())
    assert [p.name for p in folders] == sorted(room.name for room in ROOMS)
    for folder in folders:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc is not None and "\n" not in doc.strip(), folder.name


def test_design_md_draws_the_rooms() -> None:
    text = DESIGN.read_text()
    start = text.index("<!-- rooms:")
    fence = text.index("```", start)
    body = text.index("\n", fence) + 1
    rows = []
    for line in text[body : text.index("```", body)].splitlines():
        match = re.fullmatch(r"(\d+)\s+(\w+)\s+(\w+)/(?:\s{2,}imports (.+))?\s*", line)
        assert match, f"docs/design.md, rooms block: cannot read {line!r}"
        number, name, folder, uses = match.groups()
        assert name == folder, line
        rows.append((int(number), name, tuple(uses.split(", ")) if uses else ()))
    table = [(i, room.name, room.uses) for i, room in enumerate(ROOMS)]
    assert sorted(rows) == table


# -- synthetic trees: each rule broken on purpose ---------------------------------------


def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> Tree:
    base = {"agentrio/__init__.py": "", "agentrio/agents/__init__.py": ""}
    for room in ROOMS:
        base[f"agentrio/agents/{room.name}/__init__.py"] = ""
    for name, text in {**base, **files}.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return Tree.read(tmp_path / "src")


@pytest.mark.parametrize(
    "back",
    [
        "from ..composition.b import B\n",  # module level
        "def f():\n    from ..composition import b\n",  # a function body
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..composition.b import B\n",
        "class A:\n    async def m(self):\n        import agentrio.agents.composition.b\n",
    ],
)
def test_a_cycle_between_two_rooms_is_reported_wherever_its_import_is(
    tmp_path: pathlib.Path, back: str
) -> None:
    tree = _tree(
        tmp_path,
        {
            "agentrio/agents/loop/a.py": back,
            "agentrio/agents/composition/b.py": "from ..loop.a import A\n",
        },
    )
    assert room_cycles(tree) == [["composition", "loop"]]
    (found,) = room_violations(tree)
    assert found.key.startswith("room: agentrio.agents.loop.a (loop) imports")
    assert found.key.endswith("(composition), a room above it")


def test_a_cycle_through_three_rooms_is_reported(tmp_path: pathlib.Path) -> None:
    tree = _tree(
        tmp_path,
        {
            "agentrio/agents/budgets/x.py": "def f():\n    from ..tools import y\n",
            "agentrio/agents/tools/y.py": "from ..routing.z import Z\n",
            "agentrio/agents/routing/z.py": "from agentrio.agents.budgets.x import X\n",
        },
    )
    assert room_cycles(tree) == [["budgets", "routing", "tools"]]


def test_imports_within_a_room_and_down_are_not_reported(tmp_path: pathlib.Path) -> None:
    tree = _tree(
        tmp_path,
        {
            "agentrio/agents/loop/a.py": "from .b import B\nfrom ..budgets.x import X\n",
            "agentrio/agents/loop/b.py": "from .a import A\n",  # (a pair inside one room)
            "agentrio/agents/budgets/x.py": "",
            "agentrio/agents/composition/c.py": "from ..loop import a\n",
        },
    )
    assert room_cycles(tree) == []
    assert room_violations(tree) == []


@pytest.mark.parametrize(
    "back",
    [
        "from .a import A\n",  # module level
        "def f():\n    from . import a\n",  # a function body
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
    ],
)
def test_a_circle_of_three_inside_a_room_is_reported_wherever_its_import_is(
    tmp_path: pathlib.Path, back: str
) -> None:
    tree = _tree(
        tmp_path,
        {
            "agentrio/agents/loop/a.py": "from .b import B\n",
            "agentrio/agents/loop/b.py": "from .c import C\n",
            "agentrio/agents/loop/c.py": back,
        },
    )
    loop = "agentrio.agents.loop"
    assert cycles_inside_rooms(tree) == [[f"{loop}.a", f"{loop}.b", f"{loop}.c"]]


def test_a_pair_inside_a_room_and_a_circle_across_rooms_are_not_inside_one(
    tmp_path: pathlib.Path,
) -> None:
    tree = _tree(
        tmp_path,
        {
            "agentrio/agents/loop/a.py": "from .b import B\n",
            "agentrio/agents/loop/b.py": "from .a import A\nfrom ..tools.x import X\n",
            "agentrio/agents/tools/x.py": "from ..tools.y import Y\n",
            "agentrio/agents/tools/y.py": "from ..loop.a import A\n",
        },
    )
    assert cycles_inside_rooms(tree) == []  # (the rooms' circle: room_cycles reports it)


def test_a_second_pair_inside_a_room_is_reported(tmp_path: pathlib.Path) -> None:
    tree = _tree(
        tmp_path,
        {
            "agentrio/agents/loop/a.py": "from .b import B\n",
            "agentrio/agents/loop/b.py": "def f():\n    from . import a\n",
        },
    )
    assert pairs_inside_rooms(tree) == [["agentrio.agents.loop.a", "agentrio.agents.loop.b"]]
    assert cycles_inside_rooms(tree) == []  # (a pair: only the pinned list catches it)


def test_a_module_outside_the_rooms_is_reported(tmp_path: pathlib.Path) -> None:
    tree = _tree(tmp_path, {"agentrio/agents/loose.py": "", "agentrio/agents/attic/x.py": ""})
    assert roomless(tree) == ["agentrio.agents.attic.x", "agentrio.agents.loose"]
