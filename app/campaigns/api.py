"""The campaigns API (scope ``send``): create a campaign, upload its recipients, start,
pause, resume or cancel it, and follow its progress.

Recipients belong to the deployment, not to a producer: a campaign that selects them by a
``segment`` of their profiles (and so its audience, its counts and its progress) is for
keys with the ``recipients`` scope as well; to others it is a 403 naming that scope, and
the list leaves it out. A ``send`` key runs campaigns over the ids it uploads itself. Every
``POST`` counts one request against the producer's ingest quota (429 with ``Retry-After``
over it), and its campaigns have limits (``app.catalog.quotas.CampaignLimits``: 429 for too many
open campaigns, 413 for too many recipients, nothing written).

``POST /v1/campaigns`` creates a draft; ``POST /v1/campaigns/{id}/recipients`` appends up to
10,000 recipient ids per call (an ``Idempotency-Key`` makes a retried upload add nothing
twice); ``POST /v1/campaigns/{id}/start`` hands it to the workers' generator, at its
``start_at`` if it has one. ``GET /v1/campaigns/{id}`` shows its progress: recipients
generated, their deliveries' statuses (from the read model: without it they are null),
the pace and the time left. A campaign is its producer's alone: to others it is 404.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import structlog
from litestar import Controller, Request, Response, get, post, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import ClientException, NotFoundException, PermissionDeniedException
from litestar.params import FromPath, HeaderParameter, QueryParameter

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotJson, OverQuota
from app.api.methods import allowed
from app.api.read_model import ReadModel
from app.campaigns.lifecycle import Campaigns, by_segment
from app.campaigns.progress import Progress, progress_of
from app.campaigns.segments import SEGMENT_SCOPE, may_select
from app.campaigns.specs import CampaignSpec, Upload
from app.ingest.api import check_key
from app.ingest.quotas import IngestQuotas
from app.settings import ApiKey
from projections.campaign_queries import campaign_counts
from projections.database import UNAVAILABLE
from streams.campaigns.store import Campaign
from streams.core import clock

log = structlog.get_logger(__name__)
Req = Request[Any, Any, State]
MAX_LIST = 100
# 10,000 recipient ids of up to 255 characters, as JSON.
MAX_UPLOAD_BYTES = 3 * 1024 * 1024

UploadKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        description="Optional. A retried upload with the same key adds nothing again.",
        required=False,
    ),
]


class UploadAnswer(msgspec.Struct, frozen=True, kw_only=True):
    added: int  # recipients this upload added (a retry: what the first one added)
    audience: int  # the audience's size now


class CampaignList(msgspec.Struct, frozen=True, kw_only=True):
    campaigns: list[Progress]


def _campaigns(request: Req) -> Campaigns:
    campaigns: Campaigns = request.app.state.campaigns
    return campaigns


async def _progress(request: Req, campaign: Campaign) -> Progress:
    """The campaign's progress, with its deliveries' statuses when the read model has them."""
    read_model: ReadModel = request.app.state.read_model
    counts = None
    pool = await read_model.pool()
    if pool is not None:
        try:
            counts = await campaign_counts(pool, campaign.id)
        except UNAVAILABLE as error:
            log.warning("read_model.query_failed", error=str(error) or type(error).__name__)
    return progress_of(campaign, counts, clock.now_ms())


async def _act(request: Req, campaign_id: str, action: str) -> Progress:
    key = authorize(request, "send")
    campaigns = _campaigns(request)
    # A campaign's origin never changes: checked once, before the change.
    _may_see(key, await campaigns.get(key.producer, campaign_id))
    await _take_request(request, key.producer)
    campaign = await getattr(campaigns, action)(key.producer, campaign_id)
    return await _progress(request, campaign)


_SEGMENT_REFUSAL = (
    "segment: a campaign that selects recipients by their profiles needs an API key with "
    f"the {SEGMENT_SCOPE!r} scope as well as 'send' (without it, upload your own recipients)"
)


def _may_see(key: ApiKey, campaign: Campaign) -> None:
    """403 for a segment campaign unless ``key`` has the ``recipients`` scope."""
    if not may_select(key) and by_segment(campaign):
        raise PermissionDeniedException(detail=_SEGMENT_REFUSAL)


async def _take_request(request: Req, producer: str) -> None:
    """Count one request against the producer's ingest quota; ``RateLimited`` over it."""
    quotas: IngestQuotas = request.app.state.ingest_quotas
    refusal = await quotas.admit_request(producer)
    if refusal is not None:
        raise refusal


