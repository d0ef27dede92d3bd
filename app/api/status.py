"""``GET /v1/notifications/{id}`` and ``GET /v1/deliveries``: where a producer's deliveries are.

Both read the read model in PostgreSQL. A notification the projector has not reached yet is
answered from the Redis write model instead (its ``ntf:`` record, each delivery overlaid with
its ``dlv:`` hash), so an accepted id is never a 404; the same happens while PostgreSQL is
unreachable. The delivery list has no such fallback: it answers 503 then. Every answer
reports the projection lag, how far the read model is behind the event log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import asyncpg
import msgspec
import structlog
from litestar import Request, get
from litestar.datastructures import State
from litestar.exceptions import ClientException, NotFoundException, ServiceUnavailableException
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType
from litestar.params import PathParameter, QueryParameter
from redis.asyncio import Redis

from app.api.auth import authorize
from app.api.errors import AUTHENTICATED, NotFound, ReadModelUnavailable
from app.api.params import query_schema
from app.api.schemas import DeliveryListItem, DeliveryPage, DeliveryStatus, NotificationStatus
from projections import queries
from projections.database import DatabaseNotReady
from projections.queries import DELIVERY_STATUSES, DeliveryFilter, DeliveryRow, NotificationRow
from streams.ids import is_uuid
from streams.keys import KeySpace
from streams.records import NotificationRecord, decode_record
from streams.vocabulary import CHANNELS, ERROR_CLASSES

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TYPE_LENGTH = 64
MAX_CURSOR_LENGTH = 200
QUERY_TIMEOUT_S = 5.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# PostgreSQL cannot be used right now (as opposed to a bug in a query).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    DatabaseNotReady,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,  # shutting down, or not accepting connections yet
    asyncpg.InsufficientResourcesError,  # too many connections
)


class ReadModel:
    """The read-model pool; None while PostgreSQL is unreachable.

    With a ``connect`` function a missing pool is created lazily: a request that needs it
    starts an attempt (at most one at a time, and one per ``retry_interval_s`` after a
    failure) and waits for it at most ``wait_s``, so a dead database never holds requests
    for the whole connect timeout. A failed attempt is logged, never raised.
    """

    def __init__(
        self,
        pool: asyncpg.Pool | None = None,
        connect: Callable[[], Awaitable[asyncpg.Pool]] | None = None,
        *,
        retry_interval_s: float = 5.0,
        wait_s: float = 1.0,
    ) -> None:
        self._pool = pool
        self._connect = connect
        self._retry_interval_s = retry_interval_s
        self._wait_s = wait_s
        self._attempt: asyncio.Task[None] | None = None
        self._next_attempt = 0.0

    def connect_with(self, connect: Callable[[], Awaitable[asyncpg.Pool]]) -> None:
        """Create the pool with ``connect`` when it is missing."""
        self._connect = connect

    async def start(self, wait_s: float = 15.0) -> None:
        """Try to create the pool now (at start-up), waiting at most ``wait_s`` for it."""
        if self._pool is None and self._connect is not None:
            self._next_attempt = 0.0
            await self._wait_for_attempt(wait_s)

    async def pool(self) -> asyncpg.Pool | None:
        """The pool, or None when PostgreSQL cannot be reached (retried lazily)."""
        if self._pool is None and self._connect is not None:
            await self._wait_for_attempt(self._wait_s)
        return self._pool

    async def close(self) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is not None:
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _wait_for_attempt(self, wait_s: float) -> None:
        if self._attempt is None and time.monotonic() >= self._next_attempt:
            self._attempt = asyncio.create_task(self._try_connect())
        if self._attempt is not None:
            # Shielded: a request giving up waiting leaves the attempt running for others.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._attempt), wait_s)

    async def _try_connect(self) -> None:
        assert self._connect is not None
        try:
            self._pool = await self._connect()
            log.info("read_model.connected")
        except Exception as error:  # the API serves without the read model, whatever broke it
            self._next_attempt = time.monotonic() + self._retry_interval_s
            log.warning(
                "read_model.unavailable",
                error=str(error) or type(error).__name__,
                retry_in=self._retry_interval_s,
            )
        finally:
            self._attempt = None


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
ChannelFilter = Annotated[
    str | None,
    QueryParameter(
        description="Only deliveries on this channel",
        schema_extra=query_schema(enum=list(CHANNELS)),
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
ErrorClassFilter = Annotated[
    str | None,
    QueryParameter(
        description="Only deliveries whose latest failure was of this class",
        schema_extra=query_schema(enum=list(ERROR_CLASSES)),
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
    raises=[*AUTHENTICATED, NotFound],
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
    lag, projected = await asyncio.gather(
        queries.projection_lag_ms(redis, keys), _projected(read_model, notification_id)
    )
    if projected is not None:
        if projected.producer != caller.producer:
            raise NotFoundException(detail=_NOT_FOUND)
        return _from_read_model(projected, lag)
    record = await _record(redis, keys, notification_id)
    if record is None or record.producer != caller.producer:
        raise NotFoundException(detail=_NOT_FOUND)
    return await _from_write_model(redis, keys, record, lag)


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
        status=_one_of("status", status, DELIVERY_STATUSES),
        channel=_one_of("channel", channel, CHANNELS),
        notification_type=_type(notification_type),
        error_class=_one_of("error_class", error_class, ERROR_CLASSES),
        since=_time("since", since),
        until=_time("until", until),
        after=decode_cursor(cursor) if cursor is not None else None,
        limit=_limit(limit),
    )
    read_model: ReadModel = request.app.state.read_model
    pool = await read_model.pool()
    if pool is None:
        raise _read_model_unavailable()
    try:
        async with asyncio.timeout(QUERY_TIMEOUT_S):
            rows, more = await queries.list_deliveries(pool, selection)
    except UNAVAILABLE as error:
        log.warning("read_model.query_failed", error=str(error) or type(error).__name__)
        raise _read_model_unavailable() from None
    redis: Redis = request.app.state.redis
    lag = await queries.projection_lag_ms(redis, request.app.state.key_space)
    last = rows[-1] if rows and more else None
    return DeliveryPage(
        deliveries=[_list_item(row) for row in rows],
        next_cursor=encode_cursor(last.updated_at, last.id) if last else None,
        projection_lag_ms=lag,
    )


def _read_model_unavailable() -> ServiceUnavailableException:
    return ServiceUnavailableException(
        detail="the read model (PostgreSQL) is unavailable; retry shortly",
        headers={"Retry-After": "5"},
    )


async def _projected(read_model: ReadModel, notification_id: str) -> NotificationRow | None:
    """The notification from the read model; None when not there or not reachable."""
    pool = await read_model.pool()
    if pool is None:
        return None
    try:
        async with asyncio.timeout(QUERY_TIMEOUT_S):
            return await queries.notification_status(pool, notification_id)
    except UNAVAILABLE as error:
        log.warning("read_model.query_failed", error=str(error) or type(error).__name__)
        return None


def _from_read_model(row: NotificationRow, lag: int) -> NotificationStatus:
    return NotificationStatus(
        id=row.id,
        type=row.type,
        priority=row.priority,
        recipient_id=row.recipient_id,
        created_at=row.created_at,
        deliveries=[_status(delivery) for delivery in row.deliveries],
        projection_lag_ms=lag,
    )


def _status(row: DeliveryRow) -> DeliveryStatus:
    return DeliveryStatus(
        id=row.id,
        channel=row.channel,
        status=row.status,
        attempts=row.attempts,
        error_class=row.error_class,
        last_error=row.last_error,
        provider_message_id=row.provider_message_id,
        updated_at=row.updated_at,
    )


def _list_item(row: DeliveryRow) -> DeliveryListItem:
    return DeliveryListItem(
        id=row.id,
        channel=row.channel,
        status=row.status,
        attempts=row.attempts,
        error_class=row.error_class,
        last_error=row.last_error,
        provider_message_id=row.provider_message_id,
        updated_at=row.updated_at,
        notification_id=row.notification_id,
        type=row.notification_type,
        producer=row.producer,
    )


async def _record(redis: Redis, keys: KeySpace, notification_id: str) -> NotificationRecord | None:
    key = keys.notification_shard(notification_id).notification(notification_id)
    raw: bytes | str | None = await redis.get(key)
    if raw is None:
        return None
    try:
        return decode_record(raw.encode() if isinstance(raw, str) else raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.error("status.undecodable_record", notification_id=notification_id)
        return None


async def _from_write_model(
    redis: Redis, keys: KeySpace, record: NotificationRecord, lag: int
) -> NotificationStatus:
    """The record's deliveries at acceptance, each overlaid with its state hash when a
    worker has touched it."""
    shard = keys.notification_shard(record.id)
    pipe = redis.pipeline(transaction=False)
    for delivery in record.deliveries:
        pipe.hgetall(shard.delivery(delivery.id))
    hashes: list[dict[bytes, bytes]] = await pipe.execute()
    created = _from_ms(record.created_ms)
    deliveries = []
    for delivery, raw in zip(record.deliveries, hashes, strict=True):
        state = {_text(k): _text(v) for k, v in raw.items()}
        updated_ms = state.get("updated_ms")
        deliveries.append(
            DeliveryStatus(
                id=delivery.id,
                channel=delivery.channel,
                status=state.get("status") or delivery.status,
                attempts=int(state.get("attempts") or 0),
                error_class=state.get("error_class") or None,
                last_error=state.get("last_error") or None,
                provider_message_id=state.get("provider_message_id") or None,
                updated_at=_from_ms(int(updated_ms)) if updated_ms else created,
            )
        )
    return NotificationStatus(
        id=record.id,
        type=record.type,
        priority=record.priority,
        recipient_id=record.recipient_id,
        created_at=created,
        deliveries=deliveries,
        projection_lag_ms=lag,
    )


def encode_cursor(updated_at: datetime, delivery_id: str) -> str:
    """An opaque cursor: base64url of ``[updated_at in µs since the epoch, id]``."""
    micros = (updated_at - _EPOCH) // timedelta(microseconds=1)
    raw = msgspec.json.encode([micros, delivery_id])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (updated_at, id) a cursor holds; 422 naming ``cursor`` when it is not one."""
    invalid = ClientException(
        status_code=422, detail="cursor: invalid; pass the next_cursor of the previous page"
    )
    if len(cursor) > MAX_CURSOR_LENGTH or not cursor.isascii():
        raise invalid
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        micros, delivery_id = msgspec.json.decode(raw, type=tuple[int, str])
        updated_at = _EPOCH + timedelta(microseconds=micros)
    except (binascii.Error, ValueError, msgspec.DecodeError, OverflowError):
        raise invalid from None
    if not is_uuid(delivery_id):
        raise invalid
    return updated_at, delivery_id.lower()


def _one_of(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is None or value in allowed:
        return value
    raise ClientException(status_code=422, detail=f"{name}: must be one of {', '.join(allowed)}")


def _type(value: str | None) -> str | None:
    if value is None or (0 < len(value) <= MAX_TYPE_LENGTH and value.isprintable()):
        return value
    raise ClientException(
        status_code=422, detail=f"type: 1-{MAX_TYPE_LENGTH} printable characters are required"
    )


def _time(name: str, value: str | None) -> datetime | None:
    """An ISO 8601 time; UTC when it has no offset. An offset's ``+`` that arrived as a
    space (unencoded in the query string) is read as the ``+`` it was."""
    if value is None:
        return None
    text = value.strip()
    before, space, after = text.rpartition(" ")
    for candidate in (text, f"{before}+{after}" if space else text):
        try:
            parsed = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    raise ClientException(
        status_code=422, detail=f"{name}: must be an ISO 8601 time, e.g. 2026-11-29T12:00:00Z"
    )


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    text = value.strip()
    if text.isdigit() and len(text) <= 4 and 1 <= int(text) <= MAX_LIMIT:
        return int(text)
    raise ClientException(
        status_code=422, detail=f"limit: must be an integer from 1 to {MAX_LIMIT}"
    )


def _from_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
