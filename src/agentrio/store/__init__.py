"""Checkpoint stores: where durable agents keep their records (``open_runtime(store=...)``).

A store keeps opaque records and gives them back in order; see
[`CheckpointStore`][agentrio.store.CheckpointStore] to write one of your own.
Two ship with agentrio: [`DirectoryStore`][agentrio.store.DirectoryStore]
(append-only segment files) and [`SQLiteStore`][agentrio.store.SQLiteStore]
(the standard library's ``sqlite3``), and
[`PostgresStore`][agentrio.store.PostgresStore] (PostgreSQL, extra ``postgres``).
[`CheckpointWriter`][agentrio.store.CheckpointWriter]
is the one task that appends to a store, in batches.
"""

from .base import CheckpointStore, Entry, Loaded, MemoryStore
from .files import FORMAT_VERSION, MAGIC, MAX_RECORD, DirectoryStore
from .postgres import PostgresStore
from .sqlite import SQLiteStore
from .writer import CheckpointWriter

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_RECORD",
    "CheckpointStore",
    "CheckpointWriter",
    "DirectoryStore",
    "Entry",
    "Loaded",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
]

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = "agentrio.store"
del _name, _value
