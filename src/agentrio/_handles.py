"""Handles without a public constructor, for every layer: made by agentrio, not by users.

A handle (``ActorRef``, ``SupervisorRef``, ``AgentRef``, ``Runtime``,
``BlockingRuntime``...) is given out by the call that makes what it stands
for (``spawn``, ``spawn_agent``, ``open_runtime``...); calling its class
raises ``TypeError``. The module that makes one calls
``create``. Both live in the base layer, in a
module private to agentrio (not to one of its packages), so that each
layer's handles are made the same way without reaching into another
package's private names; ``create`` is public *inside* agentrio, and the
module's leading underscore keeps it out of the user's API.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

__all__ = ["NoPublicConstructor", "create"]

_T = TypeVar("_T")


class NoPublicConstructor(type):
    """Metaclass of a handle that only agentrio makes (with
    ``create``): calling the class raises ``TypeError``."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"agentrio.{cls.__qualname__} has no public constructor; "
            "the runtime makes these (spawn, spawn_agent, open_runtime, events)"
        )


def create(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
    """Make an instance of *cls*, a class whose metaclass is
    ``NoPublicConstructor``: ``type``'s own
    call (``__new__``, then ``__init__``), past the metaclass's refusal."""
    made: _T = type.__call__(cls, *args, **kwargs)
    return made
