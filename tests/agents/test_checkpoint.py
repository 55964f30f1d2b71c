"""Durable agents: the records a phase leaves in a checkpoint store, resuming a phase
cut short by a crash (of the runtime, or of the agent's actor), tool calls replayed,
made again or reported interrupted, approvals asked again, and a damaged store."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

import agentrio
from agentrio import (
    AgentSpec,
    ChatMessage,
    PermissionPolicy,
    ToolCallRequest,
    Usage,
    ask_rule,
)
from agentrio.agents.durability.records import (
    INTERRUPTED,
    PhaseBegun,
    PhaseDone,
    ToolBegun,
    ToolsDone,
    Totals,
    TurnsAdded,
    decode_records,
)
from agentrio.errors import StoreCorrupt, UnknownName
from agentrio.events import CheckpointTorn, PhaseResumed, ResumedPhaseEnded
from agentrio.store import DirectoryStore, Entry, Loaded, MemoryStore
from agentrio.testing import FunctionModel, Reply

RecordEvents = Callable[..., list[agentrio.events.Event]]


class World:
    """What the tools did (their side effects), across the runtime's lives."""

    def __init__(self) -> None:
        self.effects: list[str] = []
        self.hold = trio.Event()  # a tool that waits on it never returns in the first life


WORLD = World()


@pytest.fixture(autouse=True)
def _world() -> None:
    global WORLD
    WORLD = World()


@agentrio.tool
async def pay(amount: int) -> str:
    """Pay (not idempotent)."""
    WORLD.effects.append(f"pay {amount}")
    await WORLD.hold.wait()
    return f"paid {amount}"


@agentrio.tool(idempotent=True)
async def read(key: str) -> str:
    """Read a key (idempotent)."""
    WORLD.effects.append(f"read {key}")
    await WORLD.hold.wait()
    return f"value of {key}"


@agentrio.tool
async def note(text: str) -> str:
    """Note something (returns at once)."""
    WORLD.effects.append(f"note {text}")
    await trio.lowlevel.checkpoint()
    return f"noted {text}"


def tool_turn(*calls: ToolCallRequest) -> Reply:
    return Reply(tool_calls=calls, usage=Usage(10, 5))


def script(*replies: Reply, seen: list[tuple[ChatMessage, ...]] | None = None) -> FunctionModel:
    """A model that answers with *replies* in turn, by how many replies the history holds,
    so that it answers the same after a resume; it hangs past them."""

    async def complete(messages: Sequence[ChatMessage], tools: object) -> Reply:
        if seen is not None:
            seen.append(tuple(messages))
        n = sum(1 for m in messages if m.role == "assistant")
        await trio.lowlevel.checkpoint()
        if n < len(replies):
            return replies[n]
        await trio.sleep_forever()
        raise AssertionError

    return FunctionModel(complete)


def spec_of(model: FunctionModel, **options: object) -> Callable[[], AgentSpec[str]]:
    def make() -> AgentSpec[str]:
        return AgentSpec(
            name="worker",
            model=model,
            instructions="You work.",
            tools=[pay, read, note],
            **options,  # type: ignore[arg-type]
        )

    return make


async def crash_after(
    store: object,
    make: Callable[[], AgentSpec[str]],
    ready: Callable[[], bool],
    *,
    phase_id: str = "p1",
    **run: object,
) -> None:
    """Life 1: run a phase until *ready*, then cancel the runtime (the phase never ends)."""
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:  # type: ignore[arg-type]
        agent = await rt.spawn_agent(make(), name="w1")

        async def caller() -> None:
            with pytest.raises(agentrio.ActorStopped):
                await agent.run("do the job", phase_id=phase_id, **run)  # type: ignore[arg-type]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            while not ready():
                await trio.sleep(0.01)
            rt.cancel()


async def test_a_phase_cut_short_goes_on_from_its_last_turn(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    store = MemoryStore()
    seen: list[tuple[ChatMessage, ...]] = []
    model = script(
        tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")),
        tool_turn(ToolCallRequest("note", {"text": "b"}, id="c2")),
        Reply(text="all done", usage=Usage(7, 3)),
        seen=seen,
    )
    first = script(
        tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")),
        tool_turn(ToolCallRequest("note", {"text": "b"}, id="c2")),
    )
    await crash_after(store, spec_of(first), lambda: len(WORLD.effects) == 2)
    assert WORLD.effects == ["note a", "note b"]
    async with agentrio.open_runtime(store=store, specs={"worker": spec_of(model)}) as rt:
        events = record_events(rt)
        assert rt.resumed == ("p1",)
        # Life 1 spent two model calls: the budget starts from them.
        assert rt.usage().requests == 2 and rt.usage().input_tokens == 20
        result = await rt.resumed_result("p1")
        assert result.stop_reason == "done" and result.final_text == "all done"
        assert [c.content for c in result.tool_calls] == ["noted a", "noted b"]
        # The history was restored: the model saw the first life's turns, once each.
        (history,) = seen
        assert [m.role for m in history] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
        ]
        assert rt.usage().requests == 3 and rt.usage().input_tokens == 27
        agent_history = await (await _agent(rt, "w1")).history()
        assert [t.message.role for t in agent_history][-1] == "assistant"
        assert len(agent_history) == 7
        await trio.testing.wait_all_tasks_blocked()
        resumed = [e for e in events if isinstance(e, (PhaseResumed, ResumedPhaseEnded))]
        assert resumed == [
            PhaseResumed(path="w1", phase_id="p1", turns=6, restart=False),
            ResumedPhaseEnded(path="w1", phase_id="p1", stop_reason="done"),
        ]
    assert WORLD.effects == ["note a", "note b"]  # nothing was run twice
    # A third life finds nothing to resume, and the result in the store.
    async with agentrio.open_runtime(store=store, specs={"worker": spec_of(model)}) as rt:
        assert rt.resumed == ()
        assert (await rt.resumed_result("p1")).final_text == "all done"
        with pytest.raises(UnknownName):
            await rt.resumed_result("nope")
        assert rt.usage().requests == 3


