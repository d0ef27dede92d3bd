"""A recipient's settings as each shard's hash ``rcpt:<id>`` holds them (``RecipientSettings``;
the fields are described in ``streams.recipients.settings``, which changes them), and many
recipients' settings read from one shard in one round trip (``read.lua``), as ingest does for
each batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core import scripts
from streams.core.events import PreferenceEntry, QuietHoursSetting
from streams.core.keys import ShardKeys
from streams.core.scripts import Call

_quiet_hours_decoder = msgspec.json.Decoder(QuietHoursSetting)

_NONE: frozenset[tuple[str, str]] = frozenset()


# A Struct, not a dataclass: ingest builds one per recipient it reads, and a frozen
# dataclass's constructor costs several times a Struct's.
class RecipientSettings(msgspec.Struct, frozen=True):
    version: int = 0
    # (type, channel) pairs the recipient switched off.
    disabled: frozenset[tuple[str, str]] = _NONE
    quiet_hours: QuietHoursSetting | None = None
    # (channel, address digest) of addresses a provider reported dead.
    invalid: frozenset[tuple[str, str]] = _NONE
    # The recipient's profile as stored (JSON), b"" when it has none.
    profile: bytes = b""

    @classmethod
    def from_hash(cls, flat: list[Any] | dict[Any, Any]) -> RecipientSettings:
        """Build from HGETALL's reply (a flat list inside Lua, a dict from redis-py)."""
        pairs = flat.items() if isinstance(flat, dict) else zip(flat[::2], flat[1::2], strict=True)
        version, quiet_hours, profile = 0, None, b""
        disabled: set[tuple[str, str]] = set()
        invalid: set[tuple[str, str]] = set()
        for raw_name, raw_value in pairs:
            name = raw_name.decode()
            if name == "v":
                version = int(raw_value)
            elif name == "pf":
                profile = raw_value
            elif name == "qh":
                quiet_hours = _quiet_hours_decoder.decode(raw_value)
            elif name.startswith("p:"):
                type_name, _, channel = name[2:].rpartition(":")
                disabled.add((type_name, channel))
            elif name.startswith("x:"):
                channel, _, digest = name[2:].partition(":")
                invalid.add((channel, digest))
        return cls(
            version,
            frozenset(disabled) if disabled else _NONE,
            quiet_hours,
            frozenset(invalid) if invalid else _NONE,
            profile,
        )

    def preference_entries(self) -> list[PreferenceEntry]:
        return [
            PreferenceEntry(type=t, channel=c, enabled=False)  # type: ignore[arg-type]
            for t, c in sorted(self.disabled)
        ]


def recipients_read_call(shard: ShardKeys, recipient_ids: Sequence[str]) -> Call:
    """The keys and arguments of one ``read.lua`` call.

    KEYS: the recipients' settings hashes on ``shard``. ARGV: none.
    """
    return [shard.recipient(recipient_id) for recipient_id in recipient_ids], []


async def read_many(
    redis: Redis, shard: ShardKeys, recipient_ids: Sequence[str]
) -> list[RecipientSettings]:
    """The settings ``shard`` holds of each recipient, in one round trip."""
    replies = await scripts.RECIPIENTS_READ(redis, *recipients_read_call(shard, recipient_ids))
    return [RecipientSettings.from_hash(flat) for flat in replies]
