"""Many recipients' settings read from one shard in one round trip, on real Redis and on
fakeredis: each as the store wrote it, empty for a recipient without any."""

from __future__ import annotations

from redis.asyncio import Redis

from streams.core.events import PreferenceEntry
from streams.core.keys import KeySpace
from streams.recipients.read import read_many
from streams.recipients.settings import RecipientSettings, RecipientSettingsStore


async def test_each_recipient_is_read_in_the_order_asked(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    off = [PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)]
    written = await RecipientSettingsStore(redis, keys).set_preferences("user-1", off)
    for shard in keys.all_shards():  # every shard holds the copy
        read = await read_many(redis, shard, ["user-2", "user-1"])
        assert read == [RecipientSettings(), written]