async def _agent(rt: agentrio.Runtime, path: str) -> agentrio.AgentRef[str]:
    checkpoints = rt._services.checkpoints
    assert checkpoints is not None
    from agentrio._handles import create
    from agentrio.agents.loop.ref import AgentRef

    return create(AgentRef, checkpoints.agents[path].state)  # type: ignore[no-any-return]


async def test_recorded_results_are_replayed_idempotent_calls_made_again_others_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    batch = tool_turn(
        ToolCallRequest("pay", {"amount": 5}, id="c1"),
        ToolCallRequest("read", {"key": "k"}, id="c2"),
        ToolCallRequest("note", {"text": "x"}, id="c3"),
    )
    seen: list[tuple[ChatMessage, ...]] = []
    await crash_after(store, spec_of(script(batch)), lambda: len(WORLD.effects) == 3)
    assert sorted(WORLD.effects) == ["note x", "pay 5", "read k"]
    WORLD.hold.set()  # (in this life, the tools return)
    model = script(batch, Reply(text="ok"), seen=seen)
    async with agentrio.open_runtime(store=store, specs={"worker": spec_of(model)}) as rt:
        result = await rt.resumed_result("p1")
    # note's result was recorded: replayed. read is idempotent: made again. pay was
    # in flight and is not: not made again, reported interrupted.
    assert sorted(WORLD.effects) == ["note x", "pay 5", "read k", "read k"]
    by_id = {c.id: c for c in result.tool_calls}
    assert by_id["c3"].content == "noted x" and by_id["c3"].status == "ok"
    assert by_id["c2"].content == "value of k"
    assert by_id["c1"].status == "failed"
    assert by_id["c1"].content == INTERRUPTED.format(name="pay")
    (history,) = seen
    assert [m.tool_call_id for m in history if m.role == "tool"] == ["c1", "c2", "c3"]


async def test_the_start_of_a_call_not_idempotent_is_on_disk_before_it_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    on_disk: list[bool] = []

    @agentrio.tool(name="pay")
    async def checked_pay(amount: int) -> str:
        records = decode_records(
            [Entry("<memory>", i, data) for i, data in enumerate(store.records)]
        )
        on_disk.append(any(type(r) is ToolBegun and r.call_id == "c1" for r in records))
        return "paid"

    model = script(tool_turn(ToolCallRequest("pay", {"amount": 1}, id="c1")), Reply(text="ok"))

    def make() -> AgentSpec[str]:
        return AgentSpec(name="worker", model=model, tools=[checked_pay])

    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("pay")).final_text == "ok"
    assert on_disk == [True]


