"""SupervisorRef: names, lookups, argument checks and statistics of a supervisor's subtree."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from test_supervisor import Block, Gen, Put, Worker, _crash

import agentrio
from agentrio import InvalidArgument
from agentrio.errors import DuplicateName, RuntimeClosed, UnknownName

# -- names, lookups, arguments ----------------------------------------------------------------


async def test_names_are_unique_per_supervisor() -> None:
    async with agentrio.open_runtime() as rt:
        a = await rt.spawn_supervisor(name="a")
        b = await rt.spawn_supervisor(name="b")
        wa = await a.spawn(Worker, [], name="w")
        wb = await b.spawn(Worker, [], name="w")  # same name, other supervisor: fine
        assert (wa.path, wb.path) == ("a/w", "b/w")
        with pytest.raises(DuplicateName, match="'w'"):
            await a.spawn(Worker, [], name="w")
        with pytest.raises(DuplicateName, match="'a'"):
            await rt.spawn(Worker, [], name="a")  # actors and supervisors share names
        with pytest.raises(DuplicateName, match="'b'"):
            await rt.spawn_supervisor(name="b")
        await wa.stop()
        again = await a.spawn(Worker, [], name="w")  # free once the first has exited
        assert again is not wa
        assert rt.lookup("a/w") is again


@pytest.mark.parametrize("name", ["a.context", "a.context.side", "a.context.", "x.y.context.z%2Fw"])
async def test_names_of_the_context_actors_form_are_reserved(name: str) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            await rt.spawn(Worker, [], name=name)
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            await rt.spawn_supervisor(name=name)
        assert rt.children() == []


@pytest.mark.parametrize("name", ["context", "context-1", "a.contexts", "a.context-1", "a.ctx"])
async def test_names_near_the_reserved_form_stay_valid(name: str) -> None:
    async with agentrio.open_runtime() as rt:
        assert (await rt.spawn(Worker, [], name=name)).name == name


async def test_default_names() -> None:
    async with agentrio.open_runtime() as rt:
        taken = await rt.spawn(Worker, [], name="Worker-1")
        first = await rt.spawn(Worker, [])
        second = await rt.spawn(Worker, [])
        sup = await rt.spawn_supervisor()
        names = [first.name, second.name]
        assert len({*names, taken.name}) == 3
        assert all(n.startswith("Worker-") for n in names)
        assert sup.name.startswith("supervisor-")
        assert sup.path == sup.name
        assert rt.lookup(first.name) is first
        assert [c.name for c in rt.children()] == ["Worker-1", first.name, second.name, sup.name]


async def test_lookup() -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        inner = await team.spawn_supervisor(name="inner")
        w = await inner.spawn(Worker, [], name="w")
        assert rt.lookup("team/inner/w") is w
        assert team.lookup("inner/w") is w
        assert inner.lookup("w") is w
        assert rt.lookup_supervisor("team/inner") is inner
        assert team.lookup_supervisor("inner") is inner
        assert (team.name, team.path, inner.path) == ("team", "team", "team/inner")
        assert repr(inner) == "<SupervisorRef 'team/inner'>"
        cases: list[tuple[Callable[[str], object], str, str]] = [
            (rt.lookup, "nobody", "'nobody'"),
            (rt.lookup, "team/nobody", "'nobody' in 'team'"),
            (rt.lookup, "team/inner", "is a supervisor"),
            (rt.lookup, "team/inner/w/deeper", "is an actor, not a supervisor"),
            (rt.lookup_supervisor, "team/inner/w", "is an actor"),
            (rt.lookup_supervisor, "ghost/inner", "'ghost'"),
            (rt.lookup, "team//w", "''"),
        ]
        for lookup, name, text in cases:
            with pytest.raises(UnknownName, match=text):
                lookup(name)
        for bad in ("", 5, None):
            with pytest.raises(InvalidArgument, match="name"):
                rt.lookup(bad)  # type: ignore[arg-type]


class NotAnActor:
    async def handle(self, msg: object) -> None:
        pass


async def test_a_supervisor_ref_spawns_no_agents_the_runtime_does() -> None:
    """Agents, helpers and maps are the runtime's: ``rt.spawn_agent(spec, under=team)``."""
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        for name in ("spawn_agent", "helper", "map", "register_tool"):
            assert not hasattr(team, name)
            assert not hasattr(agentrio.SupervisorRef, name)
            assert callable(getattr(rt, name))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"actor_class": NotAnActor}, "actor_class"),
        ({"actor_class": Worker([])}, "actor_class"),
        ({"actor_class": "Worker"}, "actor_class"),
        ({"actor_class": agentrio.Message}, "actor_class"),
        ({"mailbox": "x"}, "mailbox"),
        ({"mailbox": -1}, "mailbox"),
        ({"mailbox": 2.5}, "mailbox"),
        ({"mailbox": True}, "mailbox"),
        ({"restart": "sometimes"}, "restart"),
        ({"restart": None}, "restart"),
        ({"name": 5}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": b"w"}, "name"),
    ],
)
async def test_spawn_rejects_bad_arguments(kwargs: dict[str, Any], argument: str) -> None:
    async with agentrio.open_runtime() as rt:
        sup = await rt.spawn_supervisor(name="s")
        actor_class = kwargs.pop("actor_class", Worker)
        with pytest.raises(InvalidArgument) as info:
            await sup.spawn(actor_class, [], **kwargs)
        assert str(info.value).startswith(argument)
        assert sup.children() == []


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"strategy": "x"}, "strategy"),
        ({"strategy": None}, "strategy"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": "3"}, "max_restarts"),
        ({"max_restarts": 1.5}, "max_restarts"),
        ({"period": -1}, "period"),
        ({"period": math.nan}, "period"),
        ({"period": "5"}, "period"),
        ({"period": None}, "period"),
        ({"backoff": "x"}, "backoff"),
        ({"backoff": 1.0}, "backoff"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"shutdown_timeout": None}, "shutdown_timeout"),
        ({"restart": "sometimes"}, "restart"),
        ({"name": "a/b"}, "name"),
        ({"name": 5}, "name"),
    ],
)
async def test_spawn_supervisor_rejects_bad_arguments(
    kwargs: dict[str, Any], argument: str
) -> None:
    async with agentrio.open_runtime() as rt:
        with pytest.raises(InvalidArgument) as info:
            await rt.spawn_supervisor(**kwargs)
        assert str(info.value).startswith(argument)
        assert rt.children() == []


