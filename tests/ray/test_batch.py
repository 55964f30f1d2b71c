"""Messages across hosts: batches, de-duplication, the wire form of messages and errors.

The batching and de-duplication logic is tested here without Ray (it knows none:
the outbox's ``send`` is a function); the last tests cross real hosts of a real local
Ray cluster.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from cluster import LocalCluster

import agentrio

ray_module = pytest.importorskip("ray")
from agentrio.ray import _batch  # noqa: E402  (after the skip: it imports Ray)
from agentrio.ray._batch import Dedupe, Envelope, Outbox, Tell  # noqa: E402


class Increment(agentrio.Message, frozen=True):
    by: int = 1


class Count(agentrio.Message, frozen=True):
    total: int


def tell(i: int = 0) -> Tell:
    kind, body = _batch.message_to_wire(Increment(i))
    return Tell("counter", kind, body)


# --- de-duplication ---------------------------------------------------------------------


def test_dedupe_applies_each_sender_seq_once_in_any_order() -> None:
    dedupe = Dedupe()
    seen = [dedupe.fresh("a", seq) for seq in (1, 2, 2, 1, 4, 3, 4, 5, 3)]
    assert seen == [True, True, False, False, True, True, False, True, False]
    assert dedupe.fresh("b", 1)  # (per sender)
    assert dedupe.duplicates == 4


def test_dedupe_forgets_gaps_past_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_batch, "DEDUPE_WINDOW", 3)
    dedupe = Dedupe()
    for seq in (3, 4, 5, 6):  # 1 and 2 never came: the window moves past them
        assert dedupe.fresh("a", seq)
    assert not dedupe.fresh("a", 1)
    assert not dedupe.fresh("a", 4)
    assert dedupe.fresh("a", 7)


# --- the outbox ---------------------------------------------------------------------------


class Receiver:
    """A host's receiving end: decodes batches and applies each envelope once."""

    def __init__(self, fail_after_delivery: int = 0) -> None:
        self.dedupe = Dedupe()
        self.applied: list[Envelope] = []
        self.batches: list[bytes] = []
        self.flaky = fail_after_delivery  # deliveries to report as failed (they arrived)

    async def send(self, data: bytes) -> None:
        self.batches.append(data)
        for envelope in _batch.decode_batch(data):
            if self.dedupe.fresh(envelope.sender, envelope.seq):
                self.applied.append(envelope)
        await trio.lowlevel.checkpoint()
        if self.flaky:
            self.flaky -= 1
            raise ConnectionError("no answer: did it arrive?")


