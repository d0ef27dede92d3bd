"""The read model's connection pool, for the handlers that read PostgreSQL.

The API starts and serves without PostgreSQL: the pool is created lazily and retried, so a
request that needs the read model while it is away gets a 503 (or, for a single
notification, an answer from the Redis write model), never a hang or a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import asyncpg
import structlog
from litestar.exceptions import ServiceUnavailableException

log = structlog.get_logger(__name__)


class ReadModel:
    """The read-model pool; None while PostgreSQL is unreachable.

    With a ``connect`` function a missing pool is created lazily: a request that needs it
    starts an attempt (at most one at a time, and one per ``retry_interval_s`` after a
    failure) and waits for it at most ``wait_s``, so a dead database never holds requests
    for the whole connect timeout. A failed attempt is logged, never raised.
    """

    def __init__(
        self,
        pool: asyncpg.Pool | None = None,
        connect: Callable[[], Awaitable[asyncpg.Pool]] | None = None,
        *,
        retry_interval_s: float = 5.0,
        wait_s: float = 1.0,
        close_wait_s: float = 5.0,
    ) -> None:
        self._pool = pool
        self._connect = connect
        self._retry_interval_s = retry_interval_s
        self._wait_s = wait_s
        # How long ``close`` waits for connections in use before it cuts them.
        self._close_wait_s = close_wait_s
        self._attempt: asyncio.Task[None] | None = None
        self._next_attempt = 0.0

    def connect_with(self, connect: Callable[[], Awaitable[asyncpg.Pool]]) -> None:
        """Create the pool with ``connect`` when it is missing."""
        self._connect = connect

    async def start(self, wait_s: float = 15.0) -> None:
        """Try to create the pool now (at start-up), waiting at most ``wait_s`` for it."""
        if self._pool is None and self._connect is not None:
            self._next_attempt = 0.0
            await self._wait_for_attempt(wait_s)

    async def pool(self) -> asyncpg.Pool | None:
        """The pool, or None when PostgreSQL cannot be reached (retried lazily)."""
        if self._pool is None and self._connect is not None:
            await self._wait_for_attempt(self._wait_s)
        return self._pool

    async def close(self) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is not None:
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                # Waits for the connections in use to come back; a query that hangs (a
                # lock, a stalled server) would hold a stopping API for ever.
                await asyncio.wait_for(pool.close(), self._close_wait_s)
            except TimeoutError:
                log.warning("read_model.close_forced", waited_s=self._close_wait_s)

    async def _wait_for_attempt(self, wait_s: float) -> None:
        if self._attempt is None and time.monotonic() >= self._next_attempt:
            self._attempt = asyncio.create_task(self._try_connect())
        if self._attempt is not None:
            # Shielded: a request giving up waiting leaves the attempt running for others.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._attempt), wait_s)

    async def _try_connect(self) -> None:
        assert self._connect is not None
        try:
            self._pool = await self._connect()
            log.info("read_model.connected")
        except Exception as error:  # the API serves without the read model, whatever broke it
            self._next_attempt = time.monotonic() + self._retry_interval_s
            log.warning(
                "read_model.unavailable",
                error=str(error) or type(error).__name__,
                retry_in=self._retry_interval_s,
            )
        finally:
            self._attempt = None


def read_model_unavailable() -> ServiceUnavailableException:
    """The 503 a request gets while PostgreSQL cannot be used."""
    return ServiceUnavailableException(
        detail="the read model (PostgreSQL) is unavailable; retry shortly",
        headers={"Retry-After": "5"},
    )
