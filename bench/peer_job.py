"""The job every system of ``bench/peers.py`` runs: deliver one notification, with retry.

One job is one ``order_confirmed`` notification for one EMAIL address. A peer's worker
renders it with Clarion's own template code and catalog (``app.delivery.rendering``) and hands it to
Clarion's real sandbox adapter (``app.providers.sandbox``), which records the call in its
Redis stream exactly as it does for Clarion's delivery workers. So every system does the
same provider work, including the Redis write of the record, and the sandbox record is
where every system's completions are counted.

Every ``FAIL_EVERY``-th job carries the sandbox directive ``fail_transient: 1``: its first
attempt fails with a TRANSIENT error and the system must retry it after
``app.delivery.retry_policy.retry_delay`` (exponential backoff, full jitter) under ``RETRY`` — the
same policy ``bench/peers.py`` writes into Clarion's catalog for EMAIL.

A peer's jobs are enqueued by several processes at once (``enqueueing``): each makes its
connections, prints ``PRODUCER_READY_LINE`` and waits for a line on its stdin, so that
``bench/peers.py`` starts them all together once every one is ready; each then enqueues its
share (job numbers ``producer``, ``producer + producers``, …) and prints one JSON line with
when it started and ended.

This module imports nothing outside Clarion's own dependencies (redis-py and msgspec), so it
also runs in the arq peer's environment, whose redis-py is older.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypedDict

import msgspec
from redis.asyncio import Redis

from app.catalog import Catalog, load_catalog
from app.catalog.channels import RetryPolicy
from app.delivery.rendering import render
from app.delivery.retry_policy import may_retry, retry_delay
from app.providers.base import Message, ProviderError
from app.providers.sandbox import SandboxProvider
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from streams.core.vocabulary import ErrorClass
from streams.delivery.work_items import WorkItem

NOTIFICATION_TYPE: Final = "order_confirmed"
CHANNEL: Final = "EMAIL"
FAIL_EVERY: Final = 10  # 1 job in 10 fails once with a TRANSIENT error
# Short enough that the retried tenth does not dominate a run of a few seconds.
RETRY: Final = RetryPolicy(base_seconds=0.1, max_seconds=1.0, max_attempts=3)

# The environment a peer's worker process reads its settings from.
REDIS_URL_ENV: Final = "BENCH_PEER_REDIS_URL"
PREFIX_ENV: Final = "BENCH_PEER_PREFIX"
CATALOG_ENV: Final = "BENCH_PEER_CATALOG"
# What a peer's worker prints once it takes jobs.
READY_LINE: Final = "bench peer worker ready"
# What an enqueuing process prints once connected; it starts on a line from its stdin.
PRODUCER_READY_LINE: Final = "bench peer producer ready"


class Payload(TypedDict):
    """One job's arguments, as plain JSON values (Celery sends JSON, arq pickles)."""

    delivery_id: (
        str  # a UUIDv7 minted right before enqueueing: its ms is when the job's clock starts
    )
    recipient_id: str
    address: str
    data: dict[str, Any]


def payload(number: int, tag: str) -> Payload:
    """Job ``number`` of a run; ``tag`` keeps its recipient distinct from other runs'."""
    data: dict[str, Any] = {"order_id": f"A-{number}"}
    if number % FAIL_EVERY == 0:
        data["sandbox"] = {CHANNEL: {"fail_transient": 1}}
    return {
        "delivery_id": new_id(0),
        "recipient_id": f"{tag}-user-{number}",
        "address": f"user{number}@example.com",
        "data": data,
    }


def transient_failures(jobs: int) -> int:
    """How many of ``jobs`` numbered 0.. carry the fail-once directive."""
    return len(range(0, jobs, FAIL_EVERY))


class Share(msgspec.Struct, frozen=True):
    """What one enqueuing process enqueues: job numbers ``producer``, ``producer +
    producers``, … below ``count``, of the run ``tag``."""

    count: int
    tag: str
    producer: int = 0
    producers: int = 1

    def numbers(self) -> range:
        return range(self.producer, self.count, self.producers)


def producer_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of an enqueuing process (``Share``'s fields)."""
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--tag", default="")
    parser.add_argument("--producer", type=int, default=0)
    parser.add_argument("--producers", type=int, default=1)


def share_of(args: argparse.Namespace) -> Share:
    return Share(args.count, args.tag, args.producer, args.producers)


@contextmanager
def enqueueing(share: Share) -> Iterator[None]:
    """Around a process's enqueueing: say it is ready and wait until ``bench/peers.py`` says
    go (a line on stdin); afterwards print the JSON line ``bench/peers.py`` reads: how many
    jobs, and the wall-clock seconds the enqueueing started and ended."""
    print(PRODUCER_READY_LINE, flush=True)
    sys.stdin.readline()
    started = time.time()
    yield
    ended = time.time()
    line = {"enqueued": len(share.numbers()), "started": started, "ended": ended}
    print(json.dumps(line), flush=True)


class PeerJob:
    """Renders and sends one payload; one instance per worker process (it owns a client)."""

    def __init__(self, redis: Redis, prefix: str, catalog: Catalog) -> None:
        self.redis = redis
        self.catalog = catalog
        self.sandbox = SandboxProvider(redis, KeySpace(prefix))

    @classmethod
    def from_environment(cls) -> PeerJob:
        """The job as a peer's worker process configures it: from ``BENCH_PEER_*``."""
        return cls(
            Redis.from_url(os.environ[REDIS_URL_ENV]),
            os.environ[PREFIX_ENV],
            load_catalog(Path(os.environ[CATALOG_ENV])),
        )

    async def attempt(self, job: Payload, attempt: int) -> float | None:
        """Make attempt number ``attempt`` (1-based); None when sent, else seconds to wait.

        A TRANSIENT failure with attempts left asks for a retry after the backoff delay; any
        other failure propagates, as it would end the delivery.
        """
        item = WorkItem(
            delivery_id=job["delivery_id"],
            notification_id=job["delivery_id"],
            notification_type=NOTIFICATION_TYPE,
            channel=CHANNEL,
            priority="NORMAL",
            recipient_id=job["recipient_id"],
            address=job["address"],
            locale="en",
            data=job["data"],
            created_ms=0,
            expires_ms=0,
            attempts=attempt - 1,
        )
        rendered = render(self.catalog, item, item.data)
        message = Message(
            delivery_id=item.delivery_id,
            idempotency_key=item.delivery_id,
            channel=CHANNEL,
            address=item.address,
            title=rendered.title,
            body=rendered.body,
            attempt=attempt,
            data=item.data,
        )
        try:
            await self.sandbox.send(message)
        except ProviderError as error:
            if error.error_class is ErrorClass.TRANSIENT and may_retry(RETRY, attempt):
                return retry_delay(RETRY, attempt, error.retry_after)
            raise
        return None

    async def close(self) -> None:
        """Close the Redis client."""
        await self.redis.aclose()
