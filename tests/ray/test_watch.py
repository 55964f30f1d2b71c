"""The cluster's watcher (agentrio.ray._watch), with pings of the tests' own: no Ray.

Time is Trio's MockClock (autojump): the times asserted are the watcher's own
arithmetic, not the machine's speed.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from agentrio.errors import HostLost, InvalidArgument, RestartIntensityExceeded
from agentrio.ray._watch import LOST_AFTER, PING_INTERVAL, HostDied, Watcher
from agentrio.supervisors.restart import RestartIntensity


class Hosts:
    """Hosts the tests drive: each answers, hangs, dies or fails its pings."""

    def __init__(self, n: int) -> None:
        self.state = ["up"] * n
        self.pinged = [0] * n
        self.lost: list[tuple[int, HostLost, float]] = []

    async def ping(self, host: int) -> None:
        self.pinged[host] += 1
        await trio.lowlevel.checkpoint()
        state = self.state[host]
        if state == "dead":
            raise HostDied("ActorDiedError")
        if state == "hung":
            await trio.sleep_forever()
        if state == "flaky":
            raise ConnectionError("ActorUnavailableError")

    async def on_lost(self, host: int, error: HostLost) -> None:
        self.lost.append((host, error, trio.current_time()))

    def watcher(self, max_restarts: int = 3, period: float = 5.0) -> Watcher:
        return Watcher(self.ping, self.on_lost, intensity=RestartIntensity(max_restarts, period))


async def test_a_host_that_dies_is_lost_at_its_next_ping(autojump_clock: object) -> None:
    hosts = Hosts(3)
    async with trio.open_nursery() as nursery:
        watcher = hosts.watcher()
        await nursery.start(watcher.run, range(3))
        await trio.sleep(1.0)
        hosts.state[1] = "dead"
        killed = trio.current_time()
        await trio.sleep(5.0)
        assert [(h, e.host) for h, e, _ in hosts.lost] == [(1, 1)]
        (_, error, at) = hosts.lost[0]
        assert at - killed <= PING_INTERVAL
        assert "host-1 was lost: it died" in str(error) and error.path == ""
        stats = watcher.statistics()
        assert stats.watched == (0, 2) and stats.lost == (1,)
        nursery.cancel_scope.cancel()


async def test_a_host_that_hangs_is_lost_after_the_timeout(autojump_clock: object) -> None:
    hosts = Hosts(2)
    async with trio.open_nursery() as nursery:
        await nursery.start(hosts.watcher().run, [0, 1])
        await trio.sleep(1.1)
        hosts.state[0] = "hung"
        hung = trio.current_time()
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    ((host, error, at),) = hosts.lost
    assert host == 0 and "no answer to a ping for 2 s" in str(error)
    # Lost LOST_AFTER seconds after its last answer, so within that of the hang.
    assert LOST_AFTER - PING_INTERVAL <= at - hung <= LOST_AFTER


async def test_a_suspect_host_that_answers_again_is_not_lost(autojump_clock: object) -> None:
    hosts = Hosts(1)
    async with trio.open_nursery() as nursery:
        await nursery.start(hosts.watcher().run, [0])
        hosts.state[0] = "flaky"
        await trio.sleep(LOST_AFTER - PING_INTERVAL)
        hosts.state[0] = "up"
        await trio.sleep(10.0)
        assert hosts.lost == [] and hosts.pinged[0] > 10
        hosts.state[0] = "flaky"  # flaky for good: lost when the time is up
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    ((host, error, _),) = hosts.lost
    assert host == 0 and "no answer" in str(error)


async def test_each_lost_host_is_reported_once(autojump_clock: object) -> None:
    hosts = Hosts(2)
    async with trio.open_nursery() as nursery:
        await nursery.start(hosts.watcher().run, [0, 1])
        hosts.state[0] = "dead"
        await trio.sleep(30.0)
        pinged = hosts.pinged[0]
        await trio.sleep(30.0)
        nursery.cancel_scope.cancel()
    assert [h for h, _, _ in hosts.lost] == [0]
    assert hosts.pinged[0] == pinged  # (no longer pinged)


async def test_an_unwatched_host_is_not_lost(autojump_clock: object) -> None:
    hosts = Hosts(2)
    async with trio.open_nursery() as nursery:
        watcher = hosts.watcher()
        await nursery.start(watcher.run, [0, 1])
        watcher.unwatch(1)
        hosts.state[1] = "dead"
        await trio.sleep(10.0)
        watcher.watch(1)  # watched again: now it is lost
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert [h for h, _, _ in hosts.lost] == [1]


async def test_losing_hosts_past_the_restart_intensity_fails_the_watcher(
    autojump_clock: object,
) -> None:
    hosts = Hosts(3)
    watcher = hosts.watcher(max_restarts=1, period=60.0)
    with pytest.RaisesGroup(
        pytest.RaisesExc(RestartIntensityExceeded, check=lambda e: e.child == "host-2"),
        flatten_subgroups=True,
    ):
        async with trio.open_nursery() as nursery:
            await nursery.start(watcher.run, [0, 1, 2])
            hosts.state[0] = "dead"
            await trio.sleep(5.0)
            assert [h for h, _, _ in hosts.lost] == [0]
            hosts.state[2] = "dead"
            await trio.sleep_forever()
    assert [h for h, _, _ in hosts.lost] == [0]  # (the second was not restarted)


async def test_losses_spread_over_more_than_the_period_are_within_the_intensity(
    autojump_clock: object,
) -> None:
    hosts = Hosts(3)
    async with trio.open_nursery() as nursery:
        await nursery.start(hosts.watcher(max_restarts=1, period=5.0).run, [0, 1, 2])
        hosts.state[0] = "dead"
        await trio.sleep(6.0)
        hosts.state[1] = "dead"
        await trio.sleep(6.0)
        nursery.cancel_scope.cancel()
    assert [h for h, _, _ in hosts.lost] == [0, 1]


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, True, "1"])
def test_bad_times_are_refused(bad: object) -> None:
    hosts = Hosts(1)
    with pytest.raises(InvalidArgument, match="interval"):
        Watcher(hosts.ping, hosts.on_lost, intensity=RestartIntensity(1, 1), interval=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="timeout"):
        Watcher(hosts.ping, hosts.on_lost, intensity=RestartIntensity(1, 1), timeout=bad)  # type: ignore[arg-type]


async def test_watch_before_run_is_refused() -> None:
    hosts = Hosts(1)
    with pytest.raises(InvalidArgument, match="not running"):
        hosts.watcher().watch(0)
    await trio.testing.wait_all_tasks_blocked()


async def test_a_host_found_lost_elsewhere_is_lost_once(autojump_clock: object) -> None:
    hosts = Hosts(2)
    async with trio.open_nursery() as nursery:
        watcher = hosts.watcher()
        await nursery.start(watcher.run, [0, 1])
        watcher.lose(1, "its poll failed: ActorDiedError")
        watcher.lose(1, "again")
        await trio.sleep(0)
        hosts.state[1] = "dead"  # (its pings would say so too: not twice)
        await trio.sleep(5.0)
        watcher.close()
    ((host, error, _),) = hosts.lost
    assert host == 1 and str(error) == "host-1 was lost: its poll failed: ActorDiedError"


async def test_close_stops_every_watch(autojump_clock: object) -> None:
    hosts = Hosts(2)
    async with trio.open_nursery() as nursery:
        watcher = hosts.watcher()
        await nursery.start(watcher.run, [0, 1])
        watcher.close()
        hosts.state = ["dead", "dead"]
        await trio.sleep(5.0)
    assert hosts.lost == [] and watcher.statistics().watched == ()
