"""Writing accepted notifications to Redis: one atomic Lua step per notification.

The caller (the API) validates and fans out; this module only knows the shape of what is
written: the idempotency record, the notification record, the events and the work items.
Items are grouped by shard and sent in chunks of one script call each; the calls of
concurrent requests share pipelines, because the Python client, not Redis, is the
bottleneck.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.batching import BatchedScript
from streams.core.keys import ShardKeys
from streams.core.records import naming_digest
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import Priority
from streams.digests import store as digests
from streams.recipients.read import RecipientSettings

# Bound once: looked up per item, and through the class it costs more.
_HIGH, _NORMAL, _LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW
# Shared template data outlives its notification's expiry by this much, so a worker whose
# clock runs behind Redis's still finds it (or finds the delivery expired first).
SHARED_DATA_SLACK_MS = 300_000


class PlannedWork(msgspec.Struct, frozen=True):
    """A work item for its priority's work stream, or (with ``due_ms``) a ``delayed`` member
    (see ``streams.delivery.delayed``) that waits in ``delayed`` until then."""

    priority: Priority
    item: bytes
    due_ms: int | None = None

    @property
    def destination(self) -> KeyOrArg:
        """What the ingest script is told: the work stream's name, or the due time."""
        return self.priority.stream_name if self.due_ms is None else self.due_ms


class IngestItem(msgspec.Struct, frozen=True, kw_only=True):
    shard: ShardKeys
    priority: Priority
    producer: str
    idempotency_key: str
    notification_id: str
    recipient_id: str
    fingerprint: str
    settings_version: int
    # The suppression list as the item was planned with it
    # (``streams.recipients.suppressions``): its version (0: empty, nothing to check), the
    # list fields of the item's addresses, and those of them that were active, each
    # space-separated.
    suppression_version: int = 0
    suppression_checks: str = ""
    suppressions_known: str = ""
    # The caller's answer when this item is accepted (not written: a retry's answer is
    # rebuilt from the record).
    response: bytes
    record: bytes
    # All events of this notification's acceptance, as one JSON array.
    events: bytes
    work: list[PlannedWork] = []
    # The template data its work items share (``streams.delivery.work_items``), encoded; b""
    # when each item carries its own.
    shared_data: bytes = b""
    # When the notification expires (ms): shared data is of no use after that.
    expires_ms: int = 0
    # The channel and reason of each delivery suppressed at acceptance (for the metrics; not
    # written).
    suppressed: list[tuple[str, str]] = []
    # The producer's cancellation key ("": none): the item is indexed by it until it expires.
    cancellation_key: str = ""
    # The digest it joins as it is accepted (a digest type's notification on its recipient's
    # home shard); None: none, or it joins after (``app.ingest.digests``).
    join: digests.DigestJoin | None = None


class IngestReply(msgspec.Struct, frozen=True):
    kind: Literal["OK", "DUP", "CONFLICT", "BUSY", "STALE", "SUPPRESSIONS", "DIGEST", "BROKEN"]
    # DUP: the encoded record of the notification accepted first under this key (b"" if it
    # expired, with the key, in the moment between the script and reading it).
    record: bytes = b""
    # DUP, as the script answers: that notification's id (the record is read after).
    notification_id: str = ""
    settings: RecipientSettings | None = None
    # SUPPRESSIONS: the list's version now, and its active entries among the item's fields.
    suppression_version: int = 0
    suppressions: dict[str, bytes] = {}
    # BROKEN: Redis's error about the item's key of the wrong type (nothing was written).
    error: str = ""
    # OK: the digest it joined as it was accepted (an item with a ``join``).
    joined: digests.Joined | None = None
    # DIGEST: the digest open now, to join instead of the one named ("": none, a new one).
    digest: str = ""


