"""The configurations ``bench/peers.py`` measures: Clarion's, and several of each peer.

A peer is only beaten fairly if it ran as its experts would run it on the same two cores,
so each peer runs in several configurations and the report sets the best of them (by
deliveries/s) beside Clarion. Every configuration runs the same job (``bench/peer_job.py``);
what differs is how many worker processes take it, how many jobs each has in flight, how
far ahead each fetches, and how many processes enqueue.

Clarion runs as it ships for two cores: ``clarion api --workers 2`` and two
``clarion worker`` processes, each with a NORMAL lane 128 sends wide (``lane_normal`` in
``app/settings.py``, ``WorkerOptions.lanes`` in ``app/delivery/worker.py``); its client
posts batches of 1000 from one process, 4 requests in flight.

Celery (``bench/peer_celery.py``; Redis broker, late acknowledgement, no result backend):

- ``celery-solo-2``: two worker processes, ``--pool solo``, one per core. Each runs its
  tasks in its own consumer loop: no parent process handing tasks to pool children over
  pipes, which for tasks this short costs more than the task. Prefetch multiplier 4,
  Celery's default: a solo worker runs each task as it reads it (one message per BRPOP
  from Redis), so a larger reservation would only hold retries waiting for their ETA.
- ``celery-prefork-2``: one worker, ``--pool prefork --concurrency 2``, prefetch multiplier
  16 (the tasks take well under a millisecond; at the default of 4 the children idle
  between fetches). Celery's default pool, one child per core.
- ``celery-prefork-4-fair``: one worker, ``--pool prefork --concurrency 4 -O fair``,
  prefetch multiplier 16: two children per core, so one runs while another waits on Redis;
  ``-O fair`` hands a task only to a child that is free.
- ``celery-threads-2x8``: two worker processes, ``--pool threads --concurrency 8``,
  prefetch multiplier 4: threads overlap their Redis round trips; one process per core.

Jobs are sent with ``send_task``, which is synchronous, by four enqueuing processes
started together, two per core: each waits on Redis for every message it sends, so one
process per core would leave the cores idle meanwhile, and the workers would wait on a
single-threaded enqueuer.

arq (``bench/peer_arq.py``; each worker process an asyncio loop with ``max_jobs`` jobs in
flight):

- ``arq-2x128``: two processes, ``max_jobs`` 128: Clarion's lane width per process.
- ``arq-2x32``: two processes, ``max_jobs`` 32 (what this benchmark ran before).
- ``arq-1x256``: one process with all 256 jobs in flight: arq's workers race for every
  job id they read from the queue (a WATCH/MULTI per job), which one process avoids, and
  it leaves a core to Redis and the enqueuers.

``poll_delay`` is 0.05 s everywhere: arq sleeps that long between reads of its queue, and
the default 0.5 s would add up to half a second to every job that arrives while a worker
is idle. Jobs are enqueued by two processes with 64 ``enqueue_job`` calls in flight each,
128 in all.

The job counts give every configuration several seconds of steady state at its speed on
two cores while the whole benchmark stays within about five minutes: the slower a system,
the fewer jobs (Clarion 40,000, arq 10,000, Celery 5,000; in a --quick run 2,000, 1,000
and 500, a smoke test whose figures are mostly start-up and tail). With every job queued
at once a job's latency is mostly its place in the queue divided by the rate, so latencies
of runs with different job counts are not compared.
"""

from __future__ import annotations

import sys
from typing import Final

import msgspec

ARQ_POLL_DELAY_S: Final = 0.05
CLARION_LANE: Final = 128  # app/settings.py lane_normal: NORMAL sends in flight per worker


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """One way to run a system: its name, its processes, and how many jobs it gets."""

    name: str
    workers: int  # worker processes
    jobs: int  # measured jobs at the default size (Clarion's: whole batches of 1000)
    quick_jobs: int  # and in a --quick run
    producers: int  # processes enqueueing (Clarion: one client process)

    @property
    def system(self) -> str:
        return type(self).__name__.removesuffix("Config").lower()

    def settings(self) -> str:
        """The configuration in a line, for tables."""
        raise NotImplementedError

    def description(self) -> dict[str, object]:
        """The configuration as the result records it."""
        return {"system": self.system, **msgspec.to_builtins(self), "settings": self.settings()}


