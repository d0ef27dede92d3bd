"""A running ``clarion api`` for tests that call it over HTTP as a producer would: its own
key prefix and read-model database, one key with every scope."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from projections.database import connect, ensure_database, migrate
from tests.conftest import REPO, unlink_prefix
from tests.e2e.service_support import CLARION, Lines, service_env, wait_healthy
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

API_KEY = "fuzz-secret-key"
API_KEYS = f"fuzz:{API_KEY}:send+read+recipients+admin"


async def _prepare_database(url: str) -> None:
    """Create and migrate the read model, as the projector would, so the status API has one."""
    await ensure_database(url)
    pool = await connect(url, max_size=1)
    try:
        await migrate(pool)
    finally:
        await pool.close()


@contextmanager
def running_api() -> Iterator[str]:
    """The base URL of a running API; afterwards its keys and database are removed, and it
    must not have logged a traceback."""
    with running_api_process() as (url, _):
        yield url


@contextmanager
def running_api_process(**settings: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Like ``running_api``, with the API's process (which the caller may stop first);
    ``settings``: more ``CLARION_*`` variables for it."""
    prefix = f"fuzz-{uuid.uuid4().hex[:8]}"
    database = throwaway_name()
    database_url = with_database(TEST_SERVER_URL, database)
    asyncio.run(_prepare_database(database_url))
    port = free_port()
    env = service_env(
        prefix, port, CLARION_DATABASE_URL=database_url, CLARION_API_KEYS=API_KEYS, **settings
    )
    process = subprocess.Popen(
        [*CLARION, "api", "--workers", "1"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    stderr = Lines(process.stderr)  # read as it comes, so a full pipe never blocks the API
    try:
        wait_for_port(port, timeout=20)
        wait_healthy(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=30)
        stderr.wait_closed()
        unlink_prefix(prefix)
        asyncio.run(drop_database(database))
        logged = "\n".join(stderr.lines)
        assert "Traceback" not in logged, logged[-3000:]
