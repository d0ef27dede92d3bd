"""What both clients send: checked settings, headers, paths, and answers read into Structs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx
import pytest

from clarion_client.calls import (
    campaign_path,
    checked_api_key,
    checked_base_url,
    decoded,
    headers,
    inbox_tokens_path,
    new_key,
    recipient_deliveries_path,
    status_path,
)
from clarion_client.errors import ServerError
from clarion_client.models import Accepted


def test_base_url_must_be_http_and_loses_its_trailing_slash() -> None:
    assert checked_base_url("https://clarion.example.com/") == "https://clarion.example.com"
    assert checked_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    for wrong in ("clarion.example.com", "ftp://clarion.example.com", "http://"):
        with pytest.raises(ValueError, match="base_url: an http:// or https:// URL"):
            checked_base_url(wrong)


def test_an_api_key_that_cannot_be_one_is_refused_without_showing_it() -> None:
    assert checked_api_key("dev-secret-key") == "dev-secret-key"
    for wrong in ("", "two words", "line\nbreak"):
        with pytest.raises(ValueError, match=r"^api_key: a non-empty key without spaces\b"):
            checked_api_key(wrong)


def test_headers_carry_the_key_as_bearer_and_the_idempotency_key_when_given() -> None:
    sent = headers("s3cret-key", "order-17", json_body=True)
    assert sent["Authorization"] == "Bearer s3cret-key"
    assert sent["Idempotency-Key"] == "order-17"
    assert sent["Content-Type"] == "application/json"
    read = headers("s3cret-key")
    assert "Idempotency-Key" not in read
    assert "Content-Type" not in read


def test_status_path_quotes_whatever_the_id_holds() -> None:
    assert status_path("0192-ab") == "/v1/notifications/0192-ab"
    assert status_path("../ops/lag?x=1") == "/v1/notifications/..%2Fops%2Flag%3Fx%3D1"


def test_campaign_paths_quote_the_id() -> None:
    assert campaign_path("019ae") == "/v1/campaigns/019ae"
    assert campaign_path("019ae", "start") == "/v1/campaigns/019ae/start"
    assert campaign_path("a/b", "recipients") == "/v1/campaigns/a%2Fb/recipients"


def test_inbox_token_paths_quote_the_recipient_id() -> None:
    assert inbox_tokens_path("u-1") == "/v1/recipients/u-1/inbox-tokens"
    assert inbox_tokens_path("a/b?c", "revoke") == "/v1/recipients/a%2Fb%3Fc/inbox-tokens/revoke"


def test_a_recipients_log_path_quotes_the_id_and_carries_only_the_filters_given() -> None:
    nothing: dict[str, None] = dict.fromkeys(
        ("status", "channel", "notification_type", "since", "until", "limit", "cursor")
    )
    assert recipient_deliveries_path("u-1", **nothing) == "/v1/recipients/u-1/deliveries"
    since = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
    path = recipient_deliveries_path(
        "a/b?c", **{**nothing, "notification_type": "otp", "since": since, "limit": 2,
                    "until": "2026-12-02T00:00:00+01:00", "cursor": "abc"},
    )  # fmt: skip
    assert path == (
        "/v1/recipients/a%2Fb%3Fc/deliveries?type=otp&since=2026-12-01T12%3A30%3A00%2B00%3A00"
        "&until=2026-12-02T00%3A00%3A00%2B01%3A00&limit=2&cursor=abc"
    )


def test_new_keys_are_fresh_uuids() -> None:
    first, second = new_key(), new_key()
    assert first != second
    assert uuid.UUID(first).version == 4


def test_an_answer_of_another_shape_is_a_server_error_naming_the_shape() -> None:
    good = httpx.Response(202, content=b'{"id": "n-1", "deliveries": []}')
    assert decoded(good, Accepted) == Accepted(id="n-1", deliveries=[])
    with pytest.raises(ServerError, match=r"202 answer does not read as Accepted: .*deliveries"):
        decoded(httpx.Response(202, content=b'{"id": "n-1"}'), Accepted)
    with pytest.raises(ServerError, match="does not read as Accepted"):
        decoded(httpx.Response(202, content=b"<html>"), Accepted)
