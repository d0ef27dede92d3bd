"""A request's fingerprint: the same for the same notification however its JSON is spelled,
or whether it came alone or in a batch; different for any other body; as before for a
recipient without the fields recipients gained later."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from app.api.schemas import BatchItem
from app.ingest.fingerprints import fingerprint
from app.ingest.requests import NotificationRequest, Recipient
from tests.conftest import REQUEST


def request(type_: str, data: dict[str, Any], **fields: Any) -> NotificationRequest:
    email = fields.pop("email", None)
    recipient = Recipient(id="user-42", email=email)
    return NotificationRequest(recipient=recipient, type=type_, data=data, **fields)


def push_targets_request(*targets: Any, tokens: tuple[str, ...] = ()) -> NotificationRequest:
    recipient = {"id": "u", "push_targets": list(targets), "push_tokens": list(tokens)}
    return msgspec.convert({"recipient": recipient, "type": "news"}, NotificationRequest)


def test_the_same_request_has_the_same_fingerprint_whatever_the_key_order() -> None:
    first = request("marketing", {"subject": "S", "body": "B", "extra": {"a": 1, "b": 2}})
    second = request("marketing", {"extra": {"b": 2, "a": 1}, "body": "B", "subject": "S"})
    assert list(first.data) != list(second.data)
    assert fingerprint(first) == fingerprint(second)


def test_a_different_body_has_a_different_fingerprint() -> None:
    first = request("marketing", {"subject": "S", "body": "B"})
    assert fingerprint(first) != fingerprint(request("marketing", {"subject": "S", "body": "C"}))
    assert fingerprint(first) != fingerprint(
        request("marketing", {"subject": "S", "body": "B"}, email="jane@example.com")
    )
    assert fingerprint(first) != fingerprint(
        request("marketing", {"subject": "S", "body": "B"}, ttl_seconds=60)
    )


def test_fingerprint_ignores_nothing_that_matters() -> None:
    other = NotificationRequest(recipient=REQUEST.recipient, type="marketing", priority="LOW",
                                data=REQUEST.data)  # fmt: skip
    assert fingerprint(REQUEST) != fingerprint(other)


def test_a_batch_item_fingerprints_like_the_same_notification_posted_alone() -> None:
    fields = msgspec.structs.asdict(REQUEST)
    assert fingerprint(BatchItem(**fields, idempotency_key="k")) == fingerprint(REQUEST)
    assert fingerprint(BatchItem(**fields, idempotency_key="other")) == fingerprint(REQUEST)


def test_a_recipient_without_push_targets_fingerprints_as_before() -> None:
    # As the recipient was encoded before it had push targets (and webhook URLs).
    before = {"id": "u", "email": None, "phone": None, "push_tokens": ["t"],
              "webhook_url": "https://hooks.example/x"}  # fmt: skip
    req = NotificationRequest(recipient=Recipient(**before), type="news")
    expected = msgspec.json.Encoder(order="sorted").encode(
        (before, *msgspec.structs.astuple(req)[1:7])
    )
    assert fingerprint(req) == hashlib.sha256(expected).hexdigest()[:32]
    with_target = push_targets_request({"platform": "fcm", "token": "t"})
    assert fingerprint(with_target) != fingerprint(push_targets_request(tokens=("t",)))