class IngestWriter:
    """Writes ingest items; concurrent requests share pipelines (see ``BatchedScript``).

    HIGH notifications travel in pipelines of their own, so an OTP never waits behind a
    thousand-item batch that the same process is writing.
    """

    def __init__(
        self, redis: Redis, idempotency_ttl_ms: int, pending_ttl_ms: int, fair_buffer: int
    ) -> None:
        self.redis = redis

        def writer() -> BatchedScript[int, IngestItem, IngestReply]:
            return BatchedScript(
                redis,
                scripts.INGEST,
                # By shard number: an int hashes faster than the ShardKeys it stands for.
                group_of=lambda item: item.shard.shard,
                build=lambda _, items: ingest_call(
                    items[0].shard, items, idempotency_ttl_ms, pending_ttl_ms, fair_buffer
                ),
                parse=_reply,
            )

        self._high, self._other = writer(), writer()

    async def write(
        self, items: Sequence[IngestItem], *, alone: bool = False
    ) -> list[IngestReply | Exception]:
        """Write ``items``; their replies in the same order, or the error of an item whose
        script call failed (nothing of that item was written). ``alone``: in a pipeline of
        their own, sent at once (``BatchedScript.run_alone``), not in the shared one."""
        replies = await (self._other.run_alone(items) if alone else self._write(items))
        duplicates = [
            index
            for index, reply in enumerate(replies)
            if isinstance(reply, IngestReply) and reply.kind == "DUP"
        ]
        if duplicates:
            await self._read_records(items, replies, duplicates)
        return replies

    async def _write(self, items: Sequence[IngestItem]) -> list[IngestReply | Exception]:
        high = [item.priority == _HIGH for item in items]
        if all(high):
            return await self._high.run_settled(items)
        if not any(high):
            return await self._other.run_settled(items)
        first = [item for item, is_high in zip(items, high, strict=True) if is_high]
        rest = [item for item, is_high in zip(items, high, strict=True) if not is_high]
        first_replies, rest_replies = await asyncio.gather(
            self._high.run_settled(first), self._other.run_settled(rest)
        )
        first_iter, rest_iter = iter(first_replies), iter(rest_replies)
        return [next(first_iter) if is_high else next(rest_iter) for is_high in high]

    async def _read_records(
        self,
        items: Sequence[IngestItem],
        replies: list[IngestReply | Exception],
        duplicates: Sequence[int],
    ) -> None:
        """Fill in the record of the notification each repeat (DUP) was accepted as first."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for index in duplicates:
                reply = replies[index]
                assert isinstance(reply, IngestReply)
                pipe.get(items[index].shard.notification(reply.notification_id))
            records: list[bytes | None] = await pipe.execute()
        for index, record in zip(duplicates, records, strict=True):
            replies[index] = IngestReply("DUP", record=record or b"")


def ingest_call(
    shard: ShardKeys,
    items: Sequence[IngestItem],
    idempotency_ttl_ms: int,
    pending_ttl_ms: int,
    fair_buffer: int,
) -> Call:
    """The keys and arguments of one ``ingest.lua`` call, as the script reads them.

    KEYS: events, the three work streams, delayed, the suppression list, the sets of
    producers with NORMAL and with LOW items queued (``streams.delivery.fairness``), the
    digests by closing time, then each item's keys. ARGV: the idempotency record's and the
    in-flight marker's lifetimes (ms), every item's events joined into one array and each
    item's byte span in it (``codec.join_events``, ``codec.span_text``), the fairness
    buffer, the digests' now (the latest of the joining items'; 0: none joins), bytes and
    keeping time (``streams.digests.store``), then each item's arguments (``_add_items``).
    """
    keys: list[KeyOrArg] = [shard.events, *shard.work_streams, shard.delayed, shard.suppressions]
    keys += [shard.queued_producers(_NORMAL), shard.queued_producers(_LOW), shard.digests_due]
    joined, spans = codec.join_events([item.events for item in items])
    args: list[KeyOrArg] = [idempotency_ttl_ms, pending_ttl_ms, joined, codec.span_text(spans)]
    args += (fair_buffer, 0, digests.MAX_BYTES, digests.KEEP_MS)
    args[5] = _add_items(shard, items, keys, args)
    return keys, args


def _add_items(
    shard: ShardKeys, items: Sequence[IngestItem], keys: list[KeyOrArg], args: list[KeyOrArg]
) -> int:
    """Append each item's keys and arguments to one ``ingest.lua`` call's, all items in one
    loop (a call per item would cost every notification); the latest now of the items that
    join a digest (0: none does).

    KEYS per item: its idempotency record, notification record, recipient settings, its
    producer's queue of its priority, its data hash when its work items share their data, and
    its cancellation index when it has a cancellation key, and its digest's three when it
    joins one (``digests.add_join``).
    ARGV per item: its idempotency record once accepted, the settings version it was planned
    with, the suppression list as it was planned with it (version, fields checked, fields
    found), its notification record (naming its digest when it joins one), its shared data
    ("" for none) and, only when there is some, when that data expires (ms), its number of
    work items (with a cancellation key, followed by a space and until when its index keeps
    it, in ms; then "+" when it joins a digest), per work item where it goes
    (``PlannedWork.destination``) and the item, and the join's arguments when it joins a
    digest.
    """
    now_ms = 0
    for item in items:
        keys += [
            shard.idempotency(item.producer, item.idempotency_key),
            shard.notification(item.notification_id),
            shard.recipient(item.recipient_id),
            shard.queued(item.priority, item.producer),
        ]
        # The idempotency record once accepted, as the script stores it.
        done = f"done {item.fingerprint} {item.notification_id}"
        join = item.join
        args += [
            done,
            item.settings_version,
            item.suppression_version,
            item.suppression_checks,
            item.suppressions_known,
            item.record if join is None else naming_digest(item.record, join.digest_id),
            item.shared_data,
        ]
        if item.shared_data:
            keys.append(shard.data(item.notification_id))
            args.append(item.expires_ms + SHARED_DATA_SLACK_MS)
        if item.cancellation_key:  # indexed by it until it expires
            keys.append(shard.cancellation_index(item.producer, item.cancellation_key))
            count = f"{len(item.work)} {item.expires_ms + SHARED_DATA_SLACK_MS}"
            args.append(count if join is None else count + "+")
        elif join is None:
            args.append(len(item.work))
        else:
            args.append(f"{len(item.work)}+")
        for work in item.work:
            args += [work.destination, work.item]
        if join is not None:
            digests.add_join(shard, join, keys, args)
            now_ms = max(now_ms, join.now_ms)
    return now_ms


_OK = IngestReply("OK")  # the common reply, shared


# The replies of a word and a text, by word: the field the text goes to.
_WITH_TEXT = {b"DUP": "notification_id", b"DIGEST": "digest", b"BROKEN": "error"}


def _reply(raw: bytes | list[bytes | list[bytes]]) -> IngestReply:
    """One item's entry of the script's reply: a word, or a list when it carries data."""
    if raw == b"OK":
        return _OK
    if isinstance(raw, bytes):  # CONFLICT, BUSY
        return IngestReply(raw.decode())  # type: ignore[arg-type]
    kind = raw[0]
    if kind == b"JOINED":  # accepted, and joined the digest named
        digest, count, closes = raw[1], raw[2], raw[3]
        return IngestReply("OK", joined=digests.Joined(digest.decode(), int(count), int(closes)))  # type: ignore[union-attr, arg-type]
    if kind in _WITH_TEXT:
        text = raw[1].decode()  # type: ignore[union-attr]
        return IngestReply(kind.decode(), **{_WITH_TEXT[kind]: text})  # type: ignore[arg-type]
    if kind == b"STALE":
        return IngestReply("STALE", settings=RecipientSettings.from_hash(raw[1]))  # type: ignore[arg-type]
    if kind == b"SUPPRESSIONS":
        pairs: list[bytes] = raw[2:]  # type: ignore[assignment]
        found = {pairs[i].decode(): pairs[i + 1] for i in range(0, len(pairs), 2)}
        return IngestReply(
            "SUPPRESSIONS",
            suppression_version=int(raw[1]),  # type: ignore[arg-type]
            suppressions=found,
        )
    raise ValueError(f"unknown ingest reply {raw!r}")
