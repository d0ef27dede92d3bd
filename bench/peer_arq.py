"""The arq peer of ``bench/peers.py``: the peer job as an arq job, and its enqueuer.

arq pins redis-py below 6, so this module runs in its own virtual environment (see
``bench/arq-requirements.txt``) with the repository on ``PYTHONPATH``. ``bench/peers.py``
starts the worker processes of a configuration (``bench/peer_configs.py``) as::

    python -m bench.peer_arq work --max-jobs 128 --poll-delay 0.05

(arq's own ``arq bench.peer_arq.WorkerSettings`` would log every job at INFO; these log
warnings only, as Clarion's workers do in the benchmarks) and the enqueuing processes as
``python -m bench.peer_arq enqueue --count N --tag T --producer K --producers P
--concurrency C`` (see ``bench/peer_job.py``, ``enqueueing``). Settings come from
``BENCH_PEER_REDIS_URL``, ``BENCH_PEER_PREFIX`` and ``BENCH_PEER_CATALOG``. The queue is
named after the prefix and job ids start with it, so every arq key of a run
(``arq:job:<id>``, ``arq:retry:<id>``, …) contains the prefix.

Settings that differ from arq's defaults, and why:
- ``max_jobs`` (jobs in flight per process) and ``poll_delay`` (seconds between reads of the
  queue; the default 0.5 s would add up to half a second to every job that arrives while a
  worker is idle) are the configuration's.
- ``keep_result = 0``: nobody reads results (Clarion's outcome is the sandbox record too).
A retry is ``Retry(defer=...)``: arq puts the job back with that delay.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any, Final

from arq import Retry, create_pool, run_worker  # type: ignore[import-not-found]  # not in Clarion's venv
from arq.connections import RedisSettings  # type: ignore[import-not-found]

from bench.peer_job import (
    PREFIX_ENV,
    READY_LINE,
    REDIS_URL_ENV,
    RETRY,
    Payload,
    PeerJob,
    Share,
    enqueueing,
    payload,
    producer_arguments,
    share_of,
)


def queue_name(prefix: str) -> str:
    """The one queue of a run."""
    return f"{prefix}:queue"


async def deliver(ctx: dict[str, Any], job: Payload) -> None:
    """Render and send ``job`` through the sandbox; retry a transient failure with backoff."""
    peer_job: PeerJob = ctx["peer_job"]
    delay = await peer_job.attempt(job, ctx["job_try"])
    if delay is not None:
        raise Retry(defer=delay)


async def startup(ctx: dict[str, Any]) -> None:
    """Runs once the worker is connected to Redis: build the job, tell bench/peers.py."""
    ctx["peer_job"] = PeerJob.from_environment()
    print(READY_LINE, flush=True)


async def shutdown(ctx: dict[str, Any]) -> None:
    await ctx["peer_job"].close()


def redis_settings() -> Any:
    return RedisSettings.from_dsn(os.environ[REDIS_URL_ENV])


class WorkerSettings:
    """What every worker runs; ``max_jobs`` and ``poll_delay`` come from the command line."""

    functions: Final = [deliver]
    on_startup: Final = startup
    on_shutdown: Final = shutdown
    redis_settings: Final = redis_settings() if REDIS_URL_ENV in os.environ else None
    queue_name: Final = queue_name(os.environ.get(PREFIX_ENV, "bench-peer"))
    max_tries: Final = RETRY.max_attempts
    keep_result: Final = 0
    handle_signals: Final = True


async def enqueue(share: Share, concurrency: int) -> None:
    """Enqueue this process's share of the jobs from ``concurrency`` loops, on a pool
    connected before the go; each job's id is minted right before its ``enqueue_job``."""
    prefix = os.environ[PREFIX_ENV]
    pool = await create_pool(redis_settings())
    numbers = iter(share.numbers())

    async def loop() -> None:
        for number in numbers:
            await pool.enqueue_job(
                "deliver",
                payload(number, share.tag),
                _job_id=f"{prefix}-{share.tag}-{number}",
                _queue_name=queue_name(prefix),
            )

    try:
        with enqueueing(share):
            await asyncio.gather(*(loop() for _ in range(concurrency)))
    finally:
        await pool.aclose()


def main() -> int:
    """``work``: run a worker; ``enqueue``: enqueue a share of a run's jobs."""
    parser = argparse.ArgumentParser(description="the arq peer's worker and enqueuer")
    parser.add_argument("command", choices=["work", "enqueue"])
    parser.add_argument("--max-jobs", type=int, default=128, help="work: jobs in flight")
    parser.add_argument("--poll-delay", type=float, default=0.05, help="work: seconds")
    parser.add_argument("--concurrency", type=int, default=64, help="enqueue: calls in flight")
    producer_arguments(parser)
    args = parser.parse_args()
    if args.command == "work":
        logging.basicConfig(level=logging.WARNING)
        run_worker(WorkerSettings, max_jobs=args.max_jobs, poll_delay=args.poll_delay)
    else:
        asyncio.run(enqueue(share_of(args), args.concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
