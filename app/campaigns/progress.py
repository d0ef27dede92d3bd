"""How far a campaign has come: its record in Redis (audience, generated, state) with its
deliveries' statuses from the read model (sent, delivered, failed, ...).

The API's ``GET /v1/campaigns/{id}``, ``clarion campaign status`` and the dashboard all
show this one view.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from app.campaigns import specs
from streams.campaigns.store import Campaign
from streams.core.vocabulary import CONFIRMED, PROVIDER_ACCEPTED, CampaignState, DeliveryStatus


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    type: str
    state: CampaignState
    audience: int  # recipients uploaded or selected
    generated: int  # recipients with their notification
    skipped: int  # recipients refused (no address for the type's channels, ...)
    repeated: int  # of generated: recipients listed twice, or a batch run again
    remaining: int  # recipients still to come
    # The deliveries' statuses, as far as the read model has them (null without it).
    deliveries: dict[str, int] | None
    sent: int
    delivered: int
    failed: int
    suppressed: int
    cancelled: int
    # Recipients a second since generation began, and the seconds left at that pace
    # (null unless generating).
    rate: float
    eta_seconds: float | None
    rate_limit: int | None  # what the campaign asked for
    created_at: datetime
    start_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None


def progress_of(campaign: Campaign, counts: dict[str, int] | None, now_ms: int) -> Progress:
    """The view of ``campaign`` with its deliveries' ``counts`` by status."""
    spec = specs.decode(campaign.spec)
    processed = campaign.generated + campaign.skipped
    remaining = max(0, campaign.audience - processed)
    rate = 0.0
    if campaign.started_ms:
        elapsed = ((campaign.ended_ms or now_ms) - campaign.started_ms) / 1000
        rate = processed / elapsed if elapsed > 0 else 0.0
    eta = remaining / rate if campaign.state == CampaignState.RUNNING and rate > 0 else None
    found = counts or {}
    return Progress(
        id=campaign.id,
        name=spec.name,
        type=spec.type,
        state=campaign.state,
        audience=campaign.audience,
        generated=campaign.generated,
        skipped=campaign.skipped,
        repeated=campaign.repeated,
        remaining=remaining,
        deliveries=counts,
        sent=sum(found.get(status, 0) for status in PROVIDER_ACCEPTED),
        delivered=sum(found.get(status, 0) for status in CONFIRMED),
        failed=found.get(DeliveryStatus.FAILED, 0),
        suppressed=found.get(DeliveryStatus.SUPPRESSED, 0),
        cancelled=found.get(DeliveryStatus.CANCELLED, 0),
        rate=round(rate, 1),
        eta_seconds=None if eta is None else round(eta, 1),
        rate_limit=spec.rate,
        created_at=_at(campaign.created_ms),
        start_at=spec.start_at,
        started_at=_at(campaign.started_ms) if campaign.started_ms else None,
        ended_at=_at(campaign.ended_ms) if campaign.ended_ms else None,
    )


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


BAR_WIDTH = 30


def render(progress: Progress) -> str:
    """The campaign's progress as a few lines of text, with a bar of its recipients done."""
    done = progress.generated + progress.skipped
    share = done / progress.audience if progress.audience else 0.0
    filled = round(share * BAR_WIDTH)
    eta = "" if progress.eta_seconds is None else f"  ETA {_duration(progress.eta_seconds)}"
    name = f"{progress.name} " if progress.name else ""
    lines = [
        f"{name}({progress.type}) {progress.id}  {progress.state}",
        f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:6.1%}  "
        f"{done:,} / {progress.audience:,} recipients  {progress.rate:,.0f}/s{eta}",
        f"generated {progress.generated:,} · skipped {progress.skipped:,} · "
        f"repeated {progress.repeated:,} · remaining {progress.remaining:,}",
    ]
    if progress.deliveries is None:
        lines.append("deliveries: the read model is not reachable")
    else:
        lines.append(
            f"deliveries: sent {progress.sent:,} · delivered {progress.delivered:,} · "
            f"failed {progress.failed:,} · suppressed {progress.suppressed:,} · "
            f"cancelled {progress.cancelled:,}"
        )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"
