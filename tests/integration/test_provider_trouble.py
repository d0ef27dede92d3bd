"""Provider trouble stays where it starts, against real Redis and the local Twilio and
SendGrid peers, with the worker running in this process: a hanging SMS provider fills only
its own bulkhead while HIGH email keeps its latency, and failover moves an attempt to the
backup only when the first provider certainly did not take the message."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from app.catalog import Catalog, parse_catalog
from app.delivery.worker import WorkerOptions
from streams.core.events import AnyEvent, DeliveryAttemptFailed, DeliveryDeferred, DeliverySent
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import stream_events
from tests.integration.delivery_support import accept, running_worker, state, wait_until
from tests.peers.sendgrid import PEER_KEY, SendgridPeer
from tests.peers.serving import Fault, serve
from tests.peers.twilio import PEER_SID, PEER_TOKEN, TwilioPeer
from tests.servers import free_port

pytestmark = pytest.mark.timeout(90)

PHONE = "+14155550123"

OTP_TYPE = """
[types.otp]
channels = ["SMS"]
priority = "HIGH"
ttl_seconds = 300
opt_out = false

[types.otp.templates.en]
SMS = { body = "Your code is {{ code }}" }
"""
TYPES = (
    OTP_TYPE
    + """
[types.login_alert]
channels = ["EMAIL"]
priority = "HIGH"
ttl_seconds = 300
opt_out = false

