"""The recipient settings store on real Redis and on fakeredis: quiet hours, preferences and
dead addresses, one version per change, the same copy on every shard."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from streams.core.events import (
    PreferenceChanged,
    PreferenceEntry,
    QuietHoursSetting,
    RecipientAddressInvalidated,
)
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import AddressDigest, RecipientSettingsStore
from tests.conftest import DIGEST, stream_events

NIGHT = QuietHoursSetting(start="22:00", end="08:00", timezone="Europe/Berlin")


async def copies(redis: Redis, keys: KeySpace, recipient_id: str) -> list[RecipientSettings]:
    """The recipient's settings as each shard holds them."""
    return [
        RecipientSettings.from_hash(await redis.hgetall(shard.recipient(recipient_id)))
        for shard in keys.all_shards()
    ]


async def test_quiet_hours_are_set_and_removed_each_change_a_new_version(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    store = RecipientSettingsStore(redis, keys)
    assert await store.get("user-1") == RecipientSettings()

    set_ = await store.set_quiet_hours("user-1", NIGHT)
    assert (set_.version, set_.quiet_hours) == (1, NIGHT)
    assert await store.get("user-1") == set_
    removed = await store.remove_quiet_hours("user-1")
    assert (removed.version, removed.quiet_hours) == (2, None)
    assert await store.get("user-1") == removed

    changes = await stream_events(redis, keys.shard(0).events)
    assert [type(change) for change in changes] == [PreferenceChanged] * 2
    first, second = changes
    assert isinstance(first, PreferenceChanged)
    assert isinstance(second, PreferenceChanged)
    assert (first.recipient_id, first.settings_version, first.quiet_hours) == ("user-1", 1, NIGHT)
    assert (second.settings_version, second.quiet_hours_removed) == (2, True)


async def test_preferences_replace_what_was_switched_off(redis: Redis, key_prefix: str) -> None:
    store = RecipientSettingsStore(redis, KeySpace(key_prefix))
    await store.set_preferences(
        "user-1",
        [
            PreferenceEntry(type="marketing", channel="EMAIL", enabled=False),
            PreferenceEntry(type="marketing", channel="PUSH", enabled=False),
        ],
    )
    now = await store.set_preferences(
        "user-1",
        [
            PreferenceEntry(type="marketing", channel="PUSH", enabled=False),
            PreferenceEntry(type="order_confirmed", channel="EMAIL", enabled=True),
        ],
    )
    assert now.version == 2
    assert now.disabled == {("marketing", "PUSH")}  # EMAIL is on again; enabled is the default
    assert now.preference_entries() == [
        PreferenceEntry(type="marketing", channel="PUSH", enabled=False)
    ]
    assert await store.set_quiet_hours("user-1", NIGHT) == RecipientSettings(
        3, frozenset({("marketing", "PUSH")}), NIGHT
    )  # quiet hours leave the preferences alone


async def test_switching_one_pair_off_keeps_the_others_and_says_who(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    store = RecipientSettingsStore(redis, keys)
    push_off = [PreferenceEntry(type="marketing", channel="PUSH", enabled=False)]
    await store.set_preferences("user-1", push_off)
    await store.set_quiet_hours("user-1", NIGHT)

    now = await store.switch_off("user-1", "order_confirmed", Channel.EMAIL, "unsubscribe_link")
    assert now.version == 3
    assert now.disabled == {("marketing", "PUSH"), ("order_confirmed", "EMAIL")}
    assert now.quiet_hours == NIGHT  # the rest of the settings stay as they were
    assert await copies(redis, keys, "user-1") == [now, now]

    # Again: already off, so nothing is written and no event is recorded.
    again = await store.switch_off("user-1", "order_confirmed", Channel.EMAIL, "unsubscribe_link")
    assert again == now

    changes = await stream_events(redis, keys.home_of_recipient("user-1").events)
    assert [c.source for c in changes] == ["api", "api", "unsubscribe_link"]  # type: ignore[union-attr]
    last = changes[-1]
    assert isinstance(last, PreferenceChanged)
    assert last.settings_version == 3
    # Like a replacement, the event names every pair now off.
    assert last.preferences == [
        PreferenceEntry(type="marketing", channel="PUSH", enabled=False),
        PreferenceEntry(type="order_confirmed", channel="EMAIL", enabled=False),
    ]


async def test_concurrent_switch_offs_record_each_pair_once(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=2)
    store = RecipientSettingsStore(redis, keys)
    types = ["marketing", "order_confirmed", "marketing", "order_confirmed", "marketing"]
    await asyncio.gather(
        *(store.switch_off("user-1", t, Channel.EMAIL, "unsubscribe_link") for t in types)
    )
    final = await store.get("user-1")
    assert final.disabled == {("marketing", "EMAIL"), ("order_confirmed", "EMAIL")}
    assert final.version == 2  # one change per pair, however often it was asked for
    changes = await stream_events(redis, keys.home_of_recipient("user-1").events)
    assert len(changes) == 2
    assert await copies(redis, keys, "user-1") == [final, final]


async def test_a_dead_address_is_remembered_by_its_digest_only(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    store = RecipientSettingsStore(redis, keys)
    digest = DIGEST("secret-push-token")
    settings = await store.mark_address_invalid("user-1", "PUSH", digest)
    assert settings.invalid == {("PUSH", digest)}
    assert settings.version == 1
    [event] = await stream_events(redis, keys.shard(0).events)
    assert event == RecipientAddressInvalidated(
        at=event.at, recipient_id="user-1", settings_version=1, channel="PUSH",
        address_digest=digest,
    )  # fmt: skip
    # Nowhere in Redis is the address itself.
    async for key in redis.scan_iter(match=f"{key_prefix}:*"):
        if await redis.type(key) == b"hash":
            assert b"secret-push-token" not in repr(await redis.hgetall(key)).encode()
        else:
            assert b"secret-push-token" not in repr(await redis.xrange(key)).encode()


async def test_every_shard_holds_the_home_shards_copy(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=4)
    store = RecipientSettingsStore(redis, keys)
    off = [PreferenceEntry(type="marketing", channel="EMAIL", enabled=False)]
    await store.set_preferences("user-9", off)
    await store.set_quiet_hours("user-9", NIGHT)
    latest = await store.mark_address_invalid("user-9", "EMAIL", DIGEST("eva@example.com"))

    assert await copies(redis, keys, "user-9") == [latest] * 4
    home = keys.home_of_recipient("user-9")
    for shard in keys.all_shards():  # only the home shard records the changes
        expected = 3 if shard == home else 0
        assert await redis.xlen(shard.events) == expected


async def test_concurrent_changes_each_get_their_own_version(redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix, shards=2)
    store = RecipientSettingsStore(redis, keys)
    await asyncio.gather(
        *(store.mark_address_invalid("user-1", "PUSH", DIGEST(f"token-{n}")) for n in range(10))
    )
    final = await store.get("user-1")
    assert final.version == 10
    assert len(final.invalid) == 10
    changes = await stream_events(redis, keys.home_of_recipient("user-1").events)
    assert sorted(c.settings_version for c in changes) == list(range(1, 11))  # type: ignore[union-attr]
    assert await copies(redis, keys, "user-1") == [final, final]


def test_an_address_digest_is_keyed_and_128_bits() -> None:
    """An unkeyed 64-bit digest of a phone number is found by trying every number."""
    digest = DIGEST("+4915112345678")
    assert len(digest) == 32
    assert int(digest, 16) >= 0
    assert digest == DIGEST("+4915112345678")
    assert AddressDigest(b"another-deployment")("+4915112345678") != digest
    assert "test-digest-secret" not in repr(DIGEST)


async def test_forgetting_a_recipient_drops_the_index_of_its_deliveries_waiting_for_an_address(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=2)
    store = RecipientSettingsStore(redis, keys)
    await store.update_profile("user-1", lambda _stored: (b'{"locale":"de"}', ["locale"]))
    for shard in keys.all_shards():
        await redis.zadd(shard.awaiting("user-1"), {b'normal ["waits"]': 1})
        await redis.zadd(shard.awaiting("user-2"), {b'normal ["waits"]': 1})

    await store.forget("user-1")

    for shard in keys.all_shards():
        assert not await redis.exists(shard.recipient("user-1"), shard.awaiting("user-1"))
        assert await redis.exists(shard.awaiting("user-2"))
