"""The rebuild's fresh tables against PostgreSQL: made like the live ones, down to what other
roles may do with them (``LIKE`` copies no privileges)."""

from __future__ import annotations

import asyncpg
from redis.asyncio import Redis

from projections.rebuild import rebuild
from streams.core.keys import KeySpace
from tests.integration.test_rebuild import project_everything


async def test_a_rebuild_keeps_what_other_roles_may_do_with_the_tables(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, database_url: str
) -> None:
    keys = KeySpace(key_prefix)
    await project_everything(real_redis, pool, keys)
    reader = f"clarion_reader_{key_prefix.replace('-', '_')}"  # roles are server-wide
    async with pool.acquire() as connection:
        await connection.execute(f"CREATE ROLE {reader}")
    try:
        async with pool.acquire() as connection:
            await connection.execute(f"GRANT SELECT ON notification, delivery TO {reader}")
            await connection.execute(f"GRANT UPDATE ON delivery TO {reader} WITH GRANT OPTION")
            await connection.execute("GRANT SELECT ON notification TO PUBLIC")

        summary = await rebuild(database_url, real_redis, keys)

        assert summary.swapped
        async with pool.acquire() as connection:
            may = await connection.fetchrow(
                "SELECT has_table_privilege($1, 'notification', 'SELECT') AS read_notifications,"
                " has_table_privilege($1, 'delivery', 'SELECT') AS read_deliveries,"
                " has_table_privilege($1, 'delivery', 'UPDATE WITH GRANT OPTION') AS grant_update,"
                " has_table_privilege($1, 'notification', 'INSERT') AS insert_notifications,"
                " has_table_privilege('public', 'notification', 'SELECT') AS public_reads",
                reader,
            )
        assert dict(may) == {
            "read_notifications": True,
            "read_deliveries": True,
            "grant_update": True,
            "insert_notifications": False,
            "public_reads": True,
        }
    finally:
        async with pool.acquire() as connection:
            await connection.execute(f"DROP OWNED BY {reader}")
            await connection.execute(f"DROP ROLE {reader}")
