"""agentrio's imports, every one of them, and the rules they are held to.

This is the machinery of ``tests/test_layers.py``, which also checks
docs/design.md against it. It knows nothing of the real tree but :data:`LAYERS`, so the
tests can feed it a synthetic source tree and watch it fail.

An import is read wherever it is written: at module level, inside functions and
methods, in class bodies, under ``if TYPE_CHECKING:``, in ``try``/``except``. Each
``import a.b.c`` names module ``a.b.c``; each ``from m import n`` names module ``m.n``
if that is a module on disk (``from agentrio.actors import actor``), else the name ``n``
of module ``m`` (``from agentrio.actors.actor import _Ask``). Relative imports of any
level are resolved against the importing module's package. Parent packages, which
Python also runs (``agentrio/__init__.py`` for every import of agentrio), are not
counted: they would put every module in one cycle with the top package.

A private name (``_x``, a module or any other name) belongs to the package that holds
it: a folder under agentrio is one package, the base layer's modules are one, and each
other top-level module is its own (see :meth:`Tree.package_of`). A private module of
the top package itself (``agentrio._checks``, ``agentrio._net``) is agentrio's, so
every layer may import it; the private names *inside* it are the base package's.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from collections.abc import Iterable, Iterator, Mapping

ROOT = "agentrio"


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer: its name, its modules and packages, and the lower layers it may import.

    ``members`` are dotted names: a package (``agentrio.actors``) holds every module
    under it, the top package ``agentrio`` only its ``__init__``. ``uses`` is None when
    the layer may import every lower layer, else the names of the lower layers it may
    import (a layer *beside* another, not above it, leaves that one out).
    """

    name: str
    members: tuple[str, ...]
    uses: tuple[str, ...] | None = None


LAYERS: tuple[Layer, ...] = (
    # The one table of agentrio's layers, lowest first: a module may import its own
    # layer and the layers below it (or, where ``uses`` is given, only those named),
    # at module level, in functions and under TYPE_CHECKING alike. docs/design.md
    # draws it (its "layers" block, checked by tests/test_layers.py). A module that
    # no member covers fails the layering test: put it here when you add it.
    Layer(
        "base",
        (
            "agentrio.errors",
            "agentrio.messages",
            "agentrio._checks",
            "agentrio._handles",
            "agentrio._log",
            "agentrio._lazy",
            "agentrio._net",
            "agentrio._text",
            "agentrio._version",
            "agentrio.workspace",
        ),
    ),
    # The kernel: actors, and the supervisors on them (an actor reaches its
    # supervisor through the interface actors.actor.Parent declares).
    Layer("actors", ("agentrio.actors",)),
    Layer("supervisors", ("agentrio.supervisors",)),
    # Providers sit beside the kernel, not on it: a model call needs no actor.
    Layer("providers", ("agentrio.providers",), uses=("base",)),
    # Checkpoint stores keep opaque records: beside the kernel too, on the base only.
    Layer("store", ("agentrio.store",), uses=("base",)),
    Layer("agents", ("agentrio.agents",)),
    Layer("config", ("agentrio.config",)),
    Layer("runtime", ("agentrio.runtime", "agentrio.tracing")),
    Layer(
        "top",
        (
            "agentrio",
            "agentrio.__main__",
            "agentrio.events",
            "agentrio.types",
            "agentrio.memory",  # memory and context providers (#26)
            "agentrio.testing",
            "agentrio.demo",
            "agentrio.cli",
            "agentrio.host",
            # agentrio.ray (the ray extra) sits beside host: agentrio never imports it.
            "agentrio.ray",
            "agentrio.mcp",
            "agentrio.otel",
            "agentrio.a2a",
            # The protocol servers (#28): AG-UI, a swarm as an MCP server, what they share.
            "agentrio.agui",
            "agentrio.mcp_server",
            "agentrio._serving",
        ),
    ),
)


