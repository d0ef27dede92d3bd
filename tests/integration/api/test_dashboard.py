"""The dashboard's pages against real Redis and PostgreSQL, for escalation steps and
fallbacks: ``GET /dashboard`` counts the steps skipped and waiting, and a notification's
timeline shows which delivery is a step or a fallback, a skipped step with its reason, and
the events that say so; for digests: ``GET /dashboard`` counts those opened and closed in
the last hour and the notifications that joined one."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from litestar import Litestar
from redis.asyncio import Redis

from app.api.app import create_app
from app.settings import Settings
from streams.core.events import DeliveryScheduled
from streams.core.ids import new_id
from tests.conftest import basic, http_client
from tests.integration.delivery_support import fast_catalog
from tests.integration.projection_support import (
    accepted,
    digest_closed,
    digested,
    project,
    steps_and_a_fallback,
)

Client = httpx.AsyncClient
READER = {"Authorization": basic("orders", "orders-secret")}


@pytest.fixture
def app(settings: Settings, real_redis: Redis, pool: asyncpg.Pool) -> Litestar:
    return create_app(settings, redis=real_redis, catalog=fast_catalog(), db=pool)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    async with http_client(app) as test_client:
        yield test_client


def text_of(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', page)
    assert found, element_id
    return found.group(1)


async def test_the_dashboard_counts_steps_skipped_and_waiting(
    client: Client, pool: asyncpg.Pool
) -> None:
    recently = datetime.now(UTC) - timedelta(minutes=5)
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    for entry in steps_and_a_fallback(
        nid, first, step, fallback, producer="orders", accepted_at=recently
    ):
        await project(pool, entry)
    waiting_nid, waiting = new_id(0), new_id(0)
    await project(pool, [
        accepted(waiting_nid, [waiting], at=recently, producer="orders"),
        DeliveryScheduled(at=recently, notification_id=waiting_nid, delivery_id=waiting,
                          version=1, channel="SMS", priority="HIGH",
                          until=recently + timedelta(hours=1), step=2, unless=["read"]),
    ])  # fmt: skip

    page = await client.get("/dashboard", headers=READER)
    assert page.status_code == 200, page.text
    assert (text_of(page.text, "skipped-day"), text_of(page.text, "skipped-hour")) == ("1", "1")
    assert text_of(page.text, "scheduled-steps") == "1"
    assert text_of(page.text, "scheduled-later") == "0"


async def test_the_dashboard_counts_digests_and_what_joined_them(
    client: Client, pool: asyncpg.Pool
) -> None:
    now = datetime.now(UTC)
    for count, minutes in ((1, 20), (2, 10)):
        entry = digested(new_id(0), new_id(0), "g-open", at=now - timedelta(minutes=minutes),
                         count=count, producer="orders")  # fmt: skip
        await project(pool, entry)
    await project(pool, digested(new_id(0), new_id(0), "g-closed", at=now - timedelta(hours=5),
                                 count=1, producer="orders"))  # fmt: skip
    await project(pool, [digest_closed("g-closed", at=now - timedelta(minutes=1), count=1,
                                       made=new_id(0))])  # fmt: skip

    page = await client.get("/dashboard", headers=READER)
    assert page.status_code == 200, page.text
    shown = [text_of(page.text, f"digests-{name}") for name in ("opened", "closed", "items")]
    assert shown == ["1", "1", "2"]


async def test_a_timeline_shows_steps_fallbacks_and_a_skipped_step(
    client: Client, pool: asyncpg.Pool
) -> None:
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    for entry in steps_and_a_fallback(nid, first, step, fallback, producer="orders"):
        await project(pool, entry)

    page = await client.get(f"/dashboard/notifications/{nid}", headers=READER)

    assert page.status_code == 200, page.text
    rows = {
        delivery_id: re.sub(r"<[^>]+>|\s+", " ", row)
        for delivery_id, row in re.findall(
            r'<tr data-delivery="([^"]+)">(.*?)</tr>', page.text, re.S
        )
    }
    assert set(rows) == {first, step, fallback}
    assert "SKIPPED" in rows[step]
    assert "step 2" in rows[step]
    assert " read " in rows[step]  # its reason
    assert f"fallback of {first}" in rows[fallback]
    assert "step" not in rows[first]
    assert 'data-type="DeliverySkipped"' in page.text
