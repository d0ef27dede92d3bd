"""Request and response bodies of the HTTP API (separate from the events they cause)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from app.ingest.requests import NotificationRequest
from streams.core.events import PreferenceEntry
from streams.core.records import DeliveryAtAcceptance
from streams.core.vocabulary import Channel, DeliveryStatus, Priority


class BatchItem(NotificationRequest, frozen=True, kw_only=True, forbid_unknown_fields=True):
    idempotency_key: str


class BatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/notifications/batch``; items are validated one by one."""

    notifications: Annotated[list[msgspec.Raw], msgspec.Meta(min_length=1, max_length=1000)]


class BatchRequestSchema(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The batch body as documented in the OpenAPI schema."""

    notifications: Annotated[list[BatchItem], msgspec.Meta(min_length=1, max_length=1000)]


class BatchResult(msgspec.Struct, frozen=True, omit_defaults=True):
    idempotency_key: str
    status_code: int
    id: str | None = None
    deliveries: list[DeliveryAtAcceptance] | None = None
    detail: str | None = None


class BatchResponse(msgspec.Struct, frozen=True):
    results: list[BatchResult]


class PreferenceItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    channel: Channel
    enabled: bool


class PreferencesBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    preferences: Annotated[list[PreferenceItem], msgspec.Meta(max_length=1000)]


class QuietHoursBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    start: str
    end: str
    timezone: str


class RecipientSettingsView(msgspec.Struct, frozen=True):
    recipient_id: str
    version: int
    preferences: list[PreferenceEntry]
    quiet_hours: QuietHoursBody | None


class DeliveryView(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery's current state (``reason`` says why it is SUPPRESSED, EXPIRED, CANCELLED
    (which campaign, or the notification's cancellation by id or key, cancelled by which
    producer), SKIPPED (an escalation step not needed: ``read``, ``delivered``, what an
    earlier step's delivery was) or SCHEDULED (``scheduled``: sent later; ``step``: an
    escalation step waiting; ``fallback``: a fallback about to go; quiet hours, an address
    awaited), or which provider feedback set its status, null when nothing needs saying;
    ``error_class``, ``last_error`` are from its latest failed attempt;
    ``provider_message_id`` is set once it was sent; ``due_at``, only while it is SCHEDULED,
    when it is due; ``step``, its place in its type's chain of escalation steps, from 1 (0:
    not a step); ``fallback_of``, the delivery whose permanent failure made this one, null
    for any other)."""

    id: str
    channel: Channel | None
    status: DeliveryStatus
    reason: str | None
    attempts: int
    error_class: str | None
    last_error: str | None
    provider_message_id: str | None
    updated_at: datetime
    # When a SCHEDULED delivery is due: sent later (``send_at``/``delay``), the end of the
    # recipient's quiet hours, a retry's time; null in any other status. Last, with a
    # default: clients that do not know it are unaffected.
    due_at: datetime | None = None
    # Escalation steps and fallbacks (``steps``, ``fallback`` in the catalog): its place in
    # the chain (0: not a step) and the delivery it replaces (null: not a fallback). From the
    # read model: 0 and null while the answer comes from the write model. With defaults, so
    # clients that do not know them are unaffected.
    step: int = 0
    fallback_of: str | None = None


class NotificationStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/notifications/{id}``: the notification and each delivery's state.
    ``recipient_id`` is null for a campaign's notification to a recipient its segment
    selected, unless the API key has the ``recipients`` scope: a producer sees only the
    recipients it named itself."""

    id: str
    type: str
    priority: Priority
    recipient_id: str | None
    created_at: datetime
    deliveries: list[DeliveryView]
    projection_lag_ms: int
    # Digests (``digest`` in the catalog): the digest this notification joined (its
    # deliveries DIGESTED; null until the read model has it), and the digest a
    # notification was made of when one closed.
    digest_id: str | None = None
    made_of_digest: str | None = None


class DeliveryListItem(DeliveryView, frozen=True, kw_only=True):
    notification_id: str
    type: str | None
    producer: str | None


class DeliveryPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/deliveries``: one page, newest first; ``next_cursor`` is null on the last."""

    deliveries: list[DeliveryListItem]
    next_cursor: str | None
    projection_lag_ms: int


# Standard Webhooks secrets decode to 24-64 bytes: "whsec_" and at most 88 base64 characters.
MAX_SECRET_CHARS = 100
MAX_STATUS_BATCH = 500


class StatusWebhookBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``PUT /v1/status-webhook``: where to POST the producer's statuses; without ``secret``
    Clarion makes one and shows it in this answer only."""

    url: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
    secret: Annotated[str, msgspec.Meta(max_length=MAX_SECRET_CHARS)] | None = None
    # Statuses per POST: 1, one Standard Webhooks message each; more: ``delivery.batch``.
    max_batch: Annotated[int, msgspec.Meta(ge=1, le=MAX_STATUS_BATCH)] = 1


class StatusWebhookView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The producer's status webhook: never its secret, except in the answer that made it."""

    url: str
    secret_set: bool
    max_batch: int
    # Statuses waiting in the outbox (being sent or not yet) and given up, when asked for.
    waiting: int | None = None
    dead_letters: int | None = None
    secret: str | None = None
