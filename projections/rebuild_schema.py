"""The schema a rebuild fills (``SCHEMA``): empty copies of the live ``notification`` and
``delivery`` tables, made like them before the fill and indexed like them after it.

A copy has the live table's columns, keys (the projector's upserts need them), partitions
(same names and bounds) and the privileges other roles hold on it; its other indexes come
after the fill. The rebuild (``projections.rebuild``) fills the copies and swaps them in.
A live table this cannot copy (a constraint or an index of a kind it does not know) stops
the rebuild with ``RebuildError``, as the rebuild's own checks do.
"""

from __future__ import annotations

import asyncpg

from streams.core.errors import ClarionError

SCHEMA = "clarion_rebuild"
TABLES = ("notification", "delivery")


# The privileges others hold on a live table (its owner's come with owning the new one),
# with the grantee ready to name in a GRANT.
_GRANTS = """
SELECT acl.privilege_type, acl.is_grantable,
       CASE WHEN acl.grantee = 0 THEN 'PUBLIC'
            ELSE quote_ident(pg_get_userbyid(acl.grantee)) END AS grantee
FROM pg_class AS c, aclexplode(c.relacl) AS acl
WHERE c.oid = $1::regclass AND acl.grantee <> c.relowner
ORDER BY 3, 1
"""


class RebuildError(ClarionError):
    """The rebuild cannot run; the message says why."""


async def create_tables(connection: asyncpg.Connection, live_schema: str) -> None:
    """Empty copies of the live tables with their keys; other indexes come after the fill."""
    await connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # a failed earlier run
    await connection.execute(f"CREATE SCHEMA {SCHEMA}")
    for table in TABLES:
        live = f"{live_schema}.{table}"
        key = await connection.fetchval("SELECT pg_get_partkeydef($1::regclass)", live)
        partitioned = f" PARTITION BY {key}" if key else ""
        await connection.execute(
            f"CREATE TABLE {SCHEMA}.{table} (LIKE {live} INCLUDING ALL EXCLUDING INDEXES)"
            f"{partitioned}"
        )
        constraints = await connection.fetch(
            "SELECT conname, contype::text, pg_get_constraintdef(oid) AS definition "
            "FROM pg_constraint "
            "WHERE conrelid = $1::regclass AND contype NOT IN ('c', 'n') ORDER BY conname",
            live,
        )
        for constraint in constraints:
            if constraint["contype"] not in ("p", "u", "x"):
                raise RebuildError(
                    f"{live} has constraint {constraint['conname']} of a kind the rebuild "
                    "cannot copy"
                )
            # The keys first: the projector's upserts need them to find conflicts.
            await connection.execute(
                f"ALTER TABLE {SCHEMA}.{table} ADD CONSTRAINT "
                f"{_quote(constraint['conname'])} {constraint['definition']}"
            )
        await _create_partitions(connection, live, table)
        # LIKE copies no privileges: without this, a role that reads the live table (a
        # dashboard's, a report's) would lose it at the swap.
        for grant in await connection.fetch(_GRANTS, live):
            option = " WITH GRANT OPTION" if grant["is_grantable"] else ""
            await connection.execute(
                f"GRANT {grant['privilege_type']} ON {SCHEMA}.{table} TO {grant['grantee']}{option}"
            )


async def _create_partitions(connection: asyncpg.Connection, live: str, table: str) -> None:
    """The live table's partitions (``projections.partitions``), same names and bounds."""
    partitions = await connection.fetch(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits AS i "
        "JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass",
        live,
    )
    for partition in partitions:
        await connection.execute(
            f"CREATE TABLE {SCHEMA}.{_quote(partition['relname'])} "
            f"PARTITION OF {SCHEMA}.{table} {partition['bound']}"
        )


async def create_indexes(connection: asyncpg.Connection, live_schema: str) -> None:
    """The live tables' other indexes, same names and definitions, on the new tables."""
    for table in TABLES:
        live = f"{live_schema}.{table}"
        definitions = await connection.fetch(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index AS i WHERE i.indrelid = "
            "$1::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c "
            "WHERE c.conindid = i.indexrelid)",
            live,
        )
        for (definition,) in definitions:
            # A partitioned table's index is shown "ON ONLY" it; built on the new table
            # without ONLY, it is built on every partition too.
            target = f" ON ONLY {live} " if f" ON ONLY {live} " in definition else f" ON {live} "
            if definition.count(target) != 1:
                raise RebuildError(f"cannot copy index of {live}: {definition}")
            await connection.execute(definition.replace(target, f" ON {SCHEMA}.{table} "))
        await connection.execute(f"ANALYZE {SCHEMA}.{table}")


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
