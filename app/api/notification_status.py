"""``GET /v1/notifications/{id}`` and ``GET /v1/deliveries``: where a producer's deliveries are.

Both read the read model in PostgreSQL. A notification the projector has not reached yet is
answered from the Redis write model instead (its ``ntf:`` record, each delivery overlaid with
its ``dlv:`` hash), so an accepted id is never a 404; the same happens while PostgreSQL is
unreachable, except for a notification whose ended deliveries' states may have left Redis
since they were projected (``streams.delivery.state_release``): that one is a 503 rather than a
delivery shown as still queued. The delivery list has no such fallback: it answers 503 then.
Every answer reports the projection lag, how far the read model is behind the event log.

A producer never sees a recipient id it did not name itself: a notification a campaign
generated for a recipient its segment selected shows ``recipient_id`` null to a key without
the ``recipients`` scope (``_shown_recipient``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import structlog
from litestar import Request, get
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType
from litestar.params import PathParameter, QueryParameter
from redis.asyncio import Redis

from app.api.auth import authorize
from app.api.cursor import decode_cursor, encode_cursor
from app.api.errors import AUTHENTICATED, NotFound, ReadModelUnavailable
from app.api.params import (
    MAX_TYPE_LENGTH,
    ChannelFilter,
    ErrorClassFilter,
    from_ms,
    one_of,
    page_size,
    query_schema,
    time_filter,
    type_filter,
)
from app.api.read_model import ReadModel, read_model_unavailable
from app.api.schemas import DeliveryListItem, DeliveryPage, DeliveryView, NotificationStatus
from app.campaigns import segments
from app.settings import ApiKey
from projections import queries
from projections.database import UNAVAILABLE
from projections.queries import DELIVERY_STATUSES, DeliveryFilter, DeliveryRow, NotificationRow
from streams.campaigns.ids import campaign_of
from streams.campaigns.store import CampaignStore
from streams.core.ids import is_uuid
from streams.core.keys import KeySpace
from streams.core.records import DeliveryAtAcceptance, decode_record
from streams.core.vocabulary import CHANNELS, ERROR_CLASSES
from streams.delivery.state import TERMINAL, DeliveryState, DeliveryStatus, read_states
from streams.digests.ids import digest_of

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
QUERY_TIMEOUT_S = 5.0

NotificationId = Annotated[
    str,
    PathParameter(
        description="The id from the 202 answer. An id that is not a UUID is a 404, "
        "like an unknown id or another producer's."
    ),
]
StatusFilter = Annotated[
    str | None,
    QueryParameter(
        description="Only deliveries in this status",
        schema_extra=query_schema(enum=list(DELIVERY_STATUSES)),
    ),
]
TypeFilter = Annotated[
    str | None,
    QueryParameter(
        name="type",
        description="Only notifications of this type",
        schema_extra=query_schema(min_length=1, max_length=MAX_TYPE_LENGTH),
    ),
]
Since = Annotated[
    str | None,
    QueryParameter(
        description="ISO 8601 time (UTC when it has no offset): only deliveries updated at "
        "or after it",
        schema_extra=query_schema(format=OpenAPIFormat.DATE_TIME),
    ),
]
Until = Annotated[
    str | None,
    QueryParameter(
        description="ISO 8601 time (UTC when it has no offset): only deliveries updated before it",
        schema_extra=query_schema(format=OpenAPIFormat.DATE_TIME),
    ),
]
Limit = Annotated[
    str | None,
    QueryParameter(
        description=f"Page size, 1 to {MAX_LIMIT}",
        schema_extra=query_schema(
            OpenAPIType.INTEGER, minimum=1, maximum=MAX_LIMIT, default=DEFAULT_LIMIT
        ),
    ),
]
Cursor = Annotated[
    str | None,
    QueryParameter(
        description="The next_cursor of the previous page (opaque)", schema_extra=query_schema()
    ),
]

_NOT_FOUND = "notification not found"


@get(
    "/v1/notifications/{notification_id:str}",
    raises=[*AUTHENTICATED, NotFound, ReadModelUnavailable],
)
async def get_notification_status(
    request: Req, notification_id: NotificationId
) -> NotificationStatus:
    """A notification and each delivery's current state.

    From the read model once the projector has reached it, from the write model (Redis)
    before that or while PostgreSQL is unreachable; ``projection_lag_ms`` says how far the
    read model is behind.
    """
    caller = authorize(request, "read")
    if not is_uuid(notification_id):
        raise NotFoundException(detail=_NOT_FOUND)
    notification_id = notification_id.lower()
    redis: Redis = request.app.state.redis
    keys: KeySpace = request.app.state.key_space
    read_model: ReadModel = request.app.state.read_model
    lag, (projected, asked) = await asyncio.gather(
        queries.projection_lag_ms(redis, keys), _projected(read_model, notification_id)
    )
    if projected is not None:
        if projected.producer != caller.producer:
            raise NotFoundException(detail=_NOT_FOUND)
        campaign_id = campaign_of(projected.idempotency_key)
        return await _shown_recipient(
            redis, keys, caller, campaign_id, _from_read_model(projected, lag)
        )
    accepted = await _from_write_model(redis, keys, notification_id, caller.producer, lag)
    if accepted is None:
        raise NotFoundException(detail=_NOT_FOUND)
    status, untouched, campaign_id = accepted
    status = await _shown_recipient(redis, keys, caller, campaign_id, status)
    # Not in the read model means not projected, so no state has left Redis; without an
    # answer from it, a delivery without a state is only "as accepted" while it is young.
    released_after_ms: int = request.app.state.projected_state_retention_ms
    if untouched and not asked and _age_ms(status.created_at) >= released_after_ms:
        raise read_model_unavailable()
    return status


@get(
    "/v1/deliveries",
    raises=[*AUTHENTICATED, ReadModelUnavailable],
)
async def list_deliveries(
    request: Req,
    *,
    status: StatusFilter = None,
    channel: ChannelFilter = None,
    notification_type: TypeFilter = None,
    error_class: ErrorClassFilter = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> DeliveryPage:
    """The caller's deliveries, newest change first (by ``updated_at``, then id), paged.

    Pass ``next_cursor`` back as ``cursor`` for the next page. ``status=FAILED`` is the
    failed-deliveries dashboard, with ``error_class`` and ``last_error``.
    """
    caller = authorize(request, "read")
    selection = DeliveryFilter(
        producer=caller.producer,
        status=one_of("status", status, DELIVERY_STATUSES),
        channel=one_of("channel", channel, CHANNELS),
        notification_type=type_filter(notification_type),
        error_class=one_of("error_class", error_class, ERROR_CLASSES),
        since=time_filter("since", since),
        until=time_filter("until", until),
        after=decode_cursor(cursor) if cursor is not None else None,
        limit=page_size(limit, DEFAULT_LIMIT, MAX_LIMIT),
    )
    read_model: ReadModel = request.app.state.read_model
    pool = await read_model.pool()
    if pool is None:
        raise read_model_unavailable()
    try:
        async with asyncio.timeout(QUERY_TIMEOUT_S):
            rows, more = await queries.list_deliveries(pool, selection)
    except UNAVAILABLE as error:
        log.warning("read_model.query_failed", error=str(error) or type(error).__name__)
        raise read_model_unavailable() from None
    redis: Redis = request.app.state.redis
    lag = await queries.projection_lag_ms(redis, request.app.state.key_space)
    last = rows[-1] if rows and more else None
    return DeliveryPage(
        deliveries=[_list_item(row) for row in rows],
        next_cursor=encode_cursor(last.updated_at, last.id) if last else None,
        projection_lag_ms=lag,
    )


async def _shown_recipient(
    redis: Redis, keys: KeySpace, caller: ApiKey, campaign_id: str, status: NotificationStatus
) -> NotificationStatus:
    """``status`` as ``caller`` may see it: without its recipient id when a campaign's
    segment chose the recipient and the key lacks the ``recipients`` scope (so does a
    campaign that is no longer known: when in doubt, the id is not shown). Costs a Redis
    read only for a campaign's notification shown to such a key."""
    if not await segments.hides_recipient(CampaignStore(redis, keys), caller, campaign_id):
        return status
    return msgspec.structs.replace(status, recipient_id=None)


