"""The APNs adapter against the local APNs peer (tests/peers/apns.py), which verifies the
provider token's ES256 signature, kid, team and age and checks every apns-* field as APNs
does: the request arrives with the header fields and payload the message asks for, the
expiration is where the TTL ends, the apns-id is the delivery's on every attempt, one token
serves many sends and a stale one is replaced, each answer is classified, a payload over
4 KB is refused before any request, and no device token or JWT appears in an error or a log
line."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jwt
import msgspec
import pytest
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from app.catalog.providers import ProviderLimits
from app.catalog.push import ApnsConfig
from app.providers.apns import DEFAULT_STORE_SECONDS, TOKEN_REUSE_SECONDS, ApnsProvider
from app.providers.base import Message, ProviderError, PushContent, Reason
from app.providers.http2 import Client
from streams.core.vocabulary import Channel, ErrorClass, Priority
from tests.peers.apns import PEER_KEY_ID, PEER_TEAM_ID, PEER_TOPIC, ApnsPeer, Fault
from tests.peers.http2_serving import Served, serve
from tests.servers import free_port, wait_for_port

DEVICE = "a1b2c3d4e5f60718" * 4
DELIVERY = "01936f4e-8a2b-7c3d-9e4f-a0b1c2d3e4f5"
LINK = "shop://orders/A-17"


class Clock:
    """The adapter's clock, moved by hand; it starts at the real time (the peer checks a
    token's age against that)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def peer() -> ApnsPeer:
    return ApnsPeer()


@pytest.fixture
def served(peer: ApnsPeer) -> Iterator[Served]:
    with serve(peer) as running:
        yield running


