"""The Litestar application factory: routes, auth and the shared objects handlers use."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import asyncpg
from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.api.dashboard import DASHBOARD_ROUTES
from app.api.dlq import get_dlq, replay_dlq
from app.api.metrics import lag, metrics
from app.api.notifications import create_notification, create_notifications_batch
from app.api.ops import health, internal_error, redis_unavailable
from app.api.recipients import QuietHours, get_recipient_settings, put_preferences
from app.api.status import ReadModel, get_notification_status, list_deliveries
from app.auth import KeyRing
from app.catalog import Catalog
from app.fanout import Planner, utc_now
from app.intake import Intake
from app.logging import bind_request_context
from app.metrics import HttpMetrics
from app.settings import Settings
from streams.keys import KeySpace
from streams.metrics import MetricsRecorder
from streams.recipient_settings import RecipientSettingsStore


def create_app(
    settings: Settings,
    *,
    redis: Redis,
    catalog: Catalog,
    clock: Callable[[], datetime] = utc_now,
    db: asyncpg.Pool | None = None,
) -> Litestar:
    """Build the HTTP application around an existing Redis client and catalog.

    ``db`` is the read-model pool. Without one the status endpoints answer from Redis only
    and ``GET /v1/deliveries`` 503, unless ``app.state.read_model`` is given a way to
    connect (``app.main`` does).
    """
    keys = KeySpace(settings.key_prefix, settings.shards)
    recorder = MetricsRecorder(redis, keys)
    intake = Intake(
        redis, keys, Planner(catalog), settings.idempotency_ttl_seconds, clock, metrics=recorder
    )
    batch = Router(
        "/",
        route_handlers=[create_notifications_batch],
        request_max_body_size=settings.max_batch_body_bytes,
    )
    return Litestar(
        route_handlers=[
            create_notification,
            batch,
            put_preferences,
            QuietHours,
            get_recipient_settings,
            get_notification_status,
            list_deliveries,
            get_dlq,
            replay_dlq,
            health,
            lag,
            metrics,
            *DASHBOARD_ROUTES,
        ],
        request_max_body_size=settings.max_body_bytes,
        before_request=bind_request_context,
        middleware=[DefineMiddleware(HttpMetrics, recorder=recorder)],
        lifespan=[recorder.flushing()],
        openapi_config=OpenAPIConfig(title="Clarion", version="1", path="/schema"),
        state=State(
            {
                "redis": redis,
                "catalog": catalog,
                "intake": intake,
                "key_ring": KeyRing(settings.api_keys),
                "recipient_settings": RecipientSettingsStore(redis, keys),
                "key_space": keys,
                "read_model": ReadModel(db),
            }
        ),
        # Logging is configured by app.logging (structlog), not by Litestar.
        logging_config=None,
        exception_handlers={500: internal_error, RedisError: redis_unavailable},
        debug=False,
    )
