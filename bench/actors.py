"""agentrio actors beside the raw-Trio floor (../shared/bench/raw_trio_channels.py).

Workloads, with the floor's message shape ``Msg(sender, kind, seq)``, made
fresh for each send:

  tell     1 sender -> 1 actor, 200k messages, mailbox 100; until all handled
           (floor: producer -> consumer over a memory channel of 100).
  ask      50k request/reply round trips (floor: two channels of 100).
  spawn    100k idle actors (mailbox 100), each started and blocked on its
           mailbox; seconds and RSS per actor (floor: task + channel of 0).
  fanout   10k actors x 10 messages, round-robin, mailbox 100; from the first
           send until every actor has drained and exited (floor: 10k tasks
           each with its own channel of 100).

Run: python bench/actors.py [--repeats 3]; prints one JSON line.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import msgspec
import trio
import trio.testing
from _common import main, median_of, rss_now_mb

import agentrio


class Msg(agentrio.Message):
    """The floor's message shape, as an agentrio message."""

    sender: str
    kind: str
    seq: int


class RawMsg(msgspec.Struct):
    sender: str
    kind: str
    seq: int


COUNT = [0]


class Sink(agentrio.Actor[Msg]):
    async def handle(self, msg: Msg) -> None:
        COUNT[0] += 1


class Pong(agentrio.Actor[Msg]):
    async def handle(self, msg: Msg) -> Msg:
        return Msg("server", "pong", msg.seq)


class Idle(agentrio.Actor[Msg]):
    async def on_start(self) -> None:
        COUNT[0] += 1

    async def handle(self, msg: Msg) -> None:
        pass


# -- tell --------------------------------------------------------------------------


def tell(impl: str, n: int = 200_000) -> dict[str, Any]:
    COUNT[0] = 0

    async def raw() -> float:
        send, recv = trio.open_memory_channel[RawMsg](100)

        async def consumer() -> None:
            async with recv:
                async for _m in recv:
                    COUNT[0] += 1

        async def producer() -> None:
            async with send:
                for i in range(n):
                    await send.send(RawMsg("producer", "data", i))

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            nursery.start_soon(producer)
        return time.perf_counter() - t0

    async def actor() -> float:
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Sink, mailbox=100)
            t0 = time.perf_counter()
            for i in range(n):
                await ref.send(Msg("producer", "data", i))
            await ref.stop()
            return time.perf_counter() - t0

    dt = trio.run(raw if impl == "raw" else actor)
    assert COUNT[0] == n, COUNT
    return {"msgs_per_s": round(n / dt, 1)}


# -- ask ---------------------------------------------------------------------------


def ask(impl: str, n: int = 50_000) -> dict[str, Any]:
    async def raw() -> float:
        req_send, req_recv = trio.open_memory_channel[RawMsg](100)
        rep_send, rep_recv = trio.open_memory_channel[RawMsg](100)

        async def server() -> None:
            async with req_recv, rep_send:
                async for m in req_recv:
                    await rep_send.send(RawMsg("server", "pong", m.seq))

        async def client() -> None:
            async with req_send, rep_recv:
                for i in range(n):
                    await req_send.send(RawMsg("client", "ping", i))
                    r = await rep_recv.receive()
                    assert r.seq == i

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server)
            nursery.start_soon(client)
        return time.perf_counter() - t0

    async def actor() -> float:
        async with agentrio.open_runtime() as rt:
            ref = await rt.spawn(Pong, mailbox=100)
            t0 = time.perf_counter()
            for i in range(n):
                r = await ref.ask(Msg("client", "ping", i))
                assert r.seq == i  # type: ignore[attr-defined]
            return time.perf_counter() - t0

    dt = trio.run(raw if impl == "raw" else actor)
    return {"round_trips_per_s": round(n / dt, 1)}


# -- spawn -------------------------------------------------------------------------


def spawn(impl: str, n: int = 100_000) -> dict[str, Any]:
    COUNT[0] = 0
    gc.collect()
    base = rss_now_mb()

    async def raw() -> tuple[float, float]:
        async def waiter(recv: trio.MemoryReceiveChannel[RawMsg]) -> None:
            COUNT[0] += 1
            async with recv:
                async for _m in recv:
                    pass

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            senders = []
            for _ in range(n):
                s, r = trio.open_memory_channel[RawMsg](0)
                senders.append(s)
                nursery.start_soon(waiter, r)
            while COUNT[0] < n:
                await trio.sleep(0)
            dt = time.perf_counter() - t0
            rss = rss_now_mb()
            for s in senders:
                s.close()
        return dt, rss

    async def actor() -> tuple[float, float]:
        async with agentrio.open_runtime() as rt:
            t0 = time.perf_counter()
            refs = [await rt.spawn(Idle) for _ in range(n)]
            while COUNT[0] < n:
                await trio.sleep(0)
            dt = time.perf_counter() - t0
            rss = rss_now_mb()
            assert len(refs) == n
        return dt, rss

    dt, rss = trio.run(raw if impl == "raw" else actor)
    return {"spawn_s": round(dt, 4), "bytes_per_actor": round((rss - base) * 1024 * 1024 / n, 1)}


