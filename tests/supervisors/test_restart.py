"""Restart policy pieces: Backoff delays and checks, RestartIntensity against a model."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrio import Backoff, InvalidArgument, RestartIntensity

# -- Backoff -------------------------------------------------------------------------------


def test_backoff_delays_grow_and_are_capped() -> None:
    backoff = Backoff(initial=0.5, factor=3, maximum=10)
    assert [backoff.delay(n) for n in range(6)] == [0.0, 0.5, 1.5, 4.5, 10.0, 10.0]
    assert Backoff().delay(1) == 0.1
    assert Backoff(initial=2, factor=1, maximum=5).delay(30) == 2.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"initial": -1}, "initial"),
        ({"initial": math.nan}, "initial"),
        ({"initial": "1"}, "initial"),
        ({"factor": 0.5}, "factor"),
        ({"factor": True}, "factor"),
        ({"maximum": -0.1}, "maximum"),
        ({"maximum": None}, "maximum"),
    ],
)
def test_backoff_rejects_bad_values(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument, match=f"Backoff.{field}"):
        Backoff(**kwargs)


# -- RestartIntensity ------------------------------------------------------------------


def intensity_model(times: list[float], max_restarts: int, period: float) -> list[bool]:
    """For each restart: is the number of restarts in the last *period* seconds
    (this one included) within *max_restarts*?"""
    return [
        sum(1 for t in times[: i + 1] if now - t < period) <= max_restarts
        for i, now in enumerate(times)
    ]


@pytest.mark.parametrize("period", [None, -1, math.nan, "5"])
def test_restart_intensity_needs_a_period_in_seconds(period: object) -> None:
    with pytest.raises(InvalidArgument, match="period must be"):
        RestartIntensity(1, period)  # type: ignore[arg-type]


def test_restart_intensity_reset_forgets_the_restarts() -> None:
    intensity = RestartIntensity(1, 10.0)
    assert intensity.record(0.0) and not intensity.record(1.0)
    intensity.reset()
    assert intensity.record(2.0)


def test_restart_intensity_examples() -> None:
    never = RestartIntensity(0, 5)
    assert never.record(0.0) is False
    window = RestartIntensity(2, 1.0)
    assert [window.record(t) for t in (0.0, 0.5, 0.9, 1.0, 2.0, 2.0, 2.0)] == [
        True,
        True,
        False,
        False,  # 0.0 has left the window (exactly one period ago), 0.5, 0.9, 1.0 remain
        True,
        True,
        False,
    ]


@settings(max_examples=200, deadline=None)
@given(
    max_restarts=st.integers(min_value=0, max_value=5),
    period=st.integers(min_value=1, max_value=40).map(lambda n: n / 8),
    gaps=st.lists(st.integers(min_value=0, max_value=24).map(lambda n: n / 8), max_size=40),
)
def test_restart_intensity_matches_the_model(
    max_restarts: int, period: float, gaps: list[float]
) -> None:
    times = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    intensity = RestartIntensity(max_restarts, period)
    assert [intensity.record(t) for t in times] == intensity_model(times, max_restarts, period)
