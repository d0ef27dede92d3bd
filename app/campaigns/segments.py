"""A segment's recipients: every recipient whose profile attributes match it.

Profiles live in each recipient's settings hash, of which every shard holds a copy
(``streams.recipients.settings``): one shard's copies are read, page by page with SCAN, and
the ids that match are appended to the campaign's selection in chunks. The selection is
made afresh each time it starts (a generator that died halfway leaves a partial one), and
becomes the campaign's audience in one step with its event (``app.campaigns.generator``).
SCAN may return a key twice; a recipient selected twice still gets one notification (its
idempotency key), and is counted as repeated.
"""

from __future__ import annotations

import asyncio
from typing import Final

from redis.asyncio import Redis

from app.campaigns import specs
from app.campaigns.specs import Segment
from app.ingest.profiles import decode as decode_profile
from app.settings import ApiKey
from streams.campaigns.store import CHUNK_SIZE, CampaignStore, encode_chunk
from streams.core.ids import is_uuid
from streams.core.keys import KeySpace, ShardKeys

# Keys a SCAN call looks at: a page of profiles is one pipeline of HGETs.
SCAN_PAGE: Final = 1000
# The scope a key needs to select recipients by segment, or to see whom a segment chose:
# recipients belong to the deployment, not to a producer.
SEGMENT_SCOPE: Final = "recipients"


def may_select(key: ApiKey) -> bool:
    """Whether ``key`` may create, run and see campaigns that select by segment."""
    return SEGMENT_SCOPE in key.scopes


async def chose(store: CampaignStore, producer: str, campaign_id: str) -> bool:
    """Whether the recipients of ``producer``'s notifications from ``campaign_id`` (""
    for none) were chosen by a segment, not named by the producer: then only a key with the
    ``recipients`` scope may see who they are. A campaign that cannot be found counts as
    one with a segment: when in doubt, the recipient is not shown."""
    if not campaign_id:
        return False
    campaign = await store.get(campaign_id) if is_uuid(campaign_id) else None
    if campaign is None or campaign.producer != producer:
        return True
    return specs.decode(campaign.spec).segment is not None


async def hides_recipient(store: CampaignStore, key: ApiKey, campaign_id: str) -> bool:
    """Whether ``key`` must not see the recipient of its notification from ``campaign_id``
    ("" for none): a segment chose it (``chose``) and the key lacks the ``recipients``
    scope. Reads Redis only for a campaign's notification shown to such a key."""
    return not may_select(key) and await chose(store, key.producer, campaign_id)


async def select(
    redis: Redis, keys: KeySpace, store: CampaignStore, campaign_id: str, segment: Segment
) -> int:
    """Select the segment's recipients into the campaign's selection; how many."""
    shard = keys.shard(0)
    await store.select(campaign_id, [], first=True)
    found: list[str] = []
    selected = 0
    page: list[bytes] = []
    # scan_iter, not SCAN with a cursor: on a Redis Cluster it scans every node.
    async for name in redis.scan_iter(match=shard.recipients_pattern, count=SCAN_PAGE):
        page.append(name)
        if len(page) >= SCAN_PAGE:
            found += await _matching(redis, shard, segment, page)
            page = []
            found, stored = await _store_chunks(store, campaign_id, found, last=False)
            selected += stored
            await asyncio.sleep(0)  # a big scan lets deliveries in between pages
    found += await _matching(redis, shard, segment, page)
    _, stored = await _store_chunks(store, campaign_id, found, last=True)
    return selected + stored


async def _store_chunks(
    store: CampaignStore, campaign_id: str, found: list[str], *, last: bool
) -> tuple[list[str], int]:
    """Add ``found`` to the selection in whole chunks (and the part chunk too when
    ``last``); what is left over, and how many were added."""
    stored = 0
    while len(found) >= CHUNK_SIZE or (last and found):
        chunk, found = found[:CHUNK_SIZE], found[CHUNK_SIZE:]
        await store.select(campaign_id, [encode_chunk(chunk)], first=False)
        stored += len(chunk)
    return found, stored


async def _matching(
    redis: Redis, shard: ShardKeys, segment: Segment, names: list[bytes]
) -> list[str]:
    """The ids of the recipients among ``names`` (keys of ``shard``) the segment selects."""
    if not names:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hget(name, "pf")
        profiles: list[bytes | None] = await pipe.execute()
    return [
        shard.recipient_id_of(name)
        for name, raw in zip(names, profiles, strict=True)
        if raw
        and (profile := decode_profile(raw)) is not None
        and segment.matches(profile.attributes)
    ]
