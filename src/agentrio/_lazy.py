"""Public names loaded on first use: a namespace's PEP 562 ``__getattr__`` and ``__dir__``.

``import agentrio`` would otherwise load every feature room (planning,
delegation, skills, security, the checkpoint store and its readers...)
that most processes never use: about 2 MB in each, beside the agents (see
docs/design.md, "Rooms (#25): measured"). A namespace lists those names in a
table, name -> the module that defines it, and imports them under
``if TYPE_CHECKING:`` for type checkers and the reference's generator, which
read the file; at run time its ``__getattr__`` imports the module on the
first access to one of its names (``agentrio.Planning``, ``from agentrio
import Planning``), gives them their public home as the eager names have
theirs (`set_public_home`) and keeps them in the namespace, where later
accesses find them as any other name.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Collection, Mapping

__all__ = ["lazy_names", "resolve_annotations", "set_public_home", "settle"]

# Every namespace with names loaded on first use, and its table (see lazy_names).
_NAMESPACES: list[tuple[str, Mapping[str, str]]] = []


def resolve_annotations(cls: type) -> None:
    """Replace *cls*'s own string annotations by what they name, in the module
    that defined it.

    Annotations are strings here (``from __future__ import annotations``), and
    ``typing.get_type_hints``, msgspec and cattrs read them in the module
    ``cls.__module__`` names. Once that is the public home, they would be read
    there, where the defining module's imports (``Usage``, ``Literal``...)
    are missing.
    """
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(value, str) for value in own.values()):
        return
    hints = typing.get_type_hints(cls, include_extras=True)
    cls.__annotations__ = {name: hints[name] for name in own}


def set_public_home(values: Mapping[str, object], home: str) -> None:
    """Name *home* the ``__module__`` of the classes and functions among *values*
    (reprs, tracebacks, pickles and the docs then say ``agentrio.X``), their
    annotations resolved first (every class's before any is renamed: a class's
    hints may read another's). Exceptions keep ``agentrio.errors``, their home.
    """
    fixed = [
        value
        for value in values.values()
        if (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ != "agentrio.errors"
    ]
    for value in fixed:
        if inspect.isclass(value):
            resolve_annotations(value)
    for value in fixed:
        value.__module__ = home


def lazy_names(
    home: str, table: Mapping[str, str], submodules: Collection[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the namespace *home*, whose names in
    *table* (name -> absolute name of the module that defines it) load on first use.

    The first access to one imports its module and puts every name of that
    module's in the table into the namespace, each given its public home.
    *submodules* are public modules of *home* that ``import home`` used to load
    too (``agentrio.store``): still found as attributes, imported then.
    """

    def __getattr__(name: str) -> object:
        if name in submodules:
            return importlib.import_module(f"{home}.{name}")
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {home!r} has no attribute {name!r}")
        module = importlib.import_module(source)
        settle()
        held = vars(sys.modules[home])
        # (Asked for while its module is still being imported: as it is, for now.)
        return held[name] if name in held else getattr(module, name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[home]), *table, *submodules})

    _NAMESPACES.append((home, table))
    return __getattr__, __dir__


def settle() -> None:
    """Put in its namespace, with its public home, every name loaded on first use
    whose module is loaded now, however it was (a namespace's ``__getattr__``, or
    agentrio's own code: ``open_runtime(store=...)`` loads the checkpoints' room and
    calls this, so the ``PendingCall`` it hands out says ``agentrio.types``)."""
    for home, table in _NAMESPACES:
        held = vars(sys.modules[home])
        values = {}
        for name, source in table.items():
            module = sys.modules.get(source)
            if name in held or module is None:
                continue
            if getattr(module.__spec__, "_initializing", False):
                continue  # (still being imported: settled by a later call)
            values[name] = getattr(module, name)
        if values:
            set_public_home(values, home)
            held.update(values)
