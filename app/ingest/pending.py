"""A request while it is being ingested, across the rounds of its write: the request as
checked and planned (``CheckedRequest``), what is written for it and what the last round
learnt of the recipient (``Pending``), and the request as planned with the profile in the
recipient's settings (``with_profile_of``).
"""

from __future__ import annotations

import msgspec

from app.ingest.chains import Identity
from app.ingest.profiles import decode as decode_profile
from app.ingest.profiles import merged
from app.ingest.requests import NotificationRequest
from streams.core.keys import ShardKeys
from streams.ingest.writer import IngestItem
from streams.recipients.read import RecipientSettings
from streams.recipients.suppressions import EMPTY as EMPTY_LIST
from streams.recipients.suppressions import ListView

# The settings a recipient without any has: what a first plan assumes (the common case).
NO_SETTINGS = RecipientSettings()


class CheckedRequest(msgspec.Struct, frozen=True):
    """A request checked against the catalog, with its notification id fixed for all its
    rounds. ``body`` is the request as planned: the one given (``given``), with the
    recipient's profile filled in once a round found one (and with it new delivery ids:
    nothing of a round that does not accept is written)."""

    producer: str
    shard: ShardKeys
    key: str
    body: NotificationRequest
    identity: Identity
    fingerprint: str
    given: NotificationRequest


class Pending(msgspec.Struct):
    """A request being ingested: where its answer goes, what is written for it, and what the
    last round learnt of the recipient's settings and of the suppression list."""

    index: int
    request: CheckedRequest
    item: IngestItem
    settings: RecipientSettings = NO_SETTINGS
    suppressions: ListView = EMPTY_LIST
    # The digest the ingest script named, the last round it sent the item back for joining
    # another than the one it named (None: none did), and how many rounds did.
    digest_named: str | None = None
    digest_rounds: int = 0


def with_profile_of(given: NotificationRequest, settings: RecipientSettings) -> NotificationRequest:
    """The request with the profile of the recipient's settings filled in, where it has one."""
    profile = decode_profile(settings.profile)
    return given if profile is None else merged(given, profile)
