"""The suppression list: addresses never to be sent to, for a reason, by a source, from a time,
optionally until a time. One list across channels (email addresses, phone numbers, push
targets, webhook URLs).

An address is named by its channel and its digest (``AddressDigest``), never by itself; each
entry keeps a masked form of the address for people to recognise it. The list is a hash,
``suppressed``, of which every shard holds a copy, so ingest checks it atomically inside its
own script: field ``<channel>:<digest>``, value ``<until ms>|<reason>|<JSON of at, source,
display>`` (``until`` 0: for good), and ``#v``, the copy's version, bumped by every change.
The address's home shard records ``AddressSuppressed`` and ``AddressUnsuppressed``.

Which deliveries an entry stops depends on its reason: a hard bounce, a dead token or
address, and an SMS STOP stop every notification to the address; a complaint and an
unsubscribe stop the types a recipient may opt out of (``applies``), so an OTP still reaches
someone who marked a newsletter as spam.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, get_args

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.events import AddressSuppressed, AddressUnsuppressed, Event, SuppressionReason
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call
from streams.core.vocabulary import Channel

VERSION_FIELD: Final = "#v"
REASONS: Final[tuple[str, ...]] = get_args(SuppressionReason)
_CHANNELS: Final = frozenset(channel.value for channel in Channel)
# Reasons that stop only the notification types a recipient may opt out of.
OPT_OUT_REASONS: Final = frozenset({"complaint", "unsubscribed"})


class _Details(msgspec.Struct, frozen=True):
    at_ms: int
    source: str
    display: str


_details_encoder = msgspec.json.Encoder()
_details_decoder = msgspec.json.Decoder(_Details)


@dataclass(frozen=True, slots=True)
class Suppression:
    """One entry of the list."""

    channel: Channel
    digest: str
    reason: SuppressionReason
    source: str
    at_ms: int
    until_ms: int = 0  # 0: for good
    display: str = ""  # the address, masked

    @property
    def field(self) -> str:
        return address_field(self.channel, self.digest)

    def value(self) -> str:
        """The hash value the scripts read (its first two parts) and ``decode`` reads back."""
        details = _details_encoder.encode(_Details(self.at_ms, self.source, self.display))
        return f"{self.until_ms}|{self.reason}|{details.decode()}"

    def active(self, now_ms: int) -> bool:
        return self.until_ms == 0 or self.until_ms > now_ms

    def applies(self, opt_out_type: bool) -> bool:
        """Whether it stops a notification of a type that may (or may not) be opted out of."""
        return opt_out_type or self.reason not in OPT_OUT_REASONS


def address_field(channel: Channel, digest: str) -> str:
    """The list's field for an address."""
    return f"{channel}:{digest}"


def decode(field: str | bytes, value: str | bytes) -> Suppression:
    """An entry from its field and value; ``ValueError`` for one this code did not write."""
    name = field.decode() if isinstance(field, bytes) else field
    text = value.decode() if isinstance(value, bytes) else value
    channel, _, digest = name.partition(":")
    until, reason, details = text.split("|", 2)
    if channel not in _CHANNELS or reason not in REASONS or not digest:
        raise ValueError(f"not a suppression: {name!r}")
    extra = _details_decoder.decode(details)
    return Suppression(
        channel=Channel(channel),
        digest=digest,
        reason=reason,  # type: ignore[arg-type]
        source=extra.source,
        at_ms=extra.at_ms,
        until_ms=int(until),
        display=extra.display,
    )


def active_entries(values: Mapping[str, str | bytes], now_ms: int) -> dict[str, Suppression]:
    """The active entries among ``values`` (field -> value, as HMGET or a script gave them)."""
    entries = {field: decode(field, value) for field, value in values.items()}
    return {field: entry for field, entry in entries.items() if entry.active(now_ms)}


@dataclass(frozen=True, slots=True)
class ListView:
    """What a plan knows of the list: a copy's version and its active entries among the
    addresses planned (by field). Version 0: the list is empty, nothing to check."""

    version: int = 0
    active: Mapping[str, Suppression] = field(default_factory=dict)


EMPTY: Final = ListView()


@dataclass(frozen=True, slots=True)
class Page:
    """Some entries of the list and where the next page starts (0: none follows)."""

    entries: list[Suppression]
    cursor: int


class SuppressionStore:
    """Reads and changes the suppression list on every shard."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def add(self, entry: Suppression) -> None:
        """Put ``entry`` on the list (replacing an entry for the same address)."""
        event = AddressSuppressed(
            at=_at(entry.at_ms),
            channel=entry.channel,
            address_digest=entry.digest,
            reason=entry.reason,
            source=entry.source,
            until=_at(entry.until_ms) if entry.until_ms else None,
        )
        await self._change(entry.digest, "add", entry.field, entry.value(), event)

    async def remove(self, channel: Channel, digest: str, source: str, now_ms: int) -> bool:
        """Take an address off the list; whether it was on it."""
        event = AddressUnsuppressed(
            at=_at(now_ms), channel=channel, address_digest=digest, source=source
        )
        field = address_field(channel, digest)
        return await self._change(digest, "remove", field, "", event)

    async def get(self, channel: Channel, digest: str) -> Suppression | None:
        """The entry for an address (active or not), or None."""
        value = await self.redis.hget(
            self.keys.shard(0).suppressions, address_field(channel, digest)
        )
        return None if value is None else decode(address_field(channel, digest), value)

    async def get_many(
        self, wanted: Sequence[tuple[Channel, str]]
    ) -> dict[tuple[Channel, str], Suppression | None]:
        """The entry (active or not) or None for each (channel, digest), in one HMGET."""
        if not wanted:
            return {}
        pairs = list(dict.fromkeys(wanted))
        fields = [address_field(channel, digest) for channel, digest in pairs]
        values = await self.redis.hmget(self.keys.shard(0).suppressions, fields)
        return {
            pair: None if value is None else decode(name, value)
            for pair, name, value in zip(pairs, fields, values, strict=True)
        }

    async def page(self, cursor: int, count: int) -> Page:
        """Entries from ``cursor`` on (an HSCAN of the first shard's copy: every entry once)."""
        key = self.keys.shard(0).suppressions
        next_cursor, raw = await self.redis.hscan(key, cursor, count=count)
        assert isinstance(raw, dict)  # HSCAN without NOVALUES: field -> value
        entries = [
            decode(field, value) for field, value in raw.items() if field != VERSION_FIELD.encode()
        ]
        return Page(entries, int(next_cursor))

    async def version(self, shard: ShardKeys) -> int:
        """The version of one shard's copy (0: nothing was ever put on it)."""
        return int(await self.redis.hget(shard.suppressions, VERSION_FIELD) or 0)

    async def _change(self, digest: str, change: str, field: str, value: str, event: Event) -> bool:
        home = self.keys.home_of_address(digest)
        calls = [
            suppression_call(shard, change, field, value, event if shard == home else None)
            for shard in self.keys.all_shards()
        ]
        replies: Sequence[int] = await scripts.SUPPRESSION.run_many(self.redis, calls)
        return bool(replies[self.keys.all_shards().index(home)])


def suppression_call(
    shard: ShardKeys, change: str, field: str, value: str, event: Event | None
) -> Call:
    """The keys and arguments of one ``suppression.lua`` call.

    KEYS: the shard's suppression list, its events. ARGV: "add" or "remove", the field, the
    value ("" for a remove), the encoded event ("" on a copy that is not the home shard).
    """
    encoded = codec.encode_events([event]) if event is not None else ""
    return [shard.suppressions, shard.events], [change, field, value, encoded]


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