# -- statistics -------------------------------------------------------------------------


async def test_supervisor_statistics() -> None:
    gate = trio.Event()
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        a = await team.spawn(Worker, [], gate, name="a", restart="permanent")
        inner = await team.spawn_supervisor(name="inner")
        b = await inner.spawn(Worker, [], gate, name="b")
        await rt.spawn(Worker, [], name="top")
        await a.ask(Gen())
        await _crash(a)
        await b.ask(Gen())
        await b.ask(Gen())
        b.send_nowait(Block())
        b.send_nowait(Put(n=1))
        b.send_nowait(Put(n=2))
        await trio.testing.wait_all_tasks_blocked()
        stats = team.statistics()
        assert stats == agentrio.types.SupervisorStatistics(
            path="team",
            state="running",
            children=2,
            actors=2,
            supervisors=1,
            messages_handled=3,
            restarts=1,
            mailbox_size=2,
            dead_letters=1,
        )
        whole = rt.statistics()
        assert (whole.path, whole.children, whole.actors, whole.supervisors) == ("", 2, 3, 2)
        assert whole.dead_letters == 1
        gate.set()
        await b.ask(Gen())
        assert team.statistics().messages_handled == 7
        assert team.statistics().mailbox_size == 0


# -- the seam for the layers above: spawn_nowait, owner=, closed, shutdown_timeout ------------


class Ping(agentrio.Message):
    pass


class Echo(agentrio.Actor[Ping]):
    async def handle(self, msg: Ping) -> str:
        return f"pong from {self.ref.name}"


class Tally(agentrio.InlineActor[Ping]):
    def handle(self, msg: Ping) -> str:
        return f"tally {self.ref.name}"


def _exits(events: list[agentrio.events.Event]) -> list[tuple[str, str]]:
    return [(e.path, e.reason) for e in events if isinstance(e, agentrio.events.ActorExited)]


