"""The Litestar application factory: routes, auth and the shared objects handlers use."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import asyncpg
import structlog
from litestar import Litestar, Request, Router
from litestar.datastructures import State
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, YamlRenderPlugin
from litestar.types import ControllerRouterHandler
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.api.auth import KeyRing
from app.api.dashboard import DASHBOARD_ROUTES
from app.api.dlq import get_dlq, replay_dlq
from app.api.errors import internal_error, redis_unavailable
from app.api.http_metrics import HttpMetrics
from app.api.notification_status import get_notification_status, list_deliveries
from app.api.notifications import create_notification, create_notifications_batch
from app.api.ops import lag, live, metrics, ready
from app.api.read_model import ReadModel
from app.api.recipients import QuietHours, get_recipient_settings, put_preferences
from app.api.status_webhook import StatusWebhook
from app.catalog import Catalog
from app.ingest.fanout import Planner, utc_now
from app.ingest.ingestor import Ingestor
from app.ingest.quotas import IngestQuotas
from app.settings import Settings
from app.status_webhooks.endpoint import UrlGuard
from streams.keys import KeySpace
from streams.metrics_recorder import MetricsRecorder
from streams.recipient_settings import RecipientSettingsStore
from streams.status_webhooks import StatusWebhookStore


async def bind_request_context(request: Request[Any, Any, Any]) -> None:
    """Start each API request with a fresh log context, bound to the notification it is about.

    A Litestar ``before_request`` hook: it runs in the request's task, before the handler.
    It is a coroutine function because Litestar runs a plain function hook in a thread pool,
    which cost more than the rest of a single POST.
    """
    structlog.contextvars.clear_contextvars()
    notification_id = request.path_params.get("notification_id")
    if isinstance(notification_id, str):
        structlog.contextvars.bind_contextvars(notification_id=notification_id)


# The routes after the two that ingest (the batch endpoint has a body limit of its own).
ROUTES: list[ControllerRouterHandler] = [
    put_preferences,
    QuietHours,
    get_recipient_settings,
    get_notification_status,
    list_deliveries,
    get_dlq,
    replay_dlq,
    StatusWebhook,
    live,
    ready,
    lag,
    metrics,
    *DASHBOARD_ROUTES,
]


def openapi_config() -> OpenAPIConfig:
    """The API's description at ``/schema``: public, as JSON and YAML only (Litestar's HTML
    viewers would load scripts from a CDN onto the dashboard's origin)."""
    return OpenAPIConfig(
        title="Clarion",
        version="1",
        path="/schema",
        render_plugins=[JsonRenderPlugin(path=["/", "/openapi.json"]), YamlRenderPlugin()],
    )


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
    connect (``app.processes.api`` does).
    """
    keys = KeySpace(settings.key_prefix, settings.shards)
    recorder = MetricsRecorder(redis, keys)
    ingestor = Ingestor(
        redis,
        keys,
        Planner(catalog, settings.address_digest()),
        settings.idempotency_ttl_seconds,
        clock,
        metrics=recorder,
    )
    batch = Router(
        "/",
        route_handlers=[create_notifications_batch],
        request_max_body_size=settings.max_batch_body_bytes,
    )
    # What handlers find in ``request.app.state``.
    state = {
        "redis": redis,
        "catalog": catalog,
        "ingestor": ingestor,
        "key_ring": KeyRing(settings.api_keys),
        "recipient_settings": RecipientSettingsStore(redis, keys),
        "key_space": keys,
        "read_model": ReadModel(db),
        "ingest_quotas": IngestQuotas(redis, keys, catalog.quotas),
        "status_webhooks": StatusWebhookStore(redis, keys),
        "status_webhook_guard": UrlGuard(catalog.status_webhooks),
        # A batch item may be as large as a single POST's body.
        "max_item_bytes": settings.max_body_bytes,
    }
    return Litestar(
        route_handlers=[create_notification, batch, *ROUTES],
        request_max_body_size=settings.max_body_bytes,
        before_request=bind_request_context,
        middleware=[DefineMiddleware(HttpMetrics, recorder=recorder)],
        lifespan=[recorder.flushing()],
        openapi_config=openapi_config(),
        state=State(state),
        # Logging is configured by app.logging (structlog), not by Litestar.
        logging_config=None,
        exception_handlers={500: internal_error, RedisError: redis_unavailable},
        debug=False,
    )
