"""The kernel's supervisors: supervisors, restart policy, the tree.

Above ``agentrio.actors`` and on it only (and on ``agentrio.errors``,
``agentrio.messages`` and the shared checks): a supervisor holds its
children's cells, starts, restarts and stops them; an actor knows its
supervisor only through the interface ``actors.actor.Parent`` declares.
The layers above use these public operations:

``SupervisorRef.spawn_nowait(cls, *args, name=, mailbox=, restart=, owner=)``
    ``spawn`` without its cancellation point. ``owner=`` (on ``spawn``
    too) links the new actor to its owner (as [`link`][agentrio.actors.link]),
    and lets it be spawned while the supervisor drains and take its
    owner's reserved names (``<owner>.context``,
    ``<owner>.context.<label>``: how the agent layer names context actors).
    ``SupervisorRef.closed`` and ``SupervisorRef.shutdown_timeout`` say
    whether it has begun to stop, and its graceful stop's deadline.

[`Tree`][agentrio.supervisors.Tree] ``(ref_class, ...)``
    A supervision tree: its root supervisor (``tree.ref``), event bus and
    timer task; ``await tree.run()``, ``tree.begin_stop()``,
    ``tree.cancel()``. The runtime is built on one.

See docs/concepts.md, "The kernel's primitives".
"""

from __future__ import annotations

from .tree import Tree

__all__ = ["Tree"]

# Reprs, tracebacks and the reference name these by their public home.
Tree.__module__ = __name__
