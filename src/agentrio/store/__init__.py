"""Checkpoint stores: where durable agents keep their records (``open_runtime(store=...)``).

A store keeps opaque records and gives them back in order; see
[`CheckpointStore`][agentrio.store.CheckpointStore] to write one of your own.
Two ship with agentrio: [`DirectoryStore`][agentrio.store.DirectoryStore]
(append-only segment files) and [`SQLiteStore`][agentrio.store.SQLiteStore]
(the standard library's ``sqlite3``), and
[`PostgresStore`][agentrio.store.PostgresStore] (PostgreSQL, extra ``postgres``).
[`CheckpointWriter`][agentrio.store.CheckpointWriter]
is the one task that appends to a store, in batches. Each store has a live area,
read when a runtime opens it, and an archive of finished phases
([`ArchivingStore`][agentrio.store.ArchivingStore]), pruned by a
[`Retention`][agentrio.store.Retention].
"""

from .base import (
    Archived,
    ArchivingStore,
    CheckpointStore,
    Entry,
    Loaded,
    MemoryStore,
    record_phase,
)
from .files import FORMAT_VERSION, MAGIC, MAX_RECORD, DirectoryStore
from .postgres import PostgresStore
from .retention import Retention
from .sqlite import SQLiteStore
from .writer import CheckpointWriter

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_RECORD",
    "Archived",
    "ArchivingStore",
    "CheckpointStore",
    "CheckpointWriter",
    "DirectoryStore",
    "Entry",
    "Loaded",
    "MemoryStore",
    "PostgresStore",
    "Retention",
    "SQLiteStore",
    "record_phase",
]

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) or callable(_value):
        _value.__module__ = "agentrio.store"
del _name, _value