# -- fanout ------------------------------------------------------------------------


def fanout(impl: str, actors: int = 10_000, per_actor: int = 10) -> dict[str, Any]:
    COUNT[0] = 0
    total = actors * per_actor

    async def raw() -> float:
        async def worker(recv: trio.MemoryReceiveChannel[RawMsg]) -> None:
            async with recv:
                async for _m in recv:
                    COUNT[0] += 1

        async with trio.open_nursery() as nursery:
            senders = []
            for _ in range(actors):
                s, r = trio.open_memory_channel[RawMsg](100)
                senders.append(s)
                nursery.start_soon(worker, r)
            await trio.testing.wait_all_tasks_blocked()
            t0 = time.perf_counter()
            for seq in range(per_actor):
                for s in senders:
                    await s.send(RawMsg("dispatcher", "work", seq))
            for s in senders:
                await s.aclose()
        return time.perf_counter() - t0

    async def actor() -> float:
        async with agentrio.open_runtime() as rt:
            refs = [await rt.spawn(Sink, mailbox=100) for _ in range(actors)]
            await trio.testing.wait_all_tasks_blocked()
            t0 = time.perf_counter()
            for seq in range(per_actor):
                for ref in refs:
                    await ref.send(Msg("dispatcher", "work", seq))
        # leaving the block drains every mailbox and stops every actor
        return time.perf_counter() - t0

    dt = trio.run(raw if impl == "raw" else actor)
    assert COUNT[0] == total, COUNT
    return {"msgs_per_s": round(total / dt, 1)}


SCENARIOS = {"tell": tell, "ask": ask, "spawn": spawn, "fanout": fanout}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    out: dict[str, Any] = {"bench": "actors", "repeats": args.repeats}
    res = {}
    for name in SCENARIOS:
        for impl in ("raw", "agentrio"):
            res[name, impl] = median_of(script, name, {"impl": impl}, args.repeats, args.timeout)
            print(f"[actors] {name} {impl}: {res[name, impl]}", file=sys.stderr, flush=True)
    out["tell_msgs_per_s"] = res["tell", "agentrio"]["msgs_per_s"]
    out["raw_tell_msgs_per_s"] = res["tell", "raw"]["msgs_per_s"]
    out["tell_ratio"] = round(out["tell_msgs_per_s"] / out["raw_tell_msgs_per_s"], 3)
    out["ask_round_trips_per_s"] = res["ask", "agentrio"]["round_trips_per_s"]
    out["raw_ask_round_trips_per_s"] = res["ask", "raw"]["round_trips_per_s"]
    out["ask_ratio"] = round(out["ask_round_trips_per_s"] / out["raw_ask_round_trips_per_s"], 3)
    out["spawn_100k_s"] = res["spawn", "agentrio"]["spawn_s"]
    out["raw_spawn_100k_s"] = res["spawn", "raw"]["spawn_s"]
    out["spawn_time_ratio"] = round(out["spawn_100k_s"] / out["raw_spawn_100k_s"], 3)
    out["bytes_per_actor"] = res["spawn", "agentrio"]["bytes_per_actor"]
    out["raw_bytes_per_task"] = res["spawn", "raw"]["bytes_per_actor"]
    out["spawn_rss_ratio"] = round(out["bytes_per_actor"] / out["raw_bytes_per_task"], 3)
    out["fanout_msgs_per_s"] = res["fanout", "agentrio"]["msgs_per_s"]
    out["raw_fanout_msgs_per_s"] = res["fanout", "raw"]["msgs_per_s"]
    out["fanout_ratio"] = round(out["fanout_msgs_per_s"] / out["raw_fanout_msgs_per_s"], 3)
    out["goals_met"] = {
        "tell_ratio>=0.85": out["tell_ratio"] >= 0.85,
        "ask_ratio>=1.0": out["ask_ratio"] >= 1.0,
        "spawn_rss_ratio<=1.3": out["spawn_rss_ratio"] <= 1.3,
        "fanout_ratio>=0.8": out["fanout_ratio"] >= 0.8,
    }
    return out


if __name__ == "__main__":
    main(os.path.abspath(__file__), SCENARIOS, report)
