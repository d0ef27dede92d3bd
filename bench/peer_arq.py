"""The arq peer of ``bench/peers.py``: the peer job as an arq job, and its enqueuer.

arq pins redis-py below 6, so this module runs in its own virtual environment (see
``bench/arq-requirements.txt``) with the repository on ``PYTHONPATH``. ``bench/peers.py``
starts two worker processes::

    python -m bench.peer_arq work

(arq's own ``arq bench.peer_arq.WorkerSettings`` would log every job at INFO; these log
warnings only, as Clarion's workers do in the benchmarks) and enqueues with
``python -m bench.peer_arq enqueue --count N --tag T``, which prints one JSON line:
``{"enqueued": N, "seconds": S}``. Settings come from ``BENCH_PEER_REDIS_URL``,
``BENCH_PEER_PREFIX`` and ``BENCH_PEER_CATALOG``. The queue is named after the prefix and job
ids start with it, so every arq key of a run (``arq:job:<id>``, ``arq:retry:<id>``, …)
contains the prefix.

Settings that differ from arq's defaults, and why:
- ``max_jobs = 32``: as many jobs in flight per process as a Clarion worker's NORMAL lane.
- ``poll_delay = 0.05`` s: arq polls its queue; the default 0.5 s would add up to half a
  second to every job that arrives while a worker is idle.
- ``keep_result = 0``: nobody reads results (Clarion's outcome is the sandbox record too).
A retry is ``Retry(defer=...)``: arq puts the job back with that delay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
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
    payload,
)

MAX_JOBS: Final = 32
POLL_DELAY_S: Final = 0.05
ENQUEUE_CONCURRENCY: Final = 32  # enqueue_job calls in flight (each is a few round trips)


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
    """What ``arq bench.peer_arq.WorkerSettings`` runs (read when the worker starts)."""

    functions: Final = [deliver]
    on_startup: Final = startup
    on_shutdown: Final = shutdown
    redis_settings: Final = redis_settings() if REDIS_URL_ENV in os.environ else None
    queue_name: Final = queue_name(os.environ.get(PREFIX_ENV, "bench-peer"))
    max_jobs: Final = MAX_JOBS
    max_tries: Final = RETRY.max_attempts
    poll_delay: Final = POLL_DELAY_S
    keep_result: Final = 0
    handle_signals: Final = True


async def enqueue(count: int, tag: str) -> dict[str, Any]:
    """Enqueue jobs 0..count-1 from ``ENQUEUE_CONCURRENCY`` loops; how long it took."""
    prefix = os.environ[PREFIX_ENV]
    pool = await create_pool(redis_settings())
    numbers = iter(range(count))

    async def loop() -> None:
        for number in numbers:
            await pool.enqueue_job(
                "deliver",
                payload(number, tag),
                _job_id=f"{prefix}-{tag}-{number}",
                _queue_name=queue_name(prefix),
            )

    started = time.perf_counter()
    try:
        await asyncio.gather(*(loop() for _ in range(ENQUEUE_CONCURRENCY)))
    finally:
        await pool.aclose()
    return {"enqueued": count, "seconds": time.perf_counter() - started}


def main() -> int:
    """``work``: run a worker; ``enqueue --count N --tag T``: print what was enqueued."""
    parser = argparse.ArgumentParser(description="the arq peer's worker and enqueuer")
    parser.add_argument("command", choices=["work", "enqueue"])
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    if args.command == "work":
        logging.basicConfig(level=logging.WARNING)
        run_worker(WorkerSettings)
    else:
        print(json.dumps(asyncio.run(enqueue(args.count, args.tag))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
