"""COMPOSER: the loop's ``Composer`` (``loop.seams``), met by this room's functions.

The runtime hands it to the loop in its ``Services``; `AgentRef`'s composing
methods (``respond``, ``continue_in_background``, ``start_background``,
``helper``, ``spawn_subagent``, ``map``) call through it, so the loop
imports nothing of ``composition``.
"""

from __future__ import annotations

from .compose import map_phases, spawn_child
from .helper import session_helper
from .respond import continue_in_background, respond, start_background

__all__ = ["COMPOSER", "Composition"]


class Composition:
    """This room's functions, as the loop's ``Composer``."""

    __slots__ = ()

    respond = staticmethod(respond)
    continue_in_background = staticmethod(continue_in_background)
    start_background = staticmethod(start_background)
    session_helper = staticmethod(session_helper)
    spawn_child = staticmethod(spawn_child)
    map_phases = staticmethod(map_phases)


COMPOSER = Composition()
