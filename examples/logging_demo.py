"""Logs: what agentrio says on the ``agentrio`` logger when a server misbehaves.

The fake LLM server answers some requests with a 429 or a 500; a swarm of
agents calls it through one provider. agentrio installs no log handler: this
program sets up one (``logging.basicConfig``), as any program using agentrio
would, and sees a WARNING for each retry, the shared pause after a 429 and
any call given up. A second handler counts the records, and checks that none
holds the API key or the agents' prompts and answers (agentrio logs neither).

Run it with ``python examples/logging_demo.py`` (add ``--debug`` to see a
DEBUG line for every HTTP request too).
"""

from __future__ import annotations

import logging
import sys
from collections import Counter

import trio

import agentrio
from agentrio.testing import Faults, Reply, open_fake_llm

KEY = "sk-example-NOT-IN-THE-LOG-4b1f"
PROMPT = "the plan is PLUM-7731"
ANSWER = "the answer is QUINCE-2208"
N_AGENTS = 10


class Counted(logging.Handler):
    """Counts agentrio's records by logger and level; notes any with a secret in it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: Counter[tuple[str, str]] = Counter()
        self.leaks = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.seen[record.name, record.levelname] += 1
        text = record.getMessage()
        self.leaks += any(secret in text for secret in (KEY, PROMPT, ANSWER))


async def run() -> list[str]:
    # (seed: the same requests get the same faults on every run)
    faults = Faults(seed=5, rate_limit=0.1, retry_after=1, server_error=0.2)
    answer = Reply(text=ANSWER)
    async with open_fake_llm(lambda request: answer, faults=faults, api_key=KEY) as fake:
        config = agentrio.ProviderConfig(
            name="local",
            kind="openai",
            base_url=fake.base_url + "/v1",
            max_retries=2,
            backoff_initial=0.05,
            seed=1,
        )
        async with agentrio.Provider(config, api_key=KEY) as provider:
            spec = agentrio.AgentSpec("a", provider.model("m"))
            async with agentrio.open_runtime() as rt:
                results: list[str] = []

                async def ask(i: int) -> None:
                    agent = await rt.spawn_agent(spec, name=f"a{i}")
                    results.append((await agent.run(PROMPT)).stop_reason)

                async with trio.open_nursery() as nursery:
                    for i in range(N_AGENTS):
                        nursery.start_soon(ask, i)
    return results


def main(argv: list[str]) -> int:
    level = logging.DEBUG if "--debug" in argv else logging.WARNING
    # What a program does (agentrio does not): a handler, a format, a level.
    form = "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, stream=sys.stderr, format=form)
    counted = Counted()
    logging.getLogger("agentrio").addHandler(counted)
    results = trio.run(run)
    print("runs:", ", ".join(f"{reason}={n}" for reason, n in sorted(Counter(results).items())))
    for (name, level_name), n in sorted(counted.seen.items()):
        print(f"  {name:<20} {level_name:<8} {n}")
    retried = counted.seen["agentrio.providers", "WARNING"] > 0
    print(f"logging: retries logged: {retried}, records with the key or content: {counted.leaks}")
    return 0 if retried and not counted.leaks else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
