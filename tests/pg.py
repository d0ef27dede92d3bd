"""Throwaway PostgreSQL databases for tests: one fresh database per test, dropped afterwards.

The server is ``CLARION_TEST_DATABASE_URL`` (a URL naming a database that exists there,
by default the ``postgres`` maintenance database on the local server).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from projections.database import DatabaseNotReady, ensure_database, quote_identifier
from streams.core.connection import redact

TEST_SERVER_URL = os.environ.get(
    "CLARION_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead of its own."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, v) for k, v in pairs if k not in {"dbname", "database"}])
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(name, safe=""), query, ""))


def throwaway_name() -> str:
    return f"clarion_test_{uuid.uuid4().hex[:16]}"


async def drop_database(name: str, server_url: str = TEST_SERVER_URL) -> None:
    """Drop database ``name``, disconnecting whoever still uses it."""
    connection = await asyncpg.connect(server_url)
    try:
        await connection.execute(f"DROP DATABASE IF EXISTS {quote_identifier(name)} WITH (FORCE)")
    finally:
        await connection.close()


@asynccontextmanager
async def throwaway_database(server_url: str = TEST_SERVER_URL) -> AsyncIterator[str]:
    """Create a fresh database on ``server_url``'s server, yield its URL, drop it afterwards."""
    name = throwaway_name()
    url = with_database(server_url, name)
    try:
        await ensure_database(url)
    except DatabaseNotReady as error:  # fail loudly: the suite promises real-PostgreSQL coverage
        pytest.fail(f"PostgreSQL at {redact(server_url)} is not usable for tests: {error}")
    try:
        yield url
    finally:
        await drop_database(name, server_url)
