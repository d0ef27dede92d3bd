"""A request's fingerprint: what its idempotency record keeps, so that a retry under the same
key is told apart from another body (``fingerprint``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from app.ingest.requests import NotificationRequest

_canonical = msgspec.json.Encoder(order="sorted")
# The fields a request had before sending later and cancelling: the ones after them count
# only when given, so a request accepted by an earlier version fingerprints as it did.
_LATER_FIELDS = ("send_at", "delay", "cancellation_key")
_FINGERPRINTED = len(NotificationRequest.__struct_fields__) - len(_LATER_FIELDS)


def fingerprint(request: NotificationRequest) -> str:
    """A digest of the request's canonical form: key order and spacing do not matter.

    Only the fields of a single POST count, so a batch item (which adds its idempotency
    key after them) fingerprints like the same notification posted alone.
    """
    fields = msgspec.structs.astuple(request)[:_FINGERPRINTED]
    recipient = request.recipient
    if recipient.webhook_url is None or not recipient.push_targets:
        # The fields a recipient gained later count only when given, so a retry of a
        # request accepted by an earlier version still matches its record.
        before: dict[str, Any] = {
            "id": recipient.id,
            "email": recipient.email,
            "phone": recipient.phone,
            "push_tokens": recipient.push_tokens,
        }
        if recipient.webhook_url is not None:
            before["webhook_url"] = recipient.webhook_url
        if recipient.push_targets:
            before["push_targets"] = recipient.push_targets
        fields = (before, *fields[1:])
    if request.send_at is not None or request.delay is not None or request.cancellation_key:
        fields = (*fields, request.send_at, request.delay, request.cancellation_key)
    canonical = _canonical.encode(fields)
    return hashlib.sha256(canonical).hexdigest()[:32]
