"""The Litestar application factory: routes, auth and the shared objects handlers use."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
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

from app import tracing
from app.api.auth import KeyRing
from app.api.cross_site import CrossSiteGuard
from app.api.dashboard import DASHBOARD_ROUTES
from app.api.dashboard_recipients import DASHBOARD_RECIPIENT_ROUTES
from app.api.docs import LocalSwaggerPlugin, schema_router
from app.api.errors import clarion_error, internal_error, redis_unavailable
from app.api.http_metrics import HttpMetrics
from app.api.notification_status import get_notification_status, list_deliveries
from app.api.params import declared_query, refuse_unknown_query
from app.api.read_model import ReadModel, read_model_unavailable
from app.api.request_spans import RequestSpans
from app.api.unsubscribe import UNSUBSCRIBE_ROUTES
from app.campaigns.api import CAMPAIGN_ROUTES
from app.campaigns.lifecycle import Campaigns
from app.cancellations.api import ROUTES as CANCELLATION_ROUTES
from app.cancellations.service import Cancellations
from app.catalog import Catalog, feedback_secrets
from app.catalog.providers import InboxConfig
from app.catalog.throttles import log_scopes
from app.feedback.api import receive_feedback
from app.feedback.callbacks import schemes
from app.inbox.api.cors import InboxCors
from app.inbox.api.demo import DEMO_ROUTES
from app.inbox.api.routes import INBOX_ROUTES
from app.inbox.api.stream import inbox_stream
from app.inbox.read_steps import StepsOnRead
from app.inbox.tokens import InboxTokens
from app.ingest.api import create_notification, create_notifications_batch
from app.ingest.fanout import Planner, utc_now
from app.ingest.ingestor import Ingestor
from app.ingest.quotas import IngestQuotas
from app.operations.api.dlq import get_dlq, replay_dlq
from app.operations.api.probes import lag, live, metrics, ready
from app.recipients.api.deliveries import get_recipient_deliveries
from app.recipients.api.profiles import RecipientProfile, patch_push_targets
from app.recipients.api.settings import QuietHours, get_recipient_settings, put_preferences
from app.recipients.api.suppressions import Suppressions, look_up_suppression, remove_suppression
from app.recipients.erasure import Eraser
from app.settings import Settings
from app.status_webhooks.api import StatusWebhook
from app.status_webhooks.endpoint import UrlGuard
from app.unsubscribe import UnsubscribeTokens
from projections.queries import recipient_deliveries
from streams.core.clock import now_ms as wall_clock_ms
from streams.core.errors import ClarionError
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.delivery.cancellations import NEVER_PARKED
from streams.feedback.store import Inbox
from streams.inbox.admission import StreamLimits
from streams.inbox.live import InboxHub
from streams.inbox.revocation import InboxRevocations
from streams.inbox.store import InboxStore
from streams.metrics.recorder import MetricsRecorder
from streams.recipients.settings import RecipientSettingsStore
from streams.recipients.suppressions import SuppressionStore
from streams.status_webhooks.store import StatusWebhookStore


async def before_request(request: Request[Any, Any, Any]) -> None:
    """Litestar's ``before_request`` hook of every request: a fresh log context
    (``bind_request_context``), then a query parameter the endpoint does not take is
    refused (``app.api.params.refuse_unknown_query``)."""
    await bind_request_context(request)
    refuse_unknown_query(request, request.app.state.declared_query)


async def bind_request_context(request: Request[Any, Any, Any]) -> None:
    """Start each API request with a fresh log context, bound to the notification it is about.

    Part of the ``before_request`` hook: it runs in the request's task, before the handler.
    The hook is a coroutine function because Litestar runs a plain function hook in a
    thread pool, which cost more than the rest of a single POST.
    """
    structlog.contextvars.clear_contextvars()
    notification_id = request.path_params.get("notification_id")
    if isinstance(notification_id, str):
        structlog.contextvars.bind_contextvars(notification_id=notification_id)


# The routes after the two that ingest (the batch endpoint has a body limit of its own).
ROUTES: list[ControllerRouterHandler] = [
    receive_feedback,
    RecipientProfile,
    patch_push_targets,
    put_preferences,
    QuietHours,
    get_recipient_settings,
    get_recipient_deliveries,
    Suppressions,
    look_up_suppression,
    remove_suppression,
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
    *DASHBOARD_RECIPIENT_ROUTES,
    *UNSUBSCRIBE_ROUTES,
    *INBOX_ROUTES,
    inbox_stream,
    *CAMPAIGN_ROUTES,
    *CANCELLATION_ROUTES,
    *DEMO_ROUTES,
]


def openapi_config() -> OpenAPIConfig:
    """The API's description at ``/schema``: public, as JSON and YAML, and as interactive docs
    at ``/schema/swagger`` whose files Clarion serves itself (Litestar's own HTML viewers load
    scripts from a CDN onto the dashboard's origin)."""
    return OpenAPIConfig(
        title="Clarion",
        version="1",
        path="/schema",
        openapi_router=schema_router(),
        render_plugins=[
            JsonRenderPlugin(path=["/", "/openapi.json"]),
            YamlRenderPlugin(),
            LocalSwaggerPlugin(),
        ],
    )


def _inbox_store(redis: Redis, keys: KeySpace, catalog: Catalog) -> InboxStore:
    """The inboxes, their feeds kept as the IN_APP channel's inbox provider says; a read
    brings forward its notification's steps that wait on one."""
    channel = catalog.channels.get(Channel.IN_APP)
    config = catalog.providers.get(channel.provider or "") if channel else None
    on_read = StepsOnRead(redis, catalog, wall_clock_ms) if catalog.steps else None
    if isinstance(config, InboxConfig):
        return InboxStore(redis, keys, *config.feed, on_read=on_read)
    return InboxStore(redis, keys, on_read=on_read)


def _stream_limits(settings: Settings, inbox: InboxStore) -> StreamLimits:
    """The inbox streams' bounds; a re-read takes at most what the feed can hold."""
    return StreamLimits(
        streams=settings.inbox_streams,
        per_recipient=settings.inbox_streams_per_recipient,
        resumes_per_minute=settings.inbox_resumes_per_minute,
        feed_length=inbox.feed_length,
    )


def _eraser(
    settings: Settings, redis: Redis, keys: KeySpace, read_model: ReadModel, catalog: Catalog
) -> Eraser:
    """Erasure, naming a recipient's deliveries from the read model (503 without it), and
    the scopes of its throttle logs from the catalog and the default cap."""

    async def deliveries_of(recipient_id: str) -> list[str]:
        pool = await read_model.pool()
        if pool is None:
            raise read_model_unavailable()
        return await recipient_deliveries(pool, recipient_id)

    return Eraser(
        redis,
        keys,
        state_retention_ms=settings.delivery_state_retention_seconds * 1000,
        lease_ms=settings.lease_ms,
        recipient_deliveries=deliveries_of,
        throttle_scopes=log_scopes(
            catalog.throttles,
            {name: config.priority for name, config in catalog.types.items()},
            settings.recipient_cap,
        ),
    )


def _state(
    settings: Settings,
    redis: Redis,
    catalog: Catalog,
    keys: KeySpace,
    recorder: MetricsRecorder,
    *,
    clock: Callable[[], datetime],
    db: asyncpg.Pool | None,
) -> dict[str, Any]:
    """What handlers find in ``request.app.state``."""
    address_digest = settings.address_digest()
    read_model = ReadModel(db)
    planner = Planner(catalog, address_digest, settings.max_schedule_seconds)
    inbox = _inbox_store(redis, keys, catalog)
    return {
        "redis": redis,
        "catalog": catalog,
        "ingestor": Ingestor(
            redis, keys, planner, settings.idempotency_ttl_seconds, clock, metrics=recorder
        ),
        "key_ring": KeyRing(settings.api_keys),
        "recipient_settings": RecipientSettingsStore(redis, keys),
        "suppressions": SuppressionStore(redis, keys),
        "key_space": keys,
        "address_digest": address_digest,
        "read_model": read_model,
        # How soon an ended delivery's state may leave Redis once projected: the status API
        # then needs the read model to answer for it.
        "projected_state_retention_ms": settings.projected_state_retention_seconds * 1000,
        "eraser": _eraser(settings, redis, keys, read_model, catalog),
        "public_url": settings.public_url,
        "feedback_inbox": Inbox(redis, keys),
        "ingest_quotas": IngestQuotas(redis, keys, catalog.quotas),
        "status_webhooks": StatusWebhookStore(redis, keys),
        "status_webhook_guard": UrlGuard(catalog.status_webhooks),
        # A batch item may be as large as a single POST's body.
        "max_item_bytes": settings.max_body_bytes,
        "unsubscribe_tokens": UnsubscribeTokens(settings.digest_secret),
        "inbox": inbox,
        "inbox_hub": InboxHub(redis, keys, _stream_limits(settings, inbox)),
        "inbox_tokens": InboxTokens(settings.digest_secret, keys=settings.inbox_token_keys),
        "inbox_revocations": InboxRevocations(redis, keys),
        "inbox_token_ttl_seconds": settings.inbox_token_ttl_seconds,
        "clock": clock,
        "campaigns": Campaigns(redis, keys, planner, clock),
        "cancellations": Cancellations(
            redis,
            keys,
            read_model.pool,
            state_retention_ms=settings.delivery_state_retention_seconds * 1000,
            released_after_ms=settings.projected_state_retention_seconds * 1000,
            clock=clock,
            parked_after_ms=settings.park_after_seconds * 1000 or NEVER_PARKED,
        ),
        "metrics": recorder,
    }


def _batch_route(settings: Settings) -> Router:
    """The batch endpoint, under a body limit of its own."""
    return Router(
        "/",
        route_handlers=[create_notifications_batch],
        request_max_body_size=settings.max_batch_body_bytes,
    )


def _middleware(settings: Settings, recorder: MetricsRecorder) -> list[DefineMiddleware]:
    """What wraps every request: the inbox's CORS, the HTTP metrics, the cross-site guard and,
    with tracing on, a span per request."""
    return [
        DefineMiddleware(InboxCors, origins=settings.inbox_origins),
        DefineMiddleware(HttpMetrics, recorder=recorder),
        DefineMiddleware(
            CrossSiteGuard, public_url=settings.public_url, inbox_origins=settings.inbox_origins
        ),
        *([DefineMiddleware(RequestSpans)] if tracing.ENABLED else []),
    ]


def create_app(
    settings: Settings,
    *,
    redis: Redis,
    catalog: Catalog,
    clock: Callable[[], datetime] = utc_now,
    db: asyncpg.Pool | None = None,
    environ: Mapping[str, str] | None = None,
) -> Litestar:
    """Build the HTTP application around an existing Redis client and catalog.

    ``db`` is the read-model pool. Without one the status endpoints answer from Redis only
    and ``GET /v1/deliveries`` 503, unless ``app.state.read_model`` is given a way to
    connect (``app.processes.api`` does). ``environ`` holds the secrets that verify
    providers' feedback callbacks (default: this process's environment).
    """
    keys = KeySpace(settings.key_prefix, settings.shards)
    recorder = MetricsRecorder(redis, keys)
    state = _state(settings, redis, catalog, keys, recorder, clock=clock, db=db)
    state["feedback_schemes"] = schemes(
        catalog,
        feedback_secrets(catalog, os.environ if environ is None else environ),
        state["address_digest"],
    )
    app = Litestar(
        route_handlers=[create_notification, _batch_route(settings), *ROUTES],
        request_max_body_size=settings.max_body_bytes,
        before_request=before_request,
        middleware=_middleware(settings, recorder),
        lifespan=[recorder.flushing(), state["inbox_hub"].running()],
        openapi_config=openapi_config(),
        state=State(state),
        # Logging is configured by app.logging (structlog), not by Litestar.
        logging_config=None,
        exception_handlers={
            500: internal_error,
            RedisError: redis_unavailable,
            ClarionError: clarion_error,
        },
        debug=False,
    )
    # What each GET endpoint takes, for ``before_request`` to refuse anything else.
    app.state.declared_query = declared_query(app)
    return app
