"""The campaign store against real Redis: a change lands only on the version it read."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.campaigns.store import CampaignChange, CampaignStore, encode_chunk
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority


def draft(created_ms: int = 1) -> CampaignChange:
    return CampaignChange(
        sets={"producer": "orders", "state": "draft", "spec": b"{}", "created_ms": created_ms},
        created_ms=created_ms,
    )


async def test_a_change_lands_only_on_the_version_it_read(
    real_redis: Redis, key_prefix: str
) -> None:
    store = CampaignStore(real_redis, KeySpace(key_prefix))
    campaign_id = new_id(0)
    assert await store.write(campaign_id, "orders", 0, draft()) == ("OK", 1)
    assert await store.write(campaign_id, "orders", 0, draft()) == ("MOVED", 1)
    upload = CampaignChange(
        increments={"audience": 3, "chunks": 2},
        chunks=[encode_chunk(["a", "b"]), encode_chunk(["c"])],
        upload="k",
        added=3,
    )
    assert await store.write(campaign_id, "orders", 1, upload) == ("OK", 2)
    assert await store.write(campaign_id, "orders", 2, upload) == (
        "UPLOADED",
        3,
    )  # a retry adds nothing
    campaign = await store.get(campaign_id)
    assert campaign is not None
    assert (campaign.state, campaign.audience, campaign.chunks, campaign.version) == (
        "draft",
        3,
        2,
        2,
    )
    assert await store.chunk(campaign_id, 1) == ["c"]
    assert await store.chunk(campaign_id, 5) == []
    assert await store.get(new_id(0)) is None


async def test_due_campaigns_of_every_shard_and_a_producers_newest(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=3)
    store = CampaignStore(real_redis, keys)
    ids = [new_id(shard) for shard in range(3)]
    for number, campaign_id in enumerate(ids):
        await store.write(campaign_id, "orders", 0, draft(created_ms=number))
        await store.write(campaign_id, "orders", 1, CampaignChange(due_ms=100 * number))
    assert sorted(await store.due(150)) == sorted(ids[:2])
    # A campaign's keys live on the shard its id names.
    assert await real_redis.exists(keys.shard(2).campaign(ids[2]).record)
    # A producer's campaigns are listed on its home shard (where its campaign ids point).
    home = keys.campaigns_home("orders")
    mine = [new_id(home.shard) for _ in range(3)]
    for number, campaign_id in enumerate(mine):
        await store.write(campaign_id, "orders", 0, draft(created_ms=10 + number))
    await store.write(new_id(home.shard), "other", 0, draft(created_ms=99))
    assert [c.id for c in await store.recent("orders", 2)] == [mine[2], mine[1]]


async def test_a_selection_becomes_the_audience_at_once(real_redis: Redis, key_prefix: str) -> None:
    store = CampaignStore(real_redis, KeySpace(key_prefix))
    campaign_id = new_id(0)
    await store.write(campaign_id, "orders", 0, draft())
    await store.select(campaign_id, [encode_chunk(["old"])], first=True)
    await store.select(campaign_id, [encode_chunk(["a"])], first=True)  # begun afresh
    await store.select(campaign_id, [encode_chunk(["b"])], first=False)
    await store.write(campaign_id, "orders", 1, CampaignChange(adopt_selection=True))
    assert [await store.chunk(campaign_id, i) for i in range(2)] == [["a"], ["b"]]


async def test_the_backlog_counts_a_producers_work_of_a_priority_on_every_shard(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    for shard in keys.all_shards():
        await real_redis.xadd(shard.work(Priority.LOW), {"w": "x"})
        await real_redis.rpush(shard.queued(Priority.LOW, "orders"), "x", "y")
    await real_redis.rpush(keys.shard(0).queued(Priority.LOW, "other"), "x")
    await real_redis.xadd(keys.shard(0).work(Priority.HIGH), {"w": "x"})
    assert await CampaignStore(real_redis, keys).backlog(Priority.LOW, "orders") == 6
