"""``GET /v1/dlq`` and ``POST /v1/dlq/replay``: the dead-letter queue.

A producer sees and replays only its own dead letters: viewing needs the ``read`` scope,
replaying the ``send`` scope (a replay sends again). An ``admin`` key is an operator's: it
sees and replays every producer's entries, and only it may ``force`` the replay of POISON
and BUG entries, which point at a fault in Clarion or a provider rather than at one
notification. Views never show a recipient address or template data values.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import structlog
from litestar import Request, get, post
from litestar.datastructures import State
from litestar.exceptions import PermissionDeniedException
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType
from litestar.params import QueryParameter
from redis.asyncio import Redis

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotJson
from app.api.params import ChannelFilter, ErrorClassFilter, query_schema
from app.campaigns import segments
from app.catalog import Catalog
from app.ingest import quiet_hours
from app.operations.dlq import (
    DEFAULT_SAMPLES,
    MAX_SAMPLES,
    DeadLetterView,
    DlqSummaryView,
    ReplayBody,
    ReplayView,
    replay_order,
    replay_view,
    samples_count,
    selection,
    summary_view,
)
from app.settings import ApiKey
from streams.campaigns.store import CampaignStore
from streams.core.keys import KeySpace
from streams.dlq.replay import replay
from streams.dlq.scan import Summary, summarize
from streams.recipients.settings import AddressDigest

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
    order a replay takes them (oldest first). ``resolved`` counts entries a replay settled.
    Without an ``admin`` key, only the caller's own entries count, and a sample's
    ``recipient_id`` is null where a campaign's segment chose the recipient, unless the key
    has the ``recipients`` scope."""
    caller = authorize(request, "read", "admin")
    catalog: Catalog = request.app.state.catalog
    # A ``DlqRequestError`` is a 422 naming the field (``app.api.errors``).
    chosen = selection(
        catalog,
        notification_type=notification_type,
        channel=channel,
        error_class=error_class,
        since=since,
        until=until,
        producer=_own(caller),
    )
    count = samples_count(samples)
    redis: Redis = request.app.state.redis
    keys: KeySpace = request.app.state.key_space
    summary = await summarize(redis, keys, chosen, samples=count)
    view = summary_view(summary)
    if caller.scopes.isdisjoint({"recipients", "admin"}):
        store = CampaignStore(redis, keys)
        shown = await _recipients_shown(store, caller.producer, summary, view)
        view = msgspec.structs.replace(view, samples=shown)
    return view


async def _recipients_shown(
    store: CampaignStore, producer: str, summary: Summary, view: DlqSummaryView
) -> list[DeadLetterView]:
    """The samples without the recipient ids a campaign's segment chose (for a key with
    neither ``recipients`` nor ``admin``): a producer sees only the recipients it named."""
    chose: dict[str, bool] = {}
    shown = []
    for letter, sample in zip(summary.samples, view.samples, strict=True):
        campaign_id = letter.work.campaign if letter.work else ""
        if campaign_id and campaign_id not in chose:
            chose[campaign_id] = await segments.chose(store, producer, campaign_id)
        hidden = bool(campaign_id) and chose[campaign_id]
        shown.append(msgspec.structs.replace(sample, recipient_id=None) if hidden else sample)
    return shown


@post(
    "/v1/dlq/replay",
    status_code=200,
    dependencies=documented_body(ReplayBody),
    raises=[*AUTHENTICATED, BodyTooLarge, NotJson],
)
async def replay_dlq(request: Req) -> ReplayView:
    """Replay the open dead letters a filter selects, oldest first, at most ``limit``.

    A replayed delivery keeps its id, starts a fresh attempt series and is queued again,
    with a ``DeliveryReplayed`` event naming ``operator`` and ``reason``; its entry stays,
    marked resolved. Never replayed: a delivery sent since, one past its TTL, one whose state
    has expired; POISON and BUG entries only with ``force`` (admin keys only). ``dry_run``
    answers the same and writes nothing. Without an ``admin`` key, only the caller's own
    entries are replayed.
    """
    caller = authorize(request, "send", "admin")
    body = await read_json(request, ReplayBody)
    if body.force and "admin" not in caller.scopes:
        raise PermissionDeniedException(
            detail="force: only an admin key may replay POISON and BUG entries"
        )
    catalog: Catalog = request.app.state.catalog
    # A ``DlqRequestError`` is a 422 naming the field (``app.api.errors``).
    order = replay_order(catalog, body, producer=_own(caller))
    redis: Redis = request.app.state.redis
    keys: KeySpace = request.app.state.key_space
    digest: AddressDigest = request.app.state.address_digest
    report = await replay(redis, keys, order, quiet_hours.window_end, address_digest=digest)
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


def _own(caller: ApiKey) -> str | None:
    """Whose entries the caller may see and replay: its own, or everyone's (None) for admin."""
    return None if "admin" in caller.scopes else caller.producer
