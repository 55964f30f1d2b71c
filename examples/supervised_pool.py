"""A supervised worker pool: workers crash on bad input and are restarted.

A supervisor named ``pool`` holds four worker actors. Each job is sent to one
worker with ``ask``; a job whose number is a multiple of 7 makes the worker
raise. The asker of that job gets ``ActorCrashed``, the supervisor restarts
the worker with a fresh instance, and the jobs still waiting in the worker's
mailbox are answered by the new instance. At the end the program prints a
summary, the pool's statistics and how many events of each kind were seen.

Run it with ``python examples/supervised_pool.py``.
"""

from __future__ import annotations

from collections import Counter

import trio

import agentrio

N_WORKERS = 4
N_JOBS = 30


class Job(agentrio.Message, frozen=True):
    """Square this number."""

    n: int


class Worker(agentrio.Actor[Job]):
    """Squares numbers, one job at a time; multiples of 7 make it crash."""

    async def handle(self, msg: Job) -> int:
        if msg.n % 7 == 0:
            raise ValueError(f"{msg.n} is a multiple of 7")
        await trio.sleep(0.001)  # stands in for real work
        return msg.n * msg.n


async def run_pool(n_workers: int = N_WORKERS, n_jobs: int = N_JOBS) -> None:
    """Run *n_jobs* jobs on a pool of *n_workers* workers and print what happened."""
    answers: dict[int, int] = {}
    crashes: dict[int, BaseException] = {}

    async def submit(worker: agentrio.ActorRef, n: int) -> None:
        try:
            answer = await worker.ask(Job(n=n), timeout=1.0)
        except agentrio.ActorCrashed as exc:
            crashes[n] = exc.cause
        else:
            assert isinstance(answer, int)
            answers[n] = answer

    async with agentrio.open_runtime() as rt:
        # Subscribe before spawning, so that no event is missed. The stream
        # ends on its own when the runtime stops.
        events = rt.events()
        pool = await rt.spawn_supervisor(
            name="pool",
            max_restarts=10,
            period=1.0,
            backoff=agentrio.Backoff(initial=0.005),
        )
        workers = [
            await pool.spawn(Worker, name=f"worker-{i}", restart="permanent")
            for i in range(n_workers)
        ]
        async with trio.open_nursery() as nursery:
            for n in range(1, n_jobs + 1):
                nursery.start_soon(submit, workers[n % n_workers], n)
        stats = pool.statistics()

    counts = Counter([type(event).__name__ async for event in events])
    print(f"jobs: {n_jobs}, answered: {len(answers)}, crashed: {len(crashes)}")
    for n, cause in sorted(crashes.items()):
        print(f"  job {n}: {type(cause).__name__}: {cause}")
    print(f"sum of answers: {sum(answers.values())}")
    print(
        f"pool: {stats.actors} workers, {stats.messages_handled} messages handled, "
        f"{stats.restarts} restarts"
    )
    print("events: " + ", ".join(f"{name}={counts[name]}" for name in sorted(counts)))


def main() -> int:
    """Run the example; return the process exit code."""
    trio.run(run_pool)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
