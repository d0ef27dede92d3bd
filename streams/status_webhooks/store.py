"""Producers' status webhooks in Redis: who has one (URL and signing secret), and the
figures of their outboxes for operators.

A producer's configuration is one string key (``StatusWebhookKeys.config``, JSON) in the
producer's own hash tag, beside its outbox; the set ``status_webhook_producers`` lists the
producers that have one, and ``status_webhook_version`` grows with every change, so the
status-webhooks process rereads the configurations only after one changed. Removing a
webhook removes what waited in its outbox too: the producer asked for no more. Its dead
letters stay for their retention.

The signing secret is kept here because Clarion signs with it; it is never logged, and the
API shows it only in the answer that made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams.core import clock
from streams.core.codec import as_text
from streams.core.connection import clock_reply_ms, queue_clock
from streams.core.keys import KeySpace


class StatusWebhook(msgspec.Struct, frozen=True, kw_only=True):
    """Where a producer's statuses go and the secret they are signed with."""

    url: str
    # ``whsec_`` and base64, as Standard Webhooks libraries make and read it.
    secret: str
    updated_ms: int
    # Statuses per POST: 1 sends each on its own; more sends them in batches (the receiver
    # must read the batch shape).
    max_batch: int = 1

    def __repr__(self) -> str:  # never print the secret
        return f"StatusWebhook(url=<{len(self.url)} characters>, updated_ms={self.updated_ms})"


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StatusWebhook)


class StatusWebhookStore:
    """Read and change producers' status webhooks."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def put(self, producer: str, url: str, secret: str, max_batch: int = 1) -> StatusWebhook:
        """Set (or replace) ``producer``'s webhook; statuses waiting keep their place and go to
        the new URL, signed with the new secret."""
        now_ms = clock.now_ms()
        hook = StatusWebhook(url=url, secret=secret, updated_ms=now_ms, max_batch=max_batch)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.keys.status_webhooks(producer).config, _encoder.encode(hook))
            pipe.sadd(self.keys.status_webhook_producers, producer)
            pipe.incr(self.keys.status_webhook_version)
            await pipe.execute()
        return hook

    async def get(self, producer: str) -> StatusWebhook | None:
        """``producer``'s webhook, or None."""
        raw = await self.redis.get(self.keys.status_webhooks(producer).config)
        return None if raw is None else _decoder.decode(raw)

    async def remove(self, producer: str) -> bool:
        """Remove ``producer``'s webhook and what waited in its outbox; whether it had one."""
        hooks = self.keys.status_webhooks(producer)
        async with self.redis.pipeline(transaction=False) as pipe:
            # One DEL of keys in one hash tag: atomic, so the outbox never outlives the config.
            pipe.delete(hooks.config, hooks.outbox, hooks.positions)
            pipe.srem(self.keys.status_webhook_producers, producer)
            pipe.incr(self.keys.status_webhook_version)
            removed, _, _ = await pipe.execute()
        return bool(removed)

    async def counts(self, producer: str) -> tuple[int, int]:
        """Statuses waiting in ``producer``'s outbox, and its dead letters."""
        hooks = self.keys.status_webhooks(producer)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xlen(hooks.outbox)
            pipe.xlen(hooks.dlq)
            waiting, dead = await pipe.execute()
        return int(waiting), int(dead)

    async def version(self) -> int:
        """How many changes were made so far (0: none, or Redis lost them)."""
        return int(await self.redis.get(self.keys.status_webhook_version) or 0)

    async def all(self) -> dict[str, StatusWebhook]:
        """Every producer's webhook."""
        producers = sorted(
            as_text(p) for p in await self.redis.smembers(self.keys.status_webhook_producers)
        )
        if not producers:
            return {}
        # One GET each, not an MGET: each producer's keys have a hash tag of their own.
        async with self.redis.pipeline(transaction=False) as pipe:
            for producer in producers:
                pipe.get(self.keys.status_webhooks(producer).config)
            raw: list[Any] = await pipe.execute()
        return {
            producer: _decoder.decode(value)
            for producer, value in zip(producers, raw, strict=True)
            if value is not None
        }


@dataclass(frozen=True, slots=True)
class OutboxFigures:
    """One producer's outbox and dead letters, as operators see them."""

    producer: str
    waiting: int  # statuses in the outbox, being sent or not yet
    oldest_age_ms: int  # how long the oldest has waited (0: none waits)
    dead_letters: int


async def read_outboxes(redis: Redis, keys: KeySpace) -> list[OutboxFigures]:
    """The figures of every producer with a webhook, ages on the Redis clock (two round
    trips)."""
    producers = sorted(as_text(p) for p in await redis.smembers(keys.status_webhook_producers))
    async with redis.pipeline(transaction=False) as pipe:
        queue_clock(pipe, keys.status_webhook_producers)
        for producer in producers:
            hooks = keys.status_webhooks(producer)
            pipe.xlen(hooks.outbox)
            pipe.xrange(hooks.outbox, "-", "+", count=1)
            pipe.xlen(hooks.dlq)
        replies: list[Any] = await pipe.execute()
    now_ms = clock_reply_ms(replies[0])
    figures = []
    for number, producer in enumerate(producers):
        waiting, oldest, dead = replies[1 + 3 * number : 4 + 3 * number]
        age = max(0, now_ms - entry_ms(oldest[0][0])) if oldest else 0
        figures.append(OutboxFigures(producer, int(waiting), age, int(dead)))
    return figures


def entry_ms(entry_id: bytes | str) -> int:
    """The Redis clock's milliseconds at which a stream entry was added (from its id)."""
    return int(as_text(entry_id).partition("-")[0])
