"""Notifications of a digest type joining their digests, once accepted.

The ingest script writes such a notification like any other, its deliveries DIGESTED
(``app.ingest.delivery_plan``); then it joins the digest open for its (recipient, type, key)
on the recipient's home shard (``streams.digests.store``), and only then is it answered 202,
with the digest in the answer. A request answered again (the same key and body) joins again,
which changes nothing if it had joined: so a join lost to a crash before the answer is made
by the producer's retry, as the answer itself would be. A join Redis cannot make is a 503.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.catalog import Catalog
from app.ingest.answers import IngestAnswer, refused, unavailable
from app.ingest.requests import JoinedDigest, NotificationRequest
from streams.core.clock import now_ms as wall_clock_ms
from streams.core.keys import KeySpace, ShardKeys
from streams.digests import store
from streams.digests.ids import is_digest_close
from streams.recipients.read import RecipientSettings

_encoder = msgspec.json.Encoder()


class _Id(msgspec.Struct):
    id: str


class _Zone(msgspec.Struct):
    timezone: str = ""


class DigestJoiner:
    """Joins the accepted notifications of digest types to their digests."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        catalog: Catalog,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.catalog = catalog
        self.now_ms = now_ms

    async def join(
        self,
        producer: str,
        entries: Sequence[tuple[str, NotificationRequest | IngestAnswer]],
        answers: list[IngestAnswer],
    ) -> None:
        """Join each accepted notification of a digest type in ``answers`` (in place: its
        answer names the digest, or says why it could not join)."""
        for index, ((key, request), answer) in enumerate(zip(entries, answers, strict=True)):
            if not answer.accepted or isinstance(request, IngestAnswer):
                continue
            if request.type not in self.catalog.digests or is_digest_close(key):
                continue
            try:
                joined = await self._join(producer, request, answer.response)
            except RedisError:
                answers[index] = unavailable()
            except store.DigestBusy as error:
                answers[index] = refused(error)
            else:
                answers[index] = msgspec.structs.replace(
                    answer, response=_with_digest(answer.response, joined)
                )

    async def _join(
        self, producer: str, request: NotificationRequest, response: bytes
    ) -> store.Joined:
        digest = self.catalog.digests[request.type]
        recipient_id = request.recipient.id
        home = self.keys.home_of_recipient(recipient_id)
        timezone = await self._timezone(home, recipient_id) if digest.at_minutes >= 0 else ""
        now_ms = self.now_ms()
        ask = store.JoinAsk(
            notification_id=msgspec.json.decode(response, type=_Id).id,
            recipient_id=recipient_id,
            notification_type=request.type,
            key=digest.key_of(request.data),
            producer=producer,
            locale=request.locale or "",
            recipient=_encoder.encode(request.recipient),
            item=_encoder.encode(request.data),
            closes_ms=digest.closes_ms(now_ms, timezone),
            max_items=digest.max_items,
        )
        return await store.join(self.redis, home, ask, now_ms)

    async def _timezone(self, home: ShardKeys, recipient_id: str) -> str:
        """The recipient's time zone: its profile's, else its quiet hours' ("" for none)."""
        settings = RecipientSettings.from_hash(
            await self.redis.hgetall(home.recipient(recipient_id))
        )
        if settings.profile:
            zone = msgspec.json.decode(settings.profile, type=_Zone).timezone
            if zone:
                return zone
        return settings.quiet_hours.timezone if settings.quiet_hours else ""


def _with_digest(response: bytes, joined: store.Joined) -> bytes:
    """The 202 body with the digest the notification joined."""
    digest = JoinedDigest(joined.digest_id, joined.count, joined.closes_ms)
    return response[:-1] + b',"digest":' + _encoder.encode(digest) + b"}"
