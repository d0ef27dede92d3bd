"""``GET /dashboard``: the FAILED dashboard, server-rendered HTML for a producer's operators.

A browser signs in with HTTP Basic (user: the producer, password: a ``read`` key's secret);
a 401 challenges with ``Basic`` so the browser asks. The pages need no JavaScript. Every
text from the read model is escaped by Jinja's autoescaping: error texts come from providers.

The handlers read what ``app.api.app.create_app`` puts in ``request.app.state``: ``key_ring``
(who is calling), ``read_model`` (no pool while PostgreSQL is unreachable: 503), ``redis``
and ``key_space`` (the dead-letter streams, the advisor's signals), and ``catalog`` (type names
for the filter, the providers whose circuits the advisor reads).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import asyncpg
import structlog
from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.exceptions import ClientException, NotFoundException, ServiceUnavailableException
from litestar.params import FromPath, FromQuery, QueryParameter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.api.auth import authorize_reader
from app.api.dashboard_charts import read_charts
from app.api.dashboard_recipients import may_search_recipients
from app.api.dashboard_signals import Signals, read_signals
from app.api.html_pages import HTML_ERRORS, duration, field_text, render
from app.api.params import Word
from app.api.read_model import ReadModel
from app.campaigns import segments
from app.campaigns.lifecycle import by_segment
from app.campaigns.progress import Progress, progress_of
from app.catalog import guarded_providers
from app.operations.advice import AdviceView, advice_view, read_advice
from app.settings import ApiKey
from projections.campaign_queries import campaign_counts
from projections.dashboard.queries import (
    FAILED_LIMIT,
    RATED_STATUSES,
    ChannelFailureRate,
    FailureFilter,
    digest_counts,
    failed_deliveries,
    failure_rates,
    failures_by_error_class,
    scheduled_deliveries,
    skipped_steps,
    timeline,
)
from streams.campaigns.ids import campaign_of
from streams.campaigns.store import CampaignStore
from streams.core.codec import as_text
from streams.core.keys import KeySpace
from streams.core.vocabulary import CHANNELS, ERROR_CLASSES

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]

_MAX_FILTER = 255
# The dashboard page reloads itself this often (a meta refresh: the page has no script).
REFRESH_SECONDS = 60
DASHBOARD_CAMPAIGNS = 10
READ_MODEL_UNAVAILABLE = "the read model (PostgreSQL) is unavailable; retry shortly"
# Fields every event has, shown in their own columns of the timeline.
_EVENT_COLUMNS = frozenset({"type", "at", "notification_id", "delivery_id", "version"})
# Fields of an event body that say why a delivery is where it is: highlighted.
_NOTABLE_FIELDS = frozenset(
    {"error", "error_class", "reason", "feedback", "detail", "because_of", "fallback_of"}
)
# Event fields that name the recipient (a campaign's idempotency key ends with its id).
_RECIPIENT_FIELDS = frozenset({"recipient_id", "idempotency_key"})
HIDDEN_RECIPIENT = "(chosen by a campaign's segment: needs the recipients scope)"
_PG_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """The dead-letter streams of every shard: entries, and the oldest one's age."""

    size: int
    oldest_age: str | None


async def dead_letters(redis: Redis, keys: KeySpace, now_ms: int) -> DeadLetters:
    """XLEN of each shard's ``dlq`` and the time in its first entry id."""
    async with redis.pipeline(transaction=False) as pipe:
        for shard in keys.all_shards():
            pipe.xlen(shard.dlq)
            pipe.xrange(shard.dlq, count=1)
        replies: list[Any] = await pipe.execute()
    size = sum(int(length) for length in replies[0::2])
    firsts = [int(as_text(entries[0][0]).partition("-")[0]) for entries in replies[1::2] if entries]
    if not firsts:
        return DeadLetters(size, None)
    return DeadLetters(size, duration((now_ms - min(firsts)) / 1000))


async def _pool(request: Req) -> asyncpg.Pool:
    read_model: ReadModel = request.app.state.read_model
    pool = await read_model.pool()
    if pool is None:
        raise ServiceUnavailableException(
            detail=READ_MODEL_UNAVAILABLE, headers={"Retry-After": "5"}
        )
    return pool


