"""``POST /v1/notifications/{id}/cancel`` and ``POST /v1/cancellations``: a producer takes
back what it sent, before it goes.

Both need the ``send`` scope and reach only the caller's own notifications (another
producer's id is a 404, as an unknown one). Both are idempotent: a second call changes
nothing and answers the same. A delivery a worker is handing to a provider at that moment is
left to it (the lease wins: ``SENDING`` in the answer); a retry or deferral of it is not sent.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, post
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import PathParameter

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotFound, NotJson, ReadModelUnavailable
from app.api.read_model import read_model_unavailable
from app.cancellations.service import Cancellations, KeyCancellation, ReadModelNeeded
from app.ingest import requests as ingest_requests
from streams.core.ids import is_uuid
from streams.delivery.cancellations import CancelledNotification

Req = Request[Any, Any, State]
_NOT_FOUND = "notification not found"

NotificationId = Annotated[
    str,
    PathParameter(
        description="The id from the 202 answer. An id that is not a UUID is a 404, "
        "like an unknown id or another producer's."
    ),
]


class CancellationRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/cancellations``: the ``cancellation_key`` the notifications to
    cancel were sent with."""

    key: ingest_requests.CancellationKey


@post(
    "/v1/notifications/{notification_id:str}/cancel",
    status_code=200,
    responses={
        200: ResponseSpec(
            CancelledNotification,
            description="Each delivery's status after the call: CANCELLED, or what it was "
            "when it could not be (SENT and later: it went before; SENDING: a worker is "
            "handing it to the provider now; SUPPRESSED, EXPIRED, FAILED)",
        )
    },
    raises=[*AUTHENTICATED, NotFound, ReadModelUnavailable],
)
async def cancel_notification(request: Req, notification_id: NotificationId) -> Any:
    """Cancel every delivery of a notification that has not been handed to a provider."""
    caller = authorize(request, "send")
    if not is_uuid(notification_id):
        raise NotFoundException(detail=_NOT_FOUND)
    service: Cancellations = request.app.state.cancellations
    try:
        cancelled = await service.cancel_notification(caller.producer, notification_id.lower())
    except ReadModelNeeded:
        raise read_model_unavailable() from None
    if cancelled is None:
        raise NotFoundException(detail=_NOT_FOUND)
    return cancelled


@post(
    "/v1/cancellations",
    dependencies=documented_body(CancellationRequest),
    status_code=200,
    responses={
        200: ResponseSpec(
            KeyCancellation,
            description="The notifications found under the key and their deliveries by "
            "what became of them",
        )
    },
    raises=[*AUTHENTICATED, BodyTooLarge, NotJson, ReadModelUnavailable],
)
async def cancel_by_key(request: Req) -> Any:
    """Cancel every pending delivery of the caller's notifications sent with a
    ``cancellation_key``."""
    caller = authorize(request, "send")
    body = await read_json(request, CancellationRequest)
    service: Cancellations = request.app.state.cancellations
    try:
        return await service.cancel_key(caller.producer, body.key)
    except ReadModelNeeded:
        raise read_model_unavailable() from None


ROUTES = [cancel_notification, cancel_by_key]