class ClarionConfig(Config, frozen=True, kw_only=True):
    api_workers: int
    lane: int
    batch_concurrency: int  # batch requests in flight

    def settings(self) -> str:
        return (
            f"api --workers {self.api_workers}, {self.workers} workers x lane {self.lane}; "
            f"batches of 1000, {self.batch_concurrency} in flight"
        )


class CeleryConfig(Config, frozen=True, kw_only=True):
    pool: str
    concurrency: int  # per worker process (solo: 1)
    prefetch_multiplier: int
    fair: bool = False

    def settings(self) -> str:
        fair = " -O fair" if self.fair else ""
        return (
            f"{self.workers} x --pool {self.pool} --concurrency {self.concurrency}{fair}, "
            f"prefetch multiplier {self.prefetch_multiplier}; {self.producers} enqueuers"
        )

    def worker_argv(self, slot: int, queue: str) -> list[str]:
        """The command of worker process ``slot``, consuming ``queue``."""
        argv = [
            sys.executable,
            "-m",
            "celery",
            "--app",
            "bench.peer_celery:celery_app",
            "worker",
            "--hostname",
            f"bench{slot}@%h",
            "--pool",
            self.pool,
            "--concurrency",
            str(self.concurrency),
            "--prefetch-multiplier",
            str(self.prefetch_multiplier),
            "--queues",
            queue,
            "--loglevel",
            "WARNING",
            # No cluster chatter: the workers have nothing to synchronise.
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        return argv + (["-O", "fair"] if self.fair else [])


class ArqConfig(Config, frozen=True, kw_only=True):
    max_jobs: int  # jobs in flight per worker process
    poll_delay_s: float
    producer_concurrency: int  # enqueue_job calls in flight per enqueuing process

    def settings(self) -> str:
        return (
            f"{self.workers} x max_jobs {self.max_jobs}, poll_delay {self.poll_delay_s} s; "
            f"{self.producers} enqueuers x {self.producer_concurrency} in flight"
        )

    def worker_args(self) -> list[str]:
        """The arguments of ``python -m bench.peer_arq work``."""
        return ["--max-jobs", str(self.max_jobs), "--poll-delay", str(self.poll_delay_s)]


CLARION: Final = ClarionConfig(
    name="clarion",
    workers=2,
    api_workers=2,
    lane=CLARION_LANE,
    batch_concurrency=4,
    producers=1,
    jobs=40_000,
    quick_jobs=2_000,
)
CELERY_PRODUCERS: Final = 4


def celery(
    name: str, workers: int, pool: str, concurrency: int, prefetch_multiplier: int
) -> CeleryConfig:
    """A Celery configuration, with what they all share: the enqueuers and the job counts."""
    return CeleryConfig(
        name=name,
        workers=workers,
        pool=pool,
        concurrency=concurrency,
        prefetch_multiplier=prefetch_multiplier,
        fair=name.endswith("-fair"),
        producers=CELERY_PRODUCERS,
        jobs=5_000,
        quick_jobs=500,
    )


CELERY: Final = (
    celery("celery-solo-2", 2, "solo", 1, 4),
    celery("celery-prefork-2", 1, "prefork", 2, 16),
    celery("celery-prefork-4-fair", 1, "prefork", 4, 16),
    celery("celery-threads-2x8", 2, "threads", 8, 4),
)
ARQ: Final = tuple(
    ArqConfig(
        name=f"arq-{workers}x{max_jobs}",
        workers=workers,
        max_jobs=max_jobs,
        poll_delay_s=ARQ_POLL_DELAY_S,
        producers=2,
        producer_concurrency=64,
        jobs=10_000,
        quick_jobs=1_000,
    )
    for workers, max_jobs in ((2, 128), (2, 32), (1, 256))
)
CONFIGS: Final[dict[str, Config]] = {c.name: c for c in (CLARION, *CELERY, *ARQ)}
SYSTEMS: Final = ("clarion", "celery", "arq")
