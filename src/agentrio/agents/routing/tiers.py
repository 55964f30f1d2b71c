"""Tiers without a model: a tier left empty falls back to the nearest configured one below.

A configuration's ``escalation`` lists its tiers from the weakest to the
strongest: the ladder. A tier declared with an empty model (``cloud = ""`` in
``[tiers]``: the admin has not set one up, yet routes and specs may name it)
is a rung without a model; a call on it runs on the nearest tier below it in
the ladder that has one, and escalation skips it. The configuration is
checked when it is made: an empty tier that the ladder does not list, or
below which no tier has a model, is a ``ConfigError`` then, never at a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["check_ladder", "configured", "fallback_tier", "next_configured"]


def configured(tier: str, tiers: Mapping[str, str]) -> bool:
    """Does *tier* name a model in *tiers* (declared and not empty)?"""
    return bool(tiers.get(tier))


def fallback_tier(tier: str, tiers: Mapping[str, str], ladder: Sequence[str]) -> str | None:
    """The tier a call on *tier* runs on, when *tier* is declared without a model.

    None when there is nothing to fall back from: *tier* has a model, or it
    is not a declared tier at all (the resolver then says what it is not),
    or no tier below it in *ladder* has a model (`check_ladder` refuses
    such a configuration).
    """
    if tiers.get(tier, None) != "" or tier not in ladder:
        return None
    for lower in reversed(ladder[: list(ladder).index(tier)]):
        if configured(lower, tiers):
            return lower
    return None


def next_configured(tier: str, tiers: Mapping[str, str], ladder: Sequence[str]) -> str | None:
    """The first tier above *tier* in *ladder* that has a model (None: none)."""
    if tier not in ladder:
        return None
    for higher in ladder[list(ladder).index(tier) + 1 :]:
        if configured(higher, tiers):
            return higher
    return None


def check_ladder(tiers: Mapping[str, str], ladder: Sequence[str]) -> str:
    """Why the empty tiers of *tiers* cannot fall back ("" if they all can).

    Each tier declared empty must be in *ladder*, with a tier below it that
    has a model.
    """
    for tier, target in tiers.items():
        if target != "":
            continue
        if tier not in ladder:
            return (
                f'tiers.{tier} is "" (no model) but escalation does not list it, so there is '
                f"no tier below it to fall back to (escalation: {list(ladder)})"
            )
        if fallback_tier(tier, tiers, ladder) is None:
            return (
                f'tiers.{tier} is "" (no model) and no tier below it in escalation '
                f"{list(ladder)} has a model to fall back to"
            )
    return ""
