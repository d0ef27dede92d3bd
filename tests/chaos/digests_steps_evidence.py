"""What the digests-and-steps run left behind, once the service settled.

The final states come from the status API (``GET /v1/notifications/{id}``: each delivery's
status, step, ``fallback_of`` and reason, the digest a notification joined or was made of),
for every acknowledged notification and every notification made of a digest (found in the
read model by its idempotency key, ``digest:<id>``, and in Redis by its record). What was
sent is the sandbox's record, with each call's channel and address; what a digest's
notification said is its inbox message (the sandbox keeps no text). The read model's
``digest`` rows say how many items each digest closed with, and which notification it made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from redis.asyncio import Redis

from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.core.vocabulary import TERMINAL
from streams.digests.ids import digest_of
from tests.chaos.evidence import Evidence, read_read_model, read_write_model
from tests.chaos.service import API_SECRET, DRAIN_TIMEOUT_S, PREFIX, Service

_ENDED = frozenset(status.value for status in TERMINAL)
STATUS_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class Sent:
    """One call the sandbox recorded."""

    at: float  # seconds since the epoch (the stream entry id)
    delivery_id: str
    channel: str
    address: str
    outcome: str
    duplicate: bool


@dataclass(frozen=True, slots=True)
class DigestRow:
    items: int
    closed: bool
    notification_id: str | None


@dataclass(slots=True)
class Found:
    evidence: Evidence
    status: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> status API answer
    # Digest id -> the notifications made of it (read model and Redis records together).
    made: dict[str, set[str]] = field(default_factory=dict)
    digests: dict[str, DigestRow] = field(default_factory=dict)  # the read model's rows
    calls: list[Sent] = field(default_factory=list)
    inbox: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # recipient -> messages
    digests_due: int = 0  # digests Redis still has due
    unended: int = 0  # deliveries of the read model not ended yet

    def sends(self) -> dict[str, list[Sent]]:
        """The sandbox's sends (outcome ``sent``) per delivery, in order."""
        by_delivery: dict[str, list[Sent]] = defaultdict(list)
        for call in self.calls:
            if call.outcome == "sent":
                by_delivery[call.delivery_id].append(call)
        return by_delivery


async def _read_digests(database_url: str, found: Found) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            "SELECT id, items, closed_at IS NOT NULL AS closed, notification_id::text FROM digest"
        )
        unended = await connection.fetchval(
            "SELECT count(*) FROM delivery WHERE NOT (status = ANY($1::text[]))", list(_ENDED)
        )
    finally:
        await connection.close()
    found.digests = {
        r["id"]: DigestRow(r["items"], r["closed"], r["notification_id"]) for r in rows
    }
    found.unended = int(unended)


def _made_of_digests(found: Found, digest_ids: set[str]) -> None:
    """Each digest's notifications: by the read model's idempotency keys, and by the write
    model's (whose key names end after the last colon: ``digest:<id>`` ends in the id)."""
    made: dict[str, set[str]] = defaultdict(set)
    for notification_id, key in found.evidence.pg_notifications.items():
        if digest := digest_of(key or ""):
            made[digest].add(notification_id)
    for digest in digest_ids:
        if notification_id := found.evidence.idempotency.get(digest):
            made[digest].add(notification_id)
    found.made = dict(made)


async def _read_redis(redis: Redis, keys: KeySpace, found: Found) -> None:
    found.digests_due = 0
    for shard in keys.all_shards():
        found.digests_due += int(await redis.zcard(shard.digests_due))
    calls: list[Sent] = []
    start = "-"
    while True:
        entries: Any = await redis.xrange(keys.sandbox_sent, min=start, count=10_000)
        for entry_id, entry in entries:
            fields = {k.decode(): v.decode() for k, v in entry.items()}
            calls.append(Sent(
                int(entry_id.decode().split("-")[0]) / 1000, fields["delivery_id"],
                fields["channel"], fields["address"], fields["outcome"],
                fields["duplicate"] == "1",
            ))  # fmt: skip
        if len(entries) < 10_000:
            break
        start = "(" + entries[-1][0].decode()
    found.calls = calls


def settled(found: Found) -> bool:
    """Nothing left to do: every delivery of the read model ended, every digest closed,
    nothing pending, waiting or due in Redis."""
    evidence = found.evidence
    return (
        found.unended == 0
        and found.digests_due == 0
        and all(row.closed for row in found.digests.values())
        and not any(evidence.pending.values())
        and not evidence.delayed
    )


async def drained(service: Service, acknowledged_ids: set[str], digest_ids: set[str]) -> Found:
    """Wait until the service settles (or the deadline); what it left behind."""
    redis = connect(service.redis.url)
    keys = KeySpace(PREFIX, service.shards)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    try:
        while True:
            found = Found(await read_write_model(redis, keys))
            await read_read_model(service.database_url, found.evidence)
            await _read_digests(service.database_url, found)
            await _read_redis(redis, keys, found)
            if settled(found) or time.monotonic() > deadline:
                break
            await asyncio.sleep(3)
    finally:
        await redis.aclose()
    _made_of_digests(found, digest_ids)
    made = {n for ids in found.made.values() for n in ids}
    await _read_status(service.base_url, found, acknowledged_ids | made)
    return found


async def _read_status(base_url: str, found: Found, ids: set[str]) -> None:
    headers = {"Authorization": f"Bearer {API_SECRET}"}
    limit = asyncio.Semaphore(STATUS_CONCURRENCY)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:

        async def one(notification_id: str) -> None:
            async with limit:
                answer = await client.get(f"/v1/notifications/{notification_id}", headers=headers)
            if answer.status_code == 200:
                found.status[notification_id] = answer.json()

        await asyncio.gather(*(one(i) for i in sorted(ids)))


async def read_inboxes(
    base_url: str, profiles_key: str, recipients: list[str], found: Found
) -> None:
    """Every message in each of ``recipients``' inboxes, newest first."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        for recipient in recipients:
            made = await client.post(
                f"/v1/recipients/{recipient}/inbox-tokens", json={},
                headers={"Authorization": f"Bearer {profiles_key}"},
            )  # fmt: skip
            made.raise_for_status()
            token = {"Authorization": f"Bearer {made.json()['token']}"}
            messages: list[dict[str, Any]] = []
            before: str | None = None
            while True:
                params: dict[str, Any] = {"limit": 100} | ({"before": before} if before else {})
                page = await client.get("/v1/inbox", params=params, headers=token)
                page.raise_for_status()
                body = page.json()
                messages += body["messages"]
                before = body["next"]
                if not before:
                    break
            found.inbox[recipient] = messages


def keep(path: Path, found: Found, producer: Any) -> None:
    """What the verdict judged, as JSON in ``path``: to look into a failed run."""
    kept = {
        "status": found.status,
        "made": {digest: sorted(ids) for digest, ids in found.made.items()},
        "digests": producer.digests,
        "reads": producer.reads,
        "cancels": {key: answer.statuses for key, answer in producer.cancels.items()},
        "calls": [dataclasses.astuple(call) for call in found.calls],
        "dead_letters": found.evidence.dead_letters,
        "inbox": found.inbox,
    }
    path.write_text(json.dumps(kept))
