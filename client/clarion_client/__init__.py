"""A typed client for Clarion's producer API: ``Clarion`` (blocking) and ``AsyncClarion``.

It owns the HTTP calls a producer makes: sending notifications, one or in batches of any
size, now or later, cancelling them (by id or by cancellation key), reading their status, a
recipient's message log, campaigns (create, upload recipients, start, progress), and
recipient tokens for the inbox (make, revoke); idempotency keys and retries. It imports
nothing of the server: only httpx and msgspec.
"""

from clarion_client.async_client import AsyncClarion
from clarion_client.batches import BATCH_LIMIT, UPLOAD_LIMIT
from clarion_client.errors import (
    AuthError,
    ClarionError,
    ConflictError,
    ConnectionFailedError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    UnavailableError,
)
from clarion_client.models import (
    DELIVERY_STATUSES,
    DIGESTED,
    SKIPPED,
    Accepted,
    ApnsTarget,
    BatchItem,
    BatchResult,
    CampaignSpec,
    CancelledDelivery,
    CancelledNotification,
    DeliveryAtAcceptance,
    DeliveryView,
    FcmTarget,
    InboxToken,
    InboxTokensRevoked,
    JoinedDigest,
    KeyCancellation,
    Notification,
    NotificationStatus,
    Progress,
    Recipient,
    RecipientDelivery,
    RecipientDeliveryPage,
    Segment,
    SubscriptionKeys,
    UploadAnswer,
    WebPushTarget,
)
from clarion_client.retry import NO_RETRIES, RetryPolicy
from clarion_client.sync_client import Clarion

__all__ = [
    "BATCH_LIMIT",
    "DELIVERY_STATUSES",
    "DIGESTED",
    "NO_RETRIES",
    "SKIPPED",
    "UPLOAD_LIMIT",
    "Accepted",
    "ApnsTarget",
    "AsyncClarion",
    "AuthError",
    "BatchItem",
    "BatchResult",
    "CampaignSpec",
    "CancelledDelivery",
    "CancelledNotification",
    "Clarion",
    "ClarionError",
    "ConflictError",
    "ConnectionFailedError",
    "DeliveryAtAcceptance",
    "DeliveryView",
    "FcmTarget",
    "InboxToken",
    "InboxTokensRevoked",
    "InvalidRequestError",
    "JoinedDigest",
    "KeyCancellation",
    "NotFoundError",
    "Notification",
    "NotificationStatus",
    "Progress",
    "RateLimitedError",
    "Recipient",
    "RecipientDelivery",
    "RecipientDeliveryPage",
    "RetryPolicy",
    "Segment",
    "ServerError",
    "SubscriptionKeys",
    "UnavailableError",
    "UploadAnswer",
    "WebPushTarget",
]