# The agent layer's rooms, lowest first: each a subpackage of agentrio.agents with one
# job, read like LAYERS (a room may import its own and those named in ``uses``), and
# with no import cycle between any two (function-body and TYPE_CHECKING imports
# included). docs/design.md draws it (its "rooms" block, checked by tests/test_rooms.py).
# What sits above the loop plugs into it through loop/seams.py's Protocols.
ROOMS: tuple[Layer, ...] = (
    Layer("budgets", ("agentrio.agents.budgets",), uses=()),
    Layer("tools", ("agentrio.agents.tools",), uses=()),
    Layer("routing", ("agentrio.agents.routing",), uses=("tools",)),
    # Memory and context providers (#26): below the loop, which calls them (loop/recall.py).
    Layer("memory", ("agentrio.agents.memory",), uses=()),
    Layer("loop", ("agentrio.agents.loop",), uses=("budgets", "tools", "routing", "memory")),
    Layer("observation", ("agentrio.agents.observation",), uses=("budgets", "tools", "loop")),
    Layer(
        "durability",
        ("agentrio.agents.durability",),
        uses=("budgets", "tools", "routing", "loop"),
    ),
    Layer(
        "composition",
        ("agentrio.agents.composition",),
        uses=("budgets", "tools", "routing", "loop"),
    ),
    # #26: skills (SKILL.md, activate_skill, narrowing) and security (taint, sanitising)
    Layer("skills", ("agentrio.agents.skills",), uses=("tools", "loop")),
    Layer("security", ("agentrio.agents.security",), uses=("tools", "loop")),
    # Planning and delegation (#26, the planning part): runs of many phases, above the
    # loop (loop/extensions.py's RunDriver) and composition (their children are subagents).
    Layer(
        "delegation",
        ("agentrio.agents.delegation",),
        uses=("budgets", "tools", "routing", "loop", "composition"),
    ),
    Layer(
        "planning",
        ("agentrio.agents.planning",),
        uses=("budgets", "tools", "routing", "loop", "composition", "delegation"),
    ),
)
ROOMS_HOME = "agentrio.agents"  # the package the rooms divide


@dataclasses.dataclass(frozen=True)
class Import:
    """One name an import statement brings in.

    ``target`` is the module imported; ``name`` the name taken from it when that name
    is not itself a module (None for ``import a.b`` and ``from a import module``), or
    ``"*"``.
    """

    module: str
    path: pathlib.Path
    line: int
    target: str
    name: str | None


@dataclasses.dataclass(frozen=True)
class Violation:
    """A broken rule: ``key`` says which, without a line (the line moves with every edit);
    ``where`` says where (``path:line``)."""

    key: str
    where: str

    def __str__(self) -> str:
        return f"{self.where}: {self.key}"