@pytest.mark.parametrize("durability", ["turn", "batch"])
async def test_turn_durability_syncs_each_turn_before_the_next_model_call(
    durability: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = MemoryStore()
    recorded: list[int] = []  # the turns on disk at each model call

    async def complete(messages: Sequence[ChatMessage], tools: object) -> Reply:
        records = decode_records(
            [Entry("<memory>", i, data) for i, data in enumerate(store.records)]
        )
        recorded.append(sum(1 for r in records if type(r) is TurnsAdded))
        await trio.lowlevel.checkpoint()
        n = sum(1 for m in messages if m.role == "assistant")
        if n < 2:
            return tool_turn(ToolCallRequest("read", {"key": str(n)}))
        return Reply(text="done")

    WORLD.hold.set()
    make = spec_of(FunctionModel(complete))
    async with agentrio.open_runtime(
        store=store,
        specs={"worker": make},
        durability=durability,  # type: ignore[arg-type]
    ) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go")).final_text == "done"
    if durability == "turn":
        assert recorded == [0, 1, 2]  # each model turn is on disk before the next call
    else:
        assert recorded[0] == 0 and recorded != [0, 1, 2]


async def test_an_approval_asked_before_a_crash_is_asked_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    asked: list[str] = []

    async def never(request: agentrio.events.ConfirmationRequired) -> bool:
        asked.append("life 1")
        await trio.sleep_forever()
        raise AssertionError

    async def yes(request: agentrio.events.ConfirmationRequired) -> bool:
        asked.append("life 2")
        return True

    model = script(tool_turn(ToolCallRequest("note", {"text": "n"}, id="c1")), Reply(text="ok"))
    policy = PermissionPolicy(rules=[ask_rule("note")])
    await crash_after(
        store, spec_of(model, permissions=policy, approver=never), lambda: bool(asked)
    )
    assert WORLD.effects == []  # never silently approved
    make = spec_of(model, permissions=policy, approver=yes)
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        result = await rt.resumed_result("p1")
    assert asked == ["life 1", "life 2"]
    assert result.final_text == "ok" and WORLD.effects == ["note n"]


async def test_an_answered_approval_is_not_asked_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    asked: list[str] = []

    def approver(life: str) -> Callable[[object], bool]:
        def answer(request: object) -> bool:
            asked.append(life)
            return True

        return answer

    model = script(tool_turn(ToolCallRequest("read", {"key": "k"}, id="c1")), Reply(text="ok"))
    policy = PermissionPolicy(rules=[ask_rule("read")])
    await crash_after(
        store,
        spec_of(model, permissions=policy, approver=approver("life 1")),
        lambda: bool(WORLD.effects),
    )
    WORLD.hold.set()
    make = spec_of(model, permissions=policy, approver=approver("life 2"))
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        result = await rt.resumed_result("p1")
    # read is idempotent: made again, on the answer recorded in life 1.
    assert asked == ["life 1"] and WORLD.effects == ["read k", "read k"]
    assert result.tool_calls[0].content == "value of k"


async def test_a_crashed_agent_goes_on_from_its_last_good_turn(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    crashes: list[str] = []

    def estimator(text: str) -> int:
        if text == "finished" and not crashes:
            crashes.append(text)
            raise RuntimeError("a bug in the estimator")
        return len(text) // 4 + 1

    seen: list[tuple[ChatMessage, ...]] = []
    model = script(
        tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")),
        Reply(text="finished"),
        seen=seen,
    )
    make = spec_of(model, token_estimator=estimator)
    async with agentrio.open_runtime(store=MemoryStore(), specs={"worker": make}) as rt:
        events = record_events(rt)
        agent = await rt.spawn_agent(make())
        result = await agent.run("go", phase_id="p")
        assert result.stop_reason == "done" and result.final_text == "finished"
        assert [c.content for c in result.tool_calls] == ["noted a"]
        assert crashes == ["finished"] and WORLD.effects == ["note a"]
        assert agent.statistics().restarts == 1
        # The model was called again from the turn after the tool's, not from the start.
        assert [sum(m.role == "assistant" for m in h) for h in seen] == [0, 1, 1]
        assert [t.message.role for t in await agent.history()] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        await trio.testing.wait_all_tasks_blocked()
        assert PhaseResumed(path="worker", phase_id="p", turns=4, restart=True) in events


async def test_a_crash_without_a_store_still_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def estimator(text: str) -> int:
        if text == "finished":
            raise RuntimeError("a bug in the estimator")
        return 1

    model = script(Reply(text="finished"))
    async with agentrio.open_runtime() as rt:
        agent = await rt.spawn_agent(spec_of(model, token_estimator=estimator)())
        with pytest.raises(agentrio.ActorCrashed):
            await agent.run("go")


async def test_a_spec_must_be_registered_to_be_durable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    make = spec_of(script(Reply(text="x")))
    async with agentrio.open_runtime(store=MemoryStore()) as rt:
        with pytest.raises(agentrio.InvalidArgument, match="not registered"):
            await rt.spawn_agent(make())
        assert rt.children() == []
        rt.register_spec("worker", make)
        agent = await rt.spawn_agent(make())
        assert (await agent.run("x")).final_text == "x"
        with pytest.raises(agentrio.InvalidArgument, match="already registered"):
            rt.register_spec("worker", spec_of(script()))
        with pytest.raises(agentrio.InvalidArgument, match="a function that makes"):
            rt.register_spec("other", make())  # type: ignore[arg-type]
    async with agentrio.open_runtime() as rt:
        with pytest.raises(agentrio.InvalidArgument, match="no checkpoint store"):
            rt.register_spec("worker", make)
        assert rt.resumed == ()


async def test_unfinished_phases_of_an_unregistered_spec_are_refused_at_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    await crash_after(store, spec_of(script()), lambda: bool(store.records))
    with pytest.raises(agentrio.InvalidArgument, match="not registered"):
        async with agentrio.open_runtime(store=store):
            pass


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xc1garbage", "undecodable"),
        (msgspec.msgpack.encode(["Nope", "p"]), "unknown type"),
        (msgspec.msgpack.encode(["PhaseDone", 3]), "unknown type or shape"),
    ],
)
async def test_a_damaged_record_is_a_typed_error_naming_where_it_is(
    data: bytes, why: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = MemoryStore()
    await crash_after(store, spec_of(script()), lambda: bool(store.records))
    assert store.records  # (a phase began)
    store.records.insert(1, data)
    with pytest.raises(StoreCorrupt, match=why) as caught:
        async with agentrio.open_runtime(store=store, specs={"worker": spec_of(script())}):
            pass
    assert caught.value.source == "<memory>" and caught.value.offset == 1


@pytest.mark.parametrize(
    "record",
    [
        ["Nope sk-SECRET", "p"],
        ["ToolDone", "p", {"id": "x", "name": "n", "arguments": {}, "status": "sk-SECRET"}],
    ],
)
def test_a_damaged_record_s_error_does_not_quote_it(record: list[object]) -> None:
    with pytest.raises(StoreCorrupt) as caught:
        decode_records([Entry("f", 0, msgspec.msgpack.encode(record))])
    assert "SECRET" not in str(caught.value) and "offset 0" in str(caught.value)


class TornStore(MemoryStore):
    async def load(self) -> Loaded:
        loaded = await super().load()
        return Loaded(loaded.entries, (Entry("seg-1", 1234, b"\x00\x01"),))


async def test_a_torn_tail_is_left_out_with_an_event(
    autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    async with agentrio.open_runtime(store=TornStore()) as rt:
        events = record_events(rt)
        await trio.testing.wait_all_tasks_blocked()
    assert CheckpointTorn(path="", source="seg-1", offset=1234) in events


async def test_a_directory_store_survives_the_runtime(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    folder = tmp_path / "ckpt"
    first = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")))
    await crash_after(str(folder), spec_of(first), lambda: bool(WORLD.effects))
    model = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")), Reply(text="fine"))
    async with agentrio.open_runtime(store=folder, specs={"worker": spec_of(model)}) as rt:
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "fine"
    assert WORLD.effects == ["note a"]
    loaded = await DirectoryStore(folder).load()
    kinds = [type(r).__name__ for r in decode_records(loaded.entries)]
    assert kinds[0] == "PhaseBegun" and kinds[-1] == "PhaseDone"
    assert kinds.count("PhaseBegun") == 1 and kinds.count("PhaseDone") == 1


async def test_records_of_a_phase(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    model = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")), Reply(text="ok"))
    make = spec_of(model)
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        agent = await rt.spawn_agent(make(), name="w")
        await agent.run("go", phase_id="the-phase")
    records = decode_records([Entry("<memory>", i, d) for i, d in enumerate(store.records)])
    # (note is not idempotent: its start is recorded before it runs)
    assert [type(r).__name__ for r in records] == [
        "PhaseBegun",
        "TurnsAdded",
        "ToolBegun",
        "ToolsDone",
        "TurnsAdded",
        "PhaseDone",
    ]
    begun, first, _, _, _, done = records
    assert isinstance(begun, PhaseBegun) and begun.agent == "w" and begun.spec == "worker"
    assert begun.command.user_message == "go" and begun.phase == "the-phase"
    assert isinstance(first, TurnsAdded)
    assert [m.role for m in first.messages] == ["system", "user", "assistant"]
    assert len(first.timestamps) == 3 and first.totals is not None
    assert first.totals.requests == 1
    assert isinstance(done, PhaseDone) and done.result.final_text == "ok"
    assert done.totals is not None and done.totals.requests == 2


# -- a swarm killed with SIGKILL ----------------------------------------------------


SWARM = Path(__file__).with_name("durable_swarm.py")
SWARM_AGENTS = 1000


def _records_by_life(folder: Path) -> list[list[object]]:
    """The store's records, one list per life (one segment file per life)."""
    loaded = trio.run(DirectoryStore(folder).load)
    lives: dict[str, list[Entry]] = {}
    for entry in loaded.entries:
        lives.setdefault(entry.source, []).append(entry)
    return [list(decode_records(lives[source])) for source in sorted(lives)]


def _every_record(folder: Path) -> list[object]:
    """The store's records, live and archived (a runtime opening it archives what
    ended)."""

    async def read() -> list[object]:
        store = DirectoryStore(folder)
        loaded = await store.read_live()
        records: list[object] = list(decode_records(loaded.entries))
        ids = [pid for pid, _ in await store.read_index()]
        for entries in (await store.read_archived(ids)).values():
            records += decode_records(entries)
        return records

    return trio.run(read)


def _effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_swarm_killed_with_sigkill_completes_every_phase_once(seed: int, tmp_path: Path) -> None:
    import json
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    store, effects = tmp_path / "store", tmp_path / "effects"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def command(life: int) -> list[str]:
        args = [str(store), str(effects), str(SWARM_AGENTS), str(seed), str(life)]
        return [sys.executable, str(SWARM), *args]

    # Life 1: killed at a random point of the swarm.
    first = subprocess.Popen(command(1), stdout=subprocess.PIPE, env=env)
    assert first.stdout is not None
    assert first.stdout.readline() == b"READY\n"
    # (On a loaded machine the swarm may write nothing in 0.4 s: the random
    # point is taken once its first records are written.)
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".ckpt") for p in store.iterdir()):
        assert time.monotonic() < deadline, "life 1 wrote no checkpoint"
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0.05, 0.4))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    first.stdout.close()
    before = _effects(effects)
    (life1,) = _records_by_life(store)
    recorded: dict[tuple[str, str], int] = {}  # (phase, tool) -> results recorded in life 1
    begun: set[str] = set()  # the phases whose pay call's start was recorded in life 1
    for r in life1:
        if type(r) is ToolBegun:
            begun.add(r.phase)
        results = r.results if type(r).__name__ == "ToolsDone" else ()  # type: ignore[attr-defined]
        for result in results:
            recorded[r.phase, result.name] = 1  # type: ignore[attr-defined]
    totals = [r.totals for r in life1 if getattr(r, "totals", None) is not None]

    # Life 2: the same store.
    second = subprocess.run(command(2), capture_output=True, env=env, timeout=120, check=False)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    report = json.loads(second.stdout.decode().splitlines()[-1])
    after = _effects(effects)

    results = report["results"]
    assert len(results) == SWARM_AGENTS
    assert report["resumed"], "the kill cut no phase short"
    interrupted = 0
    for i in range(SWARM_AGENTS):
        pid, agent = f"p{i}", f"w{i}"
        result = results[pid]
        assert result["stop_reason"] == "done" and result["final_text"] == f"done {agent}", result
        pays, fetches = after.count(f"pay {agent}"), after.count(f"fetch {agent}")
        # At most once: a call not declared idempotent is never made twice...
        assert pays <= 1
        (pay_call,) = [c for c in result["calls"] if c[0] == "pay"]
        if f"pay {agent}" in before:  # (its start was on disk before it ran)
            assert pid in begun
        if (pid, "pay") not in recorded and pid in begun:
            # ...and one in flight at the kill is reported interrupted (it may
            # have taken effect, or not: killed before or after its effect).
            assert pay_call[1:] == ["failed", INTERRUPTED.format(name="pay")]
            assert after.count(f"pay {agent}") == before.count(f"pay {agent}")
            interrupted += 1
        else:
            assert pay_call[1:] == ["ok", f"paid for {agent}"] and pays == 1
        # A call whose result was recorded is never made again.
        if (pid, "fetch") in recorded:
            assert fetches == 1
        assert fetches >= 1
    assert interrupted, "no call was in flight at the kill"
    # Every phase ended exactly once, in the store.
    done = [r.phase for r in _every_record(store) if type(r) is PhaseDone]  # type: ignore[attr-defined]
    assert sorted(done) == sorted(f"p{i}" for i in range(SWARM_AGENTS))
    # The budget: what life 1 settled (its last totals on disk), then what life 2 did.
    last = totals[-1] if totals else None
    opened = [last.input_tokens, last.output_tokens, last.requests] if last else [0, 0, 0]
    assert report["opened"] == opened
    served = report["served"]
    assert report["end"] == [
        opened[0] + served["input_tokens"],
        opened[1] + served["output_tokens"],
        opened[2] + served["replies"],
    ]


