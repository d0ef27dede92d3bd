"""What the sync and the async client share: the endpoints' paths, the headers of a call,
idempotency keys, and reading an answer into its Struct."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import httpx
import msgspec

from clarion_client.errors import ServerError

T = TypeVar("T")

NOTIFICATIONS = "/v1/notifications"
BATCH = "/v1/notifications/batch"
CAMPAIGNS = "/v1/campaigns"
CANCELLATIONS = "/v1/cancellations"
USER_AGENT = "clarion-client/0.1.0"
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
encode = msgspec.json.Encoder().encode


def checked_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash; ValueError when it is no http(s) URL."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url: an http:// or https:// URL is required, not {base_url!r}")
    return base_url.rstrip("/")


def checked_api_key(api_key: str) -> str:
    """``api_key``, or ValueError (naming no part of it) when it cannot be a key."""
    if not api_key or not api_key.isprintable() or " " in api_key:
        raise ValueError("api_key: a non-empty key without spaces is required")
    return api_key


def status_path(notification_id: str) -> str:
    """The path of ``GET /v1/notifications/{id}``, the id quoted whatever it holds."""
    return f"{NOTIFICATIONS}/{quote(notification_id, safe='')}"


def cancel_path(notification_id: str) -> str:
    """The path of ``POST /v1/notifications/{id}/cancel``, the id quoted whatever it holds."""
    return f"{status_path(notification_id)}/cancel"


def campaign_path(campaign_id: str, action: str = "") -> str:
    """The path of a campaign, or of an action on it (``recipients``, ``start``)."""
    path = f"{CAMPAIGNS}/{quote(campaign_id, safe='')}"
    return f"{path}/{action}" if action else path


def inbox_tokens_path(recipient_id: str, action: str = "") -> str:
    """The path of a recipient's inbox tokens, or of an action on them (``revoke``)."""
    path = f"/v1/recipients/{quote(recipient_id, safe='')}/inbox-tokens"
    return f"{path}/{action}" if action else path


def recipient_deliveries_path(
    recipient_id: str,
    *,
    status: str | None,
    channel: str | None,
    notification_type: str | None,
    since: datetime | str | None,
    until: datetime | str | None,
    limit: int | None,
    cursor: str | None,
) -> str:
    """The path and query of ``GET /v1/recipients/{id}/deliveries``: the filters given (a
    time as ISO 8601; one without an offset is UTC to the server)."""
    path = f"/v1/recipients/{quote(recipient_id, safe='')}/deliveries"
    given = {
        "status": status, "channel": channel, "type": notification_type,
        "since": since.isoformat() if isinstance(since, datetime) else since,
        "until": until.isoformat() if isinstance(until, datetime) else until,
        "limit": limit, "cursor": cursor,
    }  # fmt: skip
    query = urlencode({name: value for name, value in given.items() if value is not None})
    return f"{path}?{query}" if query else path


def new_key() -> str:
    """A fresh idempotency key, for a call whose caller gave none."""
    return str(uuid.uuid4())


def headers(
    api_key: str, idempotency_key: str | None = None, *, json_body: bool = False
) -> dict[str, str]:
    """The headers of a call: the key's header for calls that take one, the body's type
    for calls with one."""
    sent = {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    if idempotency_key is not None:
        sent["Idempotency-Key"] = idempotency_key
    if json_body:
        sent["Content-Type"] = "application/json"
    return sent


def decoded(response: httpx.Response, answer_type: type[T]) -> T:
    """A success answer as ``answer_type``; ServerError when it is not of that shape."""
    decoder: msgspec.json.Decoder[T] | None = _decoders.get(answer_type)
    if decoder is None:
        decoder = _decoders[answer_type] = msgspec.json.Decoder(answer_type)
    try:
        return decoder.decode(response.content)
    except msgspec.DecodeError as error:
        name = answer_type.__name__
        detail = f"the {response.status_code} answer does not read as {name}: {error}"
        raise ServerError(response.status_code, detail) from None
