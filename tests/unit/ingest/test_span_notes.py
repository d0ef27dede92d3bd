"""An ingest request's span names its producer, its notifications' types and priorities (the
type's priority unless the request gives one) and what was accepted; types the catalog does
not know are left out."""

from __future__ import annotations

import msgspec
import pytest

from app import tracing
from app.catalog import TypeConfig
from app.ingest.answers import IngestAnswer, refused
from app.ingest.requests import NotificationRequest, Recipient
from app.ingest.span_notes import note_on_span
from streams.core.errors import Invalid
from streams.core.vocabulary import Priority
from tests.unit.tracing_support import ended, tracing_on

__all__ = ["tracing_on"]  # the fixture, used by name


def request(type_name: str, priority: Priority | None = None) -> NotificationRequest:
    return NotificationRequest(recipient=Recipient(id="u"), type=type_name, priority=priority)


@pytest.mark.usefixtures("tracing_on")
def test_the_span_describes_the_batch_by_its_answers() -> None:
    otp = {"channels": ["SMS"], "priority": "HIGH", "ttl_seconds": 60, "opt_out": False}
    types = {"otp": msgspec.convert({**otp, "templates": {}}, TypeConfig)}
    entries: list[tuple[str, NotificationRequest | IngestAnswer]] = [
        ("k1", request("otp")),
        ("k2", request("otp", Priority.LOW)),
        ("k3", request("unknown")),
    ]
    answers = [
        IngestAnswer(response=b'{"id":"n-1","deliveries":[]}'),
        refused(Invalid("nope")),
        refused(Invalid("type: unknown")),
    ]
    with tracing.tracer().start_as_current_span("batch"):
        note_on_span(types, "shop", entries, answers)
    [span] = ended()
    assert dict(span.attributes or {}) == {
        "clarion.producer": "shop",
        "clarion.notification.type": "otp",
        "clarion.notification.priority": ("HIGH", "LOW"),
        "clarion.notification.count": 3,
        "clarion.notification.accepted": 1,
    }
