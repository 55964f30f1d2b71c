"""agentrio.ray: the same agents on a Ray cluster (the ``ray`` extra).

A *cluster* is a set of node hosts, each a Ray actor running a full agentrio
runtime on its own Trio thread, placed one per CPU across the Ray cluster's
nodes. ``open_cluster()`` opens one much as ``open_runtime()`` opens a runtime,
and the cluster offers what a runtime offers: ``spawn_agent`` (from a spec
registered by name), the agent's ``run`` and ``stream``, ``map`` across the
hosts, ``events()`` of every host as one stream, ``usage()``. Messages between
hosts travel in batches, msgpack of the same Structs, each applied once.

    async with agentrio.ray.open_cluster(hosts=2, specs={"w": make_w}) as cluster:
        agent = await cluster.spawn_agent(make_w())
        print((await agent.run("hello")).final_text)

See the how-to "From one process to a cluster". Importing this module imports
Ray; agentrio itself never imports it.
"""

from .. import _lazy
from ._cluster import Cluster as Cluster
from ._cluster import ClusterAgent as ClusterAgent
from ._cluster import ClusterRunStream as ClusterRunStream
from ._cluster import ClusterStatistics as ClusterStatistics
from ._cluster import open_cluster as open_cluster
from ._host import HostStatus as HostStatus
from ._ledger import LeaseTerms as LeaseTerms
from ._remote import RemoteRef as RemoteRef

__all__ = [
    "Cluster",
    "ClusterAgent",
    "ClusterRunStream",
    "ClusterStatistics",
    "HostStatus",
    "LeaseTerms",
    "RemoteRef",
    "open_cluster",
]

# A host loads the durability room (its deferred calls): the public names among it
# get their public home now, as open_runtime(store=...) gives them (agentrio/_lazy.py).
_lazy.settle()