_RAISES = [*AUTHENTICATED, NotFoundException, OverQuota]


class CampaignCollection(Controller):
    """``POST`` and ``GET /v1/campaigns``.

    Its ``OPTIONS`` answer is written out, by a handler named to sort first
    (``app.api.methods``).
    """

    path = "/v1/campaigns"

    @route(http_method=HttpMethod.OPTIONS, include_in_schema=False, status_code=204)
    async def allowed_methods(self, request: Req) -> Response[None]:
        """Which methods this path supports (``app.api.methods``)."""
        return allowed(request)

    @post(
        status_code=201,
        dependencies=documented_body(CampaignSpec),
        raises=[*AUTHENTICATED, BodyTooLarge, NotJson, OverQuota],
    )
    async def create_campaign(self, request: Req) -> Progress:
        """Create a campaign (a draft: upload its recipients, or give a segment, then start
        it). A segment needs the ``recipients`` scope."""
        key = authorize(request, "send")
        spec = await read_json(request, CampaignSpec)
        if spec.segment is not None and not may_select(key):
            raise PermissionDeniedException(detail=_SEGMENT_REFUSAL)
        await _take_request(request, key.producer)
        campaign = await _campaigns(request).create(key.producer, spec)
        return await _progress(request, campaign)

    @get(raises=AUTHENTICATED)
    async def list_campaigns(
        self,
        request: Req,
        limit: Annotated[
            int, QueryParameter(description=f"Campaigns to show, newest first (<= {MAX_LIST})")
        ] = 20,
    ) -> CampaignList:
        """The producer's newest campaigns with their progress (those selecting by segment
        only for a key with the ``recipients`` scope)."""
        key = authorize(request, "send")
        if not 1 <= limit <= MAX_LIST:
            raise ClientException(status_code=422, detail=f"limit: from 1 to {MAX_LIST}")
        mine = await _campaigns(request).store.recent(key.producer, limit)
        shown = [c for c in mine if may_select(key) or not by_segment(c)]
        return CampaignList(campaigns=[await _progress(request, c) for c in shown])


@get("/v1/campaigns/{campaign_id:str}", raises=_RAISES)
async def get_campaign(request: Req, campaign_id: FromPath[str]) -> Progress:
    """A campaign's progress (one selecting by segment: for the ``recipients`` scope)."""
    key = authorize(request, "send")
    campaign = await _campaigns(request).get(key.producer, campaign_id)
    _may_see(key, campaign)
    return await _progress(request, campaign)


@post(
    "/v1/campaigns/{campaign_id:str}/recipients",
    status_code=200,
    dependencies=documented_body(Upload),
    request_max_body_size=MAX_UPLOAD_BYTES,
    raises=[*_RAISES, BodyTooLarge, NotJson],
)
async def upload_recipients(
    request: Req, campaign_id: FromPath[str], idempotency_key: UploadKey = None
) -> UploadAnswer:
    """Append recipient ids to a draft campaign's audience (up to 10,000 per call; all of
    them or, past a limit, none)."""
    producer = authorize(request, "send").producer
    key = "" if idempotency_key is None else check_key(idempotency_key)
    upload = await read_json(request, Upload)
    await _take_request(request, producer)
    added, campaign = await _campaigns(request).add_recipients(
        producer, campaign_id, upload.recipients, key
    )
    return UploadAnswer(added=added, audience=campaign.audience)


def _action(action: str, summary: str) -> Any:
    @post(
        f"/v1/campaigns/{{campaign_id:str}}/{action}",
        status_code=200,
        raises=_RAISES,
        operation_id=f"{action}_campaign",
        description=summary,
    )
    async def handler(request: Req, campaign_id: FromPath[str]) -> Progress:
        return await _act(request, campaign_id, action)

    return handler


CAMPAIGN_ROUTES = [
    CampaignCollection,
    get_campaign,
    upload_recipients,
    _action("start", "Start a draft campaign: generated now, or from its start_at."),
    _action("pause", "Pause a campaign between two batches."),
    _action("resume", "Resume a paused campaign where it stopped."),
    _action(
        "cancel",
        "Cancel a campaign: nothing more is generated, and its deliveries not yet sent end "
        "CANCELLED.",
    ),
]
