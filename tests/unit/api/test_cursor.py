"""Paging cursors of ``GET /v1/deliveries``: opaque, exact, and checked when read back."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from litestar.exceptions import ClientException

from app.api.cursor import MAX_CURSOR_LENGTH, decode_cursor, encode_cursor

DELIVERY_ID = "01a22000-0000-7000-8000-000000000001"


def test_a_cursor_keeps_the_exact_time_and_id() -> None:
    at = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
    delivery_id = "01a22000-0000-7000-8000-000000000001"
    assert decode_cursor(encode_cursor(at, delivery_id)) == (at, delivery_id)


def test_a_cursor_is_url_safe_text_without_padding() -> None:
    # 15 digits of microseconds: the JSON is 56 bytes, which plain base64 would pad.
    cursor = encode_cursor(datetime(1999, 11, 29, tzinfo=UTC), DELIVERY_ID)
    assert cursor.isascii()
    assert not set(cursor) & set("+/= ")
    padded = cursor + "=" * (-len(cursor) % 4)  # what a client library may add back
    assert decode_cursor(padded) == decode_cursor(cursor)


def test_an_id_in_capitals_reads_back_in_lower_case() -> None:
    raw = f'[0,"{DELIVERY_ID.upper()}"]'.encode()
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert decode_cursor(cursor) == (datetime(1970, 1, 1, tzinfo=UTC), DELIVERY_ID)


def _of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not a cursor",
        "ü" * 10,
        _of(b"[0," + b" " * MAX_CURSOR_LENGTH + b'"01a22000-0000-7000-8000-000000000001"]'),
        _of(b"{}"),
        _of(b'[1, "not-an-id"]'),
        _of(b'["soon", "01a22000-0000-7000-8000-000000000001"]'),
        _of(b'[99999999999999999999, "01a22000-0000-7000-8000-000000000001"]'),
        _of(b'[1, "01a22000-0000-7000-8000-000000000001", "more"]'),
    ],
)
def test_anything_else_is_422_naming_the_cursor(cursor: str) -> None:
    with pytest.raises(ClientException) as caught:
        decode_cursor(cursor)
    assert caught.value.status_code == 422
    assert str(caught.value.detail).startswith("cursor: invalid")
