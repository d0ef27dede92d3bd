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
_ID_START = b'{"id":"'  # how a 202 body begins (``app.ingest.requests.Accepted``)


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
        answer names the digest, or says why it could not join), all in a few round trips."""
        joining = [
            (index, request)
            for index, ((key, request), answer) in enumerate(zip(entries, answers, strict=True))
            if answer.accepted and not isinstance(request, IngestAnswer)
            and request.type in self.catalog.digests and not is_digest_close(key)
        ]  # fmt: skip
        if not joining:
            return
        try:
            now_ms = self.now_ms()
            asks = await self._asks(producer, joining, answers, now_ms)
            results = await store.join_many(self.redis, asks, now_ms)
        except RedisError:
            for index, _ in joining:
                answers[index] = unavailable()
            return
        for (index, _), result in zip(joining, results, strict=True):
            answer = answers[index]
            if isinstance(result, store.DigestBusy):
                answers[index] = refused(result)
            else:
                response = _with_digest(answer.response, result)
                answers[index] = msgspec.structs.replace(answer, response=response)

    async def _asks(
        self,
        producer: str,
        joining: list[tuple[int, NotificationRequest]],
        answers: list[IngestAnswer],
        now_ms: int,
    ) -> list[tuple[ShardKeys, store.JoinAsk]]:
        """What each notification asks to join, on its recipient's home shard; the time
        zones of the recipients of daily digests read in one round trip."""
        homes = [self.keys.home_of_recipient(request.recipient.id) for _, request in joining]
        daily = [
            n for n, (_, request) in enumerate(joining)
            if self.catalog.digests[request.type].at_minutes >= 0
        ]  # fmt: skip
        zones = dict(zip(daily, await self._timezones(
            [(homes[n], joining[n][1].recipient.id) for n in daily]
        ), strict=True))  # fmt: skip
        asks = []
        for n, (index, request) in enumerate(joining):
            digest = self.catalog.digests[request.type]
            ask = store.JoinAsk(
                notification_id=_id_of(answers[index].response),
                recipient_id=request.recipient.id,
                notification_type=request.type,
                key=digest.key_of(request.data),
                producer=producer,
                locale=request.locale or "",
                recipient=_encoder.encode(request.recipient),
                item=_encoder.encode(request.data),
                closes_ms=digest.closes_ms(now_ms, zones.get(n, "")),
                max_items=digest.max_items,
                again=answers[index].replayed,
            )
            asks.append((homes[n], ask))
        return asks

    async def _timezones(self, recipients: list[tuple[ShardKeys, str]]) -> list[str]:
        """Each recipient's time zone: its profile's, else its quiet hours' ("" for none)."""
        if not recipients:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for home, recipient_id in recipients:
                pipe.hgetall(home.recipient(recipient_id))
            found = await pipe.execute()
        return [_zone(RecipientSettings.from_hash(fields)) for fields in found]


def _id_of(response: bytes) -> str:
    """The notification id of a 202 body: its first member (``Accepted``), read in place."""
    if response.startswith(_ID_START):
        end = response.find(b'"', len(_ID_START))
        if end > 0:
            return response[len(_ID_START) : end].decode()
    return msgspec.json.decode(response, type=_Id).id


def _zone(settings: RecipientSettings) -> str:
    if settings.profile:
        zone = msgspec.json.decode(settings.profile, type=_Zone).timezone
        if zone:
            return zone
    return settings.quiet_hours.timezone if settings.quiet_hours else ""


def _with_digest(response: bytes, joined: store.Joined) -> bytes:
    """The 202 body with the digest the notification joined."""
    digest = JoinedDigest(joined.digest_id, joined.count, joined.closes_ms)
    return response[:-1] + b',"digest":' + _encoder.encode(digest) + b"}"
