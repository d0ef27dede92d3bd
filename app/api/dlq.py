"""``GET /v1/dlq`` and ``POST /v1/dlq/replay``: the dead-letter queue for operators.

The DLQ is shared by every producer, and so are these endpoints: viewing needs the ``read``
scope, replaying the ``admin`` scope, and neither is limited to the caller's producer (an
admin key is an operator's). Views never show a recipient address or template data values.
"""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from litestar import Request, get, post
from litestar.datastructures import State
from litestar.exceptions import ClientException
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType
from litestar.params import QueryParameter
from redis.asyncio import Redis

from app.api.auth import authorize
from app.api.body import decode_body, documented_body
from app.api.errors import AUTHENTICATED, BodyTooLarge
from app.api.params import ChannelFilter, ErrorClassFilter, query_schema
from app.catalog import Catalog
from app.ingest import quiet_hours
from app.operations.dlq import (
    DEFAULT_SAMPLES,
    MAX_SAMPLES,
    DlqRequestError,
    DlqSummaryView,
    ReplayBody,
    ReplayView,
    replay_order,
    replay_view,
    samples_count,
    selection,
    summary_view,
)
from streams.dlq.replay import replay
from streams.dlq.scan import summarize
from streams.keys import KeySpace

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]


TypeFilter = Annotated[
    str | None,
    QueryParameter(
        name="type", description="Only this notification type", schema_extra=query_schema()
    ),
]
Since = Annotated[
    str | None,
    QueryParameter(
        description="ISO 8601 time (UTC without an offset): dead-lettered at or after it",
        schema_extra=query_schema(format=OpenAPIFormat.DATE_TIME),
    ),
]
Until = Annotated[
    str | None,
    QueryParameter(
        description="ISO 8601 time (UTC without an offset): dead-lettered before it",
        schema_extra=query_schema(format=OpenAPIFormat.DATE_TIME),
    ),
]
Samples = Annotated[
    str | None,
    QueryParameter(
        description=f"Open entries to show with their context, 0 to {MAX_SAMPLES}",
        schema_extra=query_schema(
            OpenAPIType.INTEGER, minimum=0, maximum=MAX_SAMPLES, default=DEFAULT_SAMPLES
        ),
    ),
]


@get("/v1/dlq", raises=AUTHENTICATED)
async def get_dlq(
    request: Req,
    *,
    notification_type: TypeFilter = None,
    channel: ChannelFilter = None,
    error_class: ErrorClassFilter = None,
    since: Since = None,
    until: Until = None,
    samples: Samples = None,
) -> DlqSummaryView:
    """The open dead letters counted by error class, channel and type, with samples in the
    order a replay takes them (oldest first). ``resolved`` counts entries a replay settled."""
    authorize(request, "read")
    catalog: Catalog = request.app.state.catalog
    try:
        chosen = selection(
            catalog,
            notification_type=notification_type,
            channel=channel,
            error_class=error_class,
            since=since,
            until=until,
        )
        count = samples_count(samples)
    except DlqRequestError as error:
        raise ClientException(status_code=422, detail=str(error)) from None
    redis: Redis = request.app.state.redis
    keys: KeySpace = request.app.state.key_space
    return summary_view(await summarize(redis, keys, chosen, samples=count))


@post(
    "/v1/dlq/replay",
    status_code=200,
    dependencies=documented_body(ReplayBody),
    raises=[*AUTHENTICATED, BodyTooLarge],
)
async def replay_dlq(request: Req) -> ReplayView:
    """Replay the open dead letters a filter selects, oldest first, at most ``limit``.

    A replayed delivery keeps its id, starts a fresh attempt series and is queued again,
    with a ``DeliveryReplayed`` event naming ``operator`` and ``reason``; its entry stays,
    marked resolved. Never replayed: a delivery sent since, one past its TTL, one whose state
    has expired; POISON and BUG entries only with ``force``. ``dry_run`` answers the same
    and writes nothing.
    """
    caller = authorize(request, "admin")
    body = decode_body(await request.body(), ReplayBody)
    catalog: Catalog = request.app.state.catalog
    try:
        order = replay_order(catalog, body)
    except DlqRequestError as error:
        raise ClientException(status_code=422, detail=str(error)) from None
    redis: Redis = request.app.state.redis
    keys: KeySpace = request.app.state.key_space
    report = await replay(redis, keys, order, quiet_hours.window_end)
    if not order.dry_run:
        for result in report.replayed:
            log.info(
                "dlq.delivery_replayed",
                delivery_id=result.letter.delivery_id,
                notification_id=result.letter.notification_id,
                entry_id=result.letter.entry_id,
                operator=order.operator,
            )
    log.info(
        "dlq.replay",
        producer=caller.producer,
        operator=order.operator,
        dry_run=order.dry_run,
        replayed=len(report.replayed),
        skipped=len(report.skipped),
    )
    return replay_view(order, report)
