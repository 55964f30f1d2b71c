"""Sessions (#27): a conversation keyed by a session id, kept in the checkpoint store.

A session is one durable agent, spawned as ``sessions/<session id>`` from a
registered spec, whose durable id is ``session:<session id>`` in every life:
all its context labels are the session's. ``Runtime.session`` gives its
`AgentRef` (the live one, or one spawned again with its contexts as the store
left them: any later runtime, in any process, with the same spec); its
mailbox serves the session's requests one at a time.

Retention (`prune`: a time to live, a maximum count) and `delete` remove a
session's records from the store (``CheckpointStore.delete_phases``, every
record of each of its phases).

A store with an archive (``ArchivingStore``: the runtime moves the phases of
agents with nothing to resume there when it opens) holds a session's earlier
phases in its archive: a session is continued from its archived phases (found
by the ``session`` of their summaries in the archive's index) and the live
area's, in the order they began.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from ..._checks import check_name
from ..._handles import create
from ...errors import InvalidArgument, UnknownName
from ...store.base import ArchivingStore, Entry
from ..loop.ref import AgentRef
from ..loop.spawning import spawn_agent
from ..loop.spec import AgentSpec
from .deferred import Checkpoints, made_spec, restore_context
from .records import PhaseBegun, Record, decode_records
from .resume import _AgentLog, _contexts, plan
from .summary import decode_summary, last_run

if TYPE_CHECKING:
    from ...supervisors.ref import SupervisorRef
    from .recorder import _Durable

__all__ = ["SUPERVISOR", "delete", "known", "open_session", "prune"]

SUPERVISOR = "sessions"  # the sessions' agents are its children, named by session id
_PREFIX = "session:"  # a session's durable agent id: this, then its id
MAX_SESSION_ID = 200


def _checked_id(session_id: object) -> str:
    if not isinstance(session_id, str) or len(session_id) > MAX_SESSION_ID:
        raise InvalidArgument(
            f"session_id must be a str of 1 to {MAX_SESSION_ID} characters, got "
            f"{type(session_id).__name__}"
            + (f" of {len(session_id)}" if isinstance(session_id, str) else "")
        )
    check_name("session_id", session_id)
    if not session_id.isprintable():
        raise InvalidArgument("session_id must hold no control characters")
    return session_id


def _durable(ck: Checkpoints, session_id: str) -> _Durable | None:
    """The live durable agent of the session, if there is one."""
    durable = ck.agents.get(f"{SUPERVISOR}/{session_id}")
    if durable is None or durable.agent_id != _PREFIX + session_id:
        return None
    ref = durable.state.ref
    if ref is None or ref.statistics().state == "exited":
        return None
    return durable


async def _ended(ck: Checkpoints, sid: str) -> None:
    """Wait for the session's agent to exit if it is stopping (a new one is then
    spawned, rather than the one going away given)."""
    durable = _durable(ck, sid)
    ref = None if durable is None else durable.state.ref
    if ref is not None and ref.statistics().state == "stopping":
        await ref.stop()


def _log(ck: Checkpoints, session_id: str) -> _AgentLog | None:
    return ck.plan.agents.get(_PREFIX + session_id)


async def _archived(ck: Checkpoints) -> dict[str, list[tuple[str, float, str, bool]]]:
    """The archived phases of every session: session id -> [(phase id, when it
    began, spec, whether the session's own agent ran it)] ({} for a store without
    an archive). (A phase forked from one of the session's carries the session
    too, run by an agent of its own: not the session's conversation, but among
    the records of the session that delete_session removes.)"""
    store = ck.store
    if not isinstance(store, ArchivingStore):
        return {}
    out: dict[str, list[tuple[str, float, str, bool]]] = {}
    source = repr(store)
    for _, meta in await store.read_index():
        summary = decode_summary(meta, source)
        if summary.session is not None:
            found = out.setdefault(summary.session, [])
            own = summary.agent_id == _PREFIX + summary.session
            found.append((summary.phase_id, summary.started_at, summary.spec, own))
    return out


async def _live_log(ck: Checkpoints, sid: str) -> _AgentLog | None:
    """The session's records of the store's live area: as the runtime read it when
    it opened, or, if the session's agent ran in this runtime and has exited (its
    phases of this life are not in that reading), as the live area holds them now."""
    gone = ck.agents.get(f"{SUPERVISOR}/{sid}")
    store = ck.store
    if gone is None or gone.agent_id != _PREFIX + sid or not isinstance(store, ArchivingStore):
        return _log(ck, sid)
    await ck.writer.synced()  # (its last records are in the store)
    return plan(await store.read_live()).agents.get(_PREFIX + sid)


async def _history(ck: Checkpoints, sid: str, log: _AgentLog | None) -> _AgentLog | None:
    """The session's phases, archived and live, as one log (oldest first)."""
    archived = (await _archived(ck)).get(sid, [])
    live = set() if log is None else set(log.phases)
    wanted = [pid for pid, _, _, own in archived if own and pid not in live]
    if not wanted:
        return log
    assert isinstance(ck.store, ArchivingStore)
    read = await ck.store.read_archived(wanted)
    runs: list[list[Record]] = []
    for pid in wanted:
        run = last_run(decode_records(read.get(pid, [])))
        if run and isinstance(run[0], PhaseBegun):
            runs.append(run)
    if not runs:
        return log
    runs.sort(key=lambda run: run[0].at)  # type: ignore[union-attr]
    first = runs[0][0]
    assert isinstance(first, PhaseBegun)
    merged = _AgentLog(first, Entry(repr(ck.store), 0, b""))
    merged.runs = runs + ([] if log is None else log.runs)
    return merged


