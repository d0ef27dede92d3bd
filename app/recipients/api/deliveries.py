"""``GET /v1/recipients/{id}/deliveries`` (scope ``recipients``): a recipient's message log.

What was sent to one person, by every producer: each delivery from the read model, newest
change first, paged and filtered like ``GET /v1/deliveries`` (the same parameters, checks
and cursor). No address is shown: the read model keeps none. A recipient nothing was sent to
has an empty log, not a 404. The dashboard's recipient search shows the same page
(``app.api.recipient_log``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import msgspec
import structlog
from litestar import Request, get
from litestar.datastructures import State
from litestar.params import FromPath

from app.api.auth import authorize
from app.api.cursor import decode_cursor, encode_cursor
from app.api.errors import AUTHENTICATED, ReadModelUnavailable
from app.api.notification_status import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QUERY_TIMEOUT_S,
    Cursor,
    Limit,
    Since,
    StatusFilter,
    TypeFilter,
    Until,
)
from app.api.params import ChannelFilter, one_of, page_size, time_filter, type_filter
from app.api.read_model import ReadModel, read_model_unavailable
from app.recipients.api.settings import recipient_id_of
from projections import queries
from projections.database import UNAVAILABLE
from projections.queries import DELIVERY_STATUSES
from projections.recipient_log import LoggedDelivery, RecipientFilter, recipient_deliveries
from streams.core.vocabulary import CHANNELS, Channel, DeliveryStatus

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]


class RecipientDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery to the recipient: whose notification it was, on which channel, where it
    is and why (``reason``: why it is SUPPRESSED, EXPIRED, CANCELLED or deferred, or which
    provider feedback set its status; ``error_class`` and ``last_error``, at most 500
    characters, from its latest failed attempt; ``due_at``, while it is SCHEDULED, when it
    is due)."""

    id: str
    notification_id: str
    producer: str
    type: str
    channel: Channel | None
    status: DeliveryStatus
    reason: str | None
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    created_at: datetime
    updated_at: datetime
    # When a SCHEDULED delivery is due (sent later, quiet hours, a retry); null in any other
    # status. Last, with a default: clients that do not know it are unaffected.
    due_at: datetime | None = None


class RecipientDeliveryPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/recipients/{id}/deliveries``: one page, newest change first;
    ``next_cursor`` is null on the last."""

    recipient_id: str
    deliveries: list[RecipientDelivery]
    next_cursor: str | None
    projection_lag_ms: int


def item_of(row: LoggedDelivery) -> RecipientDelivery:
    """The log's item of a read-model row."""
    return RecipientDelivery(
        id=row.id,
        notification_id=row.notification_id,
        producer=row.producer,
        type=row.notification_type,
        channel=row.channel,
        status=row.status,
        reason=row.reason,
        attempts=row.attempts,
        error_class=row.error_class,
        last_error=row.last_error,
        provider_message_id=row.provider_message_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        due_at=row.due_at,
    )


async def read_log(
    request: Req, selection: RecipientFilter
) -> tuple[list[LoggedDelivery], str | None]:
    """One page of the log and the cursor of the next (None on the last); 503 while the
    read model is unreachable."""
    read_model: ReadModel = request.app.state.read_model
    pool = await read_model.pool()
    if pool is None:
        raise read_model_unavailable()
    try:
        async with asyncio.timeout(QUERY_TIMEOUT_S):
            rows, more = await recipient_deliveries(pool, selection)
    except UNAVAILABLE as error:
        log.warning("read_model.query_failed", error=str(error) or type(error).__name__)
        raise read_model_unavailable() from None
    last = rows[-1] if rows and more else None
    return rows, encode_cursor(last.updated_at, last.id) if last else None


@get(
    "/v1/recipients/{recipient_id:str}/deliveries",
    raises=[*AUTHENTICATED, ReadModelUnavailable],
)
async def get_recipient_deliveries(
    request: Req,
    recipient_id: FromPath[str],
    *,
    status: StatusFilter = None,
    channel: ChannelFilter = None,
    notification_type: TypeFilter = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> RecipientDeliveryPage:
    """What was sent to the recipient, by every producer: its deliveries, newest change
    first (by ``updated_at``, then id), paged.

    Pass ``next_cursor`` back as ``cursor`` for the next page. A recipient nothing was sent
    to (or whose notifications retention dropped) has an empty page.
    """
    authorize(request, "recipients")
    selection = RecipientFilter(
        recipient_id=recipient_id_of(recipient_id),
        status=one_of("status", status, DELIVERY_STATUSES),
        channel=one_of("channel", channel, CHANNELS),
        notification_type=type_filter(notification_type),
        since=time_filter("since", since),
        until=time_filter("until", until),
        after=decode_cursor(cursor) if cursor is not None else None,
        limit=page_size(limit, DEFAULT_LIMIT, MAX_LIMIT),
    )
    rows, next_cursor = await read_log(request, selection)
    lag = await queries.projection_lag_ms(request.app.state.redis, request.app.state.key_space)
    return RecipientDeliveryPage(
        recipient_id=recipient_id,
        deliveries=[item_of(row) for row in rows],
        next_cursor=next_cursor,
        projection_lag_ms=lag,
    )