def _choice(name: str, value: str | None, allowed: tuple[Word, ...]) -> Word | None:
    """The member of ``allowed`` that ``value`` is (None when absent or empty)."""
    if not value:
        return None
    for member in allowed:
        if member == value:
            return member
    raise ClientException(detail=f"{name} must be one of {', '.join(allowed)}")


def _type_filter(value: str | None) -> str | None:
    if not value:
        return None
    if len(value) > _MAX_FILTER or not value.isprintable():
        raise ClientException(detail="type: at most 255 printable characters")
    return value


def _type_names(state: State) -> list[str]:
    catalog = state.get("catalog")
    types: Mapping[str, Any] = getattr(catalog, "types", {})
    return sorted(types)


@get("/dashboard", include_in_schema=False, exception_handlers=HTML_ERRORS)
async def dashboard(
    request: Req,
    channel: FromQuery[str | None] = None,
    notification_type: Annotated[str | None, QueryParameter(name="type")] = None,
    error_class: FromQuery[str | None] = None,
) -> Response[str]:
    """Charts of the last day, failure rates, failures by error class, the FAILED list, what
    waits SCHEDULED, the escalation steps skipped, the digests, the dead-letter queue, the
    signals (retries, unsubscribes, duplicates, open dead letters by class), the advisor's
    hints and the campaigns."""
    key = authorize_reader(request)
    where = FailureFilter(
        channel=_choice("channel", channel, CHANNELS),
        notification_type=_type_filter(notification_type),
        error_class=_choice("error_class", error_class, ERROR_CLASSES),
    )
    pool = await _pool(request)
    now = time.time()
    figures = await _read_model_figures(request, pool, key, where, now)
    return render(
        "dashboard.html",
        producer=key.producer,
        **figures,
        limit=FAILED_LIMIT,
        where=where,
        channels=CHANNELS,
        error_classes=ERROR_CLASSES,
        type_names=_type_names(request.app.state),
        ended_statuses=RATED_STATUSES,
        dlq=await _dead_letters_if_any(request, now),
        signals=await _signals_if_any(request),
        advice=await _advice_if_any(request),
        refresh_seconds=REFRESH_SECONDS,
        generated_at=datetime.fromtimestamp(now, UTC),
        search_recipients=may_search_recipients(key),
    )


async def _read_model_figures(
    request: Req, pool: asyncpg.Pool, key: ApiKey, where: FailureFilter, now: float
) -> dict[str, Any]:
    """What the dashboard shows from the read model (and the campaigns with it), by the
    names its template uses; 503 while PostgreSQL is unreachable."""
    try:
        rates = await failure_rates(pool, key.producer)
        classes = await failures_by_error_class(pool, key.producer)
        failed = await failed_deliveries(pool, key.producer, where)
        scheduled = await scheduled_deliveries(pool, key.producer)
        skipped = await skipped_steps(pool, key.producer)
        digests = await digest_counts(pool, key.producer)
        campaigns = await _campaigns(
            request, pool, key.producer, now_ms=int(now * 1000), segments=segments.may_select(key)
        )
        charts = await read_charts(request.app.state, pool, key.producer, campaigns, now)
    except _PG_ERRORS as error:
        log.warning("dashboard.read_model_unavailable", error=type(error).__name__)
        raise ServiceUnavailableException(
            detail=READ_MODEL_UNAVAILABLE, headers={"Retry-After": "5"}
        ) from None
    return {
        "rates": rates,
        "totals": _totals(rates),
        "classes": classes,
        "failed": failed,
        "scheduled": scheduled,
        "skipped": skipped,
        "digests": digests,
        "campaigns": campaigns,
        "charts": charts,
    }


async def _dead_letters_if_any(request: Req, now: float) -> DeadLetters | None:
    """The dead-letter queue's figures (None: Redis is unavailable; the page still shows)."""
    try:
        return await dead_letters(
            request.app.state.redis, request.app.state.key_space, int(now * 1000)
        )
    except (RedisError, OSError) as error:
        log.warning("dashboard.redis_unavailable", error=type(error).__name__)
        return None


async def _signals_if_any(request: Req) -> Signals | None:
    """The signals of every producer (None: Redis is unavailable; the page still shows)."""
    try:
        return await read_signals(request.app.state.redis, request.app.state.key_space)
    except (RedisError, OSError) as error:
        log.warning("dashboard.redis_unavailable", error=type(error).__name__)
        return None