async def test_spawn_nowait_spawns_without_a_cancellation_point() -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        with trio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(trio.Cancelled):
                await team.spawn(Echo, name="late")  # spawn is a cancellation point
            echo = team.spawn_nowait(Echo, name="echo")  # spawn_nowait is none
            tally = rt.spawn_nowait(Tally, name="tally", mailbox=0, restart="temporary")
        assert [c.name for c in team.children()] == ["echo"]
        assert await echo.ask(Ping()) == "pong from echo"
        assert tally.send_nowait(Ping()) is None
        assert await tally.ask(Ping()) == "tally tally"
        assert team.spawn_nowait(Echo).name.startswith("Echo-")


async def test_spawn_nowait_checks_as_spawn_does() -> None:
    async with agentrio.open_runtime() as rt:
        rt.spawn_nowait(Echo, name="echo")
        with pytest.raises(DuplicateName, match="'echo'"):
            rt.spawn_nowait(Echo, name="echo")
        with pytest.raises(InvalidArgument, match="actor_class"):
            rt.spawn_nowait(object)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="mailbox"):
            rt.spawn_nowait(Echo, mailbox=-1)
        with pytest.raises(InvalidArgument, match="restart"):
            rt.spawn_nowait(Echo, restart="sometimes")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            rt.spawn_nowait(Echo, name="echo.context")
        team = await rt.spawn_supervisor(name="team")
        await team.stop()
        with pytest.raises(RuntimeClosed, match="'team' has stopped"):
            team.spawn_nowait(Echo)


@pytest.mark.parametrize("how", ["spawn", "spawn_nowait"])
async def test_an_owned_actor_ends_after_its_owner(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
    how: str,
) -> None:
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        owner = await rt.spawn(Echo, name="owner")
        if how == "spawn":
            owned = await rt.spawn(Echo, name="owned", owner=owner)
            inline = await rt.spawn(Tally, name="tally", owner=owned)
        else:
            owned = rt.spawn_nowait(Echo, name="owned", owner=owner)
            inline = rt.spawn_nowait(Tally, name="tally", owner=owned)
        with pytest.raises(InvalidArgument, match="linked to 'owner' already"):
            agentrio.actors.link(owned, inline)  # it is linked: to its owner
        await owner.stop()
        await agentrio.actors.wait_exited(owner)  # (and what it owns)
        assert [agentrio.actors.exit_reason(r) for r in (owner, owned, inline)] == ["stopped"] * 3
        await trio.testing.wait_all_tasks_blocked()
    assert _exits(events) == [("owner", "stopped"), ("owned", "stopped"), ("tally", "stopped")]


class Drainer(agentrio.Actor[Ping]):
    """On its way out (its supervisor stopping), it spawns: owned, and not."""

    def __init__(self, team: agentrio.SupervisorRef, log: list[str]) -> None:
        self.team = team
        self.log = log

    async def handle(self, msg: Ping) -> None:
        pass

    async def on_stop(self) -> None:
        self.log.append(f"closed: {self.team.closed}")
        try:
            self.team.spawn_nowait(Echo, name="stranger")
        except RuntimeClosed as exc:
            self.log.append(f"not owned: {exc}")
        helper = self.team.spawn_nowait(Echo, name="drainer.context", owner=self.ref)
        self.log.append(await helper.ask(Ping()))


async def test_an_owned_actor_may_be_spawned_while_its_supervisor_drains(
    autojump_clock: trio.testing.MockClock,
    record_events: Callable[[agentrio.Runtime], list[agentrio.events.Event]],
) -> None:
    log: list[str] = []
    async with agentrio.open_runtime() as rt:
        events = record_events(rt)
        team = await rt.spawn_supervisor(name="team")
        drainer = await team.spawn(Drainer, team, log, name="drainer")
        await team.stop()
        assert log == [
            "closed: True",
            "not owned: cannot spawn: 'team' has stopped",
            "pong from drainer.context",
        ]
        assert team.children() == []
        with pytest.raises(RuntimeClosed, match="'team' has stopped"):
            team.spawn_nowait(Echo, name="drainer.context", owner=drainer)
        await trio.testing.wait_all_tasks_blocked()
    assert _exits(events)[:3] == [
        ("team/drainer", "stopped"),
        ("team/drainer.context", "stopped"),
        ("team", "stopped"),
    ]


