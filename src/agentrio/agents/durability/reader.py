"""StoreReader: what a checkpoint store holds, read without owning it; fork and export."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable, Collection
from types import TracebackType

import msgspec

from ..._checks import check_name, short_repr
from ..._text import scrub
from ...errors import InvalidArgument, UnknownName
from ...messages import ChatMessage
from ...store.base import ArchivingStore, CheckpointStore
from ...store.files import DirectoryStore
from ...store.retention import Retention
from ..loop.runs import new_phase_id as _new_id
from .compaction import compact
from .records import _ENCODE, MemoryKept, PhaseBegun, PhaseDone, Record, TurnsAdded, decode_records
from .resume import _unfinished, plan
from .summary import (
    PhaseStatus,
    PhaseSummary,
    RecordedTurn,
    cut,
    decode_summary,
    last_run,
    messages_of,
    summarize,
)

__all__ = ["StoreReader"]

Forker = Callable[[list[bytes]], Awaitable[None]]


class _Exported(msgspec.Struct, frozen=True):
    summary: PhaseSummary
    turns: list[RecordedTurn]


class _Export(msgspec.Struct, frozen=True):
    format: str
    phases: list[_Exported]


_STATUSES = ("unfinished", "finished", "abandoned")


def _check_filters(status: object, names: dict[str, object], since: object, until: object) -> None:
    """Refuse a filter of `StoreReader.phases` that could match nothing by mistake."""
    if status is not None and status not in _STATUSES:
        raise InvalidArgument(
            f"status must be one of {_STATUSES} or None, got {short_repr(status)}"
        )
    for what, value in names.items():
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{what} must be a str or None, got {short_repr(value)}")
    for what, value in (("since", since), ("until", until)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InvalidArgument(
                f"{what} must be a time.time() (a number) or None, got {short_repr(value)}"
            )


class StoreReader:
    """What a checkpoint store holds: its phases, their turns; export, fork, prune.

    Example:

        async with agentrio.types.StoreReader("checkpoints") as reader:
            for phase in await reader.phases(status="finished", agent="clerk"):
                print(phase.phase_id, phase.stop_reason, phase.turns)
            turns = await reader.turns("invoice-A-7")
            forked = await reader.fork("invoice-A-7", turn=2)  # resumed by the next runtime

    It reads the store without owning it (no lock taken), so it works on a store
    a runtime has open (it sees what is on disk: the last records a runtime
    holds in its writer are not yet; the runtime's own reader,
    ``rt.store_reader()``, has them written out before each read) or on one
    no runtime has open. Writing
    ([`fork`][agentrio.types.StoreReader.fork], [`compact`][agentrio.types.StoreReader.compact],
    [`delete_phases`][agentrio.types.StoreReader.delete_phases]) takes the store's
    lock, and so needs a store no runtime has open (else
    [`StoreLocked`][agentrio.errors.StoreLocked]): on an open one, use the
    runtime's reader, [`rt.store_reader()`][agentrio.Runtime.store_reader],
    whose ``fork`` starts the new phase at once.

    Args:
        store: a folder's path (a [`DirectoryStore`][agentrio.store.DirectoryStore])
            or a store object that is an
            [`ArchivingStore`][agentrio.store.ArchivingStore] (every store of
            agentrio is). ``aclose`` (or the end of ``async with``) closes it
            (a runtime's reader leaves the runtime's store open).

    Raises:
        InvalidArgument: *store* is neither.
    """

    def __init__(self, store: CheckpointStore | str | os.PathLike[str]) -> None:
        self._owned = True  # (a runtime's reader: False, its store is the runtime's)
        if isinstance(store, (str, os.PathLike)):
            store = DirectoryStore(store)
        if not isinstance(store, ArchivingStore):
            raise InvalidArgument(
                f"StoreReader needs a store with an archive (an agentrio.store.ArchivingStore),"
                f" got {store!r}"
            )
        self.store: ArchivingStore = store
        self._fork: Forker | None = None  # (a runtime's reader: its fork starts the phase)
        # (a runtime's reader: its records put so far written out before each read)
        self._synced: Callable[[], Awaitable[None]] | None = None

    def __repr__(self) -> str:
        return f"StoreReader({self.store!r})"

    async def __aenter__(self) -> StoreReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store (letting its lock go, if a write took it); a runtime's
        reader leaves the runtime's store open."""
        if self._owned:
            await self.store.aclose()

    # -- reading ---------------------------------------------------------------------

    async def _live_runs(self) -> dict[str, tuple[list[Record], PhaseSummary]]:
        if self._synced is not None:
            await self._synced()
        planned = plan(await self.store.read_live())
        records = planned.records
        unfinished = {pid for log in planned.agents.values() for pid in _unfinished(log)}
        by_phase: dict[str, list[Record]] = {}
        for record in records:
            if not isinstance(record, MemoryKept) and record.phase:
                by_phase.setdefault(record.phase, []).append(record)
        out: dict[str, tuple[list[Record], PhaseSummary]] = {}
        for pid, phase_records in by_phase.items():
            run = last_run(phase_records)
            if not run:
                continue
            abandoned = type(run[-1]) is not PhaseDone and pid not in unfinished
            out[pid] = (run, summarize(run, archived=False, abandoned=abandoned))
        return out

    async def _archived(self) -> list[PhaseSummary]:
        source = repr(self.store)
        return [decode_summary(meta, source) for _, meta in await self.store.read_index()]

    async def phases(
        self,
        *,
        status: PhaseStatus | None = None,
        agent: str | None = None,
        session: str | None = None,
        spec: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[PhaseSummary]:
        """The phases the store holds (live and archived), oldest first (by the
        time each began), those that match every filter given.

        Args:
            status: ``"unfinished"``, ``"finished"`` or ``"abandoned"``.
            agent: the agent's path.
            session: the session's id.
            spec: the spec's registered name.
            since: began at or after this ``time.time()``.
            until: began before this ``time.time()``.

        Raises:
            StoreCorrupt: a damaged record or index entry.
            StoreError: the store cannot be read.
            InvalidArgument: a filter of the wrong type, or an unknown *status*.
        """
        _check_filters(status, {"agent": agent, "session": session, "spec": spec}, since, until)
        live = await self._live_runs()
        found = [summary for _, summary in live.values()]
        found += [s for s in await self._archived() if s.phase_id not in live]

        def wanted(s: PhaseSummary) -> bool:
            return (
                (status is None or s.status == status)
                and (agent is None or s.agent == agent)
                and (session is None or s.session == session)
                and (spec is None or s.spec == spec)
                and (since is None or s.started_at >= since)
                and (until is None or s.started_at < until)
            )

        return sorted(filter(wanted, found), key=lambda s: s.started_at)

    async def _run(
        self, phase_id: str, live: dict[str, tuple[list[Record], PhaseSummary]] | None = None
    ) -> list[Record]:
        if not isinstance(phase_id, str):
            raise InvalidArgument(f"phase_id must be a str, got {short_repr(phase_id)}")
        if live is None:
            live = await self._live_runs()
        if phase_id in live:
            return live[phase_id][0]
        archived = await self.store.read_archived([phase_id])
        entries = archived.get(phase_id)
        run = last_run(decode_records(entries)) if entries else []
        if not run:
            raise UnknownName(f"the checkpoint store holds no phase {short_repr(phase_id)}")
        return run

    async def turns(self, phase_id: str) -> list[RecordedTurn]:
        """The messages the phase *phase_id* recorded, in order (its user turn, the
        model's replies, the tools' results; the turns of earlier phases that
        its context held are not its own).

        Raises:
            UnknownName: the store holds no such phase.
            StoreCorrupt: a damaged record.
        """
        run = await self._run(phase_id)
        return [
            RecordedTurn(index=i, message=m, at=at) for i, (m, at) in enumerate(messages_of(run))
        ]

    async def export(self, phase_id: str | None = None, *, session: str | None = None) -> bytes:
        """The phase *phase_id*, or every phase of the session *session* (oldest
        first), as JSON: ``{"format": "agentrio.phases/1", "phases": [{"summary":
        {...}, "turns": [{"index", "message", "at"}...]}...]}``; each message as
        a [`ChatMessage`][agentrio.ChatMessage] is encoded.

        Raises:
            InvalidArgument: neither or both of *phase_id* and *session* given.
            UnknownName: no such phase (or no phase of *session*).
        """
        if (phase_id is None) == (session is None):
            raise InvalidArgument("export takes a phase_id or a session=, one of them")
        if phase_id is not None:
            ids = [phase_id]
        else:
            ids = [s.phase_id for s in await self.phases(session=session)]
            if not ids:
                raise UnknownName(
                    f"the checkpoint store holds no phase of session {short_repr(session)}"
                )
        summaries = {s.phase_id: s for s in await self.phases()}
        live = await self._live_runs()
        out = []
        for pid in ids:
            run = await self._run(pid, live)
            summary = summaries.get(pid) or summarize(run, archived=False)
            turns = [
                RecordedTurn(index=i, message=m, at=at)
                for i, (m, at) in enumerate(messages_of(run))
            ]
            out.append(_Exported(summary, turns))
        return msgspec.json.encode(_Export("agentrio.phases/1", out))

    # -- writing -----------------------------------------------------------------------

    async def fork(
        self,
        phase_id: str,
        *,
        turn: int,
        new_phase_id: str | None = None,
        agent: str | None = None,
    ) -> str:
        """Record a new phase that goes on from the turn *turn* of the phase
        *phase_id* (time travel); the original is left as it is.

        The new phase is unfinished: its history is the original's context
        before it (the turns of earlier phases its context held) and its turns
        ``0`` to *turn*, and it goes on from there as a phase cut short by a
        crash does: the model is called next (or, if that turn asked for tool
        calls, they are made again; if it is the phase's answer, the fork ends
        with it). It is run by a new agent of the same spec, *agent* (a path;
        default: the original's, with ``-fork-<hex>`` added to its name): the
        next runtime opened on the store resumes it (see
        [`resumed_result`][agentrio.Runtime.resumed_result]), or, forked with a
        runtime's reader, that runtime starts it at once.

        Returns:
            The new phase's id (*new_phase_id*, or a new one).

        Raises:
            UnknownName: the store holds no phase *phase_id*.
            InvalidArgument: *turn* is not one of its turns' index, *agent* is not
                an agent's path (at most 1,000 characters), or *new_phase_id* is
                not a phase id (a non-empty str of at most 200 characters, as
                ``run(phase_id=...)`` takes) or is the id of a phase the store
                holds.
            StoreLocked: a runtime owns the store (use ``rt.store_reader()``).
        """
        run = await self._run(phase_id)
        messages = messages_of(run)
        if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < len(messages):
            raise InvalidArgument(
                f"turn must be the index of one of phase {short_repr(phase_id)}'s"
                f" {len(messages)} turns, got {short_repr(turn)}"
            )
        begun = run[0]
        assert type(begun) is PhaseBegun
        new_id = new_phase_id if new_phase_id is not None else _new_id()
        if not isinstance(new_id, str) or not 0 < len(new_id) <= 200 or scrub(new_id) != new_id:
            raise InvalidArgument(  # (run()'s rule for a phase id; no lone surrogate)
                f"new_phase_id must be a non-empty str of at most 200 characters,"
                f" got {short_repr(new_id)}"
            )
        if any(s.phase_id == new_id for s in await self.phases()):
            raise InvalidArgument(f"new_phase_id {new_id!r} is the id of a phase of the store")
        path = agent if agent is not None else f"{begun.agent}-fork-{secrets.token_hex(3)}"
        if not isinstance(path, str) or len(path) > 1000:
            raise InvalidArgument(
                f"agent must be an agent's path (a str of at most 1,000 characters),"
                f" got {short_repr(path)}"
            )
        for part in path.split("/"):
            check_name("the fork's agent path", part)
        prior = await self._prior_context(begun)
        command = msgspec.structs.replace(begun.command, phase_id=new_id)
        records: list[Record] = [
            PhaseBegun(
                new_id,
                path,
                _new_id(),
                begun.spec,
                command,
                time.time(),
                begun.session,
                begun.version,
            )
        ]
        if prior:
            records.append(
                TurnsAdded(new_id, tuple(m for m, _ in prior), tuple(at for _, at in prior))
            )
        records += cut(run, turn + 1, new_id)
        data = [_ENCODE(record) for record in records]
        if self._fork is not None:
            await self._fork(data)
        else:
            await self.store.append(data, sync=True)
        return new_id

    async def _prior_context(self, begun: PhaseBegun) -> list[tuple[ChatMessage, float]]:
        """The messages the context of *begun*'s phase held when it began (from its
        agent's earlier finished phases), or [] if it did not continue one."""
        cmd = begun.command
        if not cmd.continue_context:
            return []
        earlier = [
            s
            for s in await self.phases(status="finished")
            if s.agent_id == begun.agent_id and s.started_at < begun.at
        ]
        held: list[tuple[ChatMessage, float]] = []
        live = await self._live_runs()
        for summary in earlier:
            run = await self._run(summary.phase_id, live)
            first = run[0]
            assert type(first) is PhaseBegun
            if first.command.context_label != cmd.context_label:
                continue
            if not first.command.continue_context:
                held = []
            held += messages_of(run)
        return held

    async def compact(self, retention: Retention | None = None) -> None:
        """Move the finished phases of the live area to the archive (as a runtime
        opening the store does), and drop the archived phases *retention* drops.
        Takes the store's lock (a store no runtime has open).

        Raises:
            StoreLocked: a runtime owns the store.
            StoreCorrupt: a damaged record.
        """
        await compact(self.store, await self.store.load(), retention=retention)

    async def delete_phases(self, phase_ids: Collection[str]) -> None:
        """Delete every record of the phases *phase_ids*, gone from the store's files
        (see each store's ``delete_phases``). Takes the store's lock.

        Raises:
            InvalidArgument: *phase_ids* is not a collection of str.
            StoreLocked: a runtime owns the store.
        """
        ids = _phase_ids(phase_ids)
        await self.store.delete_phases(ids)


def _phase_ids(phase_ids: object) -> list[str]:
    if isinstance(phase_ids, (str, bytes)) or not isinstance(phase_ids, Collection):
        raise InvalidArgument(f"phase_ids must be a collection of str, got {phase_ids!r}")
    ids = list(phase_ids)
    if not all(isinstance(pid, str) for pid in ids):
        raise InvalidArgument(f"phase_ids must be a collection of str, got {phase_ids!r}")
    return ids
