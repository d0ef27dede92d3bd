"""A recipient's preferences, quiet hours and profile in Redis.

Each shard holds a copy in the hash ``rcpt:<id>`` so the ingest script, which touches one
slot, can check it atomically. The home shard decides the version and records the event of
each change (PreferenceChanged, RecipientProfileChanged, ...); the other copies follow the
home shard's version. Fields: ``v`` (version), ``p:<type>:<channel>`` = "0" for each
switched-off pair, ``qh`` (quiet hours as JSON), ``x:<channel>:<digest>`` for each address a
provider called dead, ``pf`` (the profile as JSON: its shape is ``app.ingest.profiles``').

Every PreferenceChanged names who made the change (``source``): "api" for a producer's
backend, "unsubscribe_link" for the recipient's own one-click unsubscribe.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.codec import as_text
from streams.core.events import (
    Event,
    PreferenceChanged,
    PreferenceEntry,
    QuietHoursSetting,
    RecipientAddressInvalidated,
    RecipientProfileChanged,
)
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call
from streams.core.vocabulary import Channel
from streams.delivery import address_waits
from streams.recipients.read import RecipientSettings

# Channels quiet hours never hold back: IN_APP lands silently in an inbox and WEBHOOK calls a
# machine, while quiet hours guard against buzzing phones and inboxes. HIGH deliveries are
# never held back either.
QUIET_HOURS_EXEMPT: frozenset[Channel] = frozenset({Channel.IN_APP, Channel.WEBHOOK})

# Who changed a recipient's settings (``PreferenceChanged.source``).
Source = Literal["api", "unsubscribe_link"]


class RecipientSettingsStore:
    """Reads and changes recipient settings on every shard."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def get(self, recipient_id: str) -> RecipientSettings:
        """The settings as the recipient's home shard holds them."""
        raw = await self.redis.hgetall(
            self.keys.home_of_recipient(recipient_id).recipient(recipient_id)
        )
        return RecipientSettings.from_hash(raw)

    async def set_preferences(
        self, recipient_id: str, entries: list[PreferenceEntry], source: Source = "api"
    ) -> RecipientSettings:
        """Replace the recipient's preferences: exactly the disabled pairs given stay off."""
        disabled = sorted({(e.type, e.channel) for e in entries if not e.enabled})
        payload = ",".join(f"{t}:{c}" for t, c in disabled)
        kept = [PreferenceEntry(type=t, channel=c, enabled=False) for t, c in disabled]
        return await self._change(
            recipient_id,
            "preferences",
            payload,
            lambda version, _: PreferenceChanged(
                at=_now(), recipient_id=recipient_id, settings_version=version,
                preferences=kept, source=source,
            ),
        )  # fmt: skip

    async def switch_off(
        self, recipient_id: str, notification_type: str, channel: Channel, source: Source
    ) -> RecipientSettings:
        """Switch one (type, channel) pair off and keep the others as they are. A pair that is
        off already changes nothing and records nothing, so repeating it is harmless."""
        pair = (notification_type, str(channel))

        def event_of(version: int, current: RecipientSettings) -> Event | None:
            if pair in current.disabled:
                return None
            # The event carries every pair now off, as a replacement of the preferences does:
            # whoever reads it learns the whole state, not only the change.
            off = RecipientSettings(disabled=current.disabled | {pair}).preference_entries()
            return PreferenceChanged(
                at=_now(), recipient_id=recipient_id, settings_version=version,
                preferences=off, source=source,
            )  # fmt: skip

        return await self._change(recipient_id, "preference_off", ":".join(pair), event_of)

    async def set_quiet_hours(
        self, recipient_id: str, setting: QuietHoursSetting, source: Source = "api"
    ) -> RecipientSettings:
        """Set the recipient's quiet hours."""
        payload = codec.encode(setting).decode()
        return await self._change(
            recipient_id,
            "quiet_hours",
            payload,
            lambda version, _: PreferenceChanged(
                at=_now(), recipient_id=recipient_id, settings_version=version,
                quiet_hours=setting, source=source,
            ),
        )  # fmt: skip

    async def remove_quiet_hours(
        self, recipient_id: str, source: Source = "api"
    ) -> RecipientSettings:
        """Remove the recipient's quiet hours."""
        return await self._change(
            recipient_id,
            "quiet_hours_off",
            "",
            lambda version, _: PreferenceChanged(
                at=_now(), recipient_id=recipient_id, settings_version=version,
                quiet_hours_removed=True, source=source,
            ),
        )  # fmt: skip

    async def mark_address_invalid(
        self, recipient_id: str, channel: Channel, digest: str
    ) -> RecipientSettings:
        """Remember that the address of ``digest`` (``AddressDigest``) is dead for
        ``channel``: fan-out suppresses it."""
        return await self._change(
            recipient_id,
            "invalid_address",
            f"x:{channel}:{digest}",
            lambda version, _: RecipientAddressInvalidated(
                at=_now(),
                recipient_id=recipient_id,
                settings_version=version,
                channel=channel,
                address_digest=digest,
            ),
        )

    async def forget(self, recipient_id: str) -> None:
        """Delete every copy of the recipient's settings, and the index of its deliveries
        waiting for an address (an erasure records its own event and ends those)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in self.keys.all_shards():
                pipe.delete(shard.recipient(recipient_id), shard.awaiting(recipient_id))
            await pipe.execute()

    async def update_profile(
        self, recipient_id: str, update: Callable[[bytes], tuple[bytes, list[str]]]
    ) -> RecipientSettings:
        """Change the recipient's profile: ``update`` gets the stored one (b"": none) and
        gives the new one (b"" removes it) and the names of what changed; it is asked again
        when a concurrent change came first, and may raise to give up. The recipient's
        deliveries waiting for an address are then due at once
        (``streams.delivery.address_waits``)."""

        def plan(current: RecipientSettings) -> tuple[str, Callable[[int], Event | None]]:
            profile, changed = update(current.profile)
            return profile.decode(), lambda version: RecipientProfileChanged(
                at=_now(), recipient_id=recipient_id, settings_version=version, changed=changed
            )

        settings = await self._change_with(recipient_id, "profile", plan)
        await address_waits.release(self.redis, self.keys, recipient_id)
        return settings

    async def _change(
        self,
        recipient_id: str,
        change: str,
        payload: str,
        event_of: Callable[[int, RecipientSettings], Event | None],
    ) -> RecipientSettings:
        """``_change_with`` for a payload known beforehand: ``event_of`` makes the event of
        the new version from the current settings, or None when they already are as asked
        (then nothing is written)."""

        def plan(current: RecipientSettings) -> tuple[str, Callable[[int], Event | None]]:
            return payload, lambda version: event_of(version, current)

        return await self._change_with(recipient_id, change, plan)

    async def _change_with(
        self,
        recipient_id: str,
        change: str,
        plan: Callable[[RecipientSettings], tuple[str, Callable[[int], Event | None]]],
    ) -> RecipientSettings:
        """Apply a change planned from the current settings (its payload, and its event or
        None for nothing to do) on the home shard, then copy the result to every other
        shard."""
        home = self.keys.home_of_recipient(recipient_id)
        while True:  # optimistic: retry when a concurrent change moved the version
            current = await self.get(recipient_id)
            payload, event_of = plan(current)
            new_version = current.version + 1
            event = event_of(new_version)
            if event is None:
                return current
            call = recipient_settings_call(
                home,
                recipient_id,
                change,
                payload,
                expected_version=current.version,
                new_version=new_version,
                event=event,
            )
            reply = await scripts.RECIPIENT_SETTINGS(self.redis, *call)
            if reply == b"OK":
                break
        return await self._copy_to_other_shards(recipient_id, home)

    async def _copy_to_other_shards(self, recipient_id: str, home: ShardKeys) -> RecipientSettings:
        """The home shard's settings, copied to every other shard."""
        # Copies on the other shards take the home shard's whole hash; one already as new
        # is left alone.
        copies = [shard for shard in self.keys.all_shards() if shard != home]
        home_hash = await self.redis.hgetall(home.recipient(recipient_id))
        if copies:
            flat = [as_text(part) for pair in home_hash.items() for part in pair]
            version = RecipientSettings.from_hash(home_hash).version
            await scripts.RECIPIENT_SETTINGS.run_many(
                self.redis,
                [
                    recipient_settings_call(
                        shard,
                        recipient_id,
                        "copy",
                        json.dumps(flat),
                        expected_version=0,
                        new_version=version,
                    )
                    for shard in copies
                ],
            )
        return RecipientSettings.from_hash(home_hash)