async def _projected(
    read_model: ReadModel, notification_id: str
) -> tuple[NotificationRow | None, bool]:
    """The notification from the read model (None when not there or not reachable), and
    whether the read model answered."""
    pool = await read_model.pool()
    if pool is None:
        return None, False
    try:
        async with asyncio.timeout(QUERY_TIMEOUT_S):
            return await queries.notification_status(pool, notification_id), True
    except UNAVAILABLE as error:
        log.warning("read_model.query_failed", error=str(error) or type(error).__name__)
        return None, False


def _age_ms(created: datetime) -> int:
    return int((datetime.now(UTC) - created).total_seconds() * 1000)


def _from_read_model(row: NotificationRow, lag: int) -> NotificationStatus:
    return NotificationStatus(
        id=row.id,
        type=row.type,
        priority=row.priority,
        recipient_id=row.recipient_id,
        created_at=row.created_at,
        deliveries=[_view(delivery) for delivery in row.deliveries],
        projection_lag_ms=lag,
        digest_id=row.digest_id,
        made_of_digest=digest_of(row.idempotency_key) or None,
    )


def _view(row: DeliveryRow) -> DeliveryView:
    return DeliveryView(
        id=row.id,
        channel=row.channel,
        status=row.status,
        reason=row.reason,
        attempts=row.attempts,
        error_class=row.error_class,
        last_error=row.last_error,
        provider_message_id=row.provider_message_id,
        updated_at=row.updated_at,
        due_at=row.due_at,
        step=row.step,
        fallback_of=row.fallback_of,
    )


