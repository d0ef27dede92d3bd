"""Every change a producer makes to a campaign: create, upload recipients, start, pause,
resume, cancel.

Each change reads the campaign, decides on what it read and writes with the version it read
(``streams.campaigns.store``): a change that raced another is decided again on the new state, so a
pause and the generator's checkpoint, or two uploads, never step on each other. Each one
records its event. A campaign belongs to the producer that created it: to any other it does
not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final, Literal

from redis.asyncio import Redis

from app.campaigns import specs
from app.campaigns.specs import CampaignSpec
from app.ingest.delivery_plan import epoch_ms
from app.ingest.fanout import Planner
from streams.campaigns.store import (
    CHUNK_SIZE,
    Campaign,
    CampaignChange,
    CampaignStore,
    OpenLimits,
    WriteResult,
    encode_chunk,
)
from streams.core.errors import Conflict, NotFound, RateLimited, TooLarge
from streams.core.events import (
    CampaignAudienceAdded,
    CampaignCreated,
    CampaignStateChanged,
)
from streams.core.ids import is_uuid, new_id
from streams.core.keys import KeySpace
from streams.core.vocabulary import CampaignState

# Tries of a change that keeps racing others before giving up (``Conflict``).
_TRIES: Final = 20
# A cancelled campaign's markers outlive any delivery it could still have waiting.
CANCEL_MARKER_SECONDS: Final = 31 * 86400


Decision = Callable[[Campaign], CampaignChange]


class Campaigns:
    """The changes producers make to their campaigns."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        planner: Planner,
        clock: Callable[[], datetime],
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.store = CampaignStore(redis, keys)
        self.planner = planner
        self.clock = clock

    async def create(self, producer: str, spec: CampaignSpec) -> Campaign:
        """A new campaign, in draft until started; ``Forbidden`` for a type the producer may
        not send, ``Invalid`` for one it cannot (``app.ingest.fanout``)."""
        self.planner.check_sender(producer, spec.type)
        self.planner.channels(spec.notification("-"))
        now = self.clock()
        campaign_id = new_id(self.keys.campaigns_home(producer).shard, epoch_ms(now))
        created = CampaignCreated(
            at=now,
            campaign_id=campaign_id,
            producer=producer,
            notification_type=spec.type,
            audience="list" if spec.segment is None else "segment",
            start_at=spec.start_at,
            rate=spec.rate or 0,
        )
        change = CampaignChange(
            sets={
                "producer": producer,
                "state": CampaignState.DRAFT,
                "spec": specs.encode(spec),
                "created_ms": epoch_ms(now),
                "updated_ms": epoch_ms(now),
            },
            created_ms=epoch_ms(now),
            events=[created],
            opened=1,
            limits=self._limits(producer),
        )
        _refuse_over_limit(await self.store.write(campaign_id, producer, 0, change))
        return await self.get(producer, campaign_id)

    def _limits(self, producer: str) -> OpenLimits:
        limits = self.planner.catalog.quotas.campaigns_of(producer)
        return OpenLimits(limits.open, limits.audience, limits.open_audience)

    async def get(self, producer: str, campaign_id: str) -> Campaign:
        campaign = await self.store.get(campaign_id) if is_uuid(campaign_id) else None
        if campaign is None or campaign.producer != producer:
            raise NotFound(f"campaign: no campaign {campaign_id!r}")
        return campaign

    async def add_recipients(
        self, producer: str, campaign_id: str, recipients: Sequence[str], upload_key: str
    ) -> tuple[int, Campaign]:
        """Append an upload's recipients to a draft campaign's audience; (recipients added,
        the campaign). An upload key already taken adds nothing again."""
        chunks = [
            encode_chunk(recipients[i : i + CHUNK_SIZE])
            for i in range(0, len(recipients), CHUNK_SIZE)
        ]

        def decide(campaign: Campaign) -> CampaignChange:
            if campaign.state != CampaignState.DRAFT:
                raise Conflict(
                    f"campaign: recipients are added before it starts, it is {campaign.state}"
                )
            if specs.decode(campaign.spec).segment is not None:
                raise Conflict("campaign: its recipients are its segment's")
            now = self.clock()
            added = CampaignAudienceAdded(
                at=now,
                campaign_id=campaign.id,
                recipients=len(recipients),
                audience=campaign.audience + len(recipients),
            )
            return CampaignChange(
                sets={"updated_ms": epoch_ms(now)},
                increments={"audience": len(recipients), "chunks": len(chunks)},
                chunks=chunks,
                upload=upload_key,
                added=len(recipients),
                events=[added],
                uploaded=len(recipients),
                limits=self._limits(producer),
            )

        campaign, uploaded = await self._change(producer, campaign_id, decide)
        return (len(recipients) if uploaded is None else uploaded), campaign

    async def start(self, producer: str, campaign_id: str) -> Campaign:
        def decide(campaign: Campaign) -> CampaignChange:
            self._require(campaign, "start", {CampaignState.DRAFT})
            spec = specs.decode(campaign.spec)
            if spec.segment is None and campaign.audience == 0:
                raise Conflict("campaign: upload its recipients before starting it")
            return self._to_waiting(campaign, spec, producer)

        return (await self._change(producer, campaign_id, decide))[0]

    async def pause(self, producer: str, campaign_id: str) -> Campaign:
        def decide(campaign: Campaign) -> CampaignChange:
            self._require_move(campaign, "pause", CampaignState.PAUSED)
            return self._to(campaign, CampaignState.PAUSED, producer, due_ms="remove")

        return (await self._change(producer, campaign_id, decide))[0]

    async def resume(self, producer: str, campaign_id: str) -> Campaign:
        def decide(campaign: Campaign) -> CampaignChange:
            self._require(campaign, "resume", {CampaignState.PAUSED})
            return self._to_waiting(campaign, specs.decode(campaign.spec), producer)

        return (await self._change(producer, campaign_id, decide))[0]

    async def cancel(self, producer: str, campaign_id: str) -> Campaign:
        """Cancel a campaign: no more notifications, and its deliveries not yet sent end
        CANCELLED. Cancelling a cancelled campaign again marks its deliveries again (a
        cancel whose marking was cut short is completed so)."""

        def decide(campaign: Campaign) -> CampaignChange:
            if campaign.state == CampaignState.CANCELLED:
                return CampaignChange()  # only the markers below
            self._require_move(campaign, "cancel", CampaignState.CANCELLED)
            change = self._to(campaign, CampaignState.CANCELLED, producer, due_ms="remove")
            change.sets["ended_ms"] = epoch_ms(self.clock())
            return change

        campaign, _ = await self._change(producer, campaign_id, decide)
        await self._mark_cancelled(campaign_id, producer)
        return campaign

    async def _mark_cancelled(self, campaign_id: str, producer: str) -> None:
        """Tell the workers, on every shard, to end the campaign's waiting deliveries; the
        marker names who cancelled (their ``DeliveryCancelled`` events say so)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for shard in self.keys.all_shards():
                marker = shard.campaign_cancelled(campaign_id)
                pipe.set(marker, producer, ex=CANCEL_MARKER_SECONDS)
            await pipe.execute()

    def _to_waiting(self, campaign: Campaign, spec: CampaignSpec, by: str) -> CampaignChange:
        """Due now, or scheduled until its start time."""
        now_ms = epoch_ms(self.clock())
        later = spec.start_ms > now_ms
        return self._to(
            campaign,
            CampaignState.SCHEDULED if later else CampaignState.RUNNING,
            by,
            due_ms=spec.start_ms if later else now_ms,
        )

    def _to(
        self, campaign: Campaign, state: CampaignState, by: str, *, due_ms: int | Literal["remove"]
    ) -> CampaignChange:
        return state_change(campaign, state, by, self.clock(), due_ms=due_ms)

    @staticmethod
    def _require(campaign: Campaign, action: str, states: set[CampaignState]) -> None:
        """Refuse ``action`` unless the campaign is in one of ``states`` (starting and
        resuming move to the same states, from different ones)."""
        if campaign.state not in states:
            raise Conflict(f"campaign: cannot {action} a campaign that is {campaign.state}")

    @staticmethod
    def _require_move(campaign: Campaign, action: str, state: CampaignState) -> None:
        """Refuse ``action`` unless the campaign may move to ``state``
        (``streams.core.vocabulary.CAMPAIGN_TRANSITIONS``)."""
        if not campaign.state.may_become(state):
            raise Conflict(f"campaign: cannot {action} a campaign that is {campaign.state}")

    async def _change(
        self, producer: str, campaign_id: str, decide: Decision
    ) -> tuple[Campaign, int | None]:
        """Read, decide, write until the write lands on what was read; the campaign after
        it, and for an upload that was a retry what the first one added."""
        for attempt in range(_TRIES):
            campaign = await self.get(producer, campaign_id)
            change = decide(campaign)
            if not change.events and not change.sets:
                return campaign, None
            written = await self.store.write(campaign_id, producer, campaign.version, change)
            _refuse_over_limit(written)
            word, number = written
            if word == "UPLOADED":
                return await self.get(producer, campaign_id), number
            if word == "OK":
                return await self.get(producer, campaign_id), None
            await asyncio.sleep(0.001 * attempt)
        raise Conflict("campaign: changing too often to change now; retry")


def _refuse_over_limit(written: WriteResult) -> None:
    """The refusal of a change past one of the producer's campaign limits (see
    ``app.catalog.quotas.CampaignLimits``; nothing was written)."""
    word, limit = written
    if word == "OPEN":
        raise RateLimited(
            f"campaigns: the producer has {limit:,} open campaigns, its limit "
            "(quotas campaigns.open); one must complete or be cancelled first",
        )
    if word == "AUDIENCE":
        raise TooLarge(
            f"recipients: a campaign may have at most {limit:,} "
            "(quotas campaigns.audience); nothing of this upload was added",
        )
    if word == "OPEN_AUDIENCE":
        raise TooLarge(
            f"recipients: the producer's open campaigns may have at most {limit:,} together "
            "(quotas campaigns.open_audience); nothing of this upload was added",
        )


def state_change(
    campaign: Campaign,
    state: CampaignState,
    by: str,
    now: datetime,
    *,
    due_ms: int | Literal["remove"] | None = None,
) -> CampaignChange:
    """The change that moves ``campaign`` to ``state``, with its event (``by``: the producer
    that asked, or "generator"); ``due_ms`` as ``CampaignChange`` has it. A move the
    transition table does not allow is a bug of the caller, which checked the state first."""
    if not campaign.state.may_become(state):
        raise ValueError(f"campaign {campaign.id}: no move from {campaign.state} to {state}")
    event = CampaignStateChanged(
        at=now, campaign_id=campaign.id, state=state, previous=campaign.state, by=by
    )
    change = CampaignChange(
        sets={"state": state, "updated_ms": epoch_ms(now)}, due_ms=due_ms, events=[event]
    )
    if state.ended and not campaign.state.ended:
        # It no longer counts against its producer's open campaigns, nor do its uploads.
        change.opened = -1
        # (A segment's recipients are selected, not uploaded.)
        change.uploaded = 0 if by_segment(campaign) else -campaign.audience
    return change


def by_segment(campaign: Campaign) -> bool:
    """Whether the campaign selects its recipients by a segment of profiles."""
    return specs.decode(campaign.spec).segment is not None
