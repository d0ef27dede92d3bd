"""The suppression list in Redis: entries on every shard's copy with one event on the address's
home shard, versions ingest learns from, ends that make an entry inactive, and what ingest
does with an address on the list: the delivery is SUPPRESSED with the entry's reason, a
complaint or an unsubscribe only for types a recipient may opt out of, the first request
after a change learning the new version in a second round."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from streams.core.events import AddressSuppressed, AddressUnsuppressed
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.recipients.suppressions import Suppression, SuppressionStore, active_entries, decode
from tests.conftest import DIGEST, stream_events
from tests.integration.api_support import OTP, post

MARKETING = {
    "recipient": {"id": "user-7", "email": "anna@example.com", "push_tokens": ["tok-7"]},
    "type": "marketing",
    "data": {"subject": "Sale", "body": "Everything must go"},
}
ALERT = {
    "recipient": {"id": "user-7", "email": "anna@example.com"},
    "type": "security_alert",
    "channels": ["EMAIL"],
    "data": {"message": "New sign-in"},
}


def entry(address: str, channel: Channel = Channel.EMAIL, **fields: Any) -> Suppression:
    values: dict[str, Any] = {
        "reason": "complaint", "source": "admin:ops", "at_ms": int(time.time() * 1000),
        "display": "a***@example.com", **fields,
    }  # fmt: skip
    return Suppression(channel=channel, digest=DIGEST(address), **values)


async def test_an_entry_is_on_every_shard_and_its_event_on_the_home_shard(
    real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix, shards=3)
    store = SuppressionStore(real_redis, keys)
    added = entry("anna@example.com", until_ms=int(time.time() * 1000) + 60_000)
    await store.add(added)
    for shard in keys.all_shards():
        assert await store.version(shard) == 1
        raw = await real_redis.hget(shard.suppressions, added.field)
        assert raw is not None
        assert decode(added.field, raw) == added
    home = keys.home_of_address(added.digest)
    recorded = await stream_events(real_redis, home.events)
    assert [type(event) for event in recorded] == [AddressSuppressed]
    assert recorded[0].reason == "complaint"
    for shard in keys.all_shards():  # the list names addresses by digest, never in clear
        stored = await real_redis.hgetall(shard.suppressions)
        assert not any(b"anna" in value for value in stored.values())
    assert await store.get(Channel.EMAIL, added.digest) == added

    assert await store.remove(Channel.EMAIL, added.digest, "admin:ops", added.at_ms)
    assert not await store.remove(Channel.EMAIL, added.digest, "admin:ops", added.at_ms)
    assert await store.get(Channel.EMAIL, added.digest) is None
    assert [type(e) for e in await stream_events(real_redis, home.events)] == [
        AddressSuppressed, AddressUnsuppressed,
    ]  # fmt: skip
    assert {await store.version(shard) for shard in keys.all_shards()} == {2}


async def test_many_entries_are_read_in_one_call_none_where_an_address_is_not_listed(
    real_redis: Redis, key_prefix: str
) -> None:
    store = SuppressionStore(real_redis, KeySpace(key_prefix, shards=2))
    listed = entry("anna@example.com")
    await store.add(listed)
    anna, bob = (Channel.EMAIL, DIGEST("anna@example.com")), (Channel.EMAIL, DIGEST("bob@x.org"))
    found = await store.get_many([anna, bob, anna])
    assert found == {anna: listed, bob: None}
    assert await store.get_many([]) == {}


def test_an_entry_past_its_end_is_inactive_and_a_foreign_value_is_refused() -> None:
    now = int(time.time() * 1000)
    ended = entry("a@example.com", until_ms=now - 1)
    lasting = entry("b@example.com")
    values = {ended.field: ended.value(), lasting.field: lasting.value()}
    assert active_entries(values, now) == {lasting.field: lasting}
    with pytest.raises(ValueError, match="not a suppression"):
        decode("FAX:abc", lasting.value())
    assert entry("a@example.com", reason="hard_bounce").applies(opt_out_type=False)
    assert not entry("a@example.com", reason="complaint").applies(opt_out_type=False)
    assert entry("a@example.com", reason="unsubscribed").applies(opt_out_type=True)


async def test_an_address_on_the_list_is_suppressed_with_the_entry_s_reason(
    client: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    store = SuppressionStore(redis, KeySpace(key_prefix))
    await store.add(entry("anna@example.com", reason="hard_bounce"))
    answer = (await post(client, MARKETING, key="m-1")).json()
    by_channel = {d["channel"]: d for d in answer["deliveries"]}
    assert (by_channel["EMAIL"]["status"], by_channel["EMAIL"]["reason"]) == (
        "SUPPRESSED", "hard_bounce",
    )  # fmt: skip
    assert by_channel["PUSH"]["status"] == "QUEUED"
    other = {**MARKETING, "recipient": {"id": "u-8", "email": "anna@example.com"}}
    again = (await post(client, other, key="m-2")).json()
    assert [d["reason"] for d in again["deliveries"]] == ["hard_bounce", "no_address"]


async def test_a_complaint_stops_what_may_be_opted_out_of_and_not_a_security_alert(
    client: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    store = SuppressionStore(redis, KeySpace(key_prefix))
    await store.add(entry("anna@example.com", reason="complaint"))
    marketing = (await post(client, MARKETING, key="m-1")).json()
    email = next(d for d in marketing["deliveries"] if d["channel"] == "EMAIL")
    assert (email["status"], email["reason"]) == ("SUPPRESSED", "complaint")
    alert = (await post(client, ALERT, key="a-1")).json()
    assert [(d["channel"], d["status"]) for d in alert["deliveries"]] == [("EMAIL", "QUEUED")]
    # A stop for good applies to every type.
    await store.add(entry("+4915112345678", Channel.SMS, reason="stop"))
    otp = (await post(client, OTP, key="o-1")).json()
    assert [(d["status"], d["reason"]) for d in otp["deliveries"]] == [("SUPPRESSED", "stop")]


async def test_an_entry_that_ended_or_was_removed_suppresses_nothing(
    client: httpx.AsyncClient, redis: Redis, key_prefix: str
) -> None:
    store = SuppressionStore(redis, KeySpace(key_prefix))
    now = int(time.time() * 1000)
    await store.add(entry("anna@example.com", reason="hard_bounce", until_ms=now + 300))
    await store.add(entry("tok-7", Channel.PUSH, reason="invalid_token"))
    first = (await post(client, MARKETING, key="m-1")).json()
    assert [d["status"] for d in first["deliveries"]] == ["SUPPRESSED", "SUPPRESSED"]
    await asyncio.sleep(0.35)  # the email address's entry ends
    await store.remove(Channel.PUSH, DIGEST("tok-7"), "admin:ops", now)
    later = (await post(client, MARKETING, key="m-2")).json()
    assert [d["status"] for d in later["deliveries"]] == ["QUEUED", "QUEUED"]
