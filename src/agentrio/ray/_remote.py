"""``RemoteRef``: an actor of a cluster's host, asked from any host or from the driver."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import InvalidArgument, RuntimeClosed
from ..messages import Message
from ._host import current_host

__all__ = ["RemoteRef"]


class Driver(Protocol):
    """What a RemoteRef needs of an open cluster (``Cluster``) in the driver."""

    async def ask(self, host: int, path: str, message: object, timeout: float | None) -> Any: ...

    async def tell(self, host: int, path: str, message: object) -> None: ...


# The clusters open in this process (the driver's), by id: a RemoteRef used in the
# driver goes through its cluster's links.
clusters: dict[str, Driver] = {}


class RemoteRef:
    """An actor on a host of a cluster (from ``Cluster.spawn`` or ``Cluster.ref``).

    It is plain data (the cluster's id, the host's index, the actor's path), so
    it can be given to agents and actors on any host (in a spec's factory, in a
    message's field as its three parts): ``ask`` and ``send`` work from every host
    of the cluster and from the driver. A message crosses as the msgpack of the
    same Struct, in the batches of its host pair.

    Attributes:
        cluster: the cluster's id.
        host: the index of the actor's host.
        path: the actor's path on it.
    """

    __slots__ = ("cluster", "host", "path")

    def __init__(self, cluster: str, host: int, path: str) -> None:
        self.cluster = cluster
        self.host = host
        self.path = path

    def __repr__(self) -> str:
        return f"RemoteRef({self.cluster!r}, {self.host}, {self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteRef) and (self.cluster, self.host, self.path) == (
            other.cluster,
            other.host,
            other.path,
        )

    def __hash__(self) -> int:
        return hash((self.cluster, self.host, self.path))

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteRef, (self.cluster, self.host, self.path))

    async def ask(self, message: Message, *, timeout: float | None = None) -> Any:
        """Send *message* to the actor and wait for its reply, as ``ActorRef.ask``.

        Raises:
            NotAMessage, InvalidArgument: *message* is not an ``agentrio.Message``
                (or cannot be encoded).
            UnknownName: no live actor at that path on its host.
            AskTimeout: no reply within *timeout* seconds (measured on its host).
            HostLost: its host is gone.
            RuntimeClosed: used where no host or driver of its cluster runs.
        """
        _check(message)
        host = current_host()
        if host is not None and host.cluster_id == self.cluster:
            if host.index == self.host:
                return await host.local_ask(self.path, message, timeout)
            return await host.ask(f"host-{self.host}", self.path, message, timeout)
        return await self._driver().ask(self.host, self.path, message, timeout)

    async def send(self, message: Message) -> None:
        """Send *message* to the actor, no reply (lost if the actor is gone, as a
        dead letter in-process)."""
        _check(message)
        host = current_host()
        if host is not None and host.cluster_id == self.cluster:
            host.tell(f"host-{self.host}", self.path, message)
        else:
            await self._driver().tell(self.host, self.path, message)

    def _driver(self) -> Driver:
        cluster = clusters.get(self.cluster)
        if cluster is None:
            raise RuntimeClosed(
                f"cluster {self.cluster!r} is not open in this process (its block has ended, "
                "or this process is none of its hosts)"
            )
        return cluster


def _check(message: object) -> None:
    if not isinstance(message, Message):
        raise InvalidArgument(f"an agentrio.Message is sent, got {type(message).__name__}")