# -- review: the how-to's promises, as a user reads them ------------------------------


async def test_a_sqlite_store_survives_the_runtime(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from agentrio.store import SQLiteStore

    path = tmp_path / "ckpt.db"
    first = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")))
    await crash_after(SQLiteStore(path), spec_of(first), lambda: bool(WORLD.effects))
    model = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")), Reply(text="fine"))
    async with agentrio.open_runtime(
        store=SQLiteStore(path), specs={"worker": spec_of(model)}
    ) as rt:
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "fine"
        assert rt.usage().requests == 2
    assert WORLD.effects == ["note a"]


def _segment(folder: Path) -> Path:
    (path,) = [p for p in folder.iterdir() if p.is_file() and p.stat().st_size]
    return path


async def test_a_damaged_directory_store_names_the_file_and_offset(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    folder = tmp_path / "ckpt"
    first = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")))
    await crash_after(folder, spec_of(first), lambda: bool(WORLD.effects))
    segment = _segment(folder)
    loaded = await DirectoryStore(folder).load()
    assert len(loaded.entries) >= 3
    second = loaded.entries[1]
    data = bytearray(segment.read_bytes())
    data[second.offset + 12] ^= 0xFF  # a byte of the second record, in the middle of the file
    segment.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt) as caught:
        async with agentrio.open_runtime(store=folder, specs={"worker": spec_of(first)}):
            pass
    assert caught.value.source == str(segment) and caught.value.offset == second.offset
    assert str(segment) in str(caught.value) and str(second.offset) in str(caught.value)


async def test_a_torn_tail_of_a_directory_store_is_left_out_and_the_phase_goes_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    folder = tmp_path / "ckpt"
    first = script(
        tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")),
        tool_turn(ToolCallRequest("note", {"text": "b"}, id="c2")),
    )
    await crash_after(folder, spec_of(first), lambda: len(WORLD.effects) == 2)
    segment = _segment(folder)
    loaded = await DirectoryStore(folder).load()
    last = loaded.entries[-1]
    with segment.open("r+b") as f:  # the last record half written
        f.truncate(last.offset + len(last.data) // 2 + 4)
    model = script(
        tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")),
        tool_turn(ToolCallRequest("note", {"text": "b"}, id="c2")),
        Reply(text="fine"),
    )
    async with agentrio.open_runtime(store=folder, specs={"worker": spec_of(model)}) as rt:
        events = record_events(rt)
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "fine"
        await trio.testing.wait_all_tasks_blocked()
    torn = [e for e in events if isinstance(e, CheckpointTorn)]
    assert torn == [CheckpointTorn(path="", source=str(segment), offset=last.offset)]


async def test_turn_durability_a_phase_killed_goes_on_from_its_last_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A kill loses what the writer had not written: with "turn", the turns before
    # the model call in flight are on disk all the same.
    store = MemoryStore()
    kept: list[int] = []  # the records on disk as the second model call is made
    calls: list[int] = []
    stop = trio.Event()

    async def complete(messages: Sequence[ChatMessage], tools: object) -> Reply:
        n = sum(1 for m in messages if m.role == "assistant")
        calls.append(n)
        await trio.lowlevel.checkpoint()
        if n == 0:  # (read is idempotent: no sync before it runs)
            return tool_turn(ToolCallRequest("read", {"key": "a"}, id="c1"))
        if not stop.is_set():
            kept.append(len(store.records))
            stop.set()
            await trio.sleep_forever()
        return Reply(text="fine")

    WORLD.hold.set()
    make = spec_of(FunctionModel(complete))
    async with agentrio.open_runtime(store=store, specs={"worker": make}, durability="turn") as rt:
        agent = await rt.spawn_agent(make(), name="w1")
        async with trio.open_nursery() as nursery:

            async def caller() -> None:
                with pytest.raises(agentrio.ActorStopped):
                    await agent.run("go", phase_id="p1")

            nursery.start_soon(caller)
            await stop.wait()
            rt.cancel()
    del store.records[kept[0] :]  # the kill: what the writer had not written is lost
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "fine"
    assert calls == [0, 1, 1] and WORLD.effects == ["read a"]


async def test_a_refused_approval_is_given_again_without_asking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    asked: list[str] = []

    def refuse(request: object) -> agentrio.Approval:
        asked.append("life 1")
        return agentrio.Approval(False, "no way")

    def accept(request: object) -> bool:
        asked.append("life 2")
        return True

    model = script(
        tool_turn(
            ToolCallRequest("read", {"key": "k"}, id="c1"),
            ToolCallRequest("pay", {"amount": 1}, id="c2"),
        ),
        Reply(text="ok"),
    )
    policy = PermissionPolicy(rules=[ask_rule("pay")])
    await crash_after(
        store,
        spec_of(model, permissions=policy, approver=refuse),
        lambda: bool(asked) and bool(WORLD.effects),
    )
    WORLD.hold.set()
    make = spec_of(model, permissions=policy, approver=accept)
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        result = await rt.resumed_result("p1")
    assert asked == ["life 1"]
    by_id = {c.id: c for c in result.tool_calls}
    assert by_id["c2"].status != "ok" and "no way" in by_id["c2"].content
    assert "pay 1" not in WORLD.effects


async def test_a_typed_output_ended_before_the_crash_is_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()

    def make() -> AgentSpec[int]:
        return AgentSpec(name="n", model=script(Reply(text="42")), output_type=int)

    async with agentrio.open_runtime(store=store, specs={"n": make}) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go", phase_id="p")).output == 42
    async with agentrio.open_runtime(store=store, specs={"n": make}) as rt:
        result = await rt.resumed_result("p")
        assert result.output is None and result.final_text == "42"


async def test_cancelling_the_runtime_while_it_resumes_leaves_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    await crash_after(store, spec_of(script()), lambda: bool(store.records))
    before = len(trio.lowlevel.current_root_task().child_nurseries[0].child_tasks)
    with trio.move_on_after(5) as scope:
        async with agentrio.open_runtime(store=store, specs={"worker": spec_of(script())}) as rt:
            assert rt.resumed == ("p1",)
            await rt.resumed_result("p1")  # hangs: the model never answers
    assert scope.cancelled_caught
    after = len(trio.lowlevel.current_root_task().child_nurseries[0].child_tasks)
    assert after == before


# -- review: records read back from a store are hostile input --------------------------


def _begun(phase: str = "p1", agent: str = "w1", agent_id: str = "a1", **cmd: object) -> bytes:
    command = agentrio.RunPhase("go", **cmd, phase_id=phase)  # type: ignore[arg-type]
    return msgspec.msgpack.encode(PhaseBegun(phase, agent, agent_id, "worker", command))


def _store(*records: object) -> MemoryStore:
    store = MemoryStore()
    for r in records:
        store.records.append(r if isinstance(r, bytes) else msgspec.msgpack.encode(r))
    return store


async def _open(store: MemoryStore, model: FunctionModel | None = None) -> None:
    make = spec_of(model or script(Reply(text="ok")))
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        for pid in rt.resumed:
            await rt.resumed_result(pid)


@pytest.mark.parametrize(
    "totals",
    [
        ["TurnsAdded", "p1", [], [], [-5, 0, 0, 0, 0.0, 0, 0, 0, 0, 0]],
        ["TurnsAdded", "p1", [], [], [0, 0, 0, 0, float("nan"), 0, 0, 0, 0, 0]],
        ["TurnsAdded", "p1", [], [], [0, 0, 0, 0, float("inf"), 0, 0, 0, 0, 0]],
        ["TurnsAdded", "p1", [], [], [0, 0, -1, 0, 0.0, 0, 0, 0, 0, 0]],
        # (#21: counts the budget would add to and write again, past what msgpack holds)
        ["TurnsAdded", "p1", [], [], [2**64 - 1, 2**64 - 1, 2**64 - 1, 0, 0.0, 0, 0, 0, 0, 0]],
        ["TurnsAdded", "p1", [], [], [0, 0, 0, 0, 0.0, 0, 0, 0, 0, 2**53 + 1]],
        PhaseDone("p1", agentrio.PhaseResult("", (), "done"), totals=Totals(2**63)),
        # (times that no clock gives)
        TurnsAdded("p1", (ChatMessage("user", "hi"),), (float("nan"),)),
        TurnsAdded("p1", (ChatMessage("user", "hi"),), (float("inf"),)),
        ToolsDone("p1", (), -1.0),
    ],
)
async def test_bad_budget_totals_are_store_corrupt(
    totals: object, autojump_clock: trio.testing.MockClock
) -> None:
    store = _store(_begun(), totals)
    with pytest.raises(StoreCorrupt) as caught:
        await _open(store)
    assert caught.value.offset == 1


@pytest.mark.parametrize("path", ["", "a//b", "/w1", "w1/", "w1.context", "a/w1.context.x"])
async def test_a_bad_agent_path_is_store_corrupt(
    path: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = _store(_begun(agent=path))
    with pytest.raises(StoreCorrupt) as caught:
        await _open(store)
    assert caught.value.offset == 0


async def test_an_agent_whose_path_was_taken_again_is_not_resumed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # (w1 of a1 was gone when w1 of a2 was spawned: its phase was abandoned)
    store = _store(_begun("p1", agent_id="a1"), _begun("p2", agent_id="a2"))
    make = spec_of(script(Reply(text="ok")))
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        assert rt.resumed == ("p2",)
        assert (await rt.resumed_result("p2")).final_text == "ok"


async def test_a_phase_begun_again_by_another_agent_is_resumed_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _store(_begun("p1", agent="w1", agent_id="a1"), _begun("p1", agent="w2", agent_id="a2"))
    make = spec_of(script(Reply(text="ok")))
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "ok"
        assert [c.path for c in rt.children() if "." not in c.path] == ["w2"]


async def test_records_of_a_phase_never_begun_or_for_unknown_calls_are_harmless(
    autojump_clock: trio.testing.MockClock,
) -> None:
    result = agentrio.ToolResult(id="nope", name="pay", arguments={}, status="ok", content="x")
    done = agentrio.PhaseResult("x", (), "done")
    store = _store(
        msgspec.msgpack.encode(["TurnsAdded", "ghost", [], []]),
        _begun(),
        msgspec.msgpack.encode(["ToolDone", "p1", msgspec.to_builtins(result)]),
        msgspec.msgpack.encode(["ToolBegun", "p1", "nope", "pay"]),
        msgspec.msgpack.encode(["ApprovalAnswered", "p1", "nope", True, ""]),
        msgspec.msgpack.encode(["PhaseDone", "ghost", msgspec.to_builtins(done)]),
    )
    make = spec_of(script(Reply(text="ok")))
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        assert rt.resumed == ("p1",)
        assert (await rt.resumed_result("p1")).final_text == "ok"
        with pytest.raises(UnknownName):
            await rt.resumed_result("ghost")


@pytest.mark.parametrize(
    "command",
    [
        {"timeout": float("nan")},
        {"timeout": -1.0},
        {"max_iterations": 0},
        {"max_continuation_turns": -1},
    ],
)
async def test_a_bad_command_in_a_phase_begun_is_store_corrupt(
    command: dict[str, object], autojump_clock: trio.testing.MockClock
) -> None:
    store = _store(_begun(**command))
    with pytest.raises(StoreCorrupt) as caught:
        await _open(store)
    assert caught.value.offset == 0


async def test_a_resumed_phase_id_is_not_taken_by_another_phase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    first = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")))
    await crash_after(store, spec_of(first), lambda: bool(WORLD.effects))
    model = script(tool_turn(ToolCallRequest("note", {"text": "a"}, id="c1")), Reply(text="fine"))
    make = spec_of(model)
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        other = await rt.spawn_agent(make(), name="w2")
        with pytest.raises(agentrio.InvalidArgument, match="p1"):
            await other.run("another job", phase_id="p1")
        result = await rt.resumed_result("p1")
        assert result.final_text == "fine"
        assert [c.content for c in result.tool_calls] == ["noted a"]
    assert WORLD.effects == ["note a"]


async def test_two_live_phases_cannot_share_an_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    make = spec_of(script())  # (it never answers: the first phase stays live)
    async with agentrio.open_runtime(store=MemoryStore(), specs={"worker": make}) as rt:
        one = await rt.spawn_agent(make(), name="w1")
        two = await rt.spawn_agent(make(), name="w2")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(one.run, "a", phase_id="same"))
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(agentrio.InvalidArgument, match="same"), trio.fail_after(60):
                await two.run("b", phase_id="same")
            nursery.cancel_scope.cancel()


async def test_a_phase_whose_agent_crashed_before_it_began_is_recorded_from_its_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    crashes: list[str] = []

    def estimator(text: str) -> int:
        if text == "go" and not crashes:  # (the user's turn: the phase has not begun)
            crashes.append(text)
            raise RuntimeError("a bug in the estimator")
        return 1

    store = MemoryStore()
    make = spec_of(script(Reply(text="fine")), token_estimator=estimator)
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go", phase_id="p")).final_text == "fine"
    assert crashes == ["go"]
    records = decode_records([Entry("<memory>", i, d) for i, d in enumerate(store.records)])
    assert [type(r).__name__ for r in records] == ["PhaseBegun", "TurnsAdded", "PhaseDone"]


async def test_a_path_that_is_another_agents_parent_is_store_corrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _store(
        _begun("p1", agent="w1", agent_id="a1"), _begun("p2", agent="w1/x", agent_id="a2")
    )
    with pytest.raises(StoreCorrupt) as caught:
        await _open(store)
    assert caught.value.offset == 1


async def test_a_cancelled_agent_whose_name_was_taken_again_is_not_resumed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    make = spec_of(script())  # (it never answers)

    async def caller(agent: agentrio.AgentRef[str], pid: str) -> None:
        with pytest.raises(agentrio.ActorStopped):
            await agent.run("go", phase_id=pid)

    async with (
        agentrio.open_runtime(store=store, specs={"worker": make}) as rt,
        trio.open_nursery() as nursery,
    ):
        for pid in ("p1", "p2"):
            agent = await rt.spawn_agent(make(), name="w1")
            nursery.start_soon(caller, agent, pid)
            await trio.testing.wait_all_tasks_blocked()
            if pid == "p1":
                agent.cancel()  # p1 is abandoned, and w1's name free again
                await trio.testing.wait_all_tasks_blocked()
        rt.cancel()  # the crash
    model = script(Reply(text="ok"))
    async with agentrio.open_runtime(store=store, specs={"worker": spec_of(model)}) as rt:
        assert rt.resumed == ("p2",)
        assert (await rt.resumed_result("p2")).final_text == "ok"
        with pytest.raises(UnknownName):
            await rt.resumed_result("p1")


async def test_a_runs_extra_headers_and_body_are_never_written_to_the_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    make = spec_of(script(Reply(text="ok")))
    secret = "sk-secret-1234"
    settings = agentrio.ModelSettings(
        temperature=0.5,
        extra_headers={"Authorization": f"Bearer {secret}"},
        extra_body={"user_key": secret},
    )
    async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
        agent = await rt.spawn_agent(make())
        assert (await agent.run("go", settings=settings)).final_text == "ok"
    assert not any(secret.encode() in r for r in store.records)
    records = decode_records([Entry("<memory>", i, d) for i, d in enumerate(store.records)])
    begun = records[0]
    assert isinstance(begun, PhaseBegun)
    assert begun.command.settings == agentrio.ModelSettings(temperature=0.5)


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        (lambda: "not a spec", "not an AgentSpec"),
        (lambda: AgentSpec(name="other", model=script()), "named 'other'"),
    ],
)
async def test_a_bad_spec_factory_is_refused_when_the_runtime_opens(
    factory: Callable[[], object], why: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = _store(_begun())
    with pytest.raises(agentrio.InvalidArgument, match=why):  # (as is, not in a group)
        async with agentrio.open_runtime(store=store, specs={"worker": factory}):  # type: ignore[dict-item]
            pass
    assert store.closed


async def test_forged_totals_at_the_limit_of_msgpack_do_not_crash_resumed_phases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """#21: totals of 2**64 - 1 with valid checksums were accepted at open, then every
    resumed phase crashed with OverflowError when its totals were written again."""
    most = 2**64 - 1
    forged = ["TurnsAdded", "p1", [], [], [most, most, most, 0, 0.0, 0, 0, 0, 0, 0]]
    with pytest.raises(StoreCorrupt, match="offset 1") as caught:
        await _open(_store(_begun(), forged))
    assert caught.value.offset == 1
    # Large counts in range are read, added to and written again.
    kept = ["TurnsAdded", "p1", [], [], [2**52, 2**52, 2**52, 0, 0.0, 0, 0, 0, 0, 0]]
    store = _store(_begun(), kept)
    await _open(store)
    (done,) = [r for r in _decoded(store) if type(r) is PhaseDone]
    assert done.result.final_text == "ok" and done.totals is not None
    assert done.totals.requests == 2**52 + 1


def _decoded(store: MemoryStore) -> list[object]:
    return list(decode_records([Entry("<m>", i, d) for i, d in enumerate(store.records)]))


# -- #21: a phase cut short in its first model call -----------------------------------


@pytest.mark.parametrize("where", ["process", "agent"])
async def test_a_phase_resumed_with_no_recorded_turn_publishes_phase_resumed(
    where: str, autojump_clock: trio.testing.MockClock, record_events: RecordEvents
) -> None:
    """Killed during its first model call, a phase has no turn in the store: it goes
    on from its user turn, with both its events, as the how-to promises."""
    store = MemoryStore()
    calls: list[int] = []
    crashes: list[str] = []

    async def first_call_hangs(messages: Sequence[ChatMessage], tools: object) -> Reply:
        calls.append(len(messages))
        await trio.lowlevel.checkpoint()
        if len(calls) == 1 and where == "process":
            await trio.sleep_forever()
        return Reply(text="fine", usage=Usage(3, 1))

    def estimator(text: str) -> int:
        if where == "agent" and text == "fine" and not crashes:
            crashes.append(text)  # (the first reply: a bug, before its turn is recorded)
            raise RuntimeError("a bug in the estimator")
        return 1

    make = spec_of(FunctionModel(first_call_hangs), token_estimator=estimator)
    if where == "process":
        await crash_after(store, make, lambda: bool(calls))
        async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
            events = record_events(rt)
            assert rt.resumed == ("p1",)
            assert (await rt.resumed_result("p1")).final_text == "fine"
            await trio.testing.wait_all_tasks_blocked()
        expected = [
            PhaseResumed(path="w1", phase_id="p1", turns=0, restart=False),
            ResumedPhaseEnded(path="w1", phase_id="p1", stop_reason="done"),
        ]
    else:
        async with agentrio.open_runtime(store=store, specs={"worker": make}) as rt:
            events = record_events(rt)
            agent = await rt.spawn_agent(make(), name="w1")
            assert (await agent.run("go", phase_id="p1")).final_text == "fine"
            await trio.testing.wait_all_tasks_blocked()
        expected = [PhaseResumed(path="w1", phase_id="p1", turns=0, restart=True)]
    assert calls == [2, 2]  # (the system prompt and the user's turn, each time)
    resumed = [e for e in events if isinstance(e, (PhaseResumed, ResumedPhaseEnded))]
    assert resumed == expected


def test_records_leave_default_fields_out() -> None:
    """A turn's record holds only the fields its messages set (ChatMessage and
    ToolResult are encoded with omit_defaults): bench/checkpoint.py's first
    record, a 3-turn phase's system, user and tool-calling assistant turns, is
    under pymalloc's 512-byte limit with its bytes object's header (33 bytes)
    and frame (12), so that many durable agents' waiting records stay in
    pymalloc's pools, not in the C allocator's heap (it fragmented: peak RSS
    +10-15 MB at 10,000 agents). Records with every field still decode."""
    call = ToolCallRequest("lookup", {"key": "k0"}, id="call_0")
    messages = (
        ChatMessage("system", "You are a benchmark agent."),
        ChatMessage("user", "task 0"),
        ChatMessage("assistant", "", tool_calls=(call,)),
    )
    record = TurnsAdded(
        "VKpX36zDHkwgEU3w",
        messages,
        (1795787872.1911762, 1795787872.191179, 1795787872.1912801),
        Totals(40, 8, 1, 0, 0.0, 0, 0, 0, 0, 0),
    )
    data = msgspec.msgpack.encode(record)
    assert len(data) + 33 + 12 <= 512, len(data)
    assert b"blocks" not in data and b"is_error" not in data
    [back] = decode_records([Entry("s", 0, data)])
    assert back == record

    # What the code before omit_defaults wrote (every field) reads the same.
    full = [
        "TurnsAdded",
        record.phase,
        [
            {
                "type": "ChatMessage",
                "role": m.role,
                "content": m.content,
                "tool_calls": [msgspec.to_builtins(c) for c in m.tool_calls],
                "tool_call_id": None,
                "name": None,
                "thinking": [],
                "is_error": False,
                "parts": [],
                "blocks": [],
            }
            for m in messages
        ],
        list(record.timestamps),
        msgspec.to_builtins(record.totals),
    ]
    [old] = decode_records([Entry("s", 0, msgspec.msgpack.encode(full))])
    assert old == record

    result = agentrio.ToolResult("call_0", "lookup", {"key": "k0"}, content='"v"')
    encoded = msgspec.msgpack.encode(result)
    assert b"parts" not in encoded and b"status" not in encoded
    assert msgspec.msgpack.decode(encoded, type=agentrio.ToolResult) == result
