"""The cluster's watch over its node hosts: a ping of agentrio's own.

Ray declares a node dead after 20 to 55 s by default (its GCS health checks);
a host's agents would wait that long. The driver pings every host itself
instead, every ``interval`` seconds (0.5), and a host is *lost* when

- a ping says it is dead for sure (the ping raises `HostDied`: Ray's
  ``ActorDiedError``), at once; or
- no ping has answered for ``timeout`` seconds (2.0) since its last answer
  (a ping that fails otherwise, Ray's ``ActorUnavailableError``, makes the
  host *suspect*: it is pinged again until it answers or the time is up).

So a killed host is lost at most ``timeout`` seconds after its last answer,
usually sooner (a SIGKILLed worker's actor is reported dead by Ray within a
second). Each loss counts as a restart of the cluster's restart intensity
(``max_restarts`` within ``period``); one too many raises
``RestartIntensityExceeded`` out of `Watcher.run`, as a root supervisor fails
its runtime.

The ping is injected (``ping(host) -> awaitable``), so this module knows
nothing of Ray: the cluster passes one that calls the host's ``ping`` method,
and the tests pass functions of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import trio

from ..errors import HostLost, InvalidArgument, RestartIntensityExceeded
from ..supervisors.restart import RestartIntensity

__all__ = ["LOST_AFTER", "PING_INTERVAL", "HostDied", "Watcher", "WatchStatistics"]

PING_INTERVAL = 0.5
"""Seconds between two pings of a host that answers."""

LOST_AFTER = 2.0
"""Seconds without an answer after which a host is lost."""

Ping = Callable[[int], Awaitable[object]]
OnLost = Callable[[int, HostLost], Awaitable[None]]


class HostDied(Exception):
    """Raised by a ping function: the host is dead for sure (not merely slow)."""


class WatchStatistics:
    """What a `Watcher` has seen: its hosts watched, lost, and pings sent."""

    __slots__ = ("lost", "pings", "watched")

    def __init__(self, watched: tuple[int, ...], lost: tuple[int, ...], pings: int) -> None:
        self.watched = watched
        self.lost = lost
        self.pings = pings

    def __repr__(self) -> str:
        return f"WatchStatistics(watched={self.watched}, lost={self.lost}, pings={self.pings})"


class Watcher:
    """Pings hosts, and calls *on_lost* once for each host it finds lost.

    Args:
        ping: ``await ping(host)`` returns when the host answers; raises
            `HostDied` when it is dead for sure, anything else when it may
            only be slow (suspect).
        on_lost: ``await on_lost(host, error)``, called once per lost host,
            in the watcher's nursery (the host's agents are restarted there).
        intensity: the cluster's restart intensity; each loss is a restart.
        interval: seconds between two pings of a host that answers.
        timeout: seconds without an answer after which a host is lost.
        name: what a host is called in messages (``name(host)``).
    """

    def __init__(
        self,
        ping: Ping,
        on_lost: OnLost,
        *,
        intensity: RestartIntensity,
        interval: float = PING_INTERVAL,
        timeout: float = LOST_AFTER,
        name: Callable[[int], str] = "host-{}".format,
    ) -> None:
        for what, value in (("interval", interval), ("timeout", timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgument(f"the watcher's {what} must be a number > 0, got {value!r}")
        self._ping = ping
        self._on_lost = on_lost
        self._intensity = intensity
        self.interval = float(interval)
        self.timeout = float(timeout)
        self._name = name
        self._watched: dict[int, trio.CancelScope] = {}
        self._told: dict[int, str] = {}  # hosts found lost by someone else, and why
        self._lost: list[int] = []
        self._pings = 0
        self._nursery: trio.Nursery | None = None

    async def run(self, hosts: Iterable[int], *, task_status: trio.TaskStatus[None]) -> None:
        """Watch *hosts* until cancelled (``nursery.start(watcher.run, hosts)``).

        Raises:
            RestartIntensityExceeded: more hosts lost within the intensity's
                period than it allows (``path`` ``"cluster"``, ``child`` the
                host's name, ``cause`` its `HostLost`).
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for host in hosts:
                self.watch(host)
            task_status.started()
            await trio.sleep_forever()

    def watch(self, host: int) -> None:
        """Watch *host* too (a host added after `run` started)."""
        if self._nursery is None:
            raise InvalidArgument("watch(): the watcher is not running")
        if host not in self._watched:
            self._watched[host] = scope = trio.CancelScope()
            self._nursery.start_soon(self._watch_one, host, scope)

    def unwatch(self, host: int) -> None:
        """Stop watching *host* (a host being stopped on purpose is not lost)."""
        scope = self._watched.pop(host, None)
        if scope is not None:
            scope.cancel()

    def lose(self, host: int, why: str) -> bool:
        """*host* is lost, as another part of the cluster found (a call to it
        failed for good): lost as if a ping had said so (once, under the
        intensity), unless it is not watched (False: nothing done)."""
        scope = self._watched.get(host)
        if scope is None:
            return False
        if host not in self._told:
            self._told[host] = why
            scope.cancel()
        return True

    def close(self) -> None:
        """Stop watching every host (the cluster is closing: its hosts stop on purpose)."""
        for host in list(self._watched):
            self.unwatch(host)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def statistics(self) -> WatchStatistics:
        """The hosts watched, the hosts lost, and the pings sent so far."""
        return WatchStatistics(tuple(self._watched), tuple(self._lost), self._pings)

    async def _watch_one(self, host: int, scope: trio.CancelScope) -> None:
        with scope:
            why = await self._until_lost(host)
        if scope.cancelled_caught:
            told = self._told.pop(host, None)
            if told is None:
                return  # (unwatched: stopped on purpose)
            why = told
        del self._watched[host]
        self._lost.append(host)
        name = self._name(host)
        error = HostLost(f"{name} was lost: {why}", path="", host=host)
        intensity = self._intensity
        if not intensity.record(trio.current_time()):
            raise RestartIntensityExceeded(
                f"the cluster lost more than {intensity.max_restarts} hosts within "
                f"{intensity.period:g} s (the last: {error})",
                path="cluster",
                child=name,
                cause=error,
            )
        await self._on_lost(host, error)

    async def _until_lost(self, host: int) -> str:
        """Ping *host* until it is lost; return why it is."""
        last_answer = trio.current_time()
        while True:
            answered = False
            with trio.move_on_at(last_answer + self.timeout):
                try:
                    self._pings += 1
                    await self._ping(host)
                    answered = True
                except HostDied as exc:
                    return f"it died ({str(exc)[:200] or 'the ping said so'})"
                except Exception:  # (suspect: pinged again until the time is up)
                    await trio.sleep(self.interval)
                    continue
            if not answered:
                return f"no answer to a ping for {self.timeout:g} s"
            last_answer = trio.current_time()
            await trio.sleep(self.interval)
