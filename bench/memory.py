"""Recall at 10,000 memories per agent, beside a plain Python floor over the same items.

  agentrio  one agent's memory (``Memory(max_items=N)``, the default BM25 scorer)
            filled with N items of 20 words each (a vocabulary of 5,000 words,
            Zipf-like, seeded); then Q recalls of the top 3 for a 4-word query,
            each an ask of the memory's actor, as a phase makes before a model
            call (``Recall``): the time per recall.
  floor     the same Q queries over the same items, with no index: each item's
            words kept as a set; a recall scores every item by the query words
            it holds and sorts (``heapq.nlargest``, a partial sort) for the top 3.
            What a memory without an index would cost.

Memory: the bytes the filled memory holds (tracemalloc: items, index, actor),
beside the UTF-8 bytes of the items' text.

Run: python bench/memory.py [--items 10000] [--queries 2000]; prints one JSON line.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import sys
import time
import tracemalloc

# bench/ goes last on the path: its http.py must not hide the standard library's http.
sys.path.sort(key=lambda p: os.path.abspath(p) == os.path.dirname(os.path.abspath(__file__)))

import trio

import agentrio
from agentrio.agents.memory.memory import Recall
from agentrio.memory import Memory
from agentrio.testing import FunctionModel, Reply


def corpus(items: int, queries: int) -> tuple[list[str], list[str]]:
    rng = random.Random(26)
    vocabulary = [f"w{n}" for n in range(5000)]
    weights = [1.0 / (n + 1) for n in range(5000)]
    texts = [" ".join(rng.choices(vocabulary, weights, k=20)) for _ in range(items)]
    asked = [" ".join(rng.choices(vocabulary, weights, k=4)) for _ in range(queries)]
    return texts, asked


def floor(texts: list[str], asked: list[str]) -> float:
    """Seconds per recall: every item scored by its query words, a partial sort."""
    sets = [frozenset(t.split()) for t in texts]
    start = time.perf_counter()
    for query in asked:
        words = query.split()
        scored = ((sum(w in s for w in words), i) for i, s in enumerate(sets))
        best = heapq.nlargest(3, scored)
        assert len(best) == 3
    return (time.perf_counter() - start) / len(asked)


async def agentrio_recall(texts: list[str], asked: list[str]) -> tuple[float, int, int]:
    """Seconds per recall through the memory's actor; bytes held; items held."""
    model = FunctionModel(lambda messages, tools: Reply(text="ok"))
    async with agentrio.open_runtime() as rt:
        spec = agentrio.AgentSpec("a", model, memory=Memory(max_items=len(texts)))
        agent = await rt.spawn_agent(spec)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        handle = agent.memory
        for text in texts:
            await handle.remember(text)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        count = len(await handle.items())
        ref = agent._state.recall.ref(agent._state)  # type: ignore[union-attr]  # (the phase's path)
        start = time.perf_counter()
        for query in asked:
            found = await ref.ask(Recall(query, 3, recalled=True))
            assert isinstance(found, list) and found
        per_call = (time.perf_counter() - start) / len(asked)
    return per_call, held, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=2000)
    args = ap.parse_args()
    texts, asked = corpus(args.items, args.queries)
    floor_s = floor(texts, asked)
    recall_s, held, count = trio.run(agentrio_recall, texts, asked)
    floor_s = min(floor_s, floor(texts, asked))  # (the floor's best of two, around agentrio)
    assert count == args.items
    text_bytes = sum(len(t.encode()) for t in texts)
    print(
        json.dumps(
            {
                "items": args.items,
                "queries": args.queries,
                "recall_us_per_call": round(recall_s * 1e6, 1),
                "floor_sort_us_per_call": round(floor_s * 1e6, 1),
                "recall_over_floor": round(recall_s / floor_s, 3),
                "memory_bytes": held,
                "text_bytes": text_bytes,
                "memory_bytes_per_item": round(held / args.items),
            }
        )
    )


if __name__ == "__main__":
    main()
