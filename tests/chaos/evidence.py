"""What the run left behind, read from Redis (the write model) and PostgreSQL (the read model),
with the providers' side: the sandbox's record and what the SMTP relay took (``relay``).

Nothing here judges; ``verdict`` compares. A delivery's state in the write model is its
``dlv:<id>`` hash, or, when no worker ever touched it (SUPPRESSED or EXPIRED at acceptance),
its entry in the notification's ``ntf:<id>`` record — as ``app.api.notification_status`` derives it.
A delivery that did not end at acceptance and has no hash any more had its state released
once projected (``streams.delivery.state_release``): it is listed in ``released``, for the
verdict to judge by the read model alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import asyncpg
from redis.asyncio import Redis

from streams.core.consumer_groups import DELIVERY_GROUP, PROJECTOR_GROUP
from streams.core.keys import KeySpace, ShardKeys
from streams.core.records import decode_record
from streams.core.vocabulary import Priority
from tests.chaos.relay import Relayed

FINAL = frozenset({"SENT", "FAILED", "EXPIRED", "SUPPRESSED", "CANCELLED"})
PIPELINE_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """The fields of a delivery both models keep and must agree on."""

    status: str
    attempts: int
    error_class: str | None
    provider_message_id: str | None


@dataclass(frozen=True, slots=True)
class SandboxCall:
    at: float  # seconds since the epoch (from the stream entry id)
    outcome: str
    duplicate: bool
    message_id: str


@dataclass(slots=True)
class Evidence:
    # Write model.
    records: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    # Idempotency key -> notification id ("" while a request still holds the key).
    idempotency: dict[str, str] = field(default_factory=dict)
    redis_states: dict[str, DeliveryState] = field(default_factory=dict)
    state_hashes: set[str] = field(default_factory=set)  # delivery ids with a dlv: hash
    released: set[str] = field(default_factory=set)  # ids whose dlv: hash left once projected
    dead_letters: list[tuple[str, str]] = field(default_factory=list)  # (delivery, class)
    pending: dict[str, int] = field(default_factory=dict)  # stream -> entries not acked
    delayed: int = 0
    # Read model.
    pg_notifications: dict[str, str] = field(default_factory=dict)  # id -> idempotency key
    pg_states: dict[str, DeliveryState] = field(default_factory=dict)
    # The providers' side.
    sandbox: dict[str, list[SandboxCall]] = field(default_factory=dict)
    # X-Clarion-Delivery-Id -> every copy the relay took, in order.
    relay: dict[str, list[Relayed]] = field(default_factory=dict)


def minted_at(uuid7: str) -> float:
    """When a notification or delivery id was made (seconds since the epoch): a UUIDv7 holds
    its millisecond in its first 48 bits."""
    return int(uuid7.replace("-", "")[:12], 16) / 1000


def made_since(evidence: Evidence, since: float, keys_before: set[str]) -> Evidence:
    """The evidence without what was made before ``since``: notifications and deliveries
    whose ids are older, and the idempotency records of ``keys_before``."""

    def new(ids: dict[str, Any]) -> dict[str, Any]:
        return {i: value for i, value in ids.items() if minted_at(i) >= since}

    return replace(
        evidence,
        records=new(evidence.records),
        idempotency={
            key: nid
            for key, nid in evidence.idempotency.items()
            if key not in keys_before and (not nid or minted_at(nid) >= since)
        },
        redis_states=new(evidence.redis_states),
        state_hashes={i for i in evidence.state_hashes if minted_at(i) >= since},
        released={i for i in evidence.released if minted_at(i) >= since},
        dead_letters=[
            (delivery_id, error_class)
            for delivery_id, error_class in evidence.dead_letters
            if not delivery_id or minted_at(delivery_id) >= since
        ],
        pg_notifications=new(evidence.pg_notifications),
        pg_states=new(evidence.pg_states),
        sandbox=new(evidence.sandbox),
        # A header that is no delivery id stays, for the verdict to name.
        relay={
            delivery_id: copies
            for delivery_id, copies in evidence.relay.items()
            if not _is_id(delivery_id) or minted_at(delivery_id) >= since
        },
    )


def _is_id(text: str) -> bool:
    return len(text) == 36 and all(c in "0123456789abcdef-" for c in text)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _scan(redis: Redis, pattern: str) -> list[bytes]:
    return [key async for key in redis.scan_iter(match=pattern, count=2000)]


async def _pipelined(redis: Redis, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    results: list[Any] = []
    for start in range(0, len(calls), PIPELINE_CHUNK):
        pipe = redis.pipeline(transaction=False)
        for name, args in calls[start : start + PIPELINE_CHUNK]:
            getattr(pipe, name)(*args)
        results += await pipe.execute()
    return results


async def read_write_model(redis: Redis, keys: KeySpace) -> Evidence:
    """Every notification record, idempotency record, delivery state and dead letter, of
    every shard."""
    evidence = Evidence()
    for shard in keys.all_shards():
        await _read_shard(redis, shard, evidence)
    return evidence


async def _read_shard(redis: Redis, shard: ShardKeys, evidence: Evidence) -> None:
    record_keys = await _scan(redis, shard.notification("*"))
    records = {}  # this shard's
    for raw in await _pipelined(redis, [("get", (key,)) for key in record_keys]):
        record = decode_record(raw)
        records[record.id] = [(d.id, d.channel, d.status) for d in record.deliveries]
    evidence.records |= records
    idem_keys = await _scan(redis, shard.idempotency("*", "*"))
    for key, raw in zip(
        idem_keys, await _pipelined(redis, [("get", (k,)) for k in idem_keys]), strict=True
    ):
        kind, _, last = _text(raw).split(" ")  # "done <fingerprint> <id>" or an in-flight mark
        evidence.idempotency[_text(key).rsplit(":", 1)[1]] = last if kind == "done" else ""
    evidence.state_hashes |= {
        _text(key).rsplit(":", 1)[1] for key in await _scan(redis, shard.delivery("*"))
    }
    at_acceptance = {d[0]: d[2] for deliveries in records.values() for d in deliveries}
    fields = ("status", "attempts", "error_class", "provider_message_id")
    ids = sorted(at_acceptance)
    calls = [("hmget", (shard.delivery(i), *fields)) for i in ids]
    for delivery_id, (status, attempts, error_class, message_id) in zip(
        ids, await _pipelined(redis, calls), strict=True
    ):
        if status is None and at_acceptance[delivery_id] not in FINAL:
            evidence.released.add(delivery_id)
            continue
        if status is None:  # never touched by a worker: as accepted
            state = DeliveryState(at_acceptance[delivery_id], 0, None, None)
        else:
            state = DeliveryState(
                _text(status),
                int(attempts or 0),
                _text(error_class) if error_class else None,
                _text(message_id) if message_id else None,
            )
        evidence.redis_states[delivery_id] = state
    dead_letters: Any = await redis.xrange(shard.dlq)  # redis-py types it as optional
    for _, entry in dead_letters:
        evidence.dead_letters.append(
            (_text(entry[b"delivery_id"]), _text(entry[b"error_class"]))
            if b"delivery_id" in entry
            else ("", _text(entry.get(b"error_class", b"?")))  # a POISON entry has no id
        )
    for priority in Priority:
        summary = await redis.xpending(shard.work(priority), DELIVERY_GROUP)
        name = f"work:{priority.lower()}"
        evidence.pending[name] = evidence.pending.get(name, 0) + int(summary["pending"])
    summary = await redis.xpending(shard.events, PROJECTOR_GROUP)
    evidence.pending["events"] = evidence.pending.get("events", 0) + int(summary["pending"])
    evidence.delayed += int(await redis.zcard(shard.delayed))


async def read_sandbox(redis: Redis, keys: KeySpace, evidence: Evidence) -> None:
    """Every provider call the sandbox recorded, per delivery, in order."""
    calls: dict[str, list[SandboxCall]] = defaultdict(list)
    start = "-"
    while True:
        entries: Any = await redis.xrange(keys.sandbox_sent, min=start, count=10_000)
        for entry_id, entry in entries:
            calls[_text(entry[b"delivery_id"])].append(
                SandboxCall(
                    at=int(_text(entry_id).split("-")[0]) / 1000,
                    outcome=_text(entry[b"outcome"]),
                    duplicate=entry[b"duplicate"] == b"1",
                    message_id=_text(entry.get(b"message_id", b"")),
                )
            )
        if len(entries) < 10_000:
            break
        start = "(" + _text(entries[-1][0])
    evidence.sandbox = dict(calls)


async def read_read_model(database_url: str, evidence: Evidence) -> None:
    """Every notification and delivery row in PostgreSQL."""
    connection = await asyncpg.connect(database_url)
    try:
        for row in await connection.fetch("SELECT id::text, idempotency_key FROM notification"):
            evidence.pg_notifications[row["id"]] = row["idempotency_key"]
        rows = await connection.fetch(
            "SELECT id::text, status, attempts, error_class, provider_message_id FROM delivery"
        )
    finally:
        await connection.close()
    for row in rows:
        evidence.pg_states[row["id"]] = DeliveryState(
            row["status"], row["attempts"], row["error_class"], row["provider_message_id"]
        )
