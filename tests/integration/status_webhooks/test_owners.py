"""Whose a delivery is: remembered from the events read, else looked up in the notification
record in Redis, else in the read model; a bounded memory."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from redis.asyncio import Redis

from app.status_webhooks.owners import Owner, Owners, ReadModelOwners
from streams.core.events import DeliveryQueued, DeliverySuppressed
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, Priority
from tests.integration.delivery_support import accept, fast_catalog
from tests.integration.projection_support import accepted, delivered, project

AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def learn_one(owners: Owners, producer: str, wanted: frozenset[str]) -> tuple[str, str]:
    nid, did = new_id(0), new_id(0)
    owners.learn(accepted(nid, [did], at=AT, producer=producer), wanted)
    owners.learn(
        DeliveryQueued(at=AT, notification_id=nid, delivery_id=did, version=1,
                       channel=Channel.EMAIL, priority=Priority.NORMAL),
        wanted,
    )  # fmt: skip
    return nid, did


async def test_owners_are_learnt_and_channels_kept_for_wanted_producers(
    fake: Redis, key_prefix: str
) -> None:
    owners = Owners(fake, KeySpace(key_prefix))
    wanted = frozenset({"shop"})
    shop_nid, shop_did = learn_one(owners, "shop", wanted)
    other_nid, other_did = learn_one(owners, "other", wanted)

    assert owners.owner(shop_nid) == Owner("shop", "otp")
    assert owners.channel(shop_did) == Channel.EMAIL
    assert owners.owner(other_nid) == Owner("other", "otp")
    assert owners.channel(other_did) is None  # nobody wants it: not kept
    assert owners.owner(shop_nid) is owners.owner(learn_one(owners, "shop", wanted)[0])  # shared


async def test_memory_is_bounded_oldest_forgotten_first(fake: Redis, key_prefix: str) -> None:
    owners = Owners(fake, KeySpace(key_prefix), limit=2)
    wanted = frozenset({"shop"})
    first, second, third = (learn_one(owners, "shop", wanted) for _ in range(3))
    assert owners.owner(first[0]) is None
    assert owners.channel(first[1]) is None
    assert owners.owner(second[0]) is not None
    assert owners.channel(third[1]) == Channel.EMAIL


async def test_what_was_never_read_is_found_in_the_notification_record(
    redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    body = {
        "recipient": {"id": "u-1", "email": "a@example.com", "push_tokens": ["t"]},
        "type": "order_confirmed",
        "data": {"order_id": "A-1"},
    }
    answer = await accept(redis, keys, fast_catalog(), body, "k-1")
    owners = Owners(redis, keys)
    [email, push, in_app] = answer["deliveries"]

    await owners.look_up([(answer["id"], email["id"])])

    assert owners.owner(answer["id"]) == Owner("orders", "order_confirmed")
    assert [owners.channel(d["id"]) for d in (email, push, in_app)] == ["EMAIL", "PUSH", "IN_APP"]


async def test_what_redis_forgot_is_found_in_the_read_model(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    nid, did = new_id(0), new_id(0)
    await project(pool, [accepted(nid, [did], at=AT, producer="shop"),
                         *delivered(nid, did, "SENT", at=AT, channel="PUSH")])  # fmt: skip

    async def connect() -> asyncpg.Pool:
        return pool

    owners = Owners(real_redis, KeySpace(key_prefix), ReadModelOwners(connect))
    assert await owners.look_up([(nid, did), (new_id(0), new_id(0))])  # asked: one unknown

    assert owners.owner(nid) == Owner("shop", "otp")
    assert owners.channel(did) == Channel.PUSH


async def test_an_unreachable_read_model_finds_nothing_and_is_tried_again_later(
    fake: Redis, key_prefix: str
) -> None:
    tries = 0

    async def connect() -> asyncpg.Pool:
        nonlocal tries
        tries += 1
        raise OSError("connection refused")

    read_model = ReadModelOwners(connect)
    owners = Owners(fake, KeySpace(key_prefix), read_model)
    nid, did = new_id(0), new_id(0)
    assert not await owners.look_up([(nid, did)])  # the read model could not be asked
    assert not await owners.look_up([(nid, did)])  # within the pause: not tried again
    assert owners.owner(nid) is None
    assert tries == 1


async def test_a_suppression_at_ingest_names_its_channel(fake: Redis, key_prefix: str) -> None:
    owners = Owners(fake, KeySpace(key_prefix))
    nid, did = new_id(0), new_id(0)
    wanted = frozenset({"shop"})
    owners.learn(accepted(nid, [did], at=AT, producer="shop"), wanted)
    owners.learn(
        DeliverySuppressed(at=AT, notification_id=nid, delivery_id=did, version=1,
                           channel=Channel.SMS, reason="no_address"),
        wanted,
    )  # fmt: skip
    assert owners.channel(did) == Channel.SMS