@dataclasses.dataclass
class Tree:
    """The modules of one source tree (the folder holding the ``agentrio`` package)."""

    src: pathlib.Path
    modules: dict[str, pathlib.Path]  # dotted name -> file
    packages: set[str]  # dotted names of the packages (folders with an __init__.py)

    @classmethod
    def read(cls, src: pathlib.Path, root: str = ROOT) -> Tree:
        modules: dict[str, pathlib.Path] = {}
        packages: set[str] = set()
        for path in sorted((src / root).rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
                packages.add(".".join(parts))
            modules[".".join(parts)] = path
        return cls(src, modules, packages)

    def where(self, imp: Import) -> str:
        return self.where_module(imp.module, imp.line)

    def imports(self) -> Iterator[Import]:
        """Every agentrio import of every module, in file and line order."""
        for module, path in self.modules.items():
            yield from read_imports(module, path, self)

    def package_of(self, module: str) -> str:
        """The package a module's private names are private to.

        A folder under agentrio is one package (``agentrio.actors`` for
        ``agentrio.actors.actor``); the base layer's modules are one package, ``base``
        (they share their helpers); every other top-level module (``config``,
        ``runtime``, ``cli``, ``demo``, ``__main__``) and the top package itself are
        each a package of their own.
        """
        parts = module.split(".")
        if len(parts) >= 3 or (module in self.packages and module != ROOT):
            return ".".join(parts[:2])
        layer = layer_of(module)
        if layer is not None and layer.name == "base":
            return "base"
        return module

    def where_module(self, module: str, line: int = 1) -> str:
        return f"{self.modules[module].relative_to(self.src.parent)}:{line}"


def _package_for_relative(module: str, path: pathlib.Path, level: int) -> str:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return package


def read_imports(module: str, path: pathlib.Path, tree: Tree) -> list[Import]:
    """Every import of agentrio in *path*, wherever it is written, in line order."""
    return sorted(_read_imports(module, path, tree), key=lambda imp: imp.line)


def _read_imports(module: str, path: pathlib.Path, tree: Tree) -> Iterator[Import]:
    syntax = ast.parse(path.read_text(), str(path))
    for node in ast.walk(syntax):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    yield Import(module, path, node.lineno, alias.name, None)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_for_relative(module, path, node.level)
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if candidate in tree.modules:
                    yield Import(module, path, node.lineno, candidate, None)
                else:
                    yield Import(module, path, node.lineno, base, alias.name)


# -- layers ----------------------------------------------------------------------------


def layer_of(module: str, layers: Iterable[Layer] = LAYERS) -> Layer | None:
    """The layer whose member covers *module* (the longest such member), or None."""
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for member in layer.members:
            covers = module == member or (member != ROOT and module.startswith(member + "."))
            if covers and (best is None or len(member) > best[0]):
                best = (len(member), layer)
    return best[1] if best else None


def allowed(layer: Layer, layers: tuple[Layer, ...] = LAYERS) -> tuple[str, ...]:
    """The names of the layers *layer*'s modules may import, its own included."""
    names = [x.name for x in layers]
    below = names[: names.index(layer.name)]
    uses = below if layer.uses is None else [n for n in below if n in layer.uses]
    return (*uses, layer.name)


def unlayered(tree: Tree, layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """The modules no layer covers."""
    return [m for m in tree.modules if layer_of(m, layers) is None]


def layer_violations(tree: Tree, layers: tuple[Layer, ...] = LAYERS) -> list[Violation]:
    """Every import of a layer the importing module's layer may not use."""
    found: dict[Violation, None] = {}  # (one per statement, not per name; in order)
    for imp in tree.imports():
        source, target = layer_of(imp.module, layers), layer_of(imp.target, layers)
        if source is None or target is None:
            continue  # reported by unlayered() (or a target that is not on disk)
        if target.name not in allowed(source, layers):
            rank = [x.name for x in layers]
            how = "above" if rank.index(target.name) > rank.index(source.name) else "beside"
            key = (
                f"layer: {imp.module} ({source.name}) imports {imp.target} ({target.name}),"
                f" a layer {how} it"
            )
            found[Violation(key, tree.where(imp))] = None
    return list(found)


# -- private names ---------------------------------------------------------------------


def is_private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (dunders) and ``*`` are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _may_use(tree: Tree, module: str, container: str) -> bool:
    """Whether *module* may use a private name of *container* (a module or package)."""
    if container in tree.packages:  # a private module or name of a package's __init__
        return module == container or module.startswith(container + ".")
    return tree.package_of(module) == tree.package_of(container)


def private_import_violations(tree: Tree) -> list[Violation]:
    """Every import of an underscore name (module or not) from another package."""
    found: dict[Violation, None] = {}
    for imp in tree.imports():
        parts = imp.target.split(".")
        named = [(".".join(parts[:i]), parts[i]) for i in range(1, len(parts))]
        if imp.name is not None:
            named.append((imp.target, imp.name))
        for container, name in named:
            if is_private(name) and not _may_use(tree, imp.module, container):
                key = f"private import: {imp.module} imports {container}.{name}"
                found[Violation(key, tree.where(imp))] = None
    return list(found)


def _private_definitions(syntax: ast.Module) -> set[str]:
    """The private attributes a module defines: module and class names, methods,
    ``self.``/``cls.`` assignments, ``__slots__``."""
    defined: set[str] = set()

    def body_names(body: list[ast.stmt]) -> Iterator[tuple[str, ast.stmt]]:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield stmt.name, stmt
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            if isinstance(stmt, ast.AnnAssign):
                targets = [stmt.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    yield target.id, stmt

    for name, _ in body_names(syntax.body):
        defined.add(name)
    for node in ast.walk(syntax):
        if isinstance(node, ast.ClassDef):
            for name, stmt in body_names(node.body):
                defined.add(name)
                if name == "__slots__" and isinstance(stmt, ast.Assign | ast.AnnAssign):
                    for const in ast.walk(stmt.value or ast.Constant(None)):
                        if isinstance(const, ast.Constant) and isinstance(const.value, str):
                            defined.add(const.value)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            defined.add(node.attr)
    return {name for name in defined if is_private(name)}


def private_attribute_violations(tree: Tree) -> list[Violation]:
    """Every ``x._name`` whose name only another package defines, or whose ``x`` is
    annotated as a class of another package.

    A heuristic: ``_name`` counts as defined by a package if one of its modules
    defines it (see :func:`_private_definitions`). An access is reported when the
    accessing module's package defines no such name and another package does, which
    finds ``ref._cell``, ``budget._attach(...)`` and a subclass's use of its base
    class's ``self._resume``. A name both packages define is still reported when the
    receiver is a parameter or local variable annotated as a class of another package
    (``def f(ref: ActorRef): ref._cell``; see :func:`_foreign_receivers`); an
    unannotated receiver of such a name is missed.
    """
    syntaxes = {m: ast.parse(p.read_text(), str(p)) for m, p in tree.modules.items()}
    by_package: dict[str, set[str]] = {}
    for module, syntax in syntaxes.items():
        by_package.setdefault(tree.package_of(module), set()).update(_private_definitions(syntax))
    found: dict[Violation, None] = {}
    for module, syntax in syntaxes.items():
        own = tree.package_of(module)
        nodes = sorted(ast.walk(syntax), key=lambda n: getattr(n, "lineno", 0))
        for node in nodes:
            if not isinstance(node, ast.Attribute) or not is_private(node.attr):
                continue
            if node.attr in by_package.get(own, set()):
                continue
            owners = sorted(p for p, names in by_package.items() if node.attr in names)
            if owners:
                key = f"private attribute: {module} uses .{node.attr} of {', '.join(owners)}"
                found[Violation(key, tree.where_module(module, node.lineno))] = None
        # A name this package defines too: reported if its receiver is typed foreign.
        for node, package in _foreign_receivers(tree, syntaxes, module):
            if node.attr in by_package.get(own, set()):
                key = f"private attribute: {module} uses .{node.attr} of {package}"
                found[Violation(key, tree.where_module(module, node.lineno))] = None
    return sorted(found, key=_place)


def _place(violation: Violation) -> tuple[str, int]:
    """A violation's file and line, to sort by."""
    path, _, line = violation.where.rpartition(":")
    return path, int(line)


def _names_in(syntax: ast.Module, module: str, tree: Tree) -> dict[str, tuple[str, str | None]]:
    """What each name a module binds by class or import refers to: ``(module, name)``
    for a class defined or a name imported, ``(module, None)`` for a module imported."""
    names: dict[str, tuple[str, str | None]] = {}
    path = tree.modules[module]
    for node in ast.walk(syntax):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_for_relative(module, path, node.level)
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                bound = alias.asname or alias.name
                is_module = candidate in tree.modules
                names[bound] = (candidate, None) if is_module else (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = (alias.name, None)
    for stmt in syntax.body:
        if isinstance(stmt, ast.ClassDef):
            names[stmt.name] = (module, stmt.name)
    return names


def _class_home(
    tree: Tree, syntaxes: Mapping[str, ast.Module], module: str, name: str
) -> str | None:
    """The module that defines class *name* as *module* sees it (through re-exports)."""
    for _ in range(8):
        syntax = syntaxes.get(module)
        if syntax is None:
            return None
        if any(isinstance(s, ast.ClassDef) and s.name == name for s in syntax.body):
            return module
        target = _names_in(syntax, module, tree).get(name)
        if target is None or target[1] is None:
            return None
        module, name = target  # type: ignore[assignment]
    return None


def _annotated_classes(
    annotation: ast.expr | None, names: Mapping[str, tuple[str, str | None]]
) -> Iterator[tuple[str, str]]:
    """The ``(module, name)`` of each class an annotation names (``X``, ``X | None``,
    ``"X"``, ``X[T]``, ``Optional[X]``, ``mod.X``)."""
    if annotation is None:
        return
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return
    if isinstance(annotation, ast.BinOp):
        yield from _annotated_classes(annotation.left, names)
        yield from _annotated_classes(annotation.right, names)
    elif isinstance(annotation, ast.Subscript):
        yield from _annotated_classes(annotation.value, names)
        inner = annotation.slice
        for element in inner.elts if isinstance(inner, ast.Tuple) else [inner]:
            yield from _annotated_classes(element, names)
    elif isinstance(annotation, ast.Name) and annotation.id in names:
        target = names[annotation.id]
        yield (target[0], target[1]) if target[1] is not None else (target[0], annotation.id)
    elif isinstance(annotation, ast.Attribute) and isinstance(annotation.value, ast.Name):
        target = names.get(annotation.value.id)
        if target is not None and target[1] is None:  # a module: mod.X
            yield target[0], annotation.attr


def _foreign_receivers(
    tree: Tree, syntaxes: Mapping[str, ast.Module], module: str
) -> Iterator[tuple[ast.Attribute, str]]:
    """Each ``x._name`` in *module* whose ``x`` is a parameter or local variable
    annotated as a class defined in another package, with that package."""
    syntax = syntaxes[module]
    names = _names_in(syntax, module, tree)
    own = tree.package_of(module)
    homes: dict[tuple[str, str], str | None] = {}

    def foreign(annotation: ast.expr | None) -> str | None:
        for where, name in _annotated_classes(annotation, names):
            if (where, name) not in homes:
                homes[where, name] = _class_home(tree, syntaxes, where, name)
            home = homes[where, name]
            if home is not None and tree.package_of(home) != own:
                return tree.package_of(home)
        return None

    def visit(node: ast.AST, typed: dict[str, str]) -> Iterator[tuple[ast.Attribute, str]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            typed = dict(typed)
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                package = foreign(arg.annotation)
                if package is not None:
                    typed[arg.arg] = package
                else:
                    typed.pop(arg.arg, None)
            body = node.body if isinstance(node.body, list) else [node.body]
            for child in ast.walk(ast.Module(body=body, type_ignores=[])):  # type: ignore[arg-type]
                if isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                    package = foreign(child.annotation)
                    if package is not None:
                        typed[child.target.id] = package
        if (
            isinstance(node, ast.Attribute)
            and is_private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in typed
        ):
            yield node, typed[node.value.id]
        for child in ast.iter_child_nodes(node):
            yield from visit(child, typed)

    yield from visit(syntax, {})


# -- cycles ----------------------------------------------------------------------------


def import_graph(tree: Tree) -> dict[str, set[str]]:
    """Module -> the agentrio modules it imports (every import counted)."""
    graph: dict[str, set[str]] = {module: set() for module in tree.modules}
    for imp in tree.imports():
        if imp.target in tree.modules and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    return graph


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The graph's cycles: its strongly connected components of two or more nodes,
    each sorted, largest first (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components, key=lambda c: (-len(c), c))


def cycles(tree: Tree) -> list[list[str]]:
    """The import cycles of *tree* (see :func:`strongly_connected`)."""
    return strongly_connected(import_graph(tree))


def cycle_violations(tree: Tree) -> list[Violation]:
    """Every import cycle whose modules belong to more than one package."""
    found = []
    for component in cycles(tree):
        packages = sorted({tree.package_of(m) for m in component})
        if len(packages) > 1:
            key = f"cycle: across {', '.join(packages)}: {' '.join(component)}"
            found.append(Violation(key, tree.where_module(component[0])))
    return found


def against_known(found: Iterable[Violation], known: Iterable[str], kind: str) -> list[str]:
    """What is wrong with *found*, given the *known* violations: each new violation
    (with where it is), and each known one of this *kind* that no longer occurs."""
    found = list(found)
    keys = {v.key for v in found}
    known = {k for k in known if k.startswith(kind + ":")}
    problems = [str(v) for v in found if v.key not in known]
    problems += [f"no longer occurs, remove it from KNOWN_VIOLATIONS: {k}" for k in known - keys]
    return sorted(set(problems))


# -- the agent layer's rooms ------------------------------------------------------------


def roomless(tree: Tree, rooms: tuple[Layer, ...] = ROOMS) -> list[str]:
    """The agent layer's modules that no room holds (its ``__init__`` aside)."""
    home = ROOMS_HOME + "."
    return [m for m in tree.modules if m.startswith(home) and layer_of(m, rooms) is None]


def room_violations(tree: Tree, rooms: tuple[Layer, ...] = ROOMS) -> list[Violation]:
    """Every import of a room that the importing module's room may not use."""
    found = layer_violations(tree, rooms)
    return [
        Violation(v.key.replace("layer: ", "room: ", 1).replace(" a layer ", " a room "), v.where)
        for v in found
    ]


def room_graph(tree: Tree, rooms: tuple[Layer, ...] = ROOMS) -> dict[str, set[str]]:
    """Room -> the rooms it imports (every import counted, wherever it is written)."""
    graph: dict[str, set[str]] = {room.name: set() for room in rooms}
    for imp in tree.imports():
        source, target = layer_of(imp.module, rooms), layer_of(imp.target, rooms)
        if source is not None and target is not None and source is not target:
            graph[source.name].add(target.name)
    return graph


def room_cycles(tree: Tree, rooms: tuple[Layer, ...] = ROOMS) -> list[list[str]]:
    """The import cycles between rooms (see :func:`strongly_connected`)."""
    return strongly_connected(room_graph(tree, rooms))


def cycles_inside_rooms(tree: Tree, rooms: tuple[Layer, ...] = ROOMS) -> list[list[str]]:
    """The import cycles among one room's modules larger than a pair (a single small
    pair is allowed): each sorted, largest first (see :func:`strongly_connected`)."""
    graph = import_graph(tree)
    found: list[list[str]] = []
    for room in rooms:
        inside = {m for m in graph if layer_of(m, rooms) is room}
        found += strongly_connected({m: graph[m] & inside for m in inside})
    return sorted((c for c in found if len(c) > 2), key=lambda c: (-len(c), c))


def pairs_inside_rooms(tree: Tree, rooms: tuple[Layer, ...] = ROOMS) -> list[list[str]]:
    """The pairs of one room's modules that import each other, each sorted."""
    graph = import_graph(tree)
    found: list[list[str]] = []
    for room in rooms:
        inside = {m for m in graph if layer_of(m, rooms) is room}
        found += strongly_connected({m: graph[m] & inside for m in inside})
    return sorted(c for c in found if len(c) == 2)
