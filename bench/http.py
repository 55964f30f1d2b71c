"""``Provider.complete`` beside a raw h11-over-Trio client, against one canned server.

The server runs in its own process and does as little as a server can (raw
Trio sockets, the request head split by hand, one canned answer written in
one ``send_all``), so what is compared is the clients' cost alone. It answers
every ``POST`` with an OpenAI chat completion: whole (JSON with
``Content-Length``), or, under the path ``/stream``, streamed as SSE in about
50 events (a role chunk, 47 text deltas, the finish chunk, the usage chunk,
``[DONE]``), each event an HTTP chunk of a chunked body, as real servers send
them.

  floor     ``h11`` over ``trio.open_tcp_stream``, one kept-alive connection
            per request in flight (as ``../shared/bench/http_ceiling.py``):
            it sends the same body bytes the provider sends, reads the
            answer, and decodes it (``json.loads`` of the body; of each
            ``data:`` payload of a stream).
  agentrio  ``Provider.complete(...)`` (kind ``openai``): the body built from
            messages, the breaker, the limits, the whole-attempt timeout,
            bounded reading, and the answer parsed into a ``ModelReply``
            (streamed: each text delta too).

The same again for OpenAI's Responses API (kind ``openai-responses``, paths
ending ``/responses``): a ``Response`` object whole, or streamed as its typed
events (``response.created``, ``response.in_progress``, the item and content
part added, 47 ``response.output_text.delta``, the done events and
``response.completed``: 55 in all), each side against its own floor
(``responses_ratio``, ``responses_stream_ratio``).

Each side runs in a fresh process, the two alternately, with the same
number of requests in flight; figures are medians. Goal: ``ratio`` and
``stream_ratio`` (agentrio's requests/s over the floor's) both >= 0.5, and
the Responses wire's two ratios too. The client's CPU per request
(``process_time``, its own process only) is reported beside them: on a
shared machine it moves less than requests/s do.

Run: python bench/http.py [--requests 3000] [--concurrency 16] [--repeats 3]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import itertools

import trio
from _common import main, run_child

import agentrio
from agentrio.providers.openai import OpenAIWire
from agentrio.providers.responses import ResponsesWire

MESSAGES = [
    agentrio.ChatMessage("system", "You answer briefly."),
    agentrio.ChatMessage("user", "Tell me about topic-7"),
]
TEXT = "Trio is about structured concurrency. " * 3
DELTAS = 47  # text deltas per streamed answer: with 4 more events, 51 in all


def _whole() -> bytes:
    body = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": TEXT},
                }
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 30, "total_tokens": 70},
        }
    ).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


def _events() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}

    cuts = [len(TEXT) * i // DELTAS for i in range(DELTAS + 1)]
    pieces = [TEXT[a:b] for a, b in itertools.pairwise(cuts)]
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    events.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 40, "completion_tokens": 30, "total_tokens": 70}
    events.append({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _streamed(events: list[bytes] | None = None) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events or _events())
    return head + body + b"0\r\n\r\n"


# -- the Responses API's answers (openai.types.responses: Response, its stream events) --


def _response(done: bool) -> dict[str, Any]:
    message = {
        "id": "msg_1",
        "type": "message",
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": [{"type": "output_text", "text": TEXT, "annotations": [], "logprobs": []}]
        if done
        else [],
    }
    usage = {
        "input_tokens": 40,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 70,
    }
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed" if done else "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": "You answer briefly.",
        "model": "m",
        "output": [message] if done else [],
        "parallel_tool_calls": True,
        "store": False,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "usage": usage if done else None,
    }


def _responses_whole() -> bytes:
    body = json.dumps(_response(True)).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


def _responses_events() -> list[bytes]:
    cuts = [len(TEXT) * i // DELTAS for i in range(DELTAS + 1)]
    pieces = [TEXT[a:b] for a, b in itertools.pairwise(cuts)]
    start, done = _response(False), _response(True)
    message = done["output"][0]
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    part = message["content"][0]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
    ]
    events += [
        {"type": "response.output_text.delta", **where, "delta": p, "logprobs": []} for p in pieces
    ]
    events += [
        {"type": "response.output_text.done", **where, "text": TEXT, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.completed", "response": done},
    ]
    return [
        b"event: %s\ndata: %s\n\n"
        % (e["type"].encode(), json.dumps({**e, "sequence_number": i}).encode())
        for i, e in enumerate(events)
    ]


def serve(sock: socket.socket) -> None:
    """The canned server (in its own process): answers each request on arrival."""
    whole, streamed = _whole(), _streamed()
    rs_whole, rs_streamed = _responses_whole(), _streamed(_responses_events())

    async def handle(stream: trio.SocketStream) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                size = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        size = int(line.split(b":")[1])
                while len(rest) < size:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    rest += data
                buf = rest[size:]
                line = head.split(b"\r\n", 1)[0]
                if b"/responses " in line:
                    answer = rs_streamed if line.startswith(b"POST /stream") else rs_whole
                else:
                    answer = streamed if line.startswith(b"POST /stream") else whole
                await stream.send_all(answer)
        except trio.BrokenResourceError:
            pass

    async def run() -> None:
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        await trio.serve_listeners(handle, [listener])

    trio.run(run)


# -- the floor ----------------------------------------------------------------------------


async def _floor(
    port: int, stream: bool, concurrency: int, responses: bool = False
) -> Callable[[], Awaitable[None]]:
    import h11

    wire = ResponsesWire() if responses else OpenAIWire()
    body = json.dumps(wire.body("m", MESSAGES, (), 256, stream)).encode()
    target = ("/stream/v1" if stream else "/v1") + wire.path
    done = b"data: [DONE]"
    headers = [
        ("host", f"127.0.0.1:{port}"),
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
    ]
    free = []
    for _ in range(concurrency):
        free.append((await trio.open_tcp_stream("127.0.0.1", port), h11.Connection(h11.CLIENT)))

    async def one() -> None:
        sock, conn = free.pop()
        data = conn.send(h11.Request(method="POST", target=target, headers=headers))
        data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        await sock.send_all(data)
        parts = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await sock.receive_some(65536))
            elif isinstance(event, h11.Data):
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        conn.start_next_cycle()
        answer = b"".join(parts)
        if stream:
            for line in answer.split(b"\n"):
                if line.startswith(b"data: ") and line != done:
                    json.loads(line[6:])
        else:
            assert json.loads(answer)["output" if responses else "choices"]
        free.append((sock, conn))

    return one


# -- agentrio -----------------------------------------------------------------------------


async def _agentrio(
    port: int, stream: bool, concurrency: int, provider: agentrio.Provider
) -> Callable[[], Awaitable[None]]:
    async def one() -> None:
        texts: list[str] = []
        on_text = texts.append if stream else None
        reply = await provider.complete("m", MESSAGES, (), max_output_tokens=256, on_text=on_text)
        assert reply.text == TEXT and reply.usage.output_tokens == 30
        assert not stream or len(texts) == DELTAS

    return one


def requests(
    impl: str, port: int, stream: bool, n: int, concurrency: int, responses: bool = False
) -> dict[str, Any]:
    async def run() -> tuple[float, float]:
        base = f"http://127.0.0.1:{port}" + ("/stream/v1" if stream else "/v1")
        kind = "openai-responses" if responses else "openai"
        config = agentrio.ProviderConfig(
            name="bench", kind=kind, base_url=base, max_concurrent=concurrency, stream=stream
        )
        async with agentrio.Provider(config) as provider:
            if impl == "floor":
                one = await _floor(port, stream, concurrency, responses)
            else:
                one = await _agentrio(port, stream, concurrency, provider)
            limiter = trio.CapacityLimiter(concurrency)

            async def guarded() -> None:
                async with limiter:
                    await one()

            for _ in range(concurrency):  # warm the connections
                await guarded()
            t0, cpu0 = time.perf_counter(), time.process_time()
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(guarded)
            return time.perf_counter() - t0, time.process_time() - cpu0

    dt, cpu = trio.run(run)
    return {"requests_per_s": round(n / dt, 1), "cpu_us": round(cpu / n * 1e6, 1)}


def report(args: Any) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    server = multiprocessing.Process(target=serve, args=(sock,), daemon=True)
    server.start()
    res: dict[str, list[dict[str, Any]]] = {}
    try:
        params = {"port": sock.getsockname()[1], "concurrency": args.concurrency}
        for _ in range(args.repeats):  # alternately, so that both see the same machine
            for responses, stream in itertools.product((False, True), (False, True)):
                n = args.requests if not stream else args.requests // 2
                for impl in ("floor", "agentrio"):
                    key = f"{impl}{'_responses' if responses else ''}{'_stream' if stream else ''}"
                    one = {**params, "impl": impl, "stream": stream, "n": n, "responses": responses}
                    res.setdefault(key, []).append(run_child(script, "requests", one, args.timeout))
    finally:
        server.terminate()
        server.join(timeout=10)
    med = {key: statistics.median(r["requests_per_s"] for r in runs) for key, runs in res.items()}
    cpu = {key: statistics.median(r["cpu_us"] for r in runs) for key, runs in res.items()}
    print(f"[http] {med} cpu_us {cpu}", file=sys.stderr, flush=True)
    ratio = med["agentrio"] / med["floor"]
    stream_ratio = med["agentrio_stream"] / med["floor_stream"]
    responses_ratio = med["agentrio_responses"] / med["floor_responses"]
    responses_stream_ratio = med["agentrio_responses_stream"] / med["floor_responses_stream"]
    return {
        "bench": "http",
        "requests": args.requests,
        "stream_requests": args.requests // 2,
        "stream_events": DELTAS + 4,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "requests_per_s": med["agentrio"],
        "floor_requests_per_s": med["floor"],
        "ratio": round(ratio, 3),
        "stream_requests_per_s": med["agentrio_stream"],
        "floor_stream_requests_per_s": med["floor_stream"],
        "stream_ratio": round(stream_ratio, 3),
        "responses_requests_per_s": med["agentrio_responses"],
        "floor_responses_requests_per_s": med["floor_responses"],
        "responses_ratio": round(responses_ratio, 3),
        "responses_stream_requests_per_s": med["agentrio_responses_stream"],
        "floor_responses_stream_requests_per_s": med["floor_responses_stream"],
        "responses_stream_ratio": round(responses_stream_ratio, 3),
        "responses_stream_events": DELTAS + 8,
        # The client's CPU per request (its process only; the server is another):
        # steadier than requests/s on a shared machine.
        "cpu_us_per_request": cpu["agentrio"],
        "floor_cpu_us_per_request": cpu["floor"],
        "stream_cpu_us_per_request": cpu["agentrio_stream"],
        "floor_stream_cpu_us_per_request": cpu["floor_stream"],
        "goals_met": {
            "ratio>=0.5": ratio >= 0.5,
            "stream_ratio>=0.5": stream_ratio >= 0.5,
            "responses_ratio>=0.5": responses_ratio >= 0.5,
            "responses_stream_ratio>=0.5": responses_stream_ratio >= 0.5,
        },
    }


def _args(ap: Any) -> None:
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)


if __name__ == "__main__":
    main(os.path.abspath(__file__), {"requests": requests}, report, _args)