@pytest.mark.parametrize("name", ["a.context", "a.context.side", "a.context.x.context"])
async def test_an_owner_gives_its_own_reserved_names(name: str) -> None:
    async with agentrio.open_runtime() as rt:
        a = await rt.spawn(Echo, name="a")
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            rt.spawn_nowait(Echo, name=name)  # no owner
        ref = rt.spawn_nowait(Echo, name=name, owner=a)
        assert ref.name == name
        assert await ref.ask(Ping()) == f"pong from {name}"


@pytest.mark.parametrize("name", ["b.context", "ab.context", "a.b.context", "x.context.a"])
async def test_an_owner_gives_no_other_reserved_name(name: str) -> None:
    async with agentrio.open_runtime() as rt:
        a = await rt.spawn(Echo, name="a")
        await rt.spawn(Echo, name="b")
        own = "reserved for agents' context actors, except 'a'"
        with pytest.raises(InvalidArgument, match=own):
            rt.spawn_nowait(Echo, name=name, owner=a)
        with pytest.raises(InvalidArgument, match="reserved for agents' context actors"):
            await rt.spawn(Echo, name=name, owner=a)
        assert [c.name for c in rt.children()] == ["a", "b"]


async def test_the_spawn_nowait_example_runs() -> None:
    # The example of SupervisorRef.spawn_nowait's docstring, run as it is.
    doc = agentrio.SupervisorRef.spawn_nowait.__doc__
    assert doc is not None
    code = textwrap.dedent(doc.split("```python\n")[1].split("```")[0])
    namespace: dict[str, object] = {"agentrio": agentrio, "Echo": Echo}
    exec("async def example(team):\n" + textwrap.indent(code, "    "), namespace)
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        await namespace["example"](team)  # type: ignore[operator]
        assert team.children() == []


async def test_an_owner_must_be_a_live_actor() -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        with pytest.raises(InvalidArgument, match=r"owner must be an agentrio\.ActorRef"):
            rt.spawn_nowait(Echo, name="x", owner=team)  # type: ignore[arg-type]
        gone = await rt.spawn(Echo, name="gone")
        await gone.stop()
        with pytest.raises(agentrio.ActorStopped, match="'gone' has stopped: it cannot own"):
            rt.spawn_nowait(Echo, name="x", owner=gone)
        with pytest.raises(agentrio.ActorStopped):
            await rt.spawn(Tally, name="x", owner=gone)
        assert [c.name for c in rt.children()] == ["team"]  # nothing was spawned
        assert rt.spawn_nowait(Echo, name="x").name == "x"  # and the name is free
        # Owned by an actor of another supervisor: refused, as link refuses it.
        with pytest.raises(InvalidArgument, match="owner must be a child of the supervisor"):
            team.spawn_nowait(Echo, name="x.context", owner=rt.lookup("x"))
        assert team.children() == []


async def test_closed_and_shutdown_timeout() -> None:
    async with agentrio.open_runtime(shutdown_timeout=7.5) as rt:
        team = await rt.spawn_supervisor(name="team", shutdown_timeout=2.5)
        assert (rt.shutdown_timeout, team.shutdown_timeout) == (7.5, 2.5)
        assert (rt.closed, team.closed) == (False, False)
        await team.stop()
        assert (rt.closed, team.closed) == (False, True)
        await rt.stop()
        assert rt.closed
        with pytest.raises(AttributeError):
            team.shutdown_timeout = 1.0  # type: ignore[misc]


async def test_a_cancelled_supervisor_is_closed_at_once() -> None:
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        inner = await team.spawn_supervisor(name="inner")
        early = rt.spawn_nowait(Echo, name="echo")  # (a sibling, so rt has a child left)
        team.cancel()  # without waiting: closed before its task has even run
        assert (team.closed, rt.closed) == (True, False)
        with pytest.raises(agentrio.errors.RuntimeClosed):
            team.spawn_nowait(Echo)
        await trio.testing.wait_all_tasks_blocked()
        assert team.closed and inner.closed
        assert team.statistics().state == "exited"
        assert await early.ask(Ping()) is not None
