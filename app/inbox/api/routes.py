"""The inbox API: recipient tokens for a producer's backend, and the inbox a recipient's app
reads with one.

``POST /v1/recipients/{id}/inbox-tokens`` (scope ``recipients``) makes a recipient token
(``app.inbox.tokens``); ``POST /v1/recipients/{id}/inbox-tokens/revoke`` (the same scope: who
may hand out a recipient's tokens may take them back) refuses every token of the recipient
made until then, as erasing the recipient does (``streams.inbox.revocation``). Every
``/v1/inbox`` endpoint takes a token as ``Authorization: Bearer <token>``; only the realtime
stream (``GET /v1/inbox/stream``) also takes ``?token=``, because a browser's ``EventSource``
cannot set headers (a token in a URL ends up in access logs and browser history, so nothing
else accepts one there). A token grants that recipient's inbox and nothing else: a message of
another recipient is 404, a missing, changed, expired or revoked token 401. The messages are
served from Redis (``streams.inbox.store``), newest first, paged by the last message id seen
(``before``); a revoked token is found in the same script call that reads the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Final, cast

import msgspec
from litestar import MediaType, Request, Response, get, post
from litestar.datastructures import State
from litestar.exceptions import (
    ClientException,
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    ValidationException,
)
from litestar.params import FromPath, FromQuery, QueryParameter

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, InvalidField, NotJson, RedisUnavailable
from app.api.params import READS_QUERY
from app.inbox.tokens import MAX_TTL_SECONDS, Grant, InboxTokens
from app.recipients.api.settings import recipient_id_of
from app.signed_tokens import TokenRefused
from streams.inbox.marks import Action
from streams.inbox.messages import StoredMessage
from streams.inbox.pages import Listing
from streams.inbox.revocation import InboxRevocations, TokensRevoked
from streams.inbox.store import Counts, InboxBusy, InboxStore

Req = Request[Any, Any, State]
_json = msgspec.json.Encoder()
MAX_PAGE = 100
# What every endpoint of a recipient token may answer, besides its own codes (as AUTHENTICATED).
RECIPIENT_AUTH: list[type[HTTPException]] = [
    ValidationException,
    NotAuthorizedException,
    RedisUnavailable,
]
# A GET endpoint's: a query parameter it does not take is refused (``app.api.params``).
RECIPIENT_READ: list[type[HTTPException]] = [*RECIPIENT_AUTH, InvalidField]


class MessageBusy(ClientException):
    status_code = 409
    detail = "The message kept changing while this change was made; retry"


class TokenRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Seconds the token works (default CLARION_INBOX_TOKEN_TTL), at most twelve hours.
    ttl_seconds: Annotated[int, msgspec.Meta(ge=60, le=MAX_TTL_SECONDS)] | None = None


class TokenView(msgspec.Struct, frozen=True):
    recipient_id: str
    token: str
    expires_at: datetime


class CountsView(msgspec.Struct, frozen=True):
    unread: int
    unseen: int


class MessageView(msgspec.Struct, frozen=True):
    id: str
    notification_id: str
    type: str
    title: str
    body: str
    action_url: str
    data: dict[str, str]
    created_at: datetime
    read_at: datetime | None
    seen_at: datetime | None
    archived_at: datetime | None


class PageView(msgspec.Struct, frozen=True):
    messages: list[MessageView]
    # The ``before`` of the next page: the last message's id; None after the oldest.
    next: str | None
    counts: CountsView


class ReadAllView(msgspec.Struct, frozen=True):
    marked: int


class RevokedView(msgspec.Struct, frozen=True):
    recipient_id: str
    # Every token of the recipient made before this moment is refused from now on.
    revoked_before: datetime


def message_view(stored: StoredMessage) -> MessageView:
    message, state = stored.message, stored.state
    return MessageView(
        id=message.id,
        notification_id=message.notification_id,
        type=message.type,
        title=message.title,
        body=message.body,
        action_url=message.action_url,
        data=message.data,
        created_at=message.created_at,
        read_at=time_of(state.read_ms),
        seen_at=time_of(state.seen_ms),
        archived_at=time_of(state.archived_ms),
    )


def counts_view(counts: Counts) -> CountsView:
    return CountsView(unread=counts.unread, unseen=counts.unseen)


def grant_of(request: Req, *, in_query: bool = False) -> Grant:
    """What the request's recipient token grants, as far as its signature and expiry tell
    (its epoch is checked by the inbox's reads); 401 without a valid one. ``in_query``: the
    token may come as ``?token=`` (the realtime stream's ``EventSource``)."""
    token = ""
    for name, value in request.scope["headers"]:
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            token = secret.strip() if scheme.lower() == "bearer" else ""
    if not token and in_query:
        token = request.query_params.get("token", "")
    if not token:
        raise NotAuthorizedException(
            detail=_MISSING[in_query or "token" not in request.query_params]
        )
    tokens: InboxTokens = request.app.state.inbox_tokens
    try:
        return tokens.read(token, now_of(request).timestamp())
    except TokenRefused as refused:
        raise NotAuthorizedException(detail=f"the recipient token is {refused.why}") from None


# A token in the query is looked at, to be refused with the hint above: not as unknown.
TOKEN_IN_QUERY: Final = {READS_QUERY: ("token",)}

_MISSING = {
    True: "a recipient token is required: 'Authorization: Bearer <token>' (?token= on "
    "/v1/inbox/stream only)",
    False: "?token= is taken by /v1/inbox/stream only (for EventSource): send the recipient "
    "token as 'Authorization: Bearer <token>'",
}


async def checked_grant(request: Req, *, in_query: bool = False) -> Grant:
    """``grant_of``, its epoch checked too (a read of its own): 401 if it was revoked."""
    grant = grant_of(request, in_query=in_query)
    revocations: InboxRevocations = request.app.state.inbox_revocations
    with unless_revoked():
        await revocations.check(grant.recipient_id, grant.epoch)
    return grant


@contextmanager
def unless_revoked() -> Iterator[None]:
    """A revoked token's read (``TokensRevoked``) answers 401."""
    try:
        yield
    except TokensRevoked:
        raise NotAuthorizedException(detail="the recipient token is revoked") from None


@post(
    "/v1/recipients/{recipient_id:str}/inbox-tokens",
    status_code=201,
    dependencies=documented_body(TokenRequest),
    raises=[*AUTHENTICATED, BodyTooLarge, NotJson],
)
async def create_inbox_token(request: Req, recipient_id: FromPath[str]) -> TokenView:
    """A token for the recipient's app: it reads that recipient's inbox and nothing else
    until it expires (``ttl_seconds``, default CLARION_INBOX_TOKEN_TTL, at most 12 h; ``{}``
    for the default)."""
    authorize(request, "recipients")
    recipient_id = recipient_id_of(recipient_id)
    asked = await read_json(request, TokenRequest)  # "{}" for the defaults
    ttl = asked.ttl_seconds or request.app.state.inbox_token_ttl_seconds
    expires_at = int(now_of(request).timestamp()) + ttl
    tokens: InboxTokens = request.app.state.inbox_tokens
    revocations: InboxRevocations = request.app.state.inbox_revocations
    epoch = await revocations.epoch(recipient_id)
    token = tokens.make(Grant(recipient_id, expires_at, epoch))
    return TokenView(recipient_id, token, datetime.fromtimestamp(expires_at, UTC))


@post(
    "/v1/recipients/{recipient_id:str}/inbox-tokens/revoke",
    status_code=200,
    raises=AUTHENTICATED,
)
async def revoke_inbox_tokens(request: Req, recipient_id: FromPath[str]) -> RevokedView:
    """Refuse every token of the recipient made until now, on every inbox endpoint, and end
    its open realtime streams (an app with a token made later reconnects). Tokens made from
    now on work. No body."""
    authorize(request, "recipients")
    recipient_id = recipient_id_of(recipient_id)
    revocations: InboxRevocations = request.app.state.inbox_revocations
    epoch = await revocations.revoke(recipient_id)
    return RevokedView(recipient_id, datetime.fromtimestamp(epoch / 1000, UTC))


@get("/v1/inbox", raises=RECIPIENT_READ, opt=TOKEN_IN_QUERY)
async def list_inbox(
    request: Req,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 20,
    before: FromQuery[str | None] = None,
    listing: Annotated[Listing, QueryParameter(name="filter")] = "inbox",
) -> Response[PageView]:
    """The recipient's messages, newest first: ``filter`` inbox (not archived), unread or
    archived; ``before`` the ``next`` of the previous page."""
    grant = grant_of(request)
    store: InboxStore = request.app.state.inbox
    with unless_revoked():
        page = await store.page_json(
            grant.recipient_id, grant.epoch, before=before or "", limit=limit, listing=listing
        )
    # The stored messages are spliced into the answer as they are (``InboxStore.page_json``):
    # its shape is PageView's, which the schema documents.
    following = _json.encode(page.next or None)
    counts = _json.encode(counts_view(page.counts))
    body = b'{"messages":%s,"next":%s,"counts":%s}' % (page.messages, following, counts)
    return cast("Response[PageView]", Response(body, media_type=MediaType.JSON))


@get("/v1/inbox/counts", raises=RECIPIENT_READ, opt=TOKEN_IN_QUERY)
async def inbox_counts(request: Req) -> CountsView:
    """How many messages are unread and unseen (archived ones count for neither)."""
    grant = grant_of(request)
    store: InboxStore = request.app.state.inbox
    with unless_revoked():
        return counts_view(await store.counts(grant.recipient_id, grant.epoch))


@post("/v1/inbox/read-all", status_code=200, raises=RECIPIENT_AUTH, opt=TOKEN_IN_QUERY)
async def read_all(request: Req) -> ReadAllView:
    """Mark every unread message read."""
    grant = grant_of(request)
    store: InboxStore = request.app.state.inbox
    with unless_revoked():
        marked = await store.read_all(grant.recipient_id, _now_ms(request), grant.epoch)
    return ReadAllView(marked=marked)


@post(
    "/v1/inbox/{message_id:str}/{action:str}",
    status_code=200,
    raises=[*RECIPIENT_AUTH, NotFoundException, MessageBusy],
    opt=TOKEN_IN_QUERY,
)
async def mark_message(
    request: Req, message_id: FromPath[str], action: FromPath[str]
) -> MessageView:
    """``read``, ``unread``, ``seen``, ``archive`` or ``unarchive`` one message; the message
    after it. Doing what is done already changes nothing."""
    grant = grant_of(request)
    if action not in _ACTIONS:
        raise NotFoundException(detail=f"action: {action[:40]!r} is none of {', '.join(_ACTIONS)}")
    store: InboxStore = request.app.state.inbox
    try:
        with unless_revoked():
            stored = await store.mark(
                grant.recipient_id, message_id, _ACTIONS[action], _now_ms(request), grant.epoch
            )
    except InboxBusy:
        raise MessageBusy(detail="message: changing too fast; retry") from None
    if stored is None:
        raise NotFoundException(detail="message: not in this recipient's inbox")
    return message_view(stored)


_ACTIONS: dict[str, Action] = {
    "read": "read", "unread": "unread", "seen": "seen", "archive": "archive",
    "unarchive": "unarchive",
}  # fmt: skip


def now_of(request: Req) -> datetime:
    """The API's clock (a test's when it sets one)."""
    now: datetime = request.app.state.clock()
    return now


def _now_ms(request: Req) -> int:
    return int(now_of(request).timestamp() * 1000)


def time_of(ms: int) -> datetime | None:
    """A state's time in ms as a datetime; None for 0 (it did not happen)."""
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


INBOX_ROUTES = [
    create_inbox_token, revoke_inbox_tokens, list_inbox, inbox_counts, read_all, mark_message,
]  # fmt: skip
