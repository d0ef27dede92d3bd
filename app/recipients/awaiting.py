"""A delivery that waited for an address (its type's ``await_address_seconds``), when it
comes due: the address the recipient's profile gives it now, and what becomes of it.

The rules are fan-out's at ingest (``app.ingest.delivery_plan``), applied to the settings
as they are now: switched off, a dead address, an address on the suppression list, a push
platform no provider sends to, the recipient's quiet hours (not HIGH, not IN_APP or
WEBHOOK). Without an address it waits again (``streams.delivery.address_waits.next_look_ms``)
until its bound, then is SUPPRESSED ``no_address`` as it would have been at once. Pure
functions: ``app.delivery.awaiting`` reads the settings and records the decision.
"""

from __future__ import annotations

from datetime import UTC, datetime

from app.ingest import profiles
from app.ingest.quiet_hours import window_end
from app.ingest.requests import target_address
from streams.core.vocabulary import Channel, Priority
from streams.delivery.address_waits import next_look_ms
from streams.delivery.decisions import Decision, Deferred, Expired, Suppressed
from streams.delivery.work_items import WorkItem
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import QUIET_HOURS_EXEMPT, AddressDigest
from streams.recipients.suppressions import Suppression


def address_for(stored_profile: bytes, channel: Channel) -> str:
    """The address a stored profile gives a delivery on ``channel`` ("" for none): its
    email, phone or webhook URL; for PUSH its first device (one delivery, one address)."""
    profile = profiles.decode(stored_profile)
    if profile is None:
        return ""
    if channel == Channel.EMAIL:
        return profile.email or ""
    if channel == Channel.SMS:
        return profile.phone or ""
    if channel == Channel.WEBHOOK:
        return profile.webhook_url or ""
    if channel == Channel.PUSH:
        devices = [*profile.push_tokens, *map(target_address, profile.push_targets)]
        return devices[0] if devices else ""
    return ""


def without_address(item: WorkItem, now_ms: int) -> Decision:
    """No address yet: look again later, or, once its bound has come, never send it."""
    if now_ms >= item.await_until_ms:
        return Suppressed("no_address")
    # It waits on as ingest recorded it (SCHEDULED, awaiting_address): no event.
    until_ms = next_look_ms(item.created_ms, now_ms, item.await_until_ms)
    return Deferred(until_ms, "awaiting_address", event=False)


def with_address(
    item: WorkItem,
    settings: RecipientSettings,
    digest: AddressDigest,
    *,
    opt_out: bool,
    listed: Suppression | None,
    routable: bool,
    now_ms: int,
) -> Decision | None:
    """What becomes of ``item``, which now has an address: None to send it now, else never
    (suppressed), later (quiet hours) or not at all (quiet hours past its TTL). ``opt_out``:
    its type may be switched off; ``listed``: the address's suppression list entry, if any;
    ``routable``: some provider sends to it."""
    suppressed = _suppressed(item, settings, digest, opt_out=opt_out, listed=listed, now_ms=now_ms)
    if suppressed is not None:
        return suppressed
    if not routable:
        return Suppressed("no_provider")
    return _quiet_hours(item, settings, now_ms)


def _suppressed(
    item: WorkItem,
    settings: RecipientSettings,
    digest: AddressDigest,
    *,
    opt_out: bool,
    listed: Suppression | None,
    now_ms: int,
) -> Suppressed | None:
    """Suppressed when the recipient switched it off or its address may not be used."""
    if opt_out and (item.notification_type, item.channel) in settings.disabled:
        return Suppressed("opted_out")
    if settings.invalid and (item.channel, digest(item.address)) in settings.invalid:
        return Suppressed("invalid_address")
    if listed is not None and listed.active(now_ms) and listed.applies(opt_out):
        return Suppressed(listed.reason)
    return None


def _quiet_hours(item: WorkItem, settings: RecipientSettings, now_ms: int) -> Decision | None:
    """Deferred while the recipient's quiet hours last (EXPIRED if they outlast its TTL)."""
    channel = item.channel
    quiet = settings.quiet_hours
    if quiet is None or item.priority == Priority.HIGH or channel in QUIET_HOURS_EXEMPT:
        return None
    ends = window_end(quiet, datetime.fromtimestamp(now_ms / 1000, UTC))
    if ends is None:
        return None
    ends_ms = int(ends.timestamp() * 1000)
    if ends_ms < item.expires_ms:
        return Deferred(ends_ms, "quiet_hours")
    return Expired("quiet_hours_past_ttl")
