"""A provider's word that an address is dead: the recipient's settings remember it and the
address goes on the suppression list with its channel's reason, its source the provider,
shown masked; a failure to record it is logged, never raised."""

from __future__ import annotations

import structlog
from redis.asyncio import Redis

from app.delivery.dead_addresses import DeadAddresses
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, Priority
from streams.delivery.work_items import WorkItem
from streams.recipients.settings import RecipientSettingsStore
from streams.recipients.suppressions import SuppressionStore
from tests.conftest import DIGEST


def item(channel: Channel, address: str) -> WorkItem:
    return WorkItem(
        delivery_id="d-1", notification_id="n-1", notification_type="order_confirmed",
        channel=channel, priority=Priority.NORMAL, recipient_id="u-1", address=address,
        locale="en", created_ms=1, expires_ms=2,
    )  # fmt: skip


async def test_a_dead_address_is_remembered_and_suppressed_with_its_channel_s_reason(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    settings, suppressions = (
        RecipientSettingsStore(real_redis, keys),
        SuppressionStore(real_redis, keys),
    )
    dead = DeadAddresses(settings, suppressions, DIGEST, lambda: 1_700_000_000_000)
    cases = [
        (Channel.PUSH, "apns " + "ab" * 32, "invalid_token"),
        (Channel.EMAIL, "gone@example.com", "hard_bounce"),
        (Channel.SMS, "+4915112345678", "invalid_address"),
        (Channel.WEBHOOK, "https://hooks.example.com/gone", "invalid_address"),
    ]
    for channel, address, _ in cases:
        await dead.forget(item(channel, address), "apns")
    recorded = await settings.get("u-1")
    assert recorded.invalid == {(channel, DIGEST(address)) for channel, address, _ in cases}
    for channel, address, reason in cases:
        entry = await suppressions.get(channel, DIGEST(address))
        assert entry is not None
        assert (entry.reason, entry.source, entry.at_ms) == (
            reason,
            "provider:apns",
            1_700_000_000_000,
        )
        assert address not in entry.display


async def test_a_failure_to_record_is_logged_not_raised(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    await real_redis.set(keys.shard(0).recipient("u-1"), "not a hash")
    settings, suppressions = (
        RecipientSettingsStore(real_redis, keys),
        SuppressionStore(real_redis, keys),
    )
    dead = DeadAddresses(settings, suppressions, DIGEST, lambda: 1)
    with structlog.testing.capture_logs() as logs:
        await dead.forget(item(Channel.EMAIL, "gone@example.com"), "smtp")
    assert [line["event"] for line in logs] == ["delivery.mark_invalid_failed"]
    assert "gone@example.com" not in str(logs)