async def test_an_outbox_flushes_a_full_batch_at_once(autojump_clock: Any) -> None:
    receiver = Receiver()
    outbox = Outbox("h0/x", receiver.send, batch_messages=100, flush_seconds=10.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(outbox.run)
        for i in range(250):
            outbox.put(tell(i))
        await trio.sleep(1.0)  # well under flush_seconds: only the full batches went
        assert [len(_batch.decode_batch(b)) for b in receiver.batches] == [100, 100]
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    assert [len(_batch.decode_batch(b)) for b in receiver.batches] == [100, 100, 50]
    assert [e.seq for e in receiver.applied] == list(range(1, 251))
    assert (outbox.batches, outbox.messages) == (3, 250)


async def test_an_outbox_flushes_a_lone_message_after_flush_seconds(autojump_clock: Any) -> None:
    receiver = Receiver()
    outbox = Outbox("h0/x", receiver.send, flush_seconds=0.001)
    async with trio.open_nursery() as nursery:
        await nursery.start(outbox.run)
        began = trio.current_time()
        outbox.put(tell())
        while not receiver.batches:
            await trio.sleep(0.0001)
        waited = trio.current_time() - began
        nursery.cancel_scope.cancel()
    assert 0.001 <= waited < 0.002


async def test_a_batch_sent_again_after_an_ambiguous_failure_is_applied_once(
    autojump_clock: Any,
) -> None:
    receiver = Receiver(fail_after_delivery=2)
    outbox = Outbox("h0/x", receiver.send, retry_on=(ConnectionError,), batch_messages=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(outbox.run)
        for i in range(10):
            outbox.put(tell(i))
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert len(receiver.batches) == 3  # the same bytes, three times
    assert len(set(receiver.batches)) == 1
    assert len(receiver.applied) == 10  # ...applied once
    assert outbox.retries == 2
    assert receiver.dedupe.duplicates == 20


async def test_an_outbox_gives_up_after_its_attempts(autojump_clock: Any) -> None:
    receiver = Receiver(fail_after_delivery=10)
    outbox = Outbox("h0/x", receiver.send, retry_on=(ConnectionError,), attempts=3)
    outbox.put(tell())
    with pytest.raises(ConnectionError):
        await outbox.run()
    assert len(receiver.batches) == 3


async def test_send_waits_for_room(autojump_clock: Any) -> None:
    receiver = Receiver()
    outbox = Outbox("h0/x", receiver.send, max_pending=2, batch_messages=2)
    await outbox.send(tell())
    await outbox.send(tell())
    with trio.move_on_after(1) as scope:
        await outbox.send(tell())  # full: waits for a flush
    assert scope.cancelled_caught
    async with trio.open_nursery() as nursery:
        await nursery.start(outbox.run)
        await outbox.send(tell())
        nursery.cancel_scope.cancel()
    assert outbox.pending <= 2


# --- the wire form -----------------------------------------------------------------------


def test_messages_cross_as_the_same_structs() -> None:
    kind, body = _batch.message_to_wire(Count(3))
    assert kind.endswith(":Count")
    assert _batch.message_from_wire(kind, body) == Count(3)
    assert _batch.message_from_wire(*_batch.message_to_wire({"a": [1, 2]})) == {"a": [1, 2]}


@pytest.mark.parametrize(
    "kind",
    ["os.path:join", "no_such_module_x:Thing", "agentrio:Nothing", "agentrio.messages:Event.x"],
)
def test_a_kind_that_is_no_message_class_is_refused(kind: str) -> None:
    with pytest.raises(agentrio.InvalidArgument):
        _batch.message_from_wire(kind, b"\x80")


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x91\x01", "text"])
def test_a_batch_that_is_not_one_is_refused(data: Any) -> None:
    with pytest.raises(agentrio.InvalidArgument):
        _batch.decode_batch(data)


def test_errors_cross_as_themselves_or_as_remote_errors() -> None:
    stopped = agentrio.ActorStopped("gone \ud800", path="a/b", reason="cancelled")
    frame = _batch.failed(7, stopped)
    assert frame.message == "gone \ufffd"  # (a lone surrogate scrubbed)
    rebuilt = _batch.rebuild(frame, host=1)
    assert isinstance(rebuilt, agentrio.ActorStopped)
    assert (rebuilt.path, rebuilt.reason) == ("a/b", "cancelled")
    other = _batch.rebuild(_batch.failed(7, KeyError("k")), host=1)
    assert isinstance(other, agentrio.errors.RemoteError)
    assert (other.error_type, other.host) == ("KeyError", 1)
    named = _batch.rebuild(_batch.failed(7, agentrio.errors.UnknownName("no x")), host=0)
    assert isinstance(named, agentrio.errors.UnknownName)


# --- across real hosts ---------------------------------------------------------------------


class Counter(agentrio.Actor[Increment]):
    """Counts what it was sent; answers with the total."""

    def __init__(self) -> None:
        self.total = 0

    async def handle(self, msg: Increment) -> Count:
        self.total += msg.by
        return Count(self.total)


class Forwarder(agentrio.Actor[Increment]):
    """Asks its target (on another host, through a RemoteRef) and answers with its reply."""

    def __init__(self, target: Any) -> None:
        self.target = target

    async def handle(self, msg: Increment) -> Count:
        reply = await self.target.ask(msg, timeout=30)
        assert isinstance(reply, Count)
        return reply


class Burst(agentrio.Actor[Increment]):
    """Asks its target (on another host) *by* times at once; answers with how many."""

    def __init__(self, target: Any) -> None:
        self.target = target

    async def handle(self, msg: Increment) -> Count:
        async with trio.open_nursery() as nursery:
            for _ in range(msg.by):
                nursery.start_soon(self.target.ask, Increment())
        return Count(msg.by)


def cluster_of(ray_cluster: LocalCluster) -> Any:
    import agentrio.ray

    return agentrio.ray.open_cluster(hosts=2, address=ray_cluster.address)


async def test_an_actor_asks_an_actor_of_another_host_in_batches(ray_cluster: LocalCluster) -> None:
    async with cluster_of(ray_cluster) as cluster:
        counter = await cluster.spawn(Counter, name="counter", host=1)
        forwarder = await cluster.spawn(Forwarder, counter, name="forwarder", host=0)
        assert await forwarder.ask(Increment(), timeout=30) == Count(1)
        burst = await cluster.spawn(Burst, counter, name="burst", host=0)
        assert await burst.ask(Increment(300), timeout=60) == Count(300)
        assert await counter.ask(Increment(0)) == Count(301)
        sender = await cluster.ping(0)
    assert sender.messages >= 301  # every ask crossed from host 0 to host 1...
    assert sender.batches < sender.messages / 3  # ...in batches


async def test_a_batch_delivered_twice_is_applied_once(ray_cluster: LocalCluster) -> None:
    from agentrio.ray import _batch
    from agentrio.ray._host import await_ref

    async with cluster_of(ray_cluster) as cluster:
        counter = await cluster.spawn(Counter, name="counter", host=1)
        kind, body = _batch.message_to_wire(Increment())
        tell = _batch.Tell("counter", kind, body)
        batch = _batch.encode_batch([_batch.Envelope("test/1", 1, tell)])
        handle = cluster._links[1].handle
        for _ in range(3):  # a retry, and a retry of the retry
            await await_ref(handle.deliver.remote(batch))
        assert await counter.ask(Increment(0)) == Count(1)
        assert (await cluster.ping(1)).duplicates == 2
