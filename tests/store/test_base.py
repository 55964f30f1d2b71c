"""The store protocol, and MemoryStore as a store that keeps it."""

from __future__ import annotations

from agentrio.store import CheckpointStore, Entry, Loaded, MemoryStore


async def test_memory_store_gives_records_back_in_order() -> None:
    store = MemoryStore()
    assert isinstance(store, CheckpointStore)
    await store.append([b"a", b"b"], sync=False)
    await store.append([b"c"], sync=True)
    loaded = await store.load()
    entries = [Entry("<memory>", i, data) for i, data in enumerate([b"a", b"b", b"c"])]
    assert loaded == Loaded(entries)
    assert loaded.torn == ()
    assert repr(store) == "MemoryStore(records=3, archived=0)"
    await store.aclose()
    assert store.closed


def test_an_entry_s_repr_does_not_show_its_record() -> None:
    entry = Entry("/ckpt/000001.ckpt", 12, b"secret conversation")
    assert repr(entry) == "Entry(source='/ckpt/000001.ckpt', offset=12, data=<19 bytes>)"
    assert "secret" not in repr(Loaded([entry], (entry,)))
