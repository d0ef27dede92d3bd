"""A producer's status outbox and dead letters: statuses waiting to be POSTed, in order.

The status-webhooks process reads every shard's ``events`` (consumer group
``status-webhooks``) and puts each status due to a producer into that producer's outbox
(``outbox_append.lua``: once per ``events`` entry, even when the entry is read
again after a crash, as long as entries come in stream order), then acknowledges the entry.
The producer's sender reads the outbox in order and deletes an entry once its POST was
answered 2xx, or once it was given up and moved to the producer's dead-letter stream
(``dead_letter.lua``). What is in the outbox is therefore exactly what is not done
yet: after a crash the sender starts from its first entry again.

An outbox entry: ``d`` the delivery id, ``v`` the delivery's version, ``b`` the JSON body.
Its id's milliseconds say when it was put in, from which its time to give up is counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.codec import as_text
from streams.core.keys import KeySpace, StatusWebhookKeys
from streams.core.scripts import Call, KeyOrArg
from streams.status_webhooks.store import entry_ms


@dataclass(frozen=True, slots=True)
class DueStatus:
    """A status to put into an outbox: from which ``events`` entry, about which delivery and
    version, and the body to POST."""

    source: str
    delivery_id: str
    version: int
    body: bytes


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A status in an outbox."""

    entry_id: str
    delivery_id: str
    version: int
    body: bytes

    @property
    def webhook_id(self) -> str:
        """The ``webhook-id`` it is sent with: the same on every attempt and after a crash,
        different for each version of the delivery, so a receiver can drop a repeat."""
        return f"{self.delivery_id}.{self.version}"

    @property
    def added_ms(self) -> int:
        """When it was put into the outbox (the Redis clock)."""
        return entry_ms(self.entry_id)


def status_outbox_append_call(
    hooks: StatusWebhookKeys, shard: int, statuses: Sequence[DueStatus], *, again: bool = False
) -> Call:
    """The keys and arguments of one ``outbox_append.lua`` call.

    KEYS: config, outbox, positions. ARGV: the shard, "once" or "again" (put in even what
    the position says was put in already), then four per status in stream order: its
    ``events`` entry id, delivery id, version and body.
    """
    args: list[KeyOrArg] = [shard, "again" if again else "once"]
    for status in statuses:
        args += (status.source, status.delivery_id, status.version, status.body)
    return [hooks.config, hooks.outbox, hooks.positions], args


async def append_statuses(
    redis: Redis,
    keys: KeySpace,
    shard: int,
    by_producer: Mapping[str, Sequence[DueStatus]],
    *,
    again: bool = False,
) -> dict[str, int]:
    """Put each producer's statuses into its outbox (one pipeline); per producer the count
    put in, or -1 when it has no webhook any more. ``again``: entries taken over out of
    order, put in even if their position says they were (a repeat, never a loss)."""
    producers = [producer for producer, statuses in by_producer.items() if statuses]
    if not producers:
        return {}
    calls = [
        status_outbox_append_call(keys.status_webhooks(p), shard, by_producer[p], again=again)
        for p in producers
    ]
    replies = await scripts.STATUS_OUTBOX_APPEND.run_many(redis, calls)
    return {producer: int(reply) for producer, reply in zip(producers, replies, strict=True)}


async def read_outbox(
    redis: Redis, hooks: StatusWebhookKeys, after: str, count: int
) -> list[OutboxEntry]:
    """Up to ``count`` entries after ``after`` ("-": from the first), in order."""
    start = "-" if after == "-" else f"({after}"
    reply: Any = await redis.xrange(hooks.outbox, start, "+", count=count)
    return [_entry(entry_id, fields) for entry_id, fields in reply]


def _entry(entry_id: bytes | str, fields: dict[bytes, bytes]) -> OutboxEntry:
    return OutboxEntry(
        entry_id=as_text(entry_id),
        delivery_id=fields[b"d"].decode(),
        version=int(fields[b"v"]),
        body=fields[b"b"],
    )


async def delete_done(redis: Redis, hooks: StatusWebhookKeys, entry_ids: Sequence[str]) -> int:
    """Delete entries that are done (answered 2xx); how many were still there."""
    return int(await redis.xdel(hooks.outbox, *entry_ids)) if entry_ids else 0


@dataclass(frozen=True, slots=True)
class GivenUp:
    """Why a status was given up: its attempts and the last one's answer or failure."""

    attempts: int
    first_attempt_ms: int
    last_attempt_ms: int
    status_code: int  # the last answer's HTTP status (0: no answer)
    error: str  # what went wrong last, without the URL's path or query


def status_dead_letter_call(
    hooks: StatusWebhookKeys, entry: OutboxEntry, retention_ms: int, why: GivenUp
) -> Call:
    """The keys and arguments of one ``dead_letter.lua`` call.

    KEYS: outbox, dlq. ARGV: the outbox entry id, the retention (ms), then the dead letter's
    field/value pairs.
    """
    fields: dict[str, KeyOrArg] = {
        "webhook_id": entry.webhook_id,
        "delivery_id": entry.delivery_id,
        "version": entry.version,
        "body": entry.body,
        "added_ms": entry.added_ms,
        "attempts": why.attempts,
        "first_attempt_ms": why.first_attempt_ms,
        "last_attempt_ms": why.last_attempt_ms,
        "status_code": why.status_code,
        "error": why.error,
    }
    flat = [part for pair in fields.items() for part in pair]
    return [hooks.outbox, hooks.dlq], [entry.entry_id, retention_ms, *flat]


async def dead_letter(
    redis: Redis,
    hooks: StatusWebhookKeys,
    entries: Sequence[OutboxEntry],
    retention_ms: int,
    why: GivenUp,
) -> int:
    """Move ``entries`` to the dead-letter stream (one pipeline); how many were still there
    (the others' webhook was removed meanwhile)."""
    calls = [status_dead_letter_call(hooks, entry, retention_ms, why) for entry in entries]
    return sum(int(reply) for reply in await scripts.STATUS_DEAD_LETTER.run_many(redis, calls))


@dataclass(frozen=True, slots=True)
class DeadStatus:
    """A dead letter of a producer's status webhook."""

    entry_id: str
    webhook_id: str
    delivery_id: str
    version: int
    body: bytes
    added_ms: int
    attempts: int
    first_attempt_ms: int
    last_attempt_ms: int
    status_code: int
    error: str


async def read_dead_letters(
    redis: Redis, hooks: StatusWebhookKeys, count: int = 100
) -> list[DeadStatus]:
    """The oldest ``count`` dead letters."""
    reply: Any = await redis.xrange(hooks.dlq, "-", "+", count=count)
    found = []
    for entry_id, raw in reply:
        fields = {key.decode(): value for key, value in raw.items()}
        found.append(
            DeadStatus(
                entry_id=as_text(entry_id),
                webhook_id=fields["webhook_id"].decode(),
                delivery_id=fields["delivery_id"].decode(),
                version=int(fields["version"]),
                body=fields["body"],
                added_ms=int(fields["added_ms"]),
                attempts=int(fields["attempts"]),
                first_attempt_ms=int(fields["first_attempt_ms"]),
                last_attempt_ms=int(fields["last_attempt_ms"]),
                status_code=int(fields["status_code"]),
                error=fields["error"].decode(),
            )
        )
    return found