[types.login_alert.templates.en]
EMAIL = { title = "New sign-in", body = "Code {{ code }}", html = "<p>Code {{ code }}</p>" }
"""
)


def twilio(name: str, port: int, **extra: str) -> str:
    settings = "".join(f"{key} = {value}\n" for key, value in extra.items())
    return (
        f'[providers.{name}]\nkind = "twilio"\naccount_sid = "{PEER_SID}"\n'
        f'auth_token_env = "TEST_TWILIO_TOKEN"\nfrom = "+15005550006"\n'
        f'base_url = "http://127.0.0.1:{port}"\n{settings}\n'
    )


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TWILIO_TOKEN", PEER_TOKEN)
    monkeypatch.setenv("TEST_SENDGRID_KEY", PEER_KEY)


@pytest.fixture
def sms_peer() -> Iterator[tuple[TwilioPeer, int]]:
    peer = TwilioPeer()
    with serve(peer) as served:
        yield peer, served.port


def otp(n: int) -> dict[str, Any]:
    return {"recipient": {"id": f"u-{n}", "phone": PHONE}, "type": "otp", "data": {"code": str(n)}}


def login_alert(n: int) -> dict[str, Any]:
    recipient = {"id": f"u-{n}", "email": f"user-{n}@example.com"}
    return {"recipient": recipient, "type": "login_alert", "data": {"code": str(n)}}


async def events(redis: Redis, keys: KeySpace) -> list[AnyEvent]:
    return await stream_events(redis, keys.shard(0).events)


async def sent_latencies_ms(redis: Redis, keys: KeySpace, ids: set[str]) -> list[float]:
    """For each sent delivery of ``ids``: ms from acceptance (the ms in its UUIDv7 id) to
    its DeliverySent event."""
    return [
        event.at.timestamp() * 1000 - int(event.delivery_id.replace("-", "")[:12], 16)
        for event in await events(redis, keys)
        if isinstance(event, DeliverySent) and event.delivery_id in ids
    ]


async def send_all(
    redis: Redis, keys: KeySpace, catalog: Catalog, bodies: list[dict[str, Any]], tag: str
) -> set[str]:
    ids = set()
    for n, body in enumerate(bodies):
        answer = await accept(redis, keys, catalog, body, f"{tag}-{n}")
        ids |= {d["id"] for d in answer["deliveries"]}
    return ids


async def all_sent(redis: Redis, keys: KeySpace, ids: set[str]) -> bool:
    return all([(await state(redis, keys, i)).get("status") == "SENT" for i in ids])


async def test_a_hanging_sms_provider_fills_only_its_bulkhead(
    real_redis: Redis, key_prefix: str, sms_peer: tuple[TwilioPeer, int]
) -> None:
    peer, port = sms_peer
    keys = KeySpace(key_prefix)
    with serve(SendgridPeer()) as mail:
        catalog = parse_catalog(
            twilio("sms", port, timeout_seconds="2", max_in_flight="4")
            + '[providers.mail]\nkind = "sendgrid"\napi_key_env = "TEST_SENDGRID_KEY"\n'
            + f'from = "no-reply@clarion.test"\nbase_url = "{mail.base_url}"\n\n'
            + '[channels.SMS]\nprovider = "sms"\n[channels.EMAIL]\nprovider = "mail"\n'
            + TYPES
        )
        # HIGH has 8 slots per worker: without the bulkhead, 8 hanging SMS would hold them
        # all and every email would wait for their time limit (2 s).
        options = WorkerOptions(
            lanes={Priority.HIGH: 8, Priority.NORMAL: 8, Priority.LOW: 2},
            lease_ms=5000,
            reclaim_interval_s=0.5,
            shutdown_grace_s=3.0,
        )
        async with running_worker(real_redis, keys, catalog, options=options):
            calm = await send_all(
                real_redis, keys, catalog, [login_alert(n) for n in range(20)], "a"
            )
            await wait_until(lambda: all_sent(real_redis, keys, calm), within=10)
            before = await sent_latencies_ms(real_redis, keys, calm)

            peer.fail(Fault.HANG)
            await send_all(real_redis, keys, catalog, [otp(n) for n in range(20)], "s")
            await asyncio.sleep(0.2)  # the SMS are hanging at the peer now
            during = await send_all(
                real_redis, keys, catalog, [login_alert(n) for n in range(100, 120)], "b"
            )
            await wait_until(lambda: all_sent(real_redis, keys, during), within=10)
            hanging = peer.requests
            peer.heal()
            peer.release()
            latencies = await sent_latencies_ms(real_redis, keys, during)
    assert hanging <= 4  # never more SMS calls in flight than the bulkhead holds
    assert max(latencies) < 1000, latencies  # no email waited for the SMS time limit
    assert max(latencies) <= max(before) + 500, (before, latencies)
    deferred = [e for e in await events(real_redis, keys) if isinstance(e, DeliveryDeferred)]
    assert any(e.reason == "bulkhead_full" for e in deferred)


FAILOVER = """
[channels.SMS]
providers = ["primary", "backup"]
retry = { base_seconds = 0.05, max_seconds = 0.1, max_attempts = 4 }
"""


async def test_an_attempt_the_first_provider_never_took_goes_to_the_backup(
    real_redis: Redis, key_prefix: str, sms_peer: tuple[TwilioPeer, int]
) -> None:
    peer, port = sms_peer
    keys = KeySpace(key_prefix)
    closed = free_port()  # nothing listens: connection refused, the message never left
    catalog = parse_catalog(
        twilio("primary", closed) + twilio("backup", port) + FAILOVER + OTP_TYPE
    )
    async with running_worker(real_redis, keys, catalog):
        ids = await send_all(real_redis, keys, catalog, [otp(1)], "f")
        await wait_until(lambda: all_sent(real_redis, keys, ids), within=10)
    [delivery_id] = ids
    recorded = await state(real_redis, keys, delivery_id)
    assert (recorded["provider"], recorded["attempts"]) == ("backup", "2")
    found = await events(real_redis, keys)
    [failed] = [e for e in found if isinstance(e, DeliveryAttemptFailed)]
    [sent] = [e for e in found if isinstance(e, DeliverySent)]
    assert (failed.provider, failed.error_class) == ("primary", "TRANSIENT")
    assert (sent.provider, sent.attempt) == ("backup", 2)
    assert len(peer.accepted) == 1


async def test_an_answer_that_may_have_sent_is_retried_at_the_same_provider(
    real_redis: Redis, key_prefix: str, sms_peer: tuple[TwilioPeer, int]
) -> None:
    peer, port = sms_peer
    keys = KeySpace(key_prefix)
    backup = TwilioPeer()
    with serve(backup) as second:
        catalog = parse_catalog(
            twilio("primary", port) + twilio("backup", second.port) + FAILOVER + OTP_TYPE
        )
        peer.fail(Fault.ERROR, times=1)  # a 500: Twilio may or may not have sent it
        async with running_worker(real_redis, keys, catalog):
            ids = await send_all(real_redis, keys, catalog, [otp(2)], "g")
            await wait_until(lambda: all_sent(real_redis, keys, ids), within=10)
    [delivery_id] = ids
    recorded = await state(real_redis, keys, delivery_id)
    assert (recorded["provider"], recorded["attempts"]) == ("primary", "2")
    assert (len(peer.accepted), len(backup.accepted)) == (1, 0)
