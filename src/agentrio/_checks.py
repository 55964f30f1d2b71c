"""Argument checks shared by every layer: each names the argument and what was expected."""

from __future__ import annotations

import math

from .errors import InvalidArgument

__all__ = [
    "check_int",
    "check_name",
    "check_seconds",
    "check_timeout",
    "is_reserved",
    "short_repr",
]


def check_int(name: str, value: object, minimum: int) -> int:
    """*value* if it is an int >= *minimum*, else
    [`InvalidArgument`][agentrio.errors.InvalidArgument]
    naming *name*."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_name(
    arg: str, value: object, *, optional: bool = False, owner: str | None = None
) -> str | None:
    """*value* if it is an actor's name, or if *optional*, ``None``.

    An actor's name is a non-empty str without ``/`` that does not end with
    ``.context`` nor contain ``.context.``: that form is reserved for agents'
    context actors (``<agent>.context``, ``<agent>.context.<label>``), so no
    other child of a supervisor can take one of their names. A name of that
    form is allowed only for a child *owned* by the actor it starts with:
    with *owner* (the owner's name) ``"a"``, ``"a.context"`` and
    ``"a.context.<label>"`` are names too (see ``SupervisorRef.spawn``'s
    ``owner``).
    """
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or "/" in value:
        raise InvalidArgument(f"{arg} must be a non-empty str without '/', got {value!r}")
    # One substring search in the common case: spawning is a hot path.
    if ".context" in value and is_reserved(value) and not _owned_name(value, owner):
        mine = "" if owner is None else f", except {owner!r}'s own ('{owner}.context[.<label>]')"
        raise InvalidArgument(
            f"{arg} must not end with '.context' nor contain '.context.' (names of that "
            f"form are reserved for agents' context actors{mine}), got {value!r}"
        )
    return value


def _owned_name(name: str, owner: str | None) -> bool:
    """Is *name* a reserved name of *owner*'s (``<owner>.context[.<label>]``)?"""
    if owner is None:
        return False
    mine = owner + ".context"
    return name == mine or name.startswith(mine + ".")


def is_reserved(name: str) -> bool:
    """Is *name* of the form reserved for context actors?"""
    return name.endswith(".context") or ".context." in name


def check_timeout(name: str, value: float | None) -> None:
    """Raise [`InvalidArgument`][agentrio.errors.InvalidArgument] unless *value* is ``None`` or a
    number >= 0."""
    check_seconds(name, value, optional=True)


def check_seconds(name: str, value: object, *, optional: bool = False) -> None:
    """Raise [`InvalidArgument`][agentrio.errors.InvalidArgument] unless *value* is a number of
    seconds >= 0 (or, if *optional*, ``None``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        alternative = " or None" if optional else ""
        raise InvalidArgument(f"{name} must be a number of seconds{alternative}, got {value!r}")
    if math.isnan(value) or value < 0:
        raise InvalidArgument(f"{name} must be >= 0 seconds, got {value!r}")


def short_repr(value: object, most: int = 100) -> str:
    """``repr(value)`` cut to *most* characters, for a message about a value from
    outside (a broken ``__repr__`` gives ``<type object>``, never an error)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= most else text[: most - 3] + "..."
