"""Modes: named presets of a run's limits, ``inline`` (quick) and ``background`` (long).

A mode sets what it names for the runs made in it, and leaves the rest (a
field left ``None``) to the agent's spec. ``run()``'s own ``max_iterations``
and ``timeout`` win over the mode's. The runtime knows a mode by its name: the
presets, laid over by the ``[modes.NAME]`` tables of agentrio.toml, then by
``open_runtime(modes=...)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from ..._checks import check_int
from ...errors import InvalidArgument
from ..tools.lanes import check_lane

__all__ = ["BACKGROUND", "INLINE", "PRESETS", "Mode", "check_mode_timeout"]


def check_mode_timeout(name: str, value: object) -> None:
    """*value* is None or a number of seconds > 0 (``math.inf``: no deadline)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name} must be a number of seconds or None, got {value!r}")
    if math.isnan(value) or value <= 0:
        raise InvalidArgument(f"{name} must be > 0 seconds (math.inf: no deadline), got {value!r}")


def _optional_int(name: str, value: object, minimum: int) -> None:
    if value is not None:
        check_int(name, value, minimum)


@attrs.frozen
class Mode:
    """A named preset of a run's limits; each field left ``None`` is the spec's.

    Two presets come with agentrio: ``Mode.inline()`` (5 model calls, 30 s,
    continuation as the spec has it, lane ``"interactive"``: for answers a
    user waits for) and ``Mode.background()`` (20 model calls, 180 s, 3
    continuations, lane ``"background"``: for work that may take a while);
    their keywords change a field of the preset. Select one per run with
    ``agent.run(..., mode="inline")`` (the runtime's mode of that name) or
    ``mode=Mode.inline(max_iterations=8)`` (this very mode). The runtime's
    mode of a name is, last one winning: the preset, the ``[modes.NAME]``
    table of its agentrio.toml (``Config.modes``), the ``Mode`` of that name
    in ``open_runtime(modes=...)``. See [Modes and routing][modes-and-routing].

    Attributes:
        name: the mode's name (a non-empty str); the runtime knows modes by it.
        max_iterations: model calls per phase, >= 1
            (``run(max_iterations=...)`` wins over it).
        timeout: seconds the phase may take, > 0 (``run(timeout=...)`` wins
            over it); ``math.inf``: no deadline.
        max_continuation_turns: continuations per phase of a reply that reads
            as unfinished (>= 0; 0: off); see ``Limits.max_continuation_turns``.
        lane: the priority lane of its runs: ``"interactive"`` for inline,
            ``"background"`` for background.

    Raises:
        InvalidArgument: a field out of range or of the wrong type, named in
            the message (``Mode.max_iterations must be an int >= 1, got 0``).
    """

    name: str
    max_iterations: int | None = None
    timeout: float | None = None
    max_continuation_turns: int | None = None
    lane: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"Mode.name must be a non-empty str, got {self.name!r}")
        _optional_int("Mode.max_iterations", self.max_iterations, 1)
        check_mode_timeout("Mode.timeout", self.timeout)
        _optional_int("Mode.max_continuation_turns", self.max_continuation_turns, 0)
        if self.lane is not None:
            # (stored as events give it: "control" is "interactive")
            object.__setattr__(self, "lane", check_lane(self.lane, "Mode.lane"))

    @classmethod
    def inline(
        cls,
        *,
        max_iterations: int | None = 5,
        timeout: float | None = 30.0,
        max_continuation_turns: int | None = None,
        lane: str | None = "interactive",
    ) -> Mode:
        """The ``inline`` preset (5 model calls, 30 s), with the fields given changed.

        Continuation is left to the spec (off unless its limits turn it on).
        """
        return cls("inline", max_iterations, timeout, max_continuation_turns, lane)

    @classmethod
    def background(
        cls,
        *,
        max_iterations: int | None = 20,
        timeout: float | None = 180.0,
        max_continuation_turns: int | None = 3,
        lane: str | None = "background",
    ) -> Mode:
        """The ``background`` preset (20 model calls, 180 s, 3 continuations),
        with the fields given changed."""
        return cls("background", max_iterations, timeout, max_continuation_turns, lane)


INLINE = Mode.inline()
BACKGROUND = Mode.background()
PRESETS: Mapping[str, Mode] = {"inline": INLINE, "background": BACKGROUND}
