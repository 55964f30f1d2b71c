"""The exception tree: its shape, the builtin bases, and what each error carries."""

from __future__ import annotations

import inspect
import re

import pytest

import agentrio
from agentrio import errors

# The core's errors: (class, its direct agentrio parent, builtin bases it must also have).
CORE_TREE: list[
    tuple[type[BaseException], type[BaseException], tuple[type[BaseException], ...]]
] = [
    (errors.AgentrioError, Exception, ()),
    (errors.UsageError, errors.AgentrioError, ()),
    (errors.InvalidArgument, errors.UsageError, (TypeError, ValueError)),
    (errors.NotAMessage, errors.UsageError, (TypeError,)),
    (errors.DuplicateName, errors.UsageError, ()),
    (errors.UnknownName, errors.UsageError, (LookupError,)),
    (errors.SelfAsk, errors.UsageError, ()),
    (errors.RuntimeClosed, errors.UsageError, ()),
    (errors.ActorError, errors.AgentrioError, ()),
    (errors.ActorCrashed, errors.ActorError, ()),
    (errors.ActorStopped, errors.ActorError, ()),
    (errors.AskTimeout, errors.ActorError, (TimeoutError,)),
    (errors.MailboxFull, errors.ActorError, ()),
    (errors.RestartIntensityExceeded, errors.ActorError, ()),
]


def _defined_exceptions() -> list[type[BaseException]]:
    found = [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]
    return sorted(found, key=lambda c: c.__name__)


def _drawn_tree() -> dict[str, str | None]:
    """The tree drawn in the module docstring, as {class name: parent name}."""
    doc = errors.__doc__
    assert doc is not None
    lines = doc.splitlines()
    first = lines.index("    AgentrioError")
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in lines[first:]:
        if not line.strip():
            break
        match = re.match(r"^[ │├└─]*([A-Z]\w+)", line)
        assert match is not None, line
        depth = (match.start(1) - 4) // 4  # each level is indented four columns
        del stack[depth:]
        parents[match.group(1)] = stack[-1] if stack else None
        stack.append(match.group(1))
    return parents


@pytest.mark.parametrize(
    ("cls", "parent", "builtins"), CORE_TREE, ids=lambda v: getattr(v, "__name__", "")
)
def test_place_in_tree(
    cls: type[BaseException],
    parent: type[BaseException],
    builtins: tuple[type[BaseException], ...],
) -> None:
    assert parent in cls.__bases__
    for base in builtins:
        assert issubclass(cls, base)


def test_the_docstring_draws_the_real_tree() -> None:
    drawn = _drawn_tree()
    assert drawn["AgentrioError"] is None
    assert drawn["InvalidArgument"] == "UsageError"  # the parser itself works
    assert set(drawn) == {cls.__name__ for cls in _defined_exceptions()}
    for name, parent in drawn.items():
        if parent is not None:
            assert getattr(errors, parent) in getattr(errors, name).__bases__, name


@pytest.mark.parametrize("cls", _defined_exceptions(), ids=lambda c: c.__name__)
def test_one_except_clause_catches_everything_and_branches_do_not_overlap(
    cls: type[BaseException],
) -> None:
    if cls is errors.ModelRetry:  # (no error: what an output validator raises, #23)
        assert not issubclass(cls, errors.AgentrioError)
        return
    # Every error agentrio raises on purpose can be caught with one except clause ...
    assert issubclass(cls, errors.AgentrioError)
    # ... and misuse, runtime failures (and any other branch) never overlap.
    branches = [b for b in _defined_exceptions() if errors.AgentrioError in b.__bases__]
    assert {errors.UsageError, errors.ActorError} <= set(branches)
    if cls is not errors.AgentrioError:
        assert sum(issubclass(cls, b) for b in branches) == 1


def test_all_lists_every_class_and_agentrio_exports_the_common_ones() -> None:
    names = {cls.__name__ for cls in _defined_exceptions()}
    assert set(errors.__all__) == names
    common = names & set(agentrio.__all__)
    assert {"AgentrioError", "ActorCrashed", "InvalidArgument"} <= common
    for name in common:
        assert getattr(agentrio, name) is getattr(errors, name)


def test_actor_error_carries_path() -> None:
    err = errors.MailboxFull("full", path="a/b")
    assert err.path == "a/b"
    assert str(err) == "full"


def test_actor_crashed_carries_the_original_exception() -> None:
    cause = KeyError("k")
    err = errors.ActorCrashed("crashed", path="w", cause=cause)
    assert err.cause is cause
    assert err.__cause__ is cause
    assert err.path == "w"


def test_actor_stopped_carries_reason() -> None:
    err = errors.ActorStopped("gone", path="w", reason="cancelled")
    assert err.reason == "cancelled"
    assert err.path == "w"


def test_restart_intensity_exceeded_carries_child_and_cause() -> None:
    cause = RuntimeError("boom")
    err = errors.RestartIntensityExceeded("gave up", path="sup", child="sup/w", cause=cause)
    assert (err.path, err.child, err.cause, err.__cause__) == ("sup", "sup/w", cause, cause)


def test_builtin_handlers_catch_agentrio_errors() -> None:
    with pytest.raises(TimeoutError):
        raise errors.AskTimeout("late", path="w")
    with pytest.raises(LookupError):
        raise errors.UnknownName("nobody")
    with pytest.raises(ValueError):
        raise errors.InvalidArgument("bad")
    with pytest.raises(TypeError):
        raise errors.NotAMessage("not a message")
