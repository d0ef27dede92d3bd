"""The words every layer shares: channels, priorities, error classes, delivery statuses and
campaign states, each defined once.

Each is a ``StrEnum`` whose members are the very strings that events, work items, Redis
hashes, SQL rows and the HTTP API carry, so entries written before stay readable and a member
compares equal to its text. The Lua scripts get the delivery statuses and their sets from
here when they load (``streams.core.scripts``), and the read model's CHECK constraints list the
same values (``projections/migrations/007_vocabulary_checks.sql``);
``tests/integration/core/test_vocabulary.py`` fails when either drifts from these.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class Channel(StrEnum):
    """Where a delivery goes."""

    PUSH = "PUSH"
    EMAIL = "EMAIL"
    SMS = "SMS"
    IN_APP = "IN_APP"
    WEBHOOK = "WEBHOOK"  # a signed POST to a URL (a chat tool, a customer's endpoint)


class Priority(StrEnum):
    """A notification's priority: each has its own work stream and worker lane, and HIGH has
    provider quota the others may not use."""

    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"

    def __init__(self, value: str) -> None:
        # Derived once per member, not per use: ingest asks for them per delivery.
        # ``high``, ``normal`` or ``low``: how key names and Lua scripts name this
        # priority's work stream (``work:high``), and the prefix of its ``delayed`` members.
        self.stream_name = value.lower()
        # ``H``, ``N`` or ``L``: this priority in the rate-limit script's arguments (one
        # character per request keeps a batch's arguments to one short string).
        self.letter = value[0]


class ErrorClass(StrEnum):
    """Why an attempt failed, which decides what happens next."""

    TRANSIENT = "TRANSIENT"  # timeouts, 5xx, 429: retried with backoff
    PERMANENT = "PERMANENT"  # invalid address, unsubscribed, invalid token: failed at once
    POISON = "POISON"  # undecodable work item, or delivered too often
    BUG = "BUG"  # an unexpected exception in Clarion or an adapter


CHANNELS: tuple[Channel, ...] = tuple(Channel)
PRIORITIES: tuple[Priority, ...] = tuple(Priority)
ERROR_CLASSES: tuple[ErrorClass, ...] = tuple(ErrorClass)


class DeliveryStatus(StrEnum):
    """Where a delivery is in its life (``streams.delivery.state`` draws the machine)."""

    QUEUED = "QUEUED"  # in a work stream, waiting for a worker
    SCHEDULED = "SCHEDULED"  # in ``delayed``: a retry, a rate-limit wait or quiet hours
    SENDING = "SENDING"  # leased by a worker
    SENT = "SENT"  # the provider accepted it
    FAILED = "FAILED"  # given up on; its work item is in the dead-letter queue
    EXPIRED = "EXPIRED"  # its TTL passed before it could be sent
    SUPPRESSED = "SUPPRESSED"  # never to be sent: opted out, no valid address
    DELIVERED = "DELIVERED"  # the provider confirmed it arrived (provider feedback)
    READ = "READ"  # IN_APP: the recipient read the inbox message
    CANCELLED = "CANCELLED"  # its campaign was cancelled before it was sent
    # An escalation step not needed (``unless``): the notification was read or delivered
    # on an earlier step's channel before this one came due.
    SKIPPED = "SKIPPED"
    # Its notification joined a digest (``digest`` in the catalog): the digest's own
    # notification, made when it closes, is what is sent.
    DIGESTED = "DIGESTED"


# Nothing is sent for a delivery in one of these any more (a replay of a FAILED one starts a
# new attempt series, by an operator's decision).
TERMINAL: frozenset[DeliveryStatus] = frozenset(
    {
        DeliveryStatus.SENT,
        DeliveryStatus.DELIVERED,
        DeliveryStatus.READ,
        DeliveryStatus.FAILED,
        DeliveryStatus.EXPIRED,
        DeliveryStatus.SUPPRESSED,
        DeliveryStatus.CANCELLED,
        DeliveryStatus.SKIPPED,
        DeliveryStatus.DIGESTED,
    }
)
# The provider took it: never sent again, not even by a replay.
PROVIDER_ACCEPTED: frozenset[DeliveryStatus] = frozenset(
    {DeliveryStatus.SENT, DeliveryStatus.DELIVERED, DeliveryStatus.READ}
)
# The provider confirmed it arrived (or the recipient read it): a campaign's "delivered".
CONFIRMED: frozenset[DeliveryStatus] = frozenset({DeliveryStatus.DELIVERED, DeliveryStatus.READ})
# Ended without ever reaching a provider, for a reason a replay cannot undo.
ENDED_UNSENT: frozenset[DeliveryStatus] = frozenset(
    {
        DeliveryStatus.EXPIRED,
        DeliveryStatus.SUPPRESSED,
        DeliveryStatus.CANCELLED,
        DeliveryStatus.SKIPPED,
        DeliveryStatus.DIGESTED,
    }
)


class CampaignState(StrEnum):
    """A campaign's life (``app.campaigns``): drafted while its recipients are uploaded,
    started (scheduled until its start time), generating (running), paused, and at last
    completed (every recipient has a notification) or cancelled."""

    DRAFT = "draft"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    COMPLETED = "completed"

    def may_become(self, state: CampaignState) -> bool:
        """Whether a campaign in this state may be moved to ``state``."""
        return state in CAMPAIGN_TRANSITIONS[self]

    @property
    def ended(self) -> bool:
        """Whether nothing moves the campaign any more (completed or cancelled)."""
        return not CAMPAIGN_TRANSITIONS[self]


# Every move a campaign may make, and only these: a state's next states. Started (or resumed)
# a campaign is scheduled until its start time, then running; the generator completes it.
CAMPAIGN_TRANSITIONS: Mapping[CampaignState, frozenset[CampaignState]] = MappingProxyType(
    {
        CampaignState.DRAFT: frozenset(
            {CampaignState.SCHEDULED, CampaignState.RUNNING, CampaignState.CANCELLED}
        ),
        CampaignState.SCHEDULED: frozenset(
            {CampaignState.RUNNING, CampaignState.PAUSED, CampaignState.CANCELLED}
        ),
        CampaignState.RUNNING: frozenset(
            {CampaignState.PAUSED, CampaignState.CANCELLED, CampaignState.COMPLETED}
        ),
        CampaignState.PAUSED: frozenset(
            {CampaignState.SCHEDULED, CampaignState.RUNNING, CampaignState.CANCELLED}
        ),
        CampaignState.CANCELLED: frozenset(),
        CampaignState.COMPLETED: frozenset(),
    }
)
