"""The notification request's own checks: how deep ``data`` may nest, what an email
address is, and which webhook URLs are taken."""

from __future__ import annotations

import itertools
import re
from typing import Any

import msgspec
import pytest

from app.ingest.requests import MAX_DATA_DEPTH, Email, NotificationRequest, target_address
from app.validation import describe


def request_with(data: Any) -> bytes:
    return msgspec.json.encode({"recipient": {"id": "u"}, "type": "otp", "data": data})


def nested_data(levels: int) -> dict[str, Any]:
    """``data`` that is ``levels`` levels of objects and arrays, itself the first."""
    value: Any = "leaf"
    for level in range(levels - 1):
        value = [value] if level % 2 else {"k": value}
    return {"k": value}


def test_data_may_nest_max_data_depth_levels() -> None:
    decoded = msgspec.json.decode(
        request_with(nested_data(MAX_DATA_DEPTH)), type=NotificationRequest
    )
    assert decoded.data == nested_data(MAX_DATA_DEPTH)


@pytest.mark.parametrize(
    "data",
    [
        nested_data(MAX_DATA_DEPTH + 1),
        {"flat": 1, "last": nested_data(MAX_DATA_DEPTH)},  # one level below data itself
        {"list": [1, [2, nested_data(MAX_DATA_DEPTH - 2)]]},
    ],
)
def test_data_nested_deeper_is_refused_naming_it(data: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(request_with(data), type=NotificationRequest)
    assert str(caught.value) == "data: objects and arrays nest at most 32 levels deep"


def test_wide_flat_data_is_fine() -> None:
    data = {f"k{n}": [n, {"n": n}] for n in range(1000)}
    assert msgspec.json.decode(request_with(data), type=NotificationRequest).data == data


# The pattern as it was written before it was made linear: the one it must agree with.
_OBVIOUS_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def test_the_email_pattern_accepts_exactly_what_the_obvious_one_does() -> None:
    info = msgspec.inspect.type_info(Email)
    assert isinstance(info, msgspec.inspect.StrType)
    assert info.pattern is not None
    linear = re.compile(info.pattern)
    for length in range(9):
        for chars in itertools.product("a.@ ", repeat=length):
            text = "".join(chars)
            assert bool(linear.search(text)) == bool(_OBVIOUS_EMAIL.search(text)), text


def webhook_request(url: str) -> bytes:
    return msgspec.json.encode({"recipient": {"id": "u", "webhook_url": url}, "type": "hook"})


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/clarion?token=abc",
        "HTTP://10.0.0.1:8080/x",
        "https://xn--bcher-kva.example/",
    ],
)
def test_a_webhook_url_is_an_http_url_of_printable_ascii(url: str) -> None:
    decoded = msgspec.json.decode(webhook_request(url), type=NotificationRequest)
    assert decoded.recipient.webhook_url == url


@pytest.mark.parametrize(
    "url",
    ["ftp://hooks.example.com/", "https://bücher.example/", "https://a b.example/", "https://",
     "https://hooks.example.com/\n", "//hooks.example.com/", "https://" + "a" * 2048],
)  # fmt: skip
def test_anything_else_is_refused_at_ingest_naming_the_field(url: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=r"recipient\.webhook_url"):
        msgspec.json.decode(webhook_request(url), type=NotificationRequest)


APNS_TOKEN = "a1" * 32
P256DH = "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM"
AUTH = "tBHItJI5svbpez7KI4CCXg"
SUBSCRIPTION = {
    "platform": "webpush",
    "endpoint": "https://updates.push.example/wpush/v2/gAAAAABk",
    "expirationTime": None,
    "keys": {"p256dh": P256DH, "auth": AUTH},
}


def push_request(*targets: Any, tokens: tuple[str, ...] = ()) -> bytes:
    recipient = {"id": "u", "push_targets": list(targets), "push_tokens": list(tokens)}
    return msgspec.json.encode({"recipient": recipient, "type": "news"})


def test_push_targets_name_their_platform_and_become_addresses() -> None:
    raw = push_request(
        {"platform": "fcm", "token": "fcm-token:APA91b"},
        {"platform": "apns", "token": APNS_TOKEN},
        SUBSCRIPTION,  # PushSubscription.toJSON() as the browser gives it, plus the platform
    )
    recipient = msgspec.json.decode(raw, type=NotificationRequest).recipient
    assert [target_address(target) for target in recipient.push_targets] == [
        "fcm fcm-token:APA91b",
        f"apns {APNS_TOKEN}",
        f"webpush https://updates.push.example/wpush/v2/gAAAAABk {P256DH} {AUTH}",
    ]


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"platform": "android", "token": "t"}, "recipient.push_targets[0]"),
        ({"platform": "apns", "token": "not hex"}, "recipient.push_targets[0].token"),
        ({"platform": "apns", "token": "ab" * 10}, "recipient.push_targets[0].token"),
        ({"platform": "fcm", "token": "has space"}, "recipient.push_targets[0].token"),
        ({**SUBSCRIPTION, "endpoint": "ftp://push.example/"}, "push_targets[0].endpoint"),
        ({**SUBSCRIPTION, "endpoint": "https://a b.example/"}, "push_targets[0].endpoint"),
        ({**SUBSCRIPTION, "keys": {"p256dh": P256DH}}, "push_targets[0].keys"),
        ({**SUBSCRIPTION, "keys": {"p256dh": "a b", "auth": AUTH}}, "keys.p256dh"),
        ({**SUBSCRIPTION, "extra": 1}, "push_targets[0]"),
    ],
)
def test_a_broken_push_target_is_refused_naming_it(target: dict[str, Any], field: str) -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(push_request(target), type=NotificationRequest)
    assert field in describe(caught.value)


def test_at_most_twenty_devices_in_all() -> None:
    fcm = [{"platform": "fcm", "token": f"t{i}"} for i in range(12)]
    msgspec.json.decode(push_request(*fcm, tokens=("a",) * 8), type=NotificationRequest)
    with pytest.raises(msgspec.ValidationError, match="at most 20 devices in all"):
        msgspec.json.decode(push_request(*fcm, tokens=("a",) * 9), type=NotificationRequest)
