"""The ASGI entry point: settings from the environment, one Redis client per process."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import structlog
from litestar import Litestar
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import tracing
from app.api.app import create_app
from app.api.read_model import ReadModel
from app.catalog import load_catalog
from app.logging import configure_logging
from app.processes.clients import redis_client
from app.processes.gc_tuning import tune_gc
from app.processes.redis_checks import check_redis
from app.settings import Settings
from projections.database import connect as connect_database
from streams.core.consumer_groups import ensure_all_groups
from streams.core.keys import KeySpace
from streams.inbox.live import InboxHub

log = structlog.get_logger(__name__)

Handler = Callable[[int, FrameType | None], Any]


def build() -> Litestar:
    """Build the app for uvicorn (``factory=True``): one per worker process."""
    settings = Settings.from_env()
    configure_logging(settings.log_format, settings.log_level)
    tracing.setup("api")  # before the app: it adds the request spans only when on
    catalog = load_catalog(settings.config_path)
    redis = redis_client(settings)
    app = create_app(settings, redis=redis, catalog=catalog)
    # The read model is optional at start-up: while PostgreSQL is unreachable the status
    # endpoints answer from Redis (the list with 503), and later requests retry the pool.
    read_model: ReadModel = app.state.read_model
    read_model.connect_with(partial(connect_database, settings.database_url))

    async def on_startup() -> None:
        await check_redis(redis, settings.redis_url)
        await _make_groups(redis, app.state.key_space)
        await read_model.start()
        _end_streams_on_stop(app.state.inbox_hub)
        tune_gc()

    async def on_shutdown() -> None:
        await read_model.close()
        await redis.aclose()
        tracing.shutdown()  # export what is left while the process can

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    return app


def _end_streams_on_stop(hub: InboxHub) -> None:
    """On SIGTERM or SIGINT, end the open inbox streams, then let the server stop as it would.

    uvicorn stops by waiting for the answers in progress to end; an inbox stream never ends
    by itself, so one open browser kept the process running until its token expired.
    uvicorn has set its own handlers when the app starts (in the main thread); each is
    called after the streams were told to end.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # not under uvicorn (an app in a test client): no signals to follow
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(number)
        if not callable(previous):
            continue  # no server handler to go before

        def stop(received: int, frame: FrameType | None, then: Handler = previous) -> None:
            loop.call_soon_threadsafe(hub.close)
            then(received, frame)

        signal.signal(number, stop)


async def _make_groups(redis: Redis, keys: KeySpace) -> None:
    """Make the streams the API writes readable from the start: every consumer group exists
    before the first notification, so readiness holds before any worker ran. A Redis that
    refuses the writes now is reported by readiness; the readers make the groups later."""
    try:
        await ensure_all_groups(redis, keys.all_shards())
    except (RedisError, OSError) as error:
        log.warning("api.groups_not_made", error=str(error) or type(error).__name__)