async def _advice_if_any(request: Req) -> list[AdviceView] | None:
    """The advisor's hints, as ``GET /v1/ops/lag`` gives them but naming no producer (None:
    Redis is unavailable)."""
    state = request.app.state
    catalog = state.get("catalog")
    providers = guarded_providers(catalog) if catalog is not None else []
    try:
        hints = await read_advice(state.redis, state.key_space, providers, name_producers=False)
    except (RedisError, OSError) as error:
        log.warning("dashboard.redis_unavailable", error=type(error).__name__)
        return None
    return advice_view(hints)


async def _campaigns(
    request: Req, pool: asyncpg.Pool, producer: str, now_ms: int, *, segments: bool
) -> list[Progress] | None:
    """The producer's newest campaigns with their progress (None: Redis is unavailable);
    those selecting by segment only with ``segments`` (a key with the ``recipients``
    scope: their audience tells how many recipients match)."""
    store = CampaignStore(request.app.state.redis, request.app.state.key_space)
    try:
        mine = await store.recent(producer, DASHBOARD_CAMPAIGNS)
    except (RedisError, OSError) as error:
        log.warning("dashboard.redis_unavailable", error=type(error).__name__)
        return None
    return [
        progress_of(campaign, await campaign_counts(pool, campaign.id), now_ms)
        for campaign in mine
        if segments or not by_segment(campaign)
    ]


def _totals(rates: list[ChannelFailureRate]) -> ChannelFailureRate:
    return ChannelFailureRate(
        channel="all",
        failed_hour=sum(r.failed_hour for r in rates),
        ended_hour=sum(r.ended_hour for r in rates),
        failed_day=sum(r.failed_day for r in rates),
        ended_day=sum(r.ended_day for r in rates),
    )


@get(
    "/dashboard/notifications/{notification_id:str}",
    include_in_schema=False,
    exception_handlers=HTML_ERRORS,
)
async def notification_timeline(request: Req, notification_id: FromPath[str]) -> Response[str]:
    """One notification of the caller's producer: its deliveries and every event, in order."""
    key = authorize_reader(request)
    try:
        wanted = uuid.UUID(notification_id)
    except ValueError:
        raise NotFoundException(detail="no such notification") from None
    pool = await _pool(request)
    try:
        found = await timeline(pool, key.producer, wanted)
    except _PG_ERRORS as error:
        log.warning("dashboard.read_model_unavailable", error=type(error).__name__)
        raise ServiceUnavailableException(
            detail=READ_MODEL_UNAVAILABLE, headers={"Retry-After": "5"}
        ) from None
    if found is None:
        # Also for another producer's notification: its existence is not theirs to know.
        raise NotFoundException(detail="no such notification")
    notification = found.notification
    hidden = await _segment_chose(request, key, notification.idempotency_key)
    if hidden:
        notification = dataclasses.replace(notification, recipient_id=HIDDEN_RECIPIENT)
    events = [
        {
            "at": event.at,
            "type": event.type,
            "delivery_id": event.delivery_id,
            "version": event.version,
            "fields": [
                (name, field_text(value), name in _NOTABLE_FIELDS)
                for name, value in sorted(event.body.items())
                if name not in _EVENT_COLUMNS and not (hidden and name in _RECIPIENT_FIELDS)
            ],
        }
        for event in found.events
    ]
    return render(
        "timeline.html",
        producer=key.producer,
        notification=notification,
        deliveries=found.deliveries,
        events=events,
    )


async def _segment_chose(request: Req, key: ApiKey, idempotency_key: str) -> bool:
    """Whether the timeline must not show its recipient: a campaign's segment chose it and
    the key lacks the ``recipients`` scope (also when Redis cannot tell)."""
    store = CampaignStore(request.app.state.redis, request.app.state.key_space)
    try:
        return await segments.hides_recipient(store, key, campaign_of(idempotency_key))
    except (RedisError, OSError) as error:
        log.warning("dashboard.redis_unavailable", error=type(error).__name__)
        return True


DASHBOARD_ROUTES = [dashboard, notification_timeline]