async def open_session(ck: Checkpoints, session_id: object, spec: object) -> AgentRef[object]:
    """The agent of session *session_id*: live, or spawned again from *spec* (a
    registered spec's name, or an ``AgentSpec`` of a registered name) with its
    contexts as the store left them."""
    sid = _checked_id(session_id)
    if isinstance(spec, AgentSpec):
        ck.check_spec(spec)
        name = spec.name
    elif isinstance(spec, str):
        name = spec
    else:
        raise InvalidArgument(
            f"spec must be a registered spec's name or an AgentSpec, got {type(spec).__name__}"
        )
    await _ended(ck, sid)
    durable = _durable(ck, sid)
    log = None if durable is not None else await _history(ck, sid, await _live_log(ck, sid))
    known = durable.spec if durable is not None else (log.spec if log is not None else None)
    if known is not None and known != name:
        raise InvalidArgument(
            f"session {sid!r} is a conversation of spec {known!r}, not {name!r}: a session "
            "is continued with the spec it began with"
        )
    if durable is not None:
        if durable.phase_ids is None:  # (spawned again at open, for an unfinished phase)
            durable.phase_ids = []
            durable.last = _last(_log(ck, sid))
        live: AgentRef[object] = create(AgentRef, durable.state)
        ck.sessions[sid] = live
        return live
    made: AgentSpec[object] = spec if isinstance(spec, AgentSpec) else made_spec(ck, name)
    under = await _supervisor(ck)
    durable = _durable(ck, sid)  # (another task may have opened it meanwhile)
    if durable is not None:
        return create(AgentRef, durable.state)
    assert ck.services is not None
    agent = spawn_agent(ck.services, under, made, sid, None)
    ck.adopt(agent, _PREFIX + sid)
    durable = ck.agents[agent.path]
    durable.phase_ids = []
    durable.last = _last(log)
    if log is not None:
        system = agent._state.info.system
        for label, (messages, stamps) in _contexts(log).items():
            if system is not None and messages and messages[0].role != "system":
                # (its first phase was deleted by a retention: the conversation goes
                # on from its oldest kept turn, under the spec's instructions)
                messages, stamps = [system[0], *messages], [stamps[0], *stamps]
            restore_context(agent._state, label, messages, stamps)
    ck.sessions[sid] = agent
    return agent


async def _supervisor(ck: Checkpoints) -> SupervisorRef:
    sup = ck.sup
    assert sup is not None
    try:
        return sup.lookup_supervisor(SUPERVISOR)
    except UnknownName:
        try:
            return await sup.spawn_supervisor(name=SUPERVISOR)
        except Exception:
            return sup.lookup_supervisor(SUPERVISOR)  # (spawned by another task meanwhile)


def _last(log: _AgentLog | None) -> float:
    """When the session of *log* last began a phase (0.0: never)."""
    if log is None:
        return 0.0
    return max((r[0].at for r in log.runs if isinstance(r[0], PhaseBegun)), default=0.0)


