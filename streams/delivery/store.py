"""Where delivery workers record their work: leases, outcomes and raw dead letters.

``begin`` takes a lease for the deliveries a worker is about to send (``begin.lua``; its
verdicts: ``streams.delivery.leases``); ``finish`` records each outcome
(``streams.delivery.outcomes``) atomically with its events, its ``delayed`` or dead-letter
entry and the acknowledgement of its work entry (``finish.lua``);
``dead_letter_raw`` parks a work entry nobody can read (``dead_letter_raw.lua``). Each
script's call is laid out by the function named after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.batching import BatchedScript
from streams.core.consumer_groups import DELIVERY_GROUP
from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import Priority
from streams.delivery.leases import VERDICT_OF_REPLY, Lease, LeaseVerdict, lease_of_reply
from streams.delivery.state import DeliveryState
from streams.delivery.work_items import WorkItem
from streams.inbox.store import InboxWrite

# How long an ended delivery's state hash stays (CLARION_DELIVERY_STATE_RETENTION), and a
# FAILED one's: as long as its dead letter may be replayed (CLARION_DLQ_RETENTION).
STATE_RETENTION_MS = 86400 * 1000
FAILED_STATE_RETENTION_MS = 7 * 86400 * 1000

# Read once: a member read off its enum class costs a hook call each time on Python 3.11.
_CANCELLED = LeaseVerdict.CANCELLED


@dataclass(frozen=True, slots=True)
class Outcome:
    """One delivery's outcome, ready to record (``streams.delivery.outcomes`` builds them)."""

    shard: ShardKeys
    priority: Priority
    delivery_id: str
    entry_id: str  # the work entry to acknowledge ("" when there is none)
    expected_version: int
    events: bytes  # the events as one JSON array (b"" for none)
    fields: dict[str, KeyOrArg]  # the state hash's changed fields
    delayed_member: bytes = b""
    due_ms: int = 0
    dead_letter: dict[str, KeyOrArg] = field(default_factory=dict)
    # The notification's ``data:<id>`` hash when this outcome ends a delivery that shares it
    # (one delivery fewer holds it; the last one deletes it), else "".
    releases_data: str = ""
    # An IN_APP delivery sent to the inbox: its message, written with the outcome.
    inbox: InboxWrite | None = None

    @property
    def status(self) -> str | None:
        """The status it records, if it changes the status."""
        status = self.fields.get("status")
        return None if status is None else str(status)


# OK: recorded. ENDED / MOVED: the delivery ended or moved on meanwhile; only the work entry
# was acknowledged. BROKEN: its state key is not a hash; nothing was recorded or acknowledged.
FinishReply = Literal["OK", "ENDED", "MOVED", "BROKEN"]


class DeliveryStore:
    """Leases and outcomes of deliveries, batched across concurrent workers."""

    def __init__(
        self,
        redis: Redis,
        *,
        state_retention_ms: int = STATE_RETENTION_MS,
        failed_state_retention_ms: int = FAILED_STATE_RETENTION_MS,
    ) -> None:
        self.redis = redis
        self.retention = (state_retention_ms, failed_state_retention_ms)
        self._finish: BatchedScript[tuple[ShardKeys, Priority], Outcome, FinishReply]
        self._finish = BatchedScript(
            redis,
            scripts.DELIVERY_FINISH,
            group_of=lambda outcome: (outcome.shard, outcome.priority),
            build=lambda group, outcomes: delivery_finish_call(*group, outcomes, self.retention),
            parse=lambda raw: raw.decode(),
        )

    async def begin(
        self,
        shard: ShardKeys,
        priority: Priority,
        entries: Sequence[tuple[str, WorkItem]],
        consumer: str,
        *,
        lease_ms: int,
        max_leases: int,
    ) -> list[Lease]:
        """Lease the deliveries of work ``entries`` (id and item), read from the shard's work
        stream of ``priority``, for ``consumer``, for ``lease_ms``; a delivery leased more
        than ``max_leases`` times without an outcome comes back POISON, one of a cancelled
        campaign CANCELLED."""
        if not entries:
            return []
        call = delivery_begin_call(shard, priority, entries, consumer, (lease_ms, max_leases))
        flat = iter(await scripts.DELIVERY_BEGIN(self.redis, *call))
        per_item = zip(flat, flat, flat, flat, flat, flat, strict=True)  # six values per item
        # Inline rather than ``lease_of_reply`` per item: a call per delivery costs more than
        # the lease itself; only a CANCELLED one (its sixth value: who cancelled) goes there.
        return [
            Lease(said, int(version), int(attempts), int(now), int(first), data)
            if (said := VERDICT_OF_REPLY[verdict]) is not _CANCELLED
            else lease_of_reply((verdict, version, attempts, now, first, data))
            for verdict, version, attempts, now, first, data in per_item
        ]

    async def finish(self, outcomes: Sequence[Outcome]) -> list[FinishReply]:
        """Record ``outcomes``; concurrent callers share pipelines."""
        return await self._finish.run(outcomes)

    async def dead_letter_raw(
        self, shard: ShardKeys, priority: Priority, entry_id: str, fields: dict[str, KeyOrArg]
    ) -> None:
        """Dead-letter a work entry nobody can handle, with ``fields``, and acknowledge it."""
        await scripts.DEAD_LETTER_RAW(
            self.redis, *dead_letter_raw_call(shard, priority, entry_id, fields)
        )

    async def state(self, shard: ShardKeys, delivery_id: str) -> DeliveryState | None:
        """The delivery's state (None while no worker touched it yet)."""
        return DeliveryState.from_hash(await self.redis.hgetall(shard.delivery(delivery_id)))


