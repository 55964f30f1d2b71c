"""Sessions and deferred decisions on a cluster (#27): the driver's side.

A session lives on one host, the one its id hashes to (``crc32(id) % hosts``):
each host owns its store (``<store>/host-<i>``), so a cluster with the same
number of hosts, opened later on the same store, finds the session's
conversation on the same host. The pending calls of every host are listed
together; a decision, and a parked phase's result, go to each host in turn
until the one that holds the phase answers.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

from .._checks import short_repr
from ..agents.loop.spec import AgentSpec
from ..errors import InvalidArgument, UnknownName

if TYPE_CHECKING:
    from ..agents.durability.deferred import PendingCall
    from ..messages import PhaseResult

# (The cluster is ``_cluster.Cluster``, which imports this module: not named here,
# so that the two make no import circle.)
Cluster = Any

__all__ = ["decide", "pending", "resumed_result", "session"]


def host_of(session_id: str, hosts: int) -> int:
    """The index of the host that holds the session *session_id*."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % hosts


async def session(
    cluster: Cluster, session_id: object, spec: object
) -> tuple[Any, AgentSpec[Any], str]:
    """The host (its link), spec and path of the agent of the session *session_id*
    (see the module)."""
    cluster._check_open()
    if not isinstance(session_id, str) or not session_id:
        raise InvalidArgument(f"session_id must be a non-empty str, got {short_repr(session_id)}")
    name = spec.name if isinstance(spec, AgentSpec) else spec
    factory = cluster._specs.get(name) if isinstance(name, str) else None
    if factory is None:
        raise InvalidArgument(
            f"spec {name!r} is not registered: open_cluster(specs={{{name!r}: make_spec}})"
        )
    made = spec if isinstance(spec, AgentSpec) else factory()
    link = cluster._links[host_of(session_id, cluster.hosts)]
    path: str = await cluster._control(link, link.handle.session.remote(session_id, name))
    if path not in cluster._names:
        cluster._names[path] = link.index
        link.agents += 1
    return link, made, path


async def pending(cluster: Cluster, kind: str) -> list[PendingCall]:
    """The pending calls of *kind* of every live host, oldest first."""
    cluster._check_open()
    out: list[PendingCall] = []
    for link in cluster._survival.live(cluster._links):
        out += await cluster._control(link, link.handle.pending.remote(kind))
    out.sort(key=lambda c: c.since)
    return out


async def decide(
    cluster: Cluster, call: object, approved: bool | None, text: str, status: str
) -> None:
    """Record a decision on *call* on the host that holds its phase."""
    cluster._check_open()
    for link in cluster._survival.live(cluster._links):
        try:
            await cluster._control(link, link.handle.decide.remote(call, approved, text, status))
        except UnknownName:
            continue
        return
    # (its ids, not its repr: a pending call's arguments may hold secrets)
    call_id, phase_id = getattr(call, "call_id", None), getattr(call, "phase_id", None)
    what = (
        short_repr(call)
        if call_id is None
        else f"call {short_repr(call_id)} of phase {short_repr(phase_id)}"
    )
    raise UnknownName(f"no host of the cluster has {what} waiting for a decision")


async def resumed_result(cluster: Cluster, phase_id: str) -> PhaseResult[Any]:
    """The result of a phase resumed (or parked, then decided) on a host."""
    cluster._check_open()
    for link in cluster._survival.live(cluster._links):
        try:
            result: PhaseResult[Any] = await cluster._control(
                link, link.handle.resumed_result.remote(phase_id)
            )
        except UnknownName:
            continue
        return result
    raise UnknownName(f"no host of the cluster resumed or ended a phase {phase_id!r}")