async def known(ck: Checkpoints) -> dict[str, float]:
    """Every session of the store and of this runtime: its id -> when it last began
    a phase."""
    out: dict[str, float] = {}
    for sid, phases in (await _archived(ck)).items():
        out[sid] = max(at for _, at, _, _ in phases)
    for agent_id, log in ck.plan.agents.items():
        if agent_id.startswith(_PREFIX):
            sid = agent_id[len(_PREFIX) :]
            out[sid] = max(out.get(sid, 0.0), _last(log))
    for sid in ck.sessions:
        durable = _durable(ck, sid)
        if durable is not None:
            out[sid] = max(out.get(sid, 0.0), durable.last)
    return out


async def delete(ck: Checkpoints, session_id: object) -> int:
    """Delete every record of the session *session_id* from the store (its agent,
    if live, is cancelled first); the number of its phases deleted.

    Raises:
        UnknownName: no such session in the store or in this runtime.
    """
    sid = _checked_id(session_id)
    delete_phases = getattr(ck.store, "delete_phases", None)
    if delete_phases is None:  # (refused before its agent is stopped)
        raise InvalidArgument(
            f"{type(ck.store).__name__} cannot delete records (it has no delete_phases)"
        )
    durable = _durable(ck, sid)
    log = _log(ck, sid)
    archived = (await _archived(ck)).get(sid, [])
    if durable is None and log is None and not archived and sid not in ck.sessions:
        raise UnknownName(f"no session {sid!r} in this runtime or its checkpoint store")
    ids: set[str] = {pid for pid, _, _, _ in archived}
    if log is not None:
        ids.update(r[0].phase for r in log.runs if isinstance(r[0], PhaseBegun))
        ids.update(log.phases)
    ck.sessions.pop(sid, None)
    if durable is not None:
        ids.update(durable.phase_ids or ())
        ref = durable.state.ref
        if ref is not None:
            ref.cancel()
            await ref.stop()  # (waits until it has exited)
    await ck.writer.synced()  # (the session's last records are in the store first)
    if isinstance(ck.store, ArchivingStore):  # (phases forked from the session's: theirs too)
        for log in plan(await ck.store.read_live()).agents.values():
            begun = [r[0] for r in log.runs if isinstance(r[0], PhaseBegun)]
            ids.update(b.phase for b in begun if b.session == sid)
    # The records of the agent's own memory (#26: MemoryKept, named by the agent's
    # path) go with it: record_phase reads a MemoryKept's memory name where it reads
    # a phase record's phase id, so delete_phases deletes them by that name.
    memory = f"{SUPERVISOR}/{sid}"
    await delete_phases(sorted(ids | {memory}))
    ck.plan.memories.pop(memory, None)  # (not replayed by a session begun again)
    for pid in ids:
        ck.parked.pop(pid, None)
        ck.plan.finished.pop(pid, None)
    ck.plan.agents.pop(_PREFIX + sid, None)
    return len(ids)


async def prune(ck: Checkpoints, max_age: object, max_count: object) -> tuple[str, ...]:
    """Delete the sessions that began no phase for *max_age* seconds, then the least
    recent ones past *max_count*; a session with a phase under way is kept."""
    if max_age is not None and (
        not isinstance(max_age, (int, float)) or isinstance(max_age, bool) or not max_age >= 0
    ):
        raise InvalidArgument(f"max_age must be a number of seconds >= 0 or None, got {max_age!r}")
    if max_count is not None and (
        not isinstance(max_count, int) or isinstance(max_count, bool) or max_count < 0
    ):
        raise InvalidArgument(f"max_count must be an int >= 0 or None, got {max_count!r}")
    sessions = await known(ck)
    busy = {sid for sid in sessions if _busy(ck, sid)}
    now = time.time()
    doomed: list[str] = []
    if max_age is not None and not math.isinf(max_age):
        doomed = [sid for sid, last in sessions.items() if now - last > max_age]
    if max_count is not None:
        old = set(doomed)
        kept = sorted((s for s in sessions if s not in old), key=sessions.__getitem__)
        doomed += kept[: max(0, len(kept) - max_count)]
    out = []
    for sid in doomed:
        if sid not in busy:
            await delete(ck, sid)
            out.append(sid)
    return tuple(out)


def _busy(ck: Checkpoints, sid: str) -> bool:
    """Has the session a phase under way: running, or parked (waiting for a
    decision or a result: a retention does not drop what someone is to decide)?"""
    if any(p.agent_id == _PREFIX + sid for p in ck.parked.values()):
        return True
    durable = _durable(ck, sid)
    return durable is not None and durable.state.phase is not None
