"""The suppression list's admin API (scope ``admin``): list, add, look up and remove entries.

``GET /v1/suppressions`` pages through the list; ``POST /v1/suppressions`` puts an address
on it; ``POST /v1/suppressions/lookup`` finds an address's entry (the address travels in a
body, not in a URL that proxies log); ``DELETE /v1/suppressions/{channel}/{digest}`` takes
one off, by the digest a listing shows. Answers show an address masked and by its digest,
never in clear.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import ClientException, NotFoundException
from litestar.params import FromPath, QueryParameter

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotJson
from app.api.methods import allowed
from app.ingest.requests import PushTarget
from app.recipients.addresses import SUPPRESSIBLE, Address, delivery_address, masked
from streams.core import clock
from streams.core.events import SuppressionReason
from streams.core.vocabulary import Channel
from streams.recipients.settings import AddressDigest
from streams.recipients.suppressions import REASONS, Suppression, SuppressionStore

Req = Request[Any, Any, State]
MAX_PAGE = 500
DEFAULT_PAGE = 100
_DIGEST_CHARACTERS = frozenset("0123456789abcdef")


class AddressBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An address of a channel: ``address``, or for PUSH a typed ``push_target``."""

    channel: Channel
    address: Address | None = None
    push_target: PushTarget | None = None


