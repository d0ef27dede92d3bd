"""A catalog's ingest quotas (``[quotas]``): what each producer may ingest (requests and
notifications, a sustained rate and a burst) and how much of Redis its campaigns may hold."""

from __future__ import annotations

from typing import Annotated

import msgspec

# As in CLARION_API_KEYS (``app.settings``).
ProducerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class Quota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A sustained rate and how much may come at once."""

    per_second: Annotated[float, msgspec.Meta(gt=0)]
    burst: Annotated[int, msgspec.Meta(ge=1)]


class CampaignLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How much of Redis one producer's campaigns may hold: campaigns open at once (created,
    not yet completed or cancelled), recipients uploaded to one campaign, and recipients
    uploaded to all its open campaigns together. Every uploaded id waits in Redis until its
    notification is generated; Redis runs without eviction, so without these one producer
    could fill it and stop every producer's writes."""

    open: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100
    audience: Annotated[int, msgspec.Meta(ge=1, le=100_000_000)] = 1_000_000
    open_audience: Annotated[int, msgspec.Meta(ge=1, le=1_000_000_000)] = 2_000_000


class IngestQuota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one producer may ingest: HTTP requests and notifications (a batch counts one
    request and each of its items, a campaign call one request, and a campaign's generator
    each notification); a quota left out is not limited. ``campaigns``: its campaigns'
    limits, which always apply (the defaults when left out)."""

    requests: Quota | None = None
    notifications: Quota | None = None
    campaigns: CampaignLimits = CampaignLimits()


class Quotas(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[quotas]``: the quota of every producer without one of its own (``default``), and
    producers' own quotas, which replace the default for them."""

    default: IngestQuota | None = None
    producers: dict[ProducerName, IngestQuota] = {}

    def of(self, producer: str) -> IngestQuota | None:
        """The quota ``producer`` ingests under; None: no limit."""
        return self.producers.get(producer, self.default)

    def campaigns_of(self, producer: str) -> CampaignLimits:
        """The limits of ``producer``'s campaigns (the defaults without a quota)."""
        quota = self.of(producer)
        return CampaignLimits() if quota is None else quota.campaigns
