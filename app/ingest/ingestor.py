"""The ingestor: ingest notifications — fan-out, then one atomic ingest step per notification.

``ingest_many`` serves both the single POST (a batch of one) and the batch endpoint. The
fan-out first assumes the recipient has no settings; the ingest script checks that assumption
atomically and, when the recipient does have settings, hands them back (STALE) so the
notification is planned again with the same ids. Recipients without settings, the common case,
cost one Redis round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import msgspec
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import tracing
from app.ingest.answers import RETRY_S, IngestAnswer, answer_of, refused, unavailable
from app.ingest.delivery_plan import epoch_ms
from app.ingest.digests import DigestJoiner, with_digest
from app.ingest.fanout import (
    FanoutError,
    NotAllowed,
    Planner,
    utc_now,
)
from app.ingest.fingerprints import fingerprint
from app.ingest.high_first import HighFirst
from app.ingest.pending import NO_SETTINGS, CheckedRequest, Pending, with_profile_of
from app.ingest.requests import NotificationRequest
from app.ingest.span_notes import note_on_span
from app.metrics import DUPLICATES_SKIPPED, OPT_OUTS, SUPPRESSED
from streams.core.errors import Conflict, Forbidden, Invalid
from streams.core.keys import KeySpace, ShardKeys
from streams.ingest.writer import IngestItem, IngestReply, IngestWriter
from streams.metrics.recorder import MetricsRecorder
from streams.recipients.read import RecipientSettings, read_many
from streams.recipients.suppressions import EMPTY as EMPTY_LIST
from streams.recipients.suppressions import ListView, decode

log = structlog.get_logger(__name__)

# How long a request that needs a second round keeps its key to itself (a twin meanwhile is
# a ``Conflict``).
IN_FLIGHT_TTL_MS = 10_000
# Rounds before giving up on a recipient whose settings (or the suppression list, or the
# digest open for it) keep changing under us: one more than a settings change, a list
# change and a digest named need.
MAX_ROUNDS = 5
# A batch yields every ``SLICE`` items planned (about 1 ms), writes in parts of
# ``WRITE_CHUNK`` (answering 1000 at once took milliseconds); with ``overlap``, in ``PLAN_CHUNK``.
SLICE, WRITE_CHUNK, PLAN_CHUNK = 25, 250, 100


class Ingestor:
    """Ingests the notifications of authenticated producers."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        planner: Planner,
        idempotency_ttl_seconds: int,
        clock: Callable[[], datetime] = utc_now,
        *,
        metrics: MetricsRecorder | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.planner = planner
        self.writer = IngestWriter(
            redis,
            idempotency_ttl_seconds * 1000,
            IN_FLIGHT_TTL_MS,
            fair_buffer=planner.catalog.fairness.buffer,
        )
        self.clock = clock
        # Counts opt-outs; without one (an Ingestor built alone, in tests) they are not counted.
        self.metrics = metrics
        # Each shard's suppression list version as the last reply said: a plan assumes it, and
        # the script answers SUPPRESSIONS when the list moved since.
        self._list_versions: dict[int, int] = {}
        # HIGH single requests being served, which a batch waits for between its slices.
        self.high_first = HighFirst()
        # Joins the accepted notifications of digest types to their digests (None: the
        # catalog has none).
        catalog = planner.catalog
        self.digests = DigestJoiner(redis, keys, catalog) if catalog.digests else None

    async def ingest(self, producer: str, key: str, request: NotificationRequest) -> IngestAnswer:
        """Ingest one notification."""
        return (await self.ingest_many(producer, [(key, request)]))[0]

    async def ingest_many(
        self,
        producer: str,
        entries: Sequence[tuple[str, NotificationRequest | IngestAnswer]],
        known: Mapping[str, RecipientSettings] | None = None,
        *,
        overlap: bool = False,
    ) -> list[IngestAnswer]:
        """Ingest notifications given as (idempotency key, request or an already known error);
        their answers in the same order. ``known``: recipients' settings as just read
        (``read_settings``), planned with from the first round on. ``overlap``: write each
        hundred as soon as it is planned, while the next is planned (a background caller's
        throughput; the API leaves it off, as its HIGH requests waited longer beside it),
        each hundred in a pipeline of its own (``IngestWriter.write``'s ``alone``)."""
        now = self.clock()
        answers: list[IngestAnswer | None] = [None] * len(entries)
        writing: list[asyncio.Task[None]] = []
        try:
            pending = await self._plan_batch(
                producer, entries, known, now, answers=answers, writing=writing, overlap=overlap
            )
            for start in range(0, len(pending), WRITE_CHUNK):
                part = pending[start : start + WRITE_CHUNK]
                await self._rounds(part, answers, now, alone=overlap)
        finally:
            # Every write started is waited for, whatever happened to the rest (without
            # ``overlap`` none was: a single POST does not gather nothing).
            settled = await asyncio.gather(*writing, return_exceptions=True) if writing else []
        for result in settled:
            if isinstance(result, BaseException):
                raise result
        assert all(answer is not None for answer in answers)  # every index is answered
        if self.digests is not None:
            await self.digests.join(producer, entries, answers)  # type: ignore[arg-type]
        if tracing.ENABLED:
            types = self.planner.catalog.types
            note_on_span(types, producer, entries, answers)  # type: ignore[arg-type]
        return answers  # type: ignore[return-value]

    async def _plan_batch(
        self,
        producer: str,
        entries: Sequence[tuple[str, NotificationRequest | IngestAnswer]],
        known: Mapping[str, RecipientSettings] | None,
        now: datetime,
        *,
        answers: list[IngestAnswer | None],
        writing: list[asyncio.Task[None]],
        overlap: bool,
    ) -> list[Pending]:
        """Plan each entry for its first round, answering at once those refused or already
        answered; what is left to write. With ``overlap``, each ``PLAN_CHUNK`` planned is
        written meanwhile, in a task added to ``writing`` (which the caller waits for)."""
        pending: list[Pending] = []
        for index, (key, request) in enumerate(entries):
            if index % SLICE == SLICE - 1:
                # Single requests get in between, HIGH ones first (``HighFirst``): planning a
                # big batch takes milliseconds. With ``overlap``, what is planned goes to
                # Redis now, and is written there while the rest is planned.
                if overlap and len(pending) >= PLAN_CHUNK:
                    written = self._rounds(pending, answers, now, alone=True)
                    writing.append(asyncio.create_task(written))
                    pending = []
                await self.high_first.batch_turn()
            if isinstance(request, IngestAnswer):
                answers[index] = request
                continue
            known_settings = known.get(request.recipient.id) if known else None
            entry = self._first_plan(
                index, producer, key, request, now, settings=known_settings or NO_SETTINGS
            )
            if isinstance(entry, IngestAnswer):
                answers[index] = entry
                continue
            pending.append(entry)
        return pending

    async def _rounds(
        self,
        pending: list[Pending],
        answers: list[IngestAnswer | None],
        now: datetime,
        *,
        alone: bool = False,
    ) -> None:
        """Write ``pending`` and answer each, planning again those whose recipient's
        settings (or the suppression list) changed meanwhile, a few rounds at most."""
        if self.digests is not None:
            await self.digests.look_up(pending)
        for _ in range(MAX_ROUNDS):
            if not pending:
                return
            pending = await self._write(pending, answers, now, alone=alone)
        for entry in pending:
            what = "digest: it kept changing while joining" if entry.digest_rounds else (
                "recipient: settings changed while ingesting"
            )  # fmt: skip
            answers[entry.index] = refused(
                Conflict(f"{what}; retry the request", retry_after_s=RETRY_S)
            )

    async def read_settings(
        self, producer: str, entries: Sequence[tuple[str, NotificationRequest]]
    ) -> dict[str, RecipientSettings]:
        """The settings of the entries' recipients, read where ingest checks them (for a
        batch whose recipients mostly have settings, as a campaign's do: planning for none
        first would cost every notification a second round)."""
        by_shard: dict[int, tuple[ShardKeys, set[str]]] = {}
        for key, request in entries:
            shard = self.keys.for_ingest(producer, key)
            by_shard.setdefault(shard.shard, (shard, set()))[1].add(request.recipient.id)
        known: dict[str, RecipientSettings] = {}
        for shard, recipient_ids in by_shard.values():
            ordered = sorted(recipient_ids)
            for recipient_id, settings in zip(
                ordered, await read_many(self.redis, shard, ordered), strict=True
            ):
                if settings.version:
                    known[recipient_id] = settings
        return known

    def _first_plan(
        self,
        index: int,
        producer: str,
        key: str,
        request: NotificationRequest,
        now: datetime,
        *,
        settings: RecipientSettings,
    ) -> Pending | IngestAnswer:
        """Check the request against the catalog, fix its ids and plan it for the
        recipient's settings as known (none, the common case); ``Invalid`` if it cannot be,
        ``Forbidden`` if the producer may not send its type."""
        shard = self.keys.for_ingest(producer, key)
        body = with_profile_of(request, settings)
        try:
            self.planner.check_sender(producer, request.type)
            identity = self.planner.identity(shard, body, now=now, key=key)
        except NotAllowed as error:
            return refused(Forbidden(str(error)))
        except FanoutError as error:
            return refused(Invalid(str(error)))
        checked = CheckedRequest(
            producer, shard, key, body, identity, fingerprint(request), given=request
        )
        version = self._list_versions.get(shard.shard, 0)
        view = ListView(version) if version else EMPTY_LIST
        plan = self._plan(checked, settings, view, now)
        return Pending(index, checked, plan, settings=settings, suppressions=view)

    async def _write(
        self,
        pending: list[Pending],
        answers: list[IngestAnswer | None],
        now: datetime,
        *,
        alone: bool = False,
    ) -> list[Pending]:
        """One round of writes: answer each item, except those whose recipient's settings
        changed (STALE), which are planned again and returned for the next round."""
        replies = await self.writer.write([entry.item for entry in pending], alone=alone)
        again: list[Pending] = []
        for entry, reply in zip(pending, replies, strict=True):
            if type(reply) is IngestReply and reply.kind == "OK":  # the common case, first
                answers[entry.index] = self._answer(entry, reply)
            elif isinstance(reply, RedisError):
                answers[entry.index] = unavailable()
            elif isinstance(reply, Exception):
                raise reply
            elif reply.kind == "STALE" and reply.settings is not None:
                entry.settings = reply.settings
                entry.request = self._with_profile(entry.request, entry.settings)
                entry.item = self._plan(
                    entry.request, entry.settings, entry.suppressions, now, entry
                )
                again.append(entry)
            elif reply.kind == "DIGEST" and self.digests is not None:  # join the one named
                entry.digest_named, entry.digest_rounds = reply.digest, entry.digest_rounds + 1
                entry.item = self.digests.planned(
                    entry.request, entry.settings, entry.item, epoch_ms(now),
                    named=reply.digest, rounds=entry.digest_rounds,
                )  # fmt: skip
                again.append(entry)
            elif reply.kind == "SUPPRESSIONS":
                self._list_versions[entry.request.shard.shard] = reply.suppression_version
                active = {
                    field: decode(field, value) for field, value in reply.suppressions.items()
                }
                entry.suppressions = ListView(reply.suppression_version, active)
                entry.item = self._plan(
                    entry.request, entry.settings, entry.suppressions, now, entry
                )
                again.append(entry)
            else:
                answers[entry.index] = self._answer(entry, reply)
        return again

    def _with_profile(self, request: CheckedRequest, settings: RecipientSettings) -> CheckedRequest:
        """The request as planned for a recipient with these settings: with its profile's
        addresses and locale where the request gives none, and the deliveries that makes."""
        body = with_profile_of(request.given, settings)
        if body == request.body:
            return request
        identity = self.planner.identity(
            request.shard, body, notification_id=request.identity.notification_id, key=request.key
        )
        return msgspec.structs.replace(request, body=body, identity=identity)

    def _plan(
        self,
        request: CheckedRequest,
        settings: RecipientSettings,
        suppressions: ListView,
        now: datetime,
        pending: Pending | None = None,
    ) -> IngestItem:
        """What the ingest script writes for ``request``, the recipient's ``settings`` and the
        suppression list as known (and the digest the last round named, in ``pending``)."""
        item = self.planner.plan(
            shard=request.shard,
            producer=request.producer,
            idempotency_key=request.key,
            request=request.body,
            identity=request.identity,
            settings=settings,
            now=now,
            request_fingerprint=request.fingerprint,
            suppressions=suppressions,
        )
        if self.digests is None or request.body.type not in self.digests.catalog.digests:
            return item
        named, rounds = (pending.digest_named, pending.digest_rounds) if pending else (None, 0)
        return self.digests.planned(
            request, settings, item, epoch_ms(now), named=named, rounds=rounds
        )

    def _answer(self, entry: Pending, reply: IngestReply) -> IngestAnswer:
        answer = answer_of(entry.item.response, reply)
        if reply.joined is not None and entry.item.join is not None:  # joined as accepted
            answer = IngestAnswer(
                response=with_digest(answer.response, reply.joined),
                joined=(entry.item.join, reply.joined),
            )
        if self.metrics is not None:
            if reply.kind == "OK":
                self._count_suppressed(entry)
            elif answer.replayed:  # the earlier answer, from its idempotency record
                self.metrics.inc(DUPLICATES_SKIPPED, ("ingest",))
        return answer

    def _count_suppressed(self, entry: Pending) -> None:
        """Count the deliveries suppressed at acceptance, as the plan found them. A replay
        (DUP) does not count twice."""
        suppressed = entry.item.suppressed
        if not suppressed:
            return
        assert self.metrics is not None
        opted_out = 0
        for channel, reason in suppressed:
            self.metrics.inc(SUPPRESSED, (channel, reason))
            opted_out += reason == "opted_out"
        if opted_out:
            self.metrics.inc(OPT_OUTS, (entry.request.body.type,), opted_out)
