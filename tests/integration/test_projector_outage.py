"""A PostgreSQL outage under load: ingest goes on, the projector catches up, nothing lost."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from projections.database import connect
from projections.projector import Projector
from streams.consumer_groups import PROJECTOR_GROUP
from streams.keys import KeySpace
from tests.integration.delivery_support import accept, fast_catalog, wait_until
from tests.servers import postgres_server

pytestmark = pytest.mark.timeout(120)


def otp(n: int) -> dict[str, object]:
    return {"recipient": {"id": f"u-{n}", "phone": "+4915112345678"}, "type": "otp",
            "data": {"code": str(n)}}  # fmt: skip


async def test_a_postgres_restart_during_load_is_caught_up(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    with postgres_server() as server:
        url = server.url.rsplit("/", 1)[0] + "/clarion"
        pool = await connect(url)
        projector = Projector(real_redis, pool, keys, consumer="p")
        task = asyncio.create_task(projector.run())
        accepted = [await accept(real_redis, keys, catalog, otp(n), f"a{n}") for n in range(50)]
        server.stop("immediate")  # a crash, mid-load
        # Ingest does not depend on the read model.
        accepted += [await accept(real_redis, keys, catalog, otp(n), f"b{n}") for n in range(50)]
        await asyncio.sleep(1.5)  # the projector keeps failing and backing off meanwhile
        server.start()
        accepted += [await accept(real_redis, keys, catalog, otp(n), f"c{n}") for n in range(50)]

        async def caught_up() -> bool:
            try:
                async with pool.acquire() as connection:
                    count = await connection.fetchval("SELECT count(*) FROM notification")
            except Exception:  # the pool reconnects after the restart
                return False
            return int(count) == len(accepted)

        await wait_until(caught_up, within=60)
        projector.stop()
        await task
        async with pool.acquire() as connection:
            ids = {str(r["id"]) for r in await connection.fetch("SELECT id FROM notification")}
            history = await connection.fetchval("SELECT count(*) FROM delivery_event")
        await pool.close()
    assert ids == {answer["id"] for answer in accepted}
    assert history == 2 * len(accepted)  # NotificationAccepted + DeliveryQueued, once each
    assert (await real_redis.xpending(keys.shard(0).events, PROJECTOR_GROUP))["pending"] == 0