@pytest.fixture
def ca_file(peer: ApnsPeer, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    peer.ca.cert_pem.write_to_path(str(path))
    return str(path)


def make_provider(
    served: Served, ca_file: str, key_pem: str, clock: Clock | None = None, **settings: Any
) -> ApnsProvider:
    values = {"team_id": PEER_TEAM_ID, "key_id": PEER_KEY_ID, "topic": PEER_TOPIC, **settings}
    config = msgspec.convert(
        {"kind": "apns", "key_env": "APNS_KEY", "base_url": served.base_url,
         "ca_file": ca_file, **values},
        ApnsConfig,
    )  # fmt: skip
    return ApnsProvider("push", config, {"key_env": key_pem}, clock=clock or time.time)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def provider(
    served: Served, ca_file: str, peer: ApnsPeer, clock: Clock
) -> AsyncIterator[ApnsProvider]:
    adapter = make_provider(served, ca_file, peer.key_pem, clock)
    yield adapter
    await adapter.close()


def push(
    address: str = f"apns {DEVICE}",
    *,
    priority: Priority = Priority.HIGH,
    expires_ms: int | None = None,
    delivery_id: str = DELIVERY,
    attempt: int = 1,
    title: str = "Your order shipped",
    body: str = "It arrives tomorrow.",
    **content: Any,
) -> Message:
    return Message(
        delivery_id=delivery_id,
        idempotency_key="idem-1",
        channel=Channel.PUSH,
        address=address,
        title=title,
        body=body,
        attempt=attempt,
        priority=priority,
        expires_ms=int((time.time() + 3600) * 1000) if expires_ms is None else expires_ms,
        push=PushContent(**content),
    )


async def refusal(provider: ApnsProvider, message: Message, peer: ApnsPeer) -> ProviderError:
    with structlog.testing.capture_logs() as logs, pytest.raises(ProviderError) as caught:
        await provider.send(message)
    text = caught.value.message + json.dumps(logs)
    for secret in [DEVICE, *peer.provider_tokens, *(t[:40] for t in peer.provider_tokens)]:
        assert secret not in text
    assert caught.value.message.startswith("push: ")
    return caught.value


async def test_a_notification_arrives_as_apns_takes_it(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    message = push(badge=3, sound="default", link=LINK, data={"order": "A-17", "aps": "x"})
    apns_id = await provider.send(message)
    [taken] = peer.accepted
    assert (apns_id, taken.apns_id, taken.token) == (DELIVERY, DELIVERY, DEVICE)
    [token] = peer.provider_tokens
    assert taken.headers == {
        "authorization": f"bearer {token}",
        "apns-topic": PEER_TOPIC,
        "apns-push-type": "alert",
        "apns-priority": "10",
        "apns-expiration": str(message.expires_ms // 1000),
        "apns-id": DELIVERY,
    }
    assert taken.payload == {
        "aps": {
            "alert": {"title": "Your order shipped", "body": "It arrives tomorrow."},
            "badge": 3,
            "sound": "default",
        },
        "order": "A-17",
        "link": LINK,
    }
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "kid": PEER_KEY_ID}
    claims = jwt.decode(token, peer.key.public_key(), algorithms=["ES256"])
    assert claims.keys() == {"iss", "iat"}
    assert claims["iss"] == PEER_TEAM_ID
    assert abs(claims["iat"] - time.time()) < 5


async def test_a_plain_token_and_an_empty_title_or_badge_zero(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    await provider.send(push(DEVICE.upper(), title="", badge=0))
    [taken] = peer.accepted
    assert taken.payload == {"aps": {"alert": {"body": "It arrives tomorrow."}, "badge": 0}}


@pytest.mark.parametrize(
    ("priority", "header"), [(Priority.HIGH, "10"), (Priority.NORMAL, "5"), (Priority.LOW, "5")]
)
async def test_the_priority(
    provider: ApnsProvider, peer: ApnsPeer, priority: Priority, header: str
) -> None:
    await provider.send(push(priority=priority))
    assert peer.accepted[0].headers["apns-priority"] == header


async def test_a_background_push_is_content_available_at_priority_5(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    adapter = make_provider(served, ca_file, peer.key_pem, push_type="background")
    await adapter.send(push(badge=1, sound="default", data={"sync": "inbox"}, link=LINK))
    await adapter.close()
    [taken] = peer.accepted
    assert (taken.headers["apns-push-type"], taken.headers["apns-priority"]) == ("background", "5")
    assert taken.payload == {"aps": {"content-available": 1}, "sync": "inbox", "link": LINK}


async def test_the_expiration_is_where_the_ttl_ends(
    provider: ApnsProvider, peer: ApnsPeer, clock: Clock
) -> None:
    ends = int(clock.now * 1000) + 90_500
    await provider.send(push(expires_ms=ends))
    await provider.send(push(expires_ms=int(clock.now * 1000) + 400))  # under a second left
    await provider.send(push(expires_ms=0))  # no TTL known
    stamps = [int(taken.headers["apns-expiration"]) for taken in peer.accepted]
    assert stamps == [ends // 1000, 0, int(clock.now) + DEFAULT_STORE_SECONDS]


async def test_the_apns_id_is_the_delivery_id_on_every_attempt(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    first = await provider.send(push(attempt=1))
    second = await provider.send(push(attempt=2))
    assert first == second == DELIVERY
    assert [taken.headers["apns-id"] for taken in peer.accepted] == [DELIVERY, DELIVERY]
    other = await provider.send(push(delivery_id="dlv-1"))  # not a UUID: APNs makes one
    assert "apns-id" not in peer.accepted[2].headers
    assert other == peer.accepted[2].apns_id != DELIVERY


async def test_the_collapse_id_is_the_key_or_its_hash_when_too_long(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    long_key = "order-status:" + "é" * 40
    await provider.send(push(collapse_key="order-A-17"))
    await provider.send(push(collapse_key=long_key))
    digest = base64.urlsafe_b64encode(hashlib.sha256(long_key.encode()).digest())
    assert [taken.headers["apns-collapse-id"] for taken in peer.accepted] == [
        "order-A-17",
        digest.decode().rstrip("="),
    ]
    await provider.send(push())
    assert "apns-collapse-id" not in peer.accepted[2].headers


async def test_one_token_serves_many_sends_until_it_is_fifty_minutes_old(
    provider: ApnsProvider, peer: ApnsPeer, clock: Clock
) -> None:
    await asyncio.gather(*(provider.send(push()) for _ in range(20)))
    clock.now += TOKEN_REUSE_SECONDS - 60
    await provider.send(push())
    assert len(peer.provider_tokens) == 1
    clock.now += 60
    await provider.send(push())
    assert len(peer.provider_tokens) == 2
    assert peer.connections == 1


async def test_an_expired_token_is_replaced_and_the_send_tried_once_more(
    provider: ApnsProvider, peer: ApnsPeer, clock: Clock
) -> None:
    await provider.send(push())
    clock.now += 120
    peer.fail(Fault.EXPIRED_TOKEN, times=1)
    with structlog.testing.capture_logs() as logs:
        assert await provider.send(push()) == DELIVERY
    assert [line["event"] for line in logs] == ["apns_provider_token_renewed"]
    assert str(peer.provider_tokens) not in json.dumps(logs)
    assert (len(peer.provider_tokens), len(peer.accepted), peer.requests) == (2, 2, 3)
    assert peer.accepted[1].headers["authorization"] == f"bearer {peer.provider_tokens[1]}"


async def test_a_young_token_refused_as_expired_is_not_replaced(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    await provider.send(push())
    peer.fail(Fault.EXPIRED_TOKEN, times=1)
    error = await refusal(provider, push(), peer)
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert error.message == "push: HTTP 403: ExpiredProviderToken"
    assert (len(peer.provider_tokens), peer.requests) == (1, 2)


async def test_a_token_over_an_hour_old_is_refused_as_expired(
    served: Served, ca_file: str, peer: ApnsPeer, clock: Clock
) -> None:
    clock.now -= 3700  # a clock an hour behind: every token it signs is stale
    adapter = make_provider(served, ca_file, peer.key_pem, clock)
    error = await refusal(adapter, push(), peer)
    await adapter.close()
    assert (error.message, error.not_accepted) == ("push: HTTP 403: ExpiredProviderToken", True)


@pytest.mark.parametrize("wrong", ["key", "team"])
async def test_a_wrong_key_or_team_is_transient_and_not_accepted(
    served: Served, ca_file: str, peer: ApnsPeer, wrong: str
) -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    other_pem = other.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    key_pem, team = (other_pem, PEER_TEAM_ID) if wrong == "key" else (peer.key_pem, "OTHERTEAM1")
    adapter = make_provider(served, ca_file, key_pem, team_id=team)
    error = await refusal(adapter, push(), peer)
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert error.message == "push: HTTP 403: InvalidProviderToken"


async def test_an_unregistered_token_is_an_invalid_address(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    peer.unregister(DEVICE, 1_700_000_000_000)
    error = await refusal(provider, push(), peer)
    assert (error.error_class, error.reason, error.not_accepted) == (
        ErrorClass.PERMANENT, Reason.INVALID_ADDRESS, False,
    )  # fmt: skip
    assert error.message == "push: HTTP 410: Unregistered (since 1700000000000 ms)"


@pytest.mark.parametrize(
    ("status", "reason", "error_class", "why", "not_accepted"),
    [
        (400, "BadDeviceToken", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS, False),
        (400, "DeviceTokenNotForTopic", ErrorClass.PERMANENT, Reason.REJECTED, False),
        (400, "BadExpirationDate", ErrorClass.PERMANENT, Reason.REJECTED, False),
        (400, "BadCollapseId", ErrorClass.PERMANENT, Reason.REJECTED, False),
        (413, "PayloadTooLarge", ErrorClass.PERMANENT, Reason.PAYLOAD_TOO_LARGE, False),
        (400, "IdleTimeout", ErrorClass.TRANSIENT, None, True),
        (403, "Forbidden", ErrorClass.TRANSIENT, None, True),
        (429, "TooManyProviderTokenUpdates", ErrorClass.TRANSIENT, None, True),
        (404, "BadPath", ErrorClass.TRANSIENT, None, True),
    ],
)
async def test_each_refusal_is_classified_by_its_reason(
    provider: ApnsProvider,
    peer: ApnsPeer,
    status: int,
    reason: str,
    error_class: ErrorClass,
    why: Reason | None,
    not_accepted: bool,
) -> None:
    peer.script(DEVICE, status, reason)
    error = await refusal(provider, push(), peer)
    assert (error.error_class, error.reason, error.not_accepted) == (error_class, why, not_accepted)
    assert error.message == f"push: HTTP {status}: {reason}"


async def test_the_peers_own_checks_are_classified_too(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    adapter = make_provider(served, ca_file, peer.key_pem, topic="com.example.other")
    error = await refusal(adapter, push(), peer)
    assert (error.message, error.reason) == ("push: HTTP 400: TopicDisallowed", Reason.REJECTED)
    await adapter.close()
    adapter = make_provider(served, ca_file, peer.key_pem)
    error = await refusal(adapter, push("apns " + DEVICE[:62]), peer)  # hex, but not 32 bytes
    assert (error.message, error.reason) == (
        "push: HTTP 400: BadDeviceToken",
        Reason.INVALID_ADDRESS,
    )
    await adapter.close()


@pytest.mark.parametrize(
    ("fault", "status", "not_accepted", "retry_after"),
    [
        (Fault.TOO_MANY_REQUESTS, 429, True, 7.0),
        (Fault.ERROR, 500, False, None),
        (Fault.UNAVAILABLE, 503, True, 7.0),
    ],
)
async def test_server_side_failures_are_transient(
    provider: ApnsProvider,
    peer: ApnsPeer,
    fault: Fault,
    status: int,
    not_accepted: bool,
    retry_after: float | None,
) -> None:
    peer.fail(fault, times=1, retry_after="7")
    error = await refusal(provider, push(), peer)
    assert (error.error_class, error.not_accepted, error.retry_after) == (
        ErrorClass.TRANSIENT, not_accepted, retry_after,
    )  # fmt: skip
    assert error.message.startswith(f"push: HTTP {status}: ")
    assert await provider.send(push()) == DELIVERY


async def test_a_payload_over_4_kb_fails_before_any_request(
    provider: ApnsProvider, peer: ApnsPeer
) -> None:
    error = await refusal(provider, push(body="€" * 1400), peer)  # 4,200 bytes in UTF-8
    assert (error.error_class, error.reason, error.not_accepted) == (
        ErrorClass.PERMANENT, Reason.PAYLOAD_TOO_LARGE, True,
    )  # fmt: skip
    assert (peer.requests, peer.connections) == (0, 0)
    await provider.send(push(body="€" * 1300))  # 3,900 bytes: fits


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("apns not-a-token", Reason.INVALID_ADDRESS),
        (f"apns {DEVICE}/../../x", Reason.INVALID_ADDRESS),
        ("fcm some-fcm-registration-token", Reason.REJECTED),
    ],
)
async def test_an_address_that_is_no_apns_token_fails_before_any_request(
    provider: ApnsProvider, peer: ApnsPeer, address: str, reason: Reason
) -> None:
    error = await refusal(provider, push(address), peer)
    assert (error.error_class, error.reason, error.not_accepted) == (
        ErrorClass.PERMANENT, reason, True,
    )  # fmt: skip
    assert peer.requests == 0


async def test_the_peer_refuses_what_apns_refuses(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    client = Client("peer", ProviderLimits(), served.base_url, ca_file=ca_file)
    await refuses_what_apns_refuses(client, peer.key)
    await client.close()
    assert len(peer.accepted) == 1


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """``tests.peers.apns_standalone`` in its own process: base URL, CA file, signing key."""
    port = free_port()
    command = [sys.executable, "-m", "tests.peers.apns_standalone", "--port", str(port),
               "--cert-dir", str(tmp_path)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        key = (tmp_path / "key.p8").read_text()
        yield f"https://127.0.0.1:{port}", str(tmp_path / "ca.pem"), key
    finally:
        process.terminate()
        process.wait(10)


async def test_the_standalone_peer_checks_the_same_over_another_http2_server(
    standalone: tuple[str, str, str],
) -> None:
    base_url, ca_file, key_pem = standalone
    client = Client("peer", ProviderLimits(), base_url, ca_file=ca_file)
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    await refuses_what_apns_refuses(client, key)
    adapter = make_provider(Served(int(base_url.rpartition(":")[2])), ca_file, key_pem)
    sent = await asyncio.gather(*(adapter.send(push(f"apns {n:064x}")) for n in range(300)))
    assert len(sent) == 300
    stats = json.loads((await client.request(b"GET", "/_peer/stats", [], b"")).body)
    assert (stats["accepted"], stats["requests"]) == (1 + 300, 17 + 300 + 1)
    await adapter.close()
    await client.close()


async def refuses_what_apns_refuses(client: Client, key: ec.EllipticCurvePrivateKey) -> None:
    """Sends one acceptable request and one of each kind APNs refuses, through ``client``."""
    token = jwt.encode(
        {"iss": PEER_TEAM_ID, "iat": int(time.time())}, key, "ES256", {"kid": PEER_KEY_ID}
    )
    good = {
        "authorization": f"bearer {token}", "apns-topic": PEER_TOPIC,
        "apns-push-type": "alert", "apns-priority": "10", "apns-expiration": "0",
    }  # fmt: skip
    alert = b'{"aps": {"alert": "hi"}}'

    async def reason(
        path: str, changes: dict[str, str], body: bytes, method: bytes = b"POST"
    ) -> str:
        values = {**good, **changes}
        fields = [(k.encode(), v.encode()) for k, v in values.items() if v != "-"]
        answer = await client.request(method, path, fields, body)
        return f"{answer.status} {json.loads(answer.body)['reason']}" if answer.body else "200"

    device = f"/3/device/{DEVICE}"
    assert await reason(device, {}, alert) == "200"
    assert await reason(device, {}, alert, b"PUT") == "405 MethodNotAllowed"
    assert await reason("/3/devices/x", {}, alert) == "404 BadPath"
    assert await reason("/3/device/abc", {}, alert) == "400 BadDeviceToken"
    assert await reason(device, {"authorization": "-"}, alert) == "403 MissingProviderToken"
    assert await reason(device, {"authorization": "bearer x.y.z"}, alert) == (
        "403 InvalidProviderToken"
    )
    assert await reason(device, {"apns-topic": "-"}, alert) == "400 MissingTopic"
    assert await reason(device, {"apns-push-type": "-"}, alert) == "400 InvalidPushType"
    assert await reason(device, {"apns-push-type": "background"}, alert) == "400 InvalidPushType"
    background = b'{"aps": {"content-available": 1}}'
    assert await reason(device, {"apns-push-type": "background"}, background) == "400 BadPriority"
    assert await reason(device, {"apns-priority": "7"}, alert) == "400 BadPriority"
    assert await reason(device, {"apns-expiration": "soon"}, alert) == "400 BadExpirationDate"
    assert await reason(device, {"apns-id": "123"}, alert) == "400 BadMessageId"
    assert await reason(device, {"apns-collapse-id": "c" * 65}, alert) == "400 BadCollapseId"
    assert await reason(device, {}, b"[1]") == "400 PayloadEmpty"
    assert await reason(device, {}, b'{"aps": {"alert": "' + b"x" * 4100 + b'"}}') == (
        "413 PayloadTooLarge"
    )
    twice = [(k.encode(), v.encode()) for k, v in good.items()] + [(b"apns-topic", b"x")]
    answer = await client.request(b"POST", device, twice, alert)
    assert json.loads(answer.body) == {"reason": "DuplicateHeaders"}
