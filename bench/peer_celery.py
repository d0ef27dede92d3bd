"""The Celery peer of ``bench/peers.py``: the peer job as a Celery task on a Redis broker.

``bench/peers.py`` starts the worker processes of a configuration (``bench/peer_configs.py``)
as::

    python -m celery --app bench.peer_celery:celery_app worker --pool solo ...

and the enqueuing processes as ``python -m bench.peer_celery enqueue --count N --tag T
--producer K --producers P`` (see ``bench/peer_job.py``, ``enqueueing``), all with
``BENCH_PEER_REDIS_URL``, ``BENCH_PEER_PREFIX`` and ``BENCH_PEER_CATALOG`` set. Every broker
key carries ``<prefix>:`` (kombu's ``global_keyprefix``) and the queue is named after the
prefix, so a run shares Redis with nothing else. There is no result backend: like Clarion,
the job's outcome is its sandbox record.

Settings that differ from Celery's defaults, and why:
- ``task_acks_late``: a message is acknowledged after the task ran, so a worker that dies
  mid-task does not lose it — the guarantee Clarion gives (XACK after the outcome).
- the pool, its concurrency, the prefetch multiplier and ``-O fair`` are the
  configuration's, given on the worker's command line.
A retry is ``self.retry(countdown=...)``: a new message with an ETA that the worker holds
until it is due.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from typing import Any

from celery import Celery, Task  # type: ignore[import-untyped]  # Celery ships no types
from celery.signals import worker_ready  # type: ignore[import-untyped]

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
        worker_hijack_root_logger=False,
    )
    return celery


# The workers' and the enqueuers' app; its settings come from the environment
# bench/peers.py sets.
celery_app = make_app(
    os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/0"),
    os.environ.get(PREFIX_ENV, "bench-peer"),
)


class _ThreadJob(threading.local):
    """An event loop and a job (with its own Redis client) per thread that runs tasks, made
    on its first task: nothing asynchronous may cross a prefork child's fork or be shared by
    the threads of the threads pool."""

    loop: asyncio.AbstractEventLoop | None = None
    job: PeerJob | None = None


_local = _ThreadJob()


def _run_attempt(job: Payload, attempt: int) -> float | None:
    if _local.loop is None or _local.job is None:
        _local.loop = asyncio.new_event_loop()
        _local.job = PeerJob.from_environment()
    return _local.loop.run_until_complete(_local.job.attempt(job, attempt))


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


def enqueue(share: Share) -> None:
    """Send this process's share of the jobs, one ``send_task`` after another, on one
    connection made before the go; each job's id is minted right before its send."""
    with celery_app.producer_or_acquire() as producer:
        producer.connection.ensure_connection()
        with enqueueing(share):
            for number in share.numbers():
                job = payload(number, share.tag)
                celery_app.send_task("bench.deliver", args=[job], producer=producer)


def main() -> int:
    """``enqueue``: enqueue a share of a run's jobs (the workers run under ``celery``)."""
    parser = argparse.ArgumentParser(description="the Celery peer's enqueuer")
    parser.add_argument("command", choices=["enqueue"])
    producer_arguments(parser)
    enqueue(share_of(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
