"""Campaigns in Redis: each campaign's record, its audience in chunks, and every change to
it as one compare-and-set (``write.lua``) with its event.

A campaign lives on its home shard (encoded in its id, ``KeySpace.campaign_home``): a hash
with its spec (encoded by ``app.campaigns``, opaque here), its state and progress, and a
``version`` that every change raises by one. A change is decided in Python on the record as
read and written only if the version is still the one read; otherwise the caller reads again
and decides again. The audience is a list of chunks, each a JSON array of up to
``CHUNK_SIZE`` recipient ids: the generator turns one chunk into notifications per batch and
then empties it, so a running campaign holds only the recipients still to come.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.events import Event
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import CampaignState, Priority

CHUNK_SIZE: Final = 1000
# The record's counters, read as numbers.
_COUNTERS = (
    "version", "audience", "chunks", "cursor", "accepted", "repeated", "skipped",
    "created_ms", "updated_ms", "started_ms", "ended_ms", "selected",
)  # fmt: skip
_chunk_encoder = msgspec.json.Encoder()
_chunk_decoder = msgspec.json.Decoder(list[str])


class Campaign(msgspec.Struct, frozen=True, kw_only=True):
    """A campaign as its record holds it."""

    id: str
    producer: str
    state: CampaignState
    spec: bytes  # ``app.campaigns``' encoded spec
    version: int
    audience: int = 0  # recipients uploaded or selected
    chunks: int = 0  # chunks of the audience
    cursor: int = 0  # chunks generated
    accepted: int = 0
    repeated: int = 0
    skipped: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    started_ms: int = 0  # when generation began (0: not yet)
    ended_ms: int = 0  # when it completed or was cancelled
    selected: int = 0  # 1 once a segment's recipients are selected

    @classmethod
    def from_hash(cls, campaign_id: str, raw: dict[Any, Any]) -> Campaign:
        text = {key.decode(): value for key, value in raw.items()}
        numbers = {name: int(text[name]) for name in _COUNTERS if name in text}
        return cls(
            id=campaign_id,
            producer=text["producer"].decode(),
            state=CampaignState(text["state"].decode()),
            spec=text["spec"],
            **numbers,
        )

    @property
    def generated(self) -> int:
        """Recipients that have their notification."""
        return self.accepted + self.repeated


@dataclass(frozen=True)
class OpenLimits:
    """What a producer's open campaigns may hold (``write.lua`` checks them
    with a change that opens a campaign or uploads recipients): campaigns, recipients of
    one campaign, recipients of all of them."""

    campaigns: int
    audience: int
    open_audience: int


# For changes that open nothing and upload nothing (the limits are not looked at).
UNCHECKED: Final = OpenLimits(0, 0, 0)


@dataclass
class CampaignChange:
    """What one change writes (see ``write.lua``)."""

    sets: dict[str, KeyOrArg] = field(default_factory=dict)
    increments: dict[str, int] = field(default_factory=dict)
    chunks: Sequence[bytes] = ()
    emptied: int | None = None  # the audience chunk to empty
    adopt_selection: bool = False
    upload: str = ""  # the upload key to record, with the recipients it added
    added: int = 0
    due_ms: int | Literal["remove"] | None = None  # None: unchanged
    created_ms: int | None = None  # list the campaign (on creation)
    events: Sequence[Event] = ()
    # The change to the producer's open campaigns (1: created, -1: ended) and to the
    # recipients uploaded to them, checked against ``limits``.
    opened: int = 0
    uploaded: int = 0
    limits: OpenLimits = UNCHECKED


WriteResult = tuple[Literal["OK", "MOVED", "UPLOADED", "OPEN", "AUDIENCE", "OPEN_AUDIENCE"], int]


def encode_chunk(recipient_ids: Sequence[str]) -> bytes:
    return _chunk_encoder.encode(recipient_ids)


def campaign_write_call(
    shard: ShardKeys, campaign_id: str, producer: str, version: int, change: CampaignChange
) -> Call:
    """The keys and arguments of one ``write.lua`` call."""
    keys = shard.campaign(campaign_id)
    pairs = [part for pair in change.sets.items() for part in pair]
    increments = [part for pair in change.increments.items() for part in pair]
    due: KeyOrArg = (
        "" if change.due_ms is None else "-" if change.due_ms == "remove" else change.due_ms
    )
    args: list[KeyOrArg] = [
        version,
        campaign_id,
        len(pairs) // 2,
        *pairs,
        len(increments) // 2,
        *increments,
        len(change.chunks),
        *change.chunks,
        "" if change.emptied is None else change.emptied,
        "1" if change.adopt_selection else "",
        change.upload,
        change.added,
        due,
        "" if change.created_ms is None else change.created_ms,
        codec.encode_events(change.events) if change.events else "",
        change.opened,
        change.uploaded,
        change.limits.campaigns,
        change.limits.audience,
        change.limits.open_audience,
    ]
    return [
        keys.record,
        keys.audience,
        keys.uploads,
        shard.campaigns_of(producer),
        shard.campaigns_due,
        shard.events,
        keys.audience_draft,
        shard.campaigns_open(producer),
    ], args


class CampaignStore:
    """Reads and changes campaigns."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def get(self, campaign_id: str) -> Campaign | None:
        raw = await self.redis.hgetall(self._home(campaign_id).campaign(campaign_id).record)
        return Campaign.from_hash(campaign_id, raw) if raw else None

    async def write(
        self, campaign_id: str, producer: str, version: int, change: CampaignChange
    ) -> WriteResult:
        """Write ``change`` if the producer's campaign is still at ``version`` (0: if it does
        not exist yet); ("OK", the new version), ("MOVED", the version now), for an upload
        key recorded before ("UPLOADED", the recipients that upload added), or for a change
        past one of its ``limits`` the limit's word and number (nothing written)."""
        call = campaign_write_call(self._home(campaign_id), campaign_id, producer, version, change)
        word, number = await scripts.CAMPAIGN_WRITE(self.redis, *call)
        return word.decode(), int(number)

    async def state(self, campaign_id: str) -> CampaignState | None:
        """The campaign's state (None for no campaign)."""
        raw: Any = await self.redis.hget(
            self._home(campaign_id).campaign(campaign_id).record, "state"
        )
        return CampaignState(raw.decode()) if raw else None

    async def chunk(self, campaign_id: str, index: int) -> list[str]:
        """The recipient ids of one audience chunk ([] once generated)."""
        keys = self._home(campaign_id).campaign(campaign_id)
        raw = await self.redis.lindex(keys.audience, index)
        return _chunk_decoder.decode(raw) if raw else []

    async def select(self, campaign_id: str, chunks: Sequence[bytes], *, first: bool) -> None:
        """Append chunks to a segment's selection (the first call starts it afresh)."""
        keys = self._home(campaign_id).campaign(campaign_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            if first:
                pipe.delete(keys.audience_draft)
            if chunks:
                pipe.rpush(keys.audience_draft, *chunks)
            await pipe.execute()

    async def due(self, now_ms: int) -> list[str]:
        """The campaigns a generator should run now, of every shard."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in self.keys.all_shards():
                pipe.zrangebyscore(shard.campaigns_due, "-inf", now_ms)
            replies: list[list[bytes]] = await pipe.execute()
        return [campaign_id.decode() for reply in replies for campaign_id in reply]

    async def recent(self, producer: str, limit: int) -> list[Campaign]:
        """The producer's newest campaigns, newest first."""
        listed = self.keys.campaigns_home(producer).campaigns_of(producer)
        ids: Any = await self.redis.zrevrange(listed, 0, limit - 1)
        names = [raw.decode() for raw in ids]
        async with self.redis.pipeline(transaction=False) as pipe:
            for campaign_id in names:
                pipe.hgetall(self._home(campaign_id).campaign(campaign_id).record)
            records: list[dict[bytes, bytes]] = await pipe.execute()
        return [
            Campaign.from_hash(campaign_id, raw)
            for campaign_id, raw in zip(names, records, strict=True)
            if raw
        ]

    async def backlog(self, priority: Priority, producer: str) -> int:
        """Work items of a priority waiting for the producer, over all shards: in the work
        streams and in its queues (``streams.delivery.fairness``)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in self.keys.all_shards():
                pipe.xlen(shard.work(priority))
                pipe.llen(shard.queued(priority, producer))
            lengths: list[int] = await pipe.execute()
        return sum(lengths)

    def _home(self, campaign_id: str) -> ShardKeys:
        return self.keys.campaign_home(campaign_id)