class SuppressionBody(AddressBody, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/suppressions``."""

    reason: SuppressionReason
    # When the entry ends (absent: never); it must be in the future.
    until: datetime | None = None


class SuppressionView(msgspec.Struct, frozen=True, kw_only=True):
    channel: Channel
    address_digest: str
    address: str  # masked
    reason: SuppressionReason
    source: str
    at: datetime
    until: datetime | None
    active: bool


class SuppressionsPage(msgspec.Struct, frozen=True, kw_only=True):
    suppressions: list[SuppressionView]
    # Where the next page starts; null on the last one.
    next_cursor: str | None


Cursor = Annotated[str | None, QueryParameter(description="Where a page starts (next_cursor)")]
Limit = Annotated[
    int | None, QueryParameter(description=f"Entries a page looks at (<= {MAX_PAGE})")
]


def _view(entry: Suppression, now_ms: int) -> SuppressionView:
    return SuppressionView(
        channel=entry.channel,
        address_digest=entry.digest,
        address=entry.display,
        reason=entry.reason,
        source=entry.source,
        at=_at(entry.at_ms),
        until=_at(entry.until_ms) if entry.until_ms else None,
        active=entry.active(now_ms),
    )


def _address(request: Req, body: AddressBody) -> tuple[str, str]:
    """The body's delivery address and its digest; ``AddressError`` (422, ``app.api.errors``)
    naming the field when it is none."""
    address = delivery_address(body.channel, body.address, body.push_target)
    digest: AddressDigest = request.app.state.address_digest
    return address, digest(address)


class Suppressions(Controller):
    """``GET`` and ``POST /v1/suppressions``.

    Its ``OPTIONS`` answer is written out, by a handler named to sort first
    (``app.api.methods``).
    """

    path = "/v1/suppressions"

    @route(http_method=HttpMethod.OPTIONS, include_in_schema=False, status_code=204)
    async def allowed_methods(self, request: Req) -> Response[None]:
        """Which methods this path supports (``app.api.methods``)."""
        return allowed(request)

    @get(raises=AUTHENTICATED)
    async def list_suppressions(
        self,
        request: Req,
        cursor: Cursor = None,
        limit: Limit = None,
        channel: Annotated[Channel | None, QueryParameter(description="Only this channel")] = None,
        reason: Annotated[str | None, QueryParameter(description="Only this reason")] = None,
    ) -> SuppressionsPage:
        """A page of the suppression list (a page may hold fewer entries than ``limit`` when
        filtered; follow ``next_cursor`` until it is null)."""
        return await _page(request, cursor, limit, channel, reason)

    @post(
        dependencies=documented_body(SuppressionBody),
        raises=[*AUTHENTICATED, BodyTooLarge, NotJson],
    )
    async def suppress(self, request: Req) -> SuppressionView:
        """Put an address on the suppression list (an entry for it already there is replaced)."""
        return await _add(request)


async def _page(
    request: Req, cursor: str | None, limit: int | None, channel: Channel | None, reason: str | None
) -> SuppressionsPage:
    authorize(request, "admin")
    count = DEFAULT_PAGE if limit is None else limit
    if not 1 <= count <= MAX_PAGE:
        raise ClientException(status_code=422, detail=f"limit: from 1 to {MAX_PAGE}")
    if reason is not None and reason not in REASONS:
        raise ClientException(status_code=422, detail=f"reason: one of {', '.join(REASONS)}")
    start = 0
    if cursor:
        if not cursor.isdigit() or len(cursor) > 20:
            raise ClientException(status_code=422, detail="cursor: a next_cursor of this list")
        start = int(cursor)
    store: SuppressionStore = request.app.state.suppressions
    page = await store.page(start, count)
    now_ms = clock.now_ms()
    shown = [
        _view(entry, now_ms)
        for entry in page.entries
        if (channel is None or entry.channel == channel) and (reason in (None, entry.reason))
    ]
    return SuppressionsPage(
        suppressions=shown, next_cursor=str(page.cursor) if page.cursor else None
    )


async def _add(request: Req) -> SuppressionView:
    caller = authorize(request, "admin")
    body = await read_json(request, SuppressionBody)
    if body.channel not in SUPPRESSIBLE:
        raise ClientException(status_code=422, detail=f"channel: {body.channel} has no addresses")
    address, digest = _address(request, body)
    now_ms = clock.now_ms()
    until_ms = 0
    if body.until is not None:
        if body.until.tzinfo is None:
            raise ClientException(status_code=422, detail="until: give a time zone offset")
        until_ms = int(body.until.timestamp() * 1000)
        if until_ms <= now_ms:
            raise ClientException(status_code=422, detail="until: must be in the future")
    entry = Suppression(
        channel=body.channel,
        digest=digest,
        reason=body.reason,
        source=f"admin:{caller.producer}",
        at_ms=now_ms,
        until_ms=until_ms,
        display=masked(body.channel, address),
    )
    store: SuppressionStore = request.app.state.suppressions
    await store.add(entry)
    return _view(entry, now_ms)


@post(
    "/v1/suppressions/lookup",
    status_code=200,
    dependencies=documented_body(AddressBody),
    raises=[*AUTHENTICATED, BodyTooLarge, NotJson, NotFoundException],
)
async def look_up_suppression(request: Req) -> SuppressionView:
    """The suppression list's entry for an address; 404 when it has none."""
    authorize(request, "admin")
    body = await read_json(request, AddressBody)
    _, digest = _address(request, body)
    store: SuppressionStore = request.app.state.suppressions
    entry = await store.get(body.channel, digest)
    if entry is None:
        raise NotFoundException(detail="address: not on the suppression list")
    return _view(entry, clock.now_ms())


@delete(
    "/v1/suppressions/{channel:str}/{digest:str}",
    status_code=204,
    raises=[*AUTHENTICATED, NotFoundException],
)
async def remove_suppression(request: Req, channel: FromPath[str], digest: FromPath[str]) -> None:
    """Take an address off the suppression list, by its channel and digest."""
    caller = authorize(request, "admin")
    if channel not in SUPPRESSIBLE:
        raise ClientException(status_code=422, detail=f"channel: one of {', '.join(SUPPRESSIBLE)}")
    if len(digest) != 32 or not _DIGEST_CHARACTERS.issuperset(digest):
        raise ClientException(status_code=422, detail="digest: 32 hex digits, as listed")
    store: SuppressionStore = request.app.state.suppressions
    source = f"admin:{caller.producer}"
    if not await store.remove(Channel(channel), digest, source, clock.now_ms()):
        raise NotFoundException(detail="address: not on the suppression list")


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
