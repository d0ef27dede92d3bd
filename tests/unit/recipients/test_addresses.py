"""Addresses given to the suppression list become the delivery addresses fan-out uses (so the
digests match), each checked by its channel's shape; the list shows them masked."""

from __future__ import annotations

import pytest

from app.ingest.requests import ApnsTarget, FcmTarget, SubscriptionKeys, WebPushTarget
from app.recipients.addresses import AddressError, delivery_address, masked

SUBSCRIPTION = WebPushTarget(
    endpoint="https://push.example.net/p/abc123",
    keys=SubscriptionKeys(p256dh="B" + "a" * 86, auth="c" * 22),
)


def test_each_channel_takes_its_own_shape() -> None:
    assert delivery_address("EMAIL", "anna@example.com", None) == "anna@example.com"
    assert delivery_address("SMS", "+4915112345678", None) == "+4915112345678"
    assert delivery_address("WEBHOOK", "https://hooks.example.com/x", None) == (
        "https://hooks.example.com/x"
    )
    assert delivery_address("PUSH", "plain-token", None) == "plain-token"
    assert delivery_address("PUSH", None, FcmTarget(token="f-1")) == "fcm f-1"
    assert delivery_address("PUSH", None, ApnsTarget(token="ab" * 32)) == "apns " + "ab" * 32
    assert delivery_address("PUSH", None, SUBSCRIPTION).startswith("webpush https://push.example")


@pytest.mark.parametrize(
    ("channel", "address", "target", "message"),
    [
        ("EMAIL", "anna", None, "address: not a valid EMAIL address"),
        ("SMS", "0151 1234", None, "address: not a valid SMS address"),
        ("WEBHOOK", "ftp://x.example", None, "address: not a valid WEBHOOK address"),
        ("PUSH", "has space", None, "address: not a valid PUSH address"),
        ("IN_APP", "u-1", None, "channel: IN_APP has no addresses"),
        ("EMAIL", None, FcmTarget(token="t"), "push_target: only for the PUSH channel"),
        ("PUSH", "t", FcmTarget(token="t"), "address: give either"),
        ("SMS", None, None, "address: required"),
    ],
)
def test_a_wrong_address_names_the_field(
    channel: str, address: str | None, target: FcmTarget | None, message: str
) -> None:
    with pytest.raises(AddressError, match=message):
        delivery_address(channel, address, target)


def test_the_list_shows_an_address_masked() -> None:
    assert masked("EMAIL", "anna@example.com") == "a***@example.com"
    assert masked("SMS", "+4915112345678") == "+49***78"
    assert masked("PUSH", "fcm abcdefghijk") == "fcm abcdef***"
    assert masked("PUSH", "plain-token-123") == "plain-***"
    assert masked("PUSH", delivery_address("PUSH", None, SUBSCRIPTION)) == (
        "webpush push.example.net/***"
    )
    assert (
        masked("WEBHOOK", "https://hooks.example.com/t/secret") == "https://hooks.example.com/***"
    )
