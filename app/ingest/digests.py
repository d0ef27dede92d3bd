"""Notifications of a digest type joining their digests, as they are accepted or after.

The ingest script writes such a notification like any other, its deliveries DIGESTED
(``app.ingest.delivery_plan``), and it joins the digest open for its (recipient, type, key)
on the recipient's home shard (``streams.digests.store``). When the notification is ingested
on that shard (always, with one shard), the ingest script joins it in the same step
(``DigestJoiner.planned``: it names the digest this process last saw open, and the script
sends a wrong guess back to be planned again). Otherwise it joins after, by ``join.lua``.
Either way its ``NotificationDigested`` event is written before it is answered 202, with
the digest in the answer. A request answered again (the same key and body) joins again,
which changes nothing if it had joined: so a join or an event lost to a crash before the
answer is made by the producer's retry, as the answer itself would be. A join Redis cannot
make is a 503.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.catalog import Catalog
from app.catalog.digests import Digest
from app.ingest.answers import IngestAnswer, refused, unavailable
from app.ingest.pending import CheckedRequest, Pending
from app.ingest.requests import JoinedDigest, NotificationRequest
from streams.core.clock import now_ms as wall_clock_ms
from streams.core.keys import KeySpace, ShardKeys
from streams.digests import store
from streams.digests.ids import is_digest_close
from streams.ingest.writer import IngestItem
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
        # The digests this process saw open: each join names its guess, which the script checks.
        self.open_digests = store.OpenDigests()

    def planned(
        self,
        request: CheckedRequest,
        settings: RecipientSettings,
        item: IngestItem,
        now_ms: int,
        *,
        named: str | None = None,
        rounds: int = 0,
    ) -> IngestItem:
        """``item`` joining its digest as the ingest script accepts it, when it is of a
        digest type and ingested on its recipient's home shard; else ``item`` as it is.
        The digest it names: ``named`` (the one the script named last round; "": a new
        one), else the one this process saw open; a new one's id changes with ``rounds``."""
        body, key = request.given, request.identity.digest_key
        if key is None:  # not of a digest type, or a digest's own notification
            return item
        shard, recipient_id = request.shard, body.recipient.id
        if self.keys.shards > 1 and self.keys.home_of_recipient(recipient_id).shard != shard.shard:
            return item  # it joins after, on its recipient's home shard
        digest = self.catalog.digests[body.type]
        open_key = store.open_digest_key(shard, recipient_id, body.type, key)
        guess = self.open_digests.guess(open_key, now_ms) if named is None else named
        opened_ms = now_ms + rounds  # a new candidate each round, should one be taken
        closes_ms = 0 if guess else max(digest.closes_ms(opened_ms, _zone(settings)), now_ms)
        join = store.DigestJoin(
            ask=_ask(body, request.producer, item.notification_id, digest, key, closes_ms),
            open_key=open_key,
            digest_id=guess or store.digest_id(recipient_id, body.type, key, opened_ms),
            how=store.OPEN if guess else store.NEW,
            now_ms=now_ms,
            events=shard.events,
        )
        return msgspec.structs.replace(item, join=join)

    async def look_up(self, pending: Sequence[Pending]) -> None:
        """Name the digest open for each join of ``pending`` that asks for a new one because
        this process saw none open, read in one round trip (a process that has not seen a
        digest, just started or beside others, would otherwise be sent back by the script
        for most of its first joins); on a Redis error, the script sorts them out."""
        unseen: dict[int, tuple[ShardKeys, list[Pending]]] = {}
        for entry in pending:
            join = entry.item.join
            if join is not None and join.how == store.NEW and entry.digest_named is None:
                shard = entry.request.shard
                unseen.setdefault(shard.shard, (shard, []))[1].append(entry)
        if not unseen:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, entries in unseen.values():
                    # By name: a cluster pipeline refuses mget (a shard's keys share a slot).
                    pipe.execute_command("MGET", *(e.item.join.open_key for e in entries))  # type: ignore[union-attr]
                found: list[list[bytes | None]] = await pipe.execute()
        except RedisError:
            return
        for (_, entries), values in zip(unseen.values(), found, strict=True):
            for entry, value in zip(entries, values, strict=True):
                join = entry.item.join
                if value is None or join is None:
                    continue
                digest, _, closes = value.decode().partition(" ")
                if closes.isdigit():
                    self.open_digests.saw(join.open_key, digest, int(closes))
                ask = msgspec.structs.replace(join.ask, closes_ms=0)
                named = msgspec.structs.replace(join, ask=ask, digest_id=digest, how=store.OPEN)
                entry.item = msgspec.structs.replace(entry.item, join=named)
                entry.digest_named = digest

    async def join(
        self,
        producer: str,
        entries: Sequence[tuple[str, NotificationRequest | IngestAnswer]],
        answers: list[IngestAnswer],
    ) -> None:
        """Record the joins the ingest script made, and join each other accepted
        notification of a digest type in ``answers`` (in place: its answer names the digest,
        or says why it could not join), all in a few round trips."""
        await self._record(answers)
        joining = [
            (index, request)
            for index, ((key, request), answer) in enumerate(zip(entries, answers, strict=True))
            if answer.joined is None and answer.accepted and not isinstance(request, IngestAnswer)
            and request.type in self.catalog.digests and not is_digest_close(key)
        ]  # fmt: skip
        if not joining:
            return
        try:
            now_ms = self.now_ms()
            asks = await self._asks(producer, joining, answers, now_ms)
            results = await store.join_many(self.redis, asks, now_ms, self.open_digests)
        except RedisError:
            for index, _ in joining:
                answers[index] = unavailable()
            return
        for (index, _), result in zip(joining, results, strict=True):
            answer = answers[index]
            if isinstance(result, store.DigestBusy):
                answers[index] = refused(result)
            else:
                response = with_digest(answer.response, result)
                answers[index] = msgspec.structs.replace(answer, response=response)

    async def _record(self, answers: list[IngestAnswer]) -> None:
        """Write the events of the joins the ingest script made (a 503 for each when Redis
        cannot: the producer's retry records it), and remember their digests open."""
        made = [(index, answer.joined) for index, answer in enumerate(answers) if answer.joined]
        if not made:
            return
        seen = self.open_digests
        try:
            await store.record_joins(self.redis, [
                (join.events, store.joined_event(join.ask, joined, join.now_ms))
                for _, (join, joined) in made
            ])  # fmt: skip
        except RedisError:
            for index, _ in made:
                answers[index] = unavailable()
            return
        for _, (join, joined) in made:
            if joined.closes_ms > join.now_ms:  # still open (a full one is due now)
                seen.saw(join.open_key, joined.digest_id, joined.closes_ms)

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
            digest, answer = self.catalog.digests[request.type], answers[index]
            ask = _ask(
                request, producer, _id_of(answer.response), digest, digest.key_of(request.data),
                digest.closes_ms(now_ms, zones.get(n, "")),
                again=answer.replayed, joined=answer.joined_before,
            )  # fmt: skip
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


def _ask(  # noqa: PLR0917 (the parts of one ask)
    request: NotificationRequest,
    producer: str,
    notification_id: str,
    digest: Digest,
    key: str,
    closes_ms: int,
    *,
    again: bool = False,
    joined: str = "",
) -> store.JoinAsk:
    """What ``request``'s notification asks to join: its digest (``key``), opening one that
    closes at ``closes_ms`` when none is open; ``again`` and ``joined`` as ``JoinAsk``'s."""
    return store.JoinAsk(
        notification_id=notification_id, recipient_id=request.recipient.id,
        notification_type=request.type, key=key, producer=producer,
        locale=request.locale or "", recipient=_encoder.encode(request.recipient),
        item=_encoder.encode(request.data), closes_ms=closes_ms, max_items=digest.max_items,
        again=again, joined=joined,
    )  # fmt: skip


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


def with_digest(response: bytes, joined: store.Joined) -> bytes:
    """The 202 body with the digest the notification joined."""
    digest = JoinedDigest(joined.digest_id, joined.count, joined.closes_ms)
    return response[:-1] + b',"digest":' + _encoder.encode(digest) + b"}"