def recipient_settings_call(
    shard: ShardKeys,
    recipient_id: str,
    change: str,
    payload: str,
    *,
    expected_version: int,
    new_version: int,
    event: Event | None = None,
) -> Call:
    """The keys and arguments of one ``settings.lua`` call.

    KEYS: the recipient's settings on ``shard``, that shard's events. ARGV: the version the
    home shard's copy must have (0 for a copy), the new version, the change (preferences,
    preference_off, quiet_hours, quiet_hours_off, invalid_address, profile or copy), its
    payload, and the encoded event the home shard records ("" for a copy). A ``profile``
    change's payload is the profile's JSON ("" removes it).
    """
    encoded = codec.encode_events([event]) if event is not None else ""
    return (
        [shard.recipient(recipient_id), shard.events],
        [expected_version, new_version, change, payload, encoded],
    )


class AddressDigest:
    """Names a contact address without revealing it: an HMAC-SHA256 of the address, keyed
    with the deployment's secret (``CLARION_DIGEST_SECRET``), cut to 128 bits.

    Keyed, because the space of phone numbers is small: an unkeyed digest of one is found
    by trying them all.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("an address digest needs a secret key")
        self._key = key

    def __call__(self, address: str) -> str:
        return hmac.digest(self._key, address.encode(), "sha256")[:16].hex()

    def __repr__(self) -> str:  # never print the key
        return "AddressDigest(<secret>)"


def _now() -> datetime:
    return datetime.now(UTC)
