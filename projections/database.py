"""The read-model database: create it if missing, apply the migrations, open a pool.

``connect`` is what a process calls at start-up. Every step is safe to run from several
processes at once: a concurrent ``CREATE DATABASE`` is tolerated, migrations run under a
Postgres advisory lock, and partitions are created under another (see ``partitions``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from urllib.parse import parse_qsl, unquote, urlsplit

import asyncpg

from projections.partitions import ensure_partitions
from streams.core.connection import redact
from streams.core.errors import ClarionError

MIGRATIONS_PACKAGE = "projections"
MIGRATIONS_DIRECTORY = "migrations"
_MIGRATION_FILE = re.compile(r"^(\d{3,})_([A-Za-z0-9_]+)\.sql$")
# Maintenance databases tried in order, as createdb does.
_MAINTENANCE_DATABASES = ("postgres", "template1")


def advisory_key(text: str) -> int:
    """A fixed signed 64-bit advisory-lock key derived from ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


MIGRATION_LOCK_KEY = advisory_key("clarion.migrations")

# Errors that mean "this server cannot be used from here right now", not a bug in a query.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.TooManyConnectionsError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
)


class DatabaseNotReady(ClarionError):
    """PostgreSQL cannot be used as Clarion's read model; the message says why."""


# PostgreSQL cannot be used right now (as opposed to a bug in a query).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    DatabaseNotReady,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,  # shutting down, or not accepting connections yet
    asyncpg.InsufficientResourcesError,  # too many connections
)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def database_name(url: str) -> str:
    """The database a ``postgresql://`` URL names (its path, else ``dbname=``/``database=``)."""
    parts = urlsplit(url)
    name = unquote(parts.path.removeprefix("/"))
    if not name:
        query = dict(parse_qsl(parts.query))
        name = query.get("dbname") or query.get("database") or ""
    if not name:
        raise DatabaseNotReady(f"{redact(url)} names no database: add /<name> to its path")
    return name


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    if "\x00" in name:
        raise ValueError("an SQL identifier cannot contain a NUL character")
    return '"' + name.replace('"', '""') + '"'


async def _open(url: str, *, database: str | None, connect_timeout: float) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url, database=database, timeout=connect_timeout)
    except asyncpg.InvalidCatalogNameError:
        raise  # the database does not exist: callers decide what that means
    except _CONNECT_ERRORS as error:
        where = redact(url) if database is None else f"{redact(url)} (database {database!r})"
        raise DatabaseNotReady(f"PostgreSQL at {where} is not reachable: {error}") from None


async def ensure_database(url: str, *, connect_timeout: float = 10.0) -> None:
    """Create the database ``url`` names unless it exists.

    The database is created from a maintenance database (``postgres``, else ``template1``)
    on the same server with the same credentials. A concurrent creator is no error.
    """
    name = database_name(url)
    try:
        connection = await _open(url, database=None, connect_timeout=connect_timeout)
    except asyncpg.InvalidCatalogNameError:
        pass
    else:
        await connection.close()
        return
    maintenance = await _open_maintenance(url, connect_timeout)
    try:
        await maintenance.execute(f"CREATE DATABASE {quote_identifier(name)}")
    except asyncpg.DuplicateDatabaseError:
        pass  # someone else created it first
    except asyncpg.UniqueViolationError:
        pass  # the same race, caught by pg_database's unique index instead
    except asyncpg.InsufficientPrivilegeError as error:
        raise DatabaseNotReady(
            f"database {name!r} at {redact(url)} does not exist and cannot be created: {error}"
        ) from None
    finally:
        await maintenance.close()


async def _open_maintenance(url: str, connect_timeout: float) -> asyncpg.Connection:
    for database in _MAINTENANCE_DATABASES:
        try:
            return await _open(url, database=database, connect_timeout=connect_timeout)
        except asyncpg.InvalidCatalogNameError:
            continue
    raise DatabaseNotReady(
        f"database {database_name(url)!r} at {redact(url)} does not exist and no maintenance "
        f"database ({', '.join(_MAINTENANCE_DATABASES)}) is there to create it from"
    )


def load_migrations() -> list[Migration]:
    """The numbered SQL files shipped in ``projections/migrations``, by version."""
    directory = resources.files(MIGRATIONS_PACKAGE).joinpath(MIGRATIONS_DIRECTORY)
    found: dict[int, Migration] = {}
    for entry in directory.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(
                f"two migrations share version {version}: {found[version].name}, {entry.name}"
            )
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[version] for version in sorted(found)]


_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migration (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def migrate(pool_or_conn: asyncpg.Pool | asyncpg.Connection) -> list[int]:
    """Apply every migration not yet applied, each in its own transaction; return their versions.

    All of it runs under a session advisory lock, so processes starting together apply each
    migration exactly once: the later ones wait, then find nothing left to do.
    """
    if isinstance(pool_or_conn, asyncpg.Pool):
        async with pool_or_conn.acquire() as connection:
            return await _migrate(connection)
    return await _migrate(pool_or_conn)


async def _migrate(connection: asyncpg.Connection) -> list[int]:
    migrations = load_migrations()
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await connection.execute(_CREATE_LEDGER)
        rows = await connection.fetch("SELECT version FROM schema_migration")
        done = {int(row["version"]) for row in rows}
        applied: list[int] = []
        for migration in migrations:
            if migration.version in done:
                continue
            async with connection.transaction():
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO schema_migration (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            applied.append(migration.version)
        return applied
    finally:
        # A broken connection has lost the lock already; do not hide the error that broke it.
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)


async def connect(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """Create the database if missing, open a pool, migrate, and ensure the daily partitions."""
    await ensure_database(url)
    try:
        pool = await asyncpg.create_pool(url, min_size=min_size, max_size=max_size)
    except _CONNECT_ERRORS as error:
        raise DatabaseNotReady(f"PostgreSQL at {redact(url)} is not reachable: {error}") from None
    try:
        await migrate(pool)
        async with pool.acquire() as connection:
            await ensure_partitions(connection, datetime.now(UTC).date())
    except BaseException:
        await pool.close()
        raise
    return pool
