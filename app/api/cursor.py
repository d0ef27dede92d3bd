"""Keyset-paging cursors of ``GET /v1/deliveries``: opaque to clients, checked when read."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime, timedelta

import msgspec
from litestar.exceptions import ClientException

from streams.core.ids import is_uuid

MAX_CURSOR_LENGTH = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
