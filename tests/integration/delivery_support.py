"""Helpers for delivery tests: a fast-retry catalog, a worker in the test's event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.delivery.worker import DeliveryWorker, WorkerOptions
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest
from app.providers.registry import build_providers, close_providers
from streams.core.keys import KeySpace
from tests.conftest import DIGEST, REPO

FAST = WorkerOptions(lease_ms=1500, reclaim_interval_s=0.3, shutdown_grace_s=5.0)


def catalog_text(
    *,
    base: float = 0.05,
    max_delay: float = 0.2,
    attempts: int = 4,
    rate_limit: str = "",
    idempotent: bool = True,
) -> str:
    """The shipped catalog with quick retries (and optionally a rate limit) on every channel."""
    text = (REPO / "clarion.toml").read_text()
    shipped_limit = "rate_limit = { per_second = 5000, burst = 500 }"
    assert shipped_limit in text, "clarion.toml changed: update this helper"
    assert "idempotent = true " in text, "clarion.toml changed: update this helper"
    text = text.replace(shipped_limit, rate_limit)
    text = text.replace("idempotent = true ", f"idempotent = {str(idempotent).lower()} ")
    for line in [ln for ln in text.splitlines() if ln.startswith("retry = {")]:
        text = text.replace(
            line,
            f"retry = {{ base_seconds = {base}, max_seconds = {max_delay}, "
            f"max_attempts = {attempts} }}",
        )
    return text


def fast_catalog(**options: Any) -> Catalog:
    return parse_catalog(catalog_text(**options), "test-catalog.toml")


async def accept(
    redis: Redis, keys: KeySpace, catalog: Catalog, body: dict[str, Any], key: str
) -> dict[str, Any]:
    """Accept one notification as producer "orders"; its 202 answer."""
    import msgspec  # noqa: PLC0415

    ingestor = Ingestor(redis, keys, Planner(catalog, DIGEST), 3600)
    outcome = await ingestor.ingest("orders", key, msgspec.convert(body, NotificationRequest))
    assert outcome.accepted, outcome
    answer: dict[str, Any] = msgspec.json.decode(outcome.response)
    return answer


@asynccontextmanager
async def running_worker(
    redis: Redis,
    keys: KeySpace,
    catalog: Catalog,
    *,
    consumer: str = "test-0",
    options: WorkerOptions = FAST,
) -> AsyncIterator[DeliveryWorker]:
    """A delivery worker running in this event loop until the block ends."""
    providers = build_providers(catalog, redis, keys)
    worker = DeliveryWorker(
        redis,
        keys,
        catalog,
        providers,
        consumer=consumer,
        address_digest=DIGEST,
        options=options,
    )
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)
        await close_providers(providers)


async def wait_until(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """Poll ``check`` until it is true; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {within} s\n{_task_stacks()}")
        await asyncio.sleep(0.02)


def _task_stacks() -> str:
    """Where every task of this loop waits: what a hang needs to be understood."""
    lines = []
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=6)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        lines.append(f"  {task.get_name()}: {where}")
    return "\n".join(sorted(lines))


async def sandbox_calls(redis: Redis, keys: KeySpace) -> list[dict[str, Any]]:
    """Every call the sandbox recorded, with the entry's time in ms as ``at_ms``."""
    calls = []
    for entry_id, fields in await redis.xrange(keys.sandbox_sent):
        call: dict[str, Any] = {k.decode(): v.decode() for k, v in fields.items()}
        call["at_ms"] = int(entry_id.split(b"-")[0])
        calls.append(call)
    return calls


async def state(redis: Redis, keys: KeySpace, delivery_id: str) -> dict[str, str]:
    """A delivery's state hash as text."""
    shard = keys.notification_shard(delivery_id)  # a delivery id names its shard too
    raw = await redis.hgetall(shard.delivery(delivery_id))  # type: ignore[misc]
    return {k.decode(): v.decode() for k, v in raw.items()}


async def dead_letters(redis: Redis, keys: KeySpace) -> list[dict[str, str]]:
    entries = await redis.xrange(keys.shard(0).dlq)
    return [{k.decode(): v.decode(errors="replace") for k, v in f.items()} for _, f in entries]


def otp(code: str = "1", directives: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"code": code}
    if directives:
        data["sandbox"] = {"SMS": directives}
    return {
        "recipient": {"id": "u-1", "phone": "+4915112345678"},
        "type": "otp",
        "data": data,
        **extra,
    }


async def final_state(
    redis: Redis, keys: KeySpace, delivery_id: str, within: float = 10
) -> dict[str, str]:
    async def ended() -> bool:
        return (await state(redis, keys, delivery_id)).get("status") in {
            "SENT",
            "FAILED",
            "EXPIRED",
            "CANCELLED",
        }

    await wait_until(ended, within)
    return await state(redis, keys, delivery_id)
