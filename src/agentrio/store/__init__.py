"""Checkpoint stores: where durable agents keep their records (``open_runtime(store=...)``).

A store keeps opaque records and gives them back in order; see
[`CheckpointStore`][agentrio.store.CheckpointStore] to write one of your own.
"""

from .base import CheckpointStore, Entry, Loaded, MemoryStore

__all__ = ["CheckpointStore", "Entry", "Loaded", "MemoryStore"]

for _name in __all__:
    globals()[_name].__module__ = "agentrio.store"
del _name
