"""The Celery peer of ``bench/peers.py``: the peer job as a Celery task on a Redis broker.

A worker is started by ``bench/peers.py`` as::

    python -m celery -A bench.peer_celery:celery_app worker --pool prefork --concurrency 2 ...

with ``BENCH_PEER_REDIS_URL``, ``BENCH_PEER_PREFIX`` and ``BENCH_PEER_CATALOG`` set. Every
broker key carries ``<prefix>:`` (kombu's ``global_keyprefix``) and the queue is named after
the prefix, so a run shares Redis with nothing else. There is no result backend: like
Clarion, the job's outcome is its sandbox record.

Settings that differ from Celery's defaults, and why:
- ``task_acks_late``: a message is acknowledged after the task ran, so a worker that dies
  mid-task does not lose it — the guarantee Clarion gives (XACK after the outcome).
- ``worker_prefetch_multiplier = 16``: the tasks take well under a millisecond; with the
  default of 4 the pool idles between fetches.
A retry is ``self.retry(countdown=...)``: a new message with an ETA that the worker holds
until it is due.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Final

from celery import Celery, Task  # type: ignore[import-untyped]  # Celery ships no types
from celery.signals import worker_ready  # type: ignore[import-untyped]

from bench.peer_job import PREFIX_ENV, READY_LINE, REDIS_URL_ENV, RETRY, Payload, PeerJob

PREFETCH_MULTIPLIER: Final = 16


def queue_name(prefix: str) -> str:
    """The one queue of a run."""
    return f"{prefix}:deliveries"


def make_app(redis_url: str, prefix: str) -> Any:
    """A Celery app on ``redis_url`` whose broker keys all start with ``<prefix>:``."""
    celery = Celery("clarion_bench_peer", broker=redis_url, set_as_current=False)
    celery.conf.update(
        broker_transport_options={"global_keyprefix": f"{prefix}:"},
        broker_connection_retry_on_startup=True,
        task_default_queue=queue_name(prefix),
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
        worker_hijack_root_logger=False,
    )
    return celery


# The worker's app; its settings come from the environment bench/peers.py sets.
celery_app = make_app(
    os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/0"),
    os.environ.get(PREFIX_ENV, "bench-peer"),
)

# Each prefork child builds its own event loop and job (with its own Redis client) on its
# first task: nothing asynchronous may cross the fork.
_loop: asyncio.AbstractEventLoop | None = None
_job: PeerJob | None = None


def _run_attempt(job: Payload, attempt: int) -> float | None:
    global _loop, _job  # noqa: PLW0603  # one loop and one job per worker process
    if _loop is None or _job is None:
        _loop = asyncio.new_event_loop()
        _job = PeerJob.from_environment()
    return _loop.run_until_complete(_job.attempt(job, attempt))


@celery_app.task(bind=True, name="bench.deliver", max_retries=RETRY.max_attempts - 1)  # type: ignore[untyped-decorator]
def deliver(self: Task, job: Payload) -> None:
    """Render and send ``job`` through the sandbox; retry a transient failure with backoff."""
    delay = _run_attempt(job, self.request.retries + 1)
    if delay is not None:
        raise self.retry(countdown=delay)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _announce_ready(**_: Any) -> None:
    """Tell bench/peers.py the worker consumes (it runs with --loglevel WARNING)."""
    print(READY_LINE, flush=True)