def _list_item(row: DeliveryRow) -> DeliveryListItem:
    return DeliveryListItem(
        **msgspec.structs.asdict(_view(row)),
        notification_id=row.notification_id,
        type=row.notification_type,
        producer=row.producer,
    )


async def _from_write_model(
    redis: Redis, keys: KeySpace, notification_id: str, producer: str, lag: int
) -> tuple[NotificationStatus, bool, str] | None:
    """The notification as Redis holds it: its record's deliveries at acceptance, each
    overlaid with its state once a worker touched it, whether a delivery that had not
    ended at acceptance has no state, and its campaign ("": none). None when Redis does
    not know it (or it is another producer's)."""
    shard = keys.notification_shard(notification_id)
    raw: bytes | str | None = await redis.get(shard.notification(notification_id))
    if raw is None:
        return None
    try:
        record = decode_record(raw.encode() if isinstance(raw, str) else raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.error("status.undecodable_record", notification_id=notification_id)
        return None
    if record.producer != producer:
        return None
    states = await read_states(redis, shard, [delivery.id for delivery in record.deliveries])
    created = from_ms(record.created_ms)
    status = NotificationStatus(
        id=record.id,
        type=record.type,
        priority=record.priority,
        recipient_id=record.recipient_id,
        created_at=created,
        deliveries=[
            _view_of_state(delivery, state, created)
            for delivery, state in zip(record.deliveries, states, strict=True)
        ],
        projection_lag_ms=lag,
    )
    untouched = any(
        state is None and delivery.status not in TERMINAL
        for delivery, state in zip(record.deliveries, states, strict=True)
    )
    return status, untouched, record.campaign_id


def _view_of_state(
    delivery: DeliveryAtAcceptance, state: DeliveryState | None, created: datetime
) -> DeliveryView:
    if state is None:  # no worker touched it yet: as accepted
        return DeliveryView(
            id=delivery.id,
            channel=delivery.channel,
            status=delivery.status,
            reason=delivery.reason or None,
            attempts=0,
            error_class=None,
            last_error=None,
            provider_message_id=None,
            updated_at=created,
            due_at=_due_at(delivery.status, delivery.due_ms),
        )
    return DeliveryView(
        id=delivery.id,
        channel=delivery.channel,
        status=state.status,
        reason=state.reason or None,
        attempts=state.attempts,
        error_class=state.error_class or None,
        last_error=state.last_error or None,
        provider_message_id=state.provider_message_id or None,
        updated_at=from_ms(state.updated_ms) if state.updated_ms else created,
        due_at=_due_at(state.status, state.due_ms),
    )


def _due_at(status: DeliveryStatus, due_ms: int) -> datetime | None:
    """When a SCHEDULED delivery is due; None in any other status (a state hash keeps its
    last ``due_ms`` after it moved on) or when the write model does not say (a delivery
    deferred for quiet hours at acceptance has no ``due_ms`` in its record)."""
    return from_ms(due_ms) if status == DeliveryStatus.SCHEDULED and due_ms else None
