"""``POST /v1/notifications`` and ``POST /v1/notifications/batch``."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.datastructures import State
from litestar.exceptions import ClientException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import HeaderParameter

from app.api.auth import authorize
from app.api.body import decode_body, documented_body
from app.api.errors import AUTHENTICATED, BodyTooLarge, KeyInFlight
from app.api.schemas import BatchItem, BatchRequest, BatchRequestSchema, BatchResponse, BatchResult
from app.ingest.ingestor import IngestAnswer, Ingestor
from app.ingest.requests import Accepted, NotificationRequest
from app.validation import describe

MAX_KEY_LENGTH = 255
_JSON = "application/json"
_item_decoder = msgspec.json.Decoder(BatchItem)
_valid_batch_decoder = msgspec.json.Decoder(BatchRequestSchema)
_encoder = msgspec.json.Encoder()

IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        description="Required. A retry with the same key and body gets the same answer.",
        required=False,
    ),
]


def check_key(key: str | None) -> str:
    """The idempotency key, or the 400 that explains what is wrong with it."""
    if key is None or not key.strip():
        raise ClientException(status_code=400, detail="Idempotency-Key: header is required")
    if len(key) > MAX_KEY_LENGTH:
        raise ClientException(
            status_code=400, detail=f"Idempotency-Key: at most {MAX_KEY_LENGTH} characters"
        )
    if not key.isprintable():
        raise ClientException(
            status_code=400, detail="Idempotency-Key: only printable characters are allowed"
        )
    return key


def _error(status_code: int, detail: str, headers: dict[str, str] | None = None) -> Response[Any]:
    body = {"status_code": status_code, "detail": detail}
    return Response(body, status_code=status_code, headers=headers)


@post(
    "/v1/notifications",
    dependencies=documented_body(NotificationRequest),
    status_code=202,
    responses={
        202: ResponseSpec(Accepted, description="Accepted: the notification is in the event log"),
    },
    raises=[*AUTHENTICATED, KeyInFlight, BodyTooLarge],
)
async def create_notification(
    request: Request[Any, Any, State], idempotency_key: IdempotencyKey = None
) -> Response[Any]:
    """Ingest one notification: fan it out to its channels and write it to the event log."""
    caller = authorize(request, "send")
    key = check_key(idempotency_key)
    body = decode_body(await request.body(), NotificationRequest)
    ingestor: Ingestor = request.app.state.ingestor
    outcome = await ingestor.ingest(caller.producer, key, body)
    if outcome.status_code != 202:
        retry = {"Retry-After": "1"} if outcome.status_code in (409, 503) else None
        return _error(outcome.status_code, outcome.detail, retry)
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
    return Response(outcome.response, status_code=202, media_type=_JSON, headers=headers)


@post(
    "/v1/notifications/batch",
    dependencies=documented_body(BatchRequestSchema),
    status_code=200,
    responses={200: ResponseSpec(BatchResponse, description="One result per item, in order")},
    raises=[*AUTHENTICATED, BodyTooLarge],
)
async def create_notifications_batch(request: Request[Any, Any, State]) -> Response[Any]:
    """Ingest up to 1000 notifications, each with its own idempotency key."""
    caller = authorize(request, "send")
    body = await request.body()
    try:  # the common case, every item valid, in one decoding pass
        items = [_entry(item) for item in _valid_batch_decoder.decode(body).notifications]
    except (msgspec.ValidationError, msgspec.DecodeError):
        batch = decode_body(body, BatchRequest)
        items = [_entry_of_raw(position, raw) for position, raw in enumerate(batch.notifications)]
    ingestor: Ingestor = request.app.state.ingestor
    outcomes = await ingestor.ingest_many(caller.producer, items)
    results = [_result(key, outcome) for (key, _), outcome in zip(items, outcomes, strict=True)]
    return Response(b'{"results":[%s]}' % b",".join(results), status_code=200, media_type=_JSON)


def _entry(item: BatchItem) -> tuple[str, NotificationRequest | IngestAnswer]:
    try:
        key = check_key(item.idempotency_key)
    except ClientException as error:
        return item.idempotency_key, IngestAnswer(400, detail=str(error.detail))
    return key, item


def _entry_of_raw(
    position: int, raw: msgspec.Raw
) -> tuple[str, NotificationRequest | IngestAnswer]:
    try:
        item = _item_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        return _key_of(raw), IngestAnswer(422, detail=describe(error, f"notifications[{position}]"))
    return _entry(item)


def _key_of(raw: msgspec.Raw) -> str:
    """The idempotency key of an item that failed validation, if it has a usable one."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return ""
    key = value.get("idempotency_key") if isinstance(value, dict) else None
    return key if isinstance(key, str) else ""


def _result(key: str, outcome: IngestAnswer) -> bytes:
    """One encoded entry of ``results``."""
    if outcome.status_code == 202:
        # The 202 body is the JSON object {"id": …, "deliveries": […]}; a result is that
        # object with two more fields in front, so splice instead of decoding it again.
        head = b'{"idempotency_key":%s,"status_code":202,' % _encoder.encode(key)
        return head + outcome.response[1:]
    return _encoder.encode(
        BatchResult(idempotency_key=key, status_code=outcome.status_code, detail=outcome.detail)
    )