def delivery_begin_call(
    shard: ShardKeys,
    priority: Priority,
    entries: Sequence[tuple[str, WorkItem]],
    consumer: str,
    lease: tuple[int, int],
) -> Call:
    """The keys and arguments of one ``begin.lua`` call.

    KEYS: the work stream of ``priority``, each delivery's state hash, then the data hash of
    each item with shared data and the cancel marker of each campaign the items belong to
    (once per campaign), as the items come. ARGV: the consumer, the lease's length (ms) and
    the leases allowed without an outcome (``lease``), the number of deliveries, then per
    delivery its work entry id, its notification id and channel (for a state hash created
    fresh), the positions in KEYS of its data hash and of its campaign's marker (0 for none)
    and, only with a data hash, when it expires (ms).
    """
    keys: list[KeyOrArg] = [shard.work(priority)]
    keys += [shard.delivery(item.delivery_id) for _, item in entries]
    args: list[KeyOrArg] = [consumer, *lease, len(entries)]
    markers: dict[str, int] = {}
    for entry_id, item in entries:
        data_at = marker_at = 0
        if item.shared_data:
            keys.append(shard.data(item.notification_id))
            data_at = len(keys)
        if item.campaign:
            marker_at = markers.get(item.campaign, 0)
            if not marker_at:
                keys.append(shard.campaign_cancelled(item.campaign))
                marker_at = markers[item.campaign] = len(keys)
        args += [entry_id, item.notification_id, item.channel, data_at, marker_at]
        if data_at:
            args.append(item.expires_ms)
    return keys, args


def delivery_finish_call(
    shard: ShardKeys,
    priority: Priority,
    outcomes: Sequence[Outcome],
    retention: tuple[int, int],
) -> Call:
    """The keys and arguments of one ``finish.lua`` call (one work stream).

    KEYS: the work stream, events, delayed, dlq, then each delivery's state hash, then the
    data hash each outcome releases (if any). ARGV: the consumer group, how long an ended
    and a FAILED delivery's state stays (ms), every outcome's events joined into one array
    and each one's byte span in it (``codec.join_events``, ``codec.span_text``), the number
    of outcomes, then per outcome: the work entry to acknowledge ("" for none), the version
    it expects, its ``delayed`` member ("" for none) and due time, the position of the data
    hash it releases in KEYS (0 for none), its state fields (count, then field/value pairs)
    and its dead-letter fields (likewise; 0 for none), the position in KEYS of the inbox
    it writes a message to (0 for none; ``InboxWrite.arguments`` follow).
    """
    keys: list[KeyOrArg] = [shard.work(priority), shard.events, shard.delayed, shard.dlq]
    keys += [shard.delivery(outcome.delivery_id) for outcome in outcomes]
    joined, spans = codec.join_events([outcome.events for outcome in outcomes])
    args: list[KeyOrArg] = [
        DELIVERY_GROUP, *retention, joined, codec.span_text(spans), len(outcomes)
    ]  # fmt: skip
    for outcome in outcomes:
        release_at = 0
        if outcome.releases_data:
            keys.append(outcome.releases_data)
            release_at = len(keys)
        args += [outcome.entry_id, outcome.expected_version, outcome.delayed_member, outcome.due_ms]
        args.append(release_at)
        args += _flat(outcome.fields)
        args += _flat(outcome.dead_letter)
        inbox = outcome.inbox
        if inbox is None:
            args.append(0)
            continue
        args.append(len(keys) + 1)
        keys += [inbox.keys.messages, inbox.keys.order, inbox.keys.feed]
        args += inbox.arguments()
    return keys, args


def dead_letter_raw_call(
    shard: ShardKeys, priority: Priority, entry_id: str, fields: dict[str, KeyOrArg]
) -> Call:
    """The keys and arguments of one ``dead_letter_raw.lua`` call.

    KEYS: the work stream, dlq. ARGV: the consumer group, the work entry, then the
    dead-letter entry's field/value pairs.
    """
    args: list[KeyOrArg] = [DELIVERY_GROUP, entry_id]
    for name, value in fields.items():
        args += [name, value]
    return [shard.work(priority), shard.dlq], args


def _flat(fields: dict[str, KeyOrArg]) -> list[KeyOrArg]:
    flat: list[KeyOrArg] = [2 * len(fields)]
    for name, value in fields.items():
        flat += [name, value]
    return flat
