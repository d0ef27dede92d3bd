"""A segment's recipients: every recipient whose profile attributes match it.

Profiles live in each recipient's settings hash, of which every shard holds a copy
(``streams.recipient_settings``): one shard's copies are read, page by page with SCAN, and
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

from app.campaigns.specs import Segment
from app.ingest.profiles import decode as decode_profile
from streams.campaigns import CHUNK_SIZE, CampaignStore, encode_chunk
from streams.keys import KeySpace

# Keys a SCAN call looks at: a page of profiles is one pipeline of HGETs.
SCAN_PAGE: Final = 1000


async def select(
    redis: Redis, keys: KeySpace, store: CampaignStore, campaign_id: str, segment: Segment
) -> int:
    """Select the segment's recipients into the campaign's selection; how many."""
    shard = keys.shard(0)
    await store.select(campaign_id, [], first=True)
    found: list[str] = []
    selected = 0
    cursor = 0
    while True:
        cursor, names = await redis.scan(cursor, match=shard.recipients_pattern, count=SCAN_PAGE)
        if names:
            async with redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hget(name, "pf")
                profiles: list[bytes | None] = await pipe.execute()
            for name, raw in zip(names, profiles, strict=True):
                profile = decode_profile(raw) if raw else None
                if profile is not None and segment.matches(profile.attributes):
                    found.append(shard.recipient_id_of(name))
        while len(found) >= CHUNK_SIZE or (cursor == 0 and found):
            chunk, found = found[:CHUNK_SIZE], found[CHUNK_SIZE:]
            await store.select(campaign_id, [encode_chunk(chunk)], first=False)
            selected += len(chunk)
        if cursor == 0:
            return selected
        await asyncio.sleep(0)  # a big scan lets deliveries in between pages
