"""Limits: defaults and the validation of every field."""

from __future__ import annotations

import math

import attrs
import pytest

from agentrio import InvalidArgument, Limits


def test_defaults() -> None:
    limits = Limits()
    assert attrs.asdict(limits) == {
        "max_iterations": 10,
        "timeout": None,
        "max_parallel_tools": 4,
        "tool_timeout": 60.0,
        "max_output_tokens": 1024,
        "final_answer": True,
        "context_fill": 0.75,
        "mailbox": 16,
        "max_parse_retries": 2,
        "max_tool_calls_per_turn": 64,
        "max_continuation_turns": 0,
        "max_identical_calls": 2,
        "max_identical_results": 3,
    }


def test_good_values() -> None:
    limits = Limits(
        max_iterations=1,
        timeout=0.5,
        max_parallel_tools=1,
        tool_timeout=3,
        max_output_tokens=1,
        final_answer=False,
        context_fill=1,
        mailbox=0,
        max_tool_calls_per_turn=1,
        max_continuation_turns=3,
        max_identical_calls=5,
        max_identical_results=2,
    )
    assert limits.timeout == 0.5 and limits.mailbox == 0 and limits.context_fill == 1
    assert (limits.max_continuation_turns, limits.max_identical_calls) == (3, 5)
    assert limits.max_identical_results == 2


@pytest.mark.parametrize("field", ["max_identical_calls", "max_identical_results"])
def test_a_stall_rule_is_turned_off_by_none_or_zero(field: str) -> None:
    # 0 is how agentrio.toml says it (TOML has no null); both are stored as None.
    off = Limits(**{field: None})  # type: ignore[arg-type]
    assert getattr(off, field) is None
    assert Limits(**{field: 0}) == off  # type: ignore[arg-type]
    assert getattr(attrs.evolve(Limits(), **{field: 0}), field) is None


def test_frozen_and_comparable() -> None:
    assert Limits(max_iterations=3) == Limits(max_iterations=3)
    assert hash(Limits()) == hash(Limits())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Limits().max_iterations = 3  # type: ignore[misc]


BAD = [
    ("max_iterations", 0),
    ("max_iterations", -1),
    ("max_iterations", True),
    ("max_iterations", "3"),
    ("max_iterations", 2.0),
    ("max_iterations", None),
    ("timeout", 0),
    ("timeout", -1),
    ("timeout", math.nan),
    ("timeout", "10"),
    ("timeout", True),
    ("max_parallel_tools", 0),
    ("max_parallel_tools", False),
    ("max_parallel_tools", 1.5),
    ("tool_timeout", None),
    ("tool_timeout", 0),
    ("tool_timeout", -0.1),
    ("tool_timeout", math.nan),
    ("max_output_tokens", 0),
    ("max_output_tokens", "many"),
    ("final_answer", 1),
    ("final_answer", None),
    ("context_fill", 0),
    ("context_fill", 1.01),
    ("context_fill", -0.5),
    ("context_fill", True),
    ("context_fill", math.nan),
    ("context_fill", "0.5"),
    ("mailbox", -1),
    ("mailbox", 1.0),
    ("mailbox", True),
    ("max_parse_retries", 0),
    ("max_parse_retries", "2"),
    ("max_tool_calls_per_turn", 0),
    ("max_tool_calls_per_turn", -1),
    ("max_tool_calls_per_turn", 64.0),
    ("max_tool_calls_per_turn", True),
    ("max_tool_calls_per_turn", None),
    ("max_continuation_turns", -1),
    ("max_continuation_turns", None),
    ("max_continuation_turns", True),
    ("max_continuation_turns", 1.0),
    ("max_identical_calls", 1),
    ("max_identical_calls", -2),
    ("max_identical_calls", 3.0),
    ("max_identical_calls", 0.0),
    ("max_identical_calls", False),
    ("max_identical_calls", True),
    ("max_identical_calls", "3"),
    ("max_identical_results", 1),
    ("max_identical_results", -1),
    ("max_identical_results", 2.5),
    ("max_identical_results", False),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidArgument, match=rf"Limits\.{field}") as info:
        Limits(**{field: value})  # type: ignore[arg-type]
    assert repr(value) in str(info.value)


def test_evolve_is_validated() -> None:
    with pytest.raises(InvalidArgument, match="max_iterations"):
        attrs.evolve(Limits(), max_iterations=0)
