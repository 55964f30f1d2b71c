"""Compaction: the finished phases moved out of the store's live area, and retention.

A runtime opening a store reads its live area (``load``). What it no longer
needs there, it moves to the store's archive (``ArchivingStore.compact``):
every phase of an agent that has no unfinished phase left (such an agent is
never spawned again, so its phases are never read to resume one); and drops
the records of no phase it knows. The live area keeps the phases of the
agents that will be resumed (their finished phases too: they hold those
agents' contexts), the memories' records (#26: ``MemoryKept``, no phase's)
and one ``TotalsKept`` with the budget's last totals. It
runs when a runtime given a [`Retention`][agentrio.store.Retention] opens a store
and when it closes it (the retention also drops archived phases), and when a
[`StoreReader`][agentrio.types.StoreReader] is asked to.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...store.base import Archived, ArchivingStore, Entry, Loaded
from ...store.retention import Retention
from .records import _ENCODE, MemoryKept, PhaseBegun, PhaseDone, Record, TotalsKept
from .resume import _Plan, _unfinished, plan
from .summary import PhaseSummary, decode_summary, encode_summary, last_run, summarize

__all__ = ["compact", "retained"]


def _split(
    entries: Sequence[Entry], records: Sequence[Record], planned: _Plan
) -> tuple[list[bytes], list[Archived], bool]:
    """The live area's records to keep, the phases to archive, and whether anything
    changes (a phase archived, or a record of no known phase dropped)."""
    resumed = {log.agent_id for log in planned.agents.values() if _unfinished(log)}
    by_phase: dict[str, list[int]] = {}
    live: list[int] = []
    for i, record in enumerate(records):
        if isinstance(record, MemoryKept):  # (a memory's, no phase's: it stays live)
            live.append(i)
        else:
            by_phase.setdefault(record.phase, []).append(i)
    archive: list[Archived] = []
    changed = False
    for phase, where in by_phase.items():
        if phase == "":  # (a TotalsKept: made again below)
            changed = changed or len(where) > 1
            continue
        run_records = [records[i] for i in where]
        begun = next((r for r in reversed(run_records) if type(r) is PhaseBegun), None)
        if begun is None:
            changed = True  # (records of a phase whose beginning is gone: dropped)
            continue
        if begun.agent_id in resumed:
            live += where
            continue
        run = last_run(run_records)
        abandoned = type(run[-1]) is not PhaseDone
        summary = summarize(run, archived=True, abandoned=abandoned)
        first = where[len(run_records) - len(run)]
        data = [entries[i].data for i in where if i >= first]
        archive.append(Archived(phase, encode_summary(summary), data))
        changed = True
    live.sort()
    kept = [entries[i].data for i in live]
    if planned.totals is not None:
        # (Last: a kept record's older totals must not come after the newest.)
        kept.append(_ENCODE(TotalsKept("", planned.totals)))
    return kept, archive, changed


def retained(summaries: Sequence[PhaseSummary], retention: Retention, now: float) -> list[str]:
    """The archived phases that *retention* drops: those ended longer than
    ``max_age`` ago, and the oldest beyond ``max_count``."""
    ended = [s for s in summaries if s.status != "unfinished"]
    drop: set[str] = set()
    if retention.max_age is not None:
        horizon = now - retention.max_age
        drop |= {s.phase_id for s in ended if (s.ended_at or s.started_at) < horizon}
    if retention.max_count is not None:
        newest = sorted(ended, key=lambda s: s.ended_at or s.started_at, reverse=True)
        drop |= {s.phase_id for s in newest[retention.max_count :]}
    return sorted(drop)


async def compact(
    store: ArchivingStore,
    loaded: Loaded,
    planned: _Plan | None = None,
    *,
    retention: Retention | None = None,
) -> None:
    """Move what the live area *loaded* no longer needs to the archive, and drop
    what *retention* drops; nothing is written if nothing changes."""
    if planned is None:
        planned = plan(loaded)
    records, planned.records = planned.records, []  # (let go once split)
    live, archive, changed = _split(loaded.entries, records, planned)
    del records
    drop: list[str] = []
    if retention is not None and (retention.max_age is not None or retention.max_count is not None):
        source = repr(store)
        summaries = [decode_summary(meta, source) for _, meta in await store.read_index()]
        added = {a.phase for a in archive}
        summaries = [s for s in summaries if s.phase_id not in added]
        summaries += [decode_summary(a.meta, source) for a in archive]
        drop = retained(summaries, retention, time.time())
        changed = changed or bool(drop)
    if changed:
        await store.compact(live, archive, drop)
