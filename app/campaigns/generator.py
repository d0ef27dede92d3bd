"""The generator: turns a campaign's recipients into notifications, a batch at a time.

It runs in a worker process, holding the campaign's lease (``app.campaigns.runner``), and
repeats: read the campaign; stop unless it is running (a pause or cancel takes effect
between batches); wait while the campaign's priority has more work queued than the backlog
allows (a million-recipient campaign then holds only that much of itself in Redis); ingest
the next chunk of up to 1000 recipients through the same ingest step as the API
(``app.ingest.ingestor``), taking each part from the producer's notifications quota first
and waiting while it is spent (``app.ingest.quotas.NotificationQuota``); record the batch.
While a chunk is written, the next one and its recipients' settings are read.

Nothing is generated twice. Each recipient's notification is ingested under the idempotency
key ``campaign:<id>:<recipient>``, whose record the ingest script writes in the same atomic
step as the notification: that record is the checkpoint that counts. The batch's own
checkpoint (the campaign's cursor, its counts, its event) follows it; a generator killed in
between runs the batch again on restart, and each recipient that already has a
notification is answered as a repeat, counted as ``repeated`` and sent nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import structlog

from app.campaigns import segments, specs
from app.campaigns.batches import Batch, Entry, Known, Pace, ReadAhead, Tally
from app.campaigns.lifecycle import state_change
from app.campaigns.specs import CampaignSpec
from app.ingest.answers import IngestAnswer
from app.ingest.delivery_plan import epoch_ms
from app.ingest.ingestor import Ingestor
from app.ingest.quotas import NotificationQuota
from streams.campaigns.ids import notification_key
from streams.campaigns.store import CHUNK_SIZE, Campaign, CampaignChange, CampaignStore
from streams.core.errors import ClarionError, Conflict, Unavailable
from streams.core.events import (
    CampaignAudienceAdded,
    CampaignBatchGenerated,
)
from streams.core.vocabulary import CampaignState, Priority

log = structlog.get_logger(__name__)

# Answers that a later try may turn into a notification: a twin still in flight (the run
# before a crash) and settings that kept changing (``Conflict``), Redis refusing writes
# (``Unavailable``).
_TRANSIENT: Final[tuple[type[ClarionError], ...]] = (Conflict, Unavailable)
_RETRIES: Final = 5
_CHECKPOINT_TRIES: Final = 20


@dataclass(frozen=True)
class GeneratorOptions:
    # Work items of the campaign's priority allowed to wait before the next batch.
    backlog: int = 100_000
    # How long to wait before looking at the backlog again.
    backlog_poll_s: float = 0.2


Renew = Callable[[], Awaitable[bool]]


class Generator:
    """Generates campaigns' notifications (one campaign per ``run``)."""

    def __init__(self, ingestor: Ingestor, store: CampaignStore, options: GeneratorOptions) -> None:
        self.ingestor = ingestor
        self.store = store
        self.options = options
        self.quota = NotificationQuota(
            ingestor.redis, ingestor.keys, ingestor.planner.catalog.quotas
        )

    async def run(self, campaign_id: str, renew: Renew) -> None:
        """Generate until the campaign is done, paused or cancelled, or the lease is lost."""
        ahead = ReadAhead()
        try:
            await self._run(campaign_id, renew, ahead)
        finally:
            ahead.drop()

    async def _run(self, campaign_id: str, renew: Renew, ahead: ReadAhead) -> None:
        paced = Pace()
        while await renew():
            campaign = await self.store.get(campaign_id)
            if campaign is None:
                return
            begun = await self._begin(campaign)
            if begun == "stop":
                return
            if begun == "changed":
                continue  # read it again: a later write must name the version now
            spec = specs.decode(campaign.spec)
            if spec.segment is not None and not campaign.selected:
                await self._select(campaign, spec)
                continue
            if campaign.cursor >= campaign.chunks:
                await self._complete(campaign)
                return
            if not await self._room(self._priority(spec), campaign.producer, renew):
                return
            batch = await ahead.take(campaign.cursor) or await self._read(campaign, spec, 0)
            if campaign.cursor + 1 < campaign.chunks:
                # The next chunk and its recipients' settings are read while this one is
                # written (a settings change meanwhile makes its round STALE, as ever).
                ahead.start(campaign.cursor + 1, self._read(campaign, spec, 1))
            tally = await self._generate(campaign, spec, batch, paced, renew)
            if tally is None:
                return
            await self._checkpoint(campaign, tally)

    async def _begin(self, campaign: Campaign) -> Literal["go", "changed", "stop"]:
        """Whether to generate the campaign as read ("go"), to stop (it is neither running
        nor due), or to read it again first ("changed": it was just started, a due scheduled
        one made to run or a running one given its start time, or someone changed it
        meanwhile)."""
        now = self.ingestor.clock()
        if campaign.state == CampaignState.RUNNING:
            if campaign.started_ms:
                return "go"
            change = CampaignChange(sets={"started_ms": epoch_ms(now)})
        elif campaign.state == CampaignState.SCHEDULED:
            if specs.decode(campaign.spec).start_ms > epoch_ms(now):
                return "stop"
            change = state_change(campaign, CampaignState.RUNNING, "generator", now)
            change.sets["started_ms"] = epoch_ms(now)
        else:
            return "stop"
        await self._write(campaign, change)
        return "changed"

    async def _select(self, campaign: Campaign, spec: CampaignSpec) -> None:
        assert spec.segment is not None
        ingestor = self.ingestor
        count = await segments.select(
            self.store.redis, ingestor.keys, self.store, campaign.id, spec.segment
        )
        chunks = -(-count // CHUNK_SIZE)
        added = CampaignAudienceAdded(
            at=ingestor.clock(), campaign_id=campaign.id, recipients=count, audience=count
        )
        change = CampaignChange(
            sets={"selected": 1, "audience": count, "chunks": chunks},
            adopt_selection=True,
            events=[added],
        )
        await self._write(campaign, change)
        log.info("campaign.selected", campaign_id=campaign.id, recipients=count)

    async def _room(self, priority: Priority, producer: str, renew: Renew) -> bool:
        """Wait until the producer's backlog of the priority leaves room for a batch (False:
        the lease was lost)."""
        last_renewal = time.monotonic()
        while await self.store.backlog(priority, producer) > self.options.backlog:
            await asyncio.sleep(self.options.backlog_poll_s)
            if time.monotonic() - last_renewal > 1.0:
                if not await renew():
                    return False
                last_renewal = time.monotonic()
        return True

    async def _read(self, campaign: Campaign, spec: CampaignSpec, later: int) -> Batch:
        """The notifications of the chunk ``later`` chunks after the campaign's cursor, and
        their recipients' settings."""
        recipients = await self.store.chunk(campaign.id, campaign.cursor + later)
        entries = [(notification_key(campaign.id, r), spec.notification(r)) for r in recipients]
        # Campaign recipients have profiles: read their settings with the batch, so that
        # each notification is planned once (see ``Ingestor.read_settings``).
        return Batch(entries, await self.ingestor.read_settings(campaign.producer, entries))

    async def _generate(
        self,
        campaign: Campaign,
        spec: CampaignSpec,
        batch: Batch,
        paced: Pace,
        renew: Renew,
    ) -> Tally | None:
        """Ingest one chunk's notifications (None: given up halfway, as the lease was lost
        or, for a paced campaign, it was paused or cancelled: the chunk runs again on resume,
        its recipients generated so far counted as repeated then)."""
        tally = Tally()
        burst = self.quota.burst(campaign.producer)
        step = min(paced.step(spec.rate), burst or CHUNK_SIZE)
        for start in range(0, len(batch.entries), step):
            part = batch.entries[start : start + step]
            await paced.wait(spec.rate, len(part))
            if not await self._take_quota(campaign.producer, len(part), renew):
                return None
            if spec.rate and not (
                await renew() and await self.store.state(campaign.id) == CampaignState.RUNNING
            ):
                return None
            for answer in await self._ingest(campaign, part, batch.known):
                tally.count(answer)
        return tally

    async def _take_quota(self, producer: str, count: int, renew: Renew) -> bool:
        """Wait until the producer's notifications quota gives ``count`` (False: the lease
        was lost meanwhile). A long wait renews the lease each second."""
        last_renewal = time.monotonic()
        while (wait := await self.quota.take(producer, count)) > 0:
            await asyncio.sleep(min(wait, 1.0))
            if time.monotonic() - last_renewal > 1.0:
                if not await renew():
                    return False
                last_renewal = time.monotonic()
        return True

    async def _ingest(
        self, campaign: Campaign, batch: Sequence[Entry], known: Known
    ) -> list[IngestAnswer]:
        """The ingest answers for ``batch``, retrying those that may still succeed (with
        their recipients' settings read again)."""
        answers: list[IngestAnswer | None] = [None] * len(batch)
        waiting = list(range(len(batch)))
        for attempt in range(_RETRIES + 1):
            entries = [batch[i] for i in waiting]
            if attempt:
                known = await self.ingestor.read_settings(campaign.producer, entries)
            results = await self.ingestor.ingest_many(
                campaign.producer, entries, known, overlap=True
            )
            again = []
            for index, answer in zip(waiting, results, strict=True):
                if isinstance(answer.error, _TRANSIENT) and attempt < _RETRIES:
                    again.append(index)
                else:
                    answers[index] = answer
            if not again:
                break
            waiting = again
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        done = [answer for answer in answers if answer is not None]
        for answer in done:
            if answer.error is not None:
                log.info(
                    "campaign.recipient_skipped",
                    campaign_id=campaign.id,
                    detail=answer.error.detail,
                )
        return done

    async def _checkpoint(self, campaign: Campaign, tally: Tally) -> None:
        """Record the batch (whatever happened to the campaign meanwhile: it was written)."""
        batch = campaign.cursor
        event = CampaignBatchGenerated(
            at=self.ingestor.clock(),
            campaign_id=campaign.id,
            batch=batch,
            accepted=tally.accepted,
            repeated=tally.repeated,
            skipped=tally.skipped,
        )
        for _ in range(_CHECKPOINT_TRIES):
            if campaign.cursor != batch:
                return  # recorded already (cannot happen while the lease holds)
            change = CampaignChange(
                sets={"cursor": batch + 1},
                increments={
                    "accepted": tally.accepted,
                    "repeated": tally.repeated,
                    "skipped": tally.skipped,
                },
                emptied=batch,
                events=[event],
            )
            if await self._write(campaign, change):
                return
            found = await self.store.get(campaign.id)
            if found is None:
                return
            campaign = found
        raise RuntimeError(f"campaign {campaign.id}: its checkpoint kept racing other changes")

    async def _complete(self, campaign: Campaign) -> None:
        now = self.ingestor.clock()
        change = state_change(campaign, CampaignState.COMPLETED, "generator", now, due_ms="remove")
        change.sets["ended_ms"] = epoch_ms(now)
        if await self._write(campaign, change):
            log.info("campaign.completed", campaign_id=campaign.id, generated=campaign.generated)

    async def _write(self, campaign: Campaign, change: CampaignChange) -> bool:
        word, _ = await self.store.write(campaign.id, campaign.producer, campaign.version, change)
        return word == "OK"

    def _priority(self, spec: CampaignSpec) -> Priority:
        return spec.priority or self.ingestor.planner.catalog.types[spec.type].priority
