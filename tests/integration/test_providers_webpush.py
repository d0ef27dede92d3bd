"""The Web Push adapter against the local push service (tests/peers/webpush.py), which checks
VAPID as a push service does and decrypts every message as the browser would, with its own
RFC 8291 code (itself checked here against the RFC's Appendix A example): the plaintext that
arrives is the payload builder's JSON, the JWT is verified and reused per origin, TTL,
Urgency and Topic are as the message says at each attempt, each answer is classified, the
SSRF guard keeps the endpoint out of private networks, and no endpoint, key or JWT appears in
an error or a log line. ``push.test`` and ``other.test`` resolve to 127.0.0.1 through an
injected resolver that ``allow_networks`` lets through."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import http_ece
import httpx
import jwt
import msgspec
import pytest
import structlog
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from app.catalog.push import WebPushConfig, subscription_address
from app.providers.base import Message, ProviderError, PushContent, Reason
from app.providers.webpush import (
    DEFAULT_TTL_SECONDS,
    MAX_PLAINTEXT_BYTES,
    WebPushProvider,
    encrypt,
    payload,
)
from streams.vocabulary import Channel, ErrorClass, Priority
from tests.peers.serving import Fault, serve
from tests.peers.webpush import (
    Subscription,
    WebPushPeer,
    b64url,
    decrypt,
    raw_public,
    subscription,
    unb64url,
)
from tests.servers import free_port

VAPID_KEY = ec.generate_private_key(ec.SECP256R1())
VAPID_PEM = VAPID_KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
OTHER_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RAW = b64url(OTHER_KEY.private_numbers().private_value.to_bytes(32, "big"))
SUBJECT = "mailto:ops@clarion.test"
LINK = "https://shop.example/orders/A-17"


async def resolve_locally(host: str, port: int) -> Sequence[str]:
    if host in {"push.test", "other.test"}:
        return ["127.0.0.1"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


class Clock:
    """The adapter's clock, moved by hand; it starts at the real time (the peer checks exp
    against that)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def make_provider(
    key: str = VAPID_PEM, clock: Clock | None = None, **overrides: object
) -> WebPushProvider:
    settings: dict[str, Any] = {
        "kind": "webpush", "vapid_private_key_env": "VAPID_KEY", "subject": SUBJECT,
        "allow_http_hosts": ["push.test", "other.test"], "allow_networks": ["127.0.0.0/8"],
        "timeout_seconds": 5.0, "connect_timeout_seconds": 2.0, **overrides,
    }  # fmt: skip
    config = msgspec.convert(settings, WebPushConfig)
    return WebPushProvider(
        "push",
        config,
        {"vapid_private_key_env": key},
        resolver=resolve_locally,
        clock=clock or Clock(),
    )


@pytest.fixture
def peer() -> Iterator[WebPushPeer]:
    service = WebPushPeer()
    with serve(service) as running:
        service.origin = f"http://push.test:{running.port}"
        yield service


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def provider(clock: Clock) -> AsyncIterator[WebPushProvider]:
    adapter = make_provider(clock=clock)
    yield adapter
    await adapter.close()


def push_message(
    address: str,
    *,
    push: PushContent | None = None,
    priority: Priority = Priority.NORMAL,
    expires_ms: int = 0,
    body: str = "Order A-17 is on its way.",
) -> Message:
    return Message(
        delivery_id="0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", idempotency_key="idem-1",
        channel=Channel.PUSH, address=address, title="Shipped", body=body, attempt=1,
        priority=priority, expires_ms=expires_ms,
        push=push if push is not None else PushContent(
            {"order": "A-17"}, 3, "default", LINK, "order-A-17"
        ),
    )  # fmt: skip


async def refusal(provider: WebPushProvider, message: Message) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.send(message)
    return caught.value


def test_the_peer_decrypts_rfc_8291_s_example_and_the_adapter_encrypts_it_byte_for_byte() -> None:
    # RFC 8291, Appendix A.
    plaintext = b"When I grow up, I want to be a watermelon"
    ua = ec.derive_private_key(
        int.from_bytes(unb64url("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"), "big"),
        ec.SECP256R1(),
    )
    sender = ec.derive_private_key(
        int.from_bytes(unb64url("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"), "big"),
        ec.SECP256R1(),
    )
    ua_public = (
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    )
    auth = unb64url("BTBZMqHH6r4Tts7J_aSIgg")
    salt = unb64url("DGv6ra1nlYgDCS1FRnbzlw")
    body = unb64url(
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLoc"
        "InmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLV"
        "WGNWQexSgSxsj_Qulcy4a-fN"
    )
    assert b64url(raw_public(ua)) == ua_public
    assert b64url(raw_public(sender)) == (
        "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    )
    assert decrypt(body, ua, auth) == plaintext
    assert encrypt(plaintext, ua.public_key(), auth, sender=sender, salt=salt) == body
    tampered = body[:-1] + bytes([body[-1] ^ 1])
    with pytest.raises(ValueError, match="does not authenticate"):
        decrypt(tampered, ua, auth)


def test_http_ece_decrypts_what_the_adapter_encrypts_with_a_fresh_key_and_salt() -> None:
    # A third reading of RFC 8188/8291 beside the peer's and the adapter's own.
    ua = ec.generate_private_key(ec.SECP256R1())
    auth = b"0123456789abcdef"
    plaintext = json.dumps({"notification": {"title": "Hi", "body": "x" * 3000}}).encode()
    first = encrypt(plaintext, ua.public_key(), auth)
    second = encrypt(plaintext, ua.public_key(), auth)
    assert first[:16] != second[:16]  # the salt
    assert first[21:86] != second[21:86]  # the sender's key
    for body in (first, second):
        assert http_ece.decrypt(body, private_key=ua, auth_secret=auth) == plaintext


async def test_a_push_arrives_decrypted_as_the_payload_builder_made_it(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    sent = push_message(sub.address)
    message_id = await provider.send(sent)
    [taken] = peer.accepted
    assert message_id == taken.location
    assert message_id.startswith(f"{peer.origin}/message/")
    assert json.loads(taken.plaintext) == {
        "web_push": 8030,
        "notification": {
            "title": "Shipped", "body": "Order A-17 is on its way.", "navigate": LINK,
            "tag": "order-A-17", "data": {"order": "A-17"},
        },
        "app_badge": 3,
    }  # fmt: skip
    assert taken.plaintext == payload(sent)
    headers = taken.headers
    assert (headers["content-encoding"], headers["content-type"]) == (
        "aes128gcm", "application/octet-stream",
    )  # fmt: skip
    assert (headers["urgency"], headers["topic"], headers["ttl"]) == (
        "normal", "order-A-17", str(DEFAULT_TTL_SECONDS),
    )  # fmt: skip
    assert headers["host"] == peer.origin.removeprefix("http://")
    assert headers["authorization"] == f"vapid t={taken.token}, k={b64url(raw_public(VAPID_KEY))}"
    assert peer.refusals == []


async def test_without_an_absolute_link_the_same_json_goes_to_the_service_worker(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    await provider.send(push_message(sub.address, push=PushContent(sound="default")))
    await provider.send(push_message(sub.address, push=PushContent(badge=-1, link="/orders/7")))
    await provider.send(push_message(sub.address, push=PushContent(badge=0, link="app://o/7")))
    assert [json.loads(push.plaintext) for push in peer.accepted] == [
        {"notification": {"title": "Shipped", "body": "Order A-17 is on its way."}},
        {"notification": {"title": "Shipped", "body": "Order A-17 is on its way.",
                          "navigate": "/orders/7"}},
        {"notification": {"title": "Shipped", "body": "Order A-17 is on its way.",
                          "navigate": "app://o/7"}, "app_badge": 0},
    ]  # fmt: skip
    assert "topic" not in peer.accepted[0].headers


def claims_of(token: str) -> dict[str, Any]:
    return dict(jwt.decode(token, options={"verify_signature": False}))


async def test_the_vapid_jwt_is_verified_and_signed_once_per_origin_for_half_a_day(
    peer: WebPushPeer, provider: WebPushProvider, clock: Clock
) -> None:
    sub = peer.subscribe()
    for _ in range(3):
        await provider.send(push_message(sub.address))
    other = WebPushPeer()
    with serve(other) as running:
        other.origin = f"http://other.test:{running.port}"
        for _ in range(2):
            await provider.send(push_message(other.subscribe().address))
    await provider.send(push_message(sub.address))
    tokens = [push.token for push in peer.accepted]
    assert len(set(tokens)) == 1
    assert len({push.token for push in other.accepted}) == 1
    first, there = claims_of(tokens[0]), claims_of(other.accepted[0].token)
    assert (first["aud"], there["aud"]) == (peer.origin, other.origin)
    assert first["exp"] == int(clock.now) + 12 * 3600
    assert first["sub"] == SUBJECT
    clock.now += 11 * 3600 - 1  # still over an hour left: the same JWT
    await provider.send(push_message(sub.address))
    clock.now += 2  # within the last hour: a new one
    await provider.send(push_message(sub.address))
    later = [push.token for push in peer.accepted[-2:]]
    assert later[0] == tokens[0]
    assert later[1] != tokens[0]
    assert claims_of(later[1])["exp"] == int(clock.now) + 12 * 3600


async def test_a_jwt_the_push_service_refuses_is_transient_and_not_accepted(
    peer: WebPushPeer,
) -> None:
    sub = peer.subscribe()
    peer.application_server_key = raw_public(VAPID_KEY)
    impostor = make_provider(OTHER_RAW)
    forbidden = await refusal(impostor, push_message(sub.address))
    await impostor.close()
    stale_clock = Clock()
    stale_clock.now -= 13 * 3600  # its JWT expired an hour ago
    stale = make_provider(clock=stale_clock)
    expired = await refusal(stale, push_message(sub.address))
    await stale.close()
    host = peer.origin.removeprefix("http://").partition(":")[0]
    assert (forbidden.error_class, forbidden.not_accepted, forbidden.message) == (
        ErrorClass.TRANSIENT, True, f"push: HTTP 403: {host} (errno 109)",
    )  # fmt: skip
    assert (expired.error_class, expired.not_accepted, expired.message) == (
        ErrorClass.TRANSIENT, True, f"push: HTTP 401: {host} (errno 109)",
    )  # fmt: skip
    assert peer.refusals == [
        (403, "the key is not the subscription's"), (401, "exp is not in the next 24 hours"),
    ]  # fmt: skip
    assert peer.accepted == []


async def test_ttl_is_the_time_left_at_each_attempt(
    peer: WebPushPeer, provider: WebPushProvider, clock: Clock
) -> None:
    sub = peer.subscribe()
    sent = push_message(sub.address, expires_ms=int(clock.now * 1000) + 600_500)
    await provider.send(sent)
    clock.now += 7.2
    await provider.send(sent)
    clock.now += 593.0  # 0.3 s left
    await provider.send(sent)
    clock.now += 5.0  # past it (the worker would not start this attempt)
    await provider.send(sent)
    assert [push.headers["ttl"] for push in peer.accepted] == ["600", "593", "0", "0"]


@pytest.mark.parametrize(
    ("priority", "urgency"),
    [(Priority.HIGH, "high"), (Priority.NORMAL, "normal"), (Priority.LOW, "low")],
)
async def test_urgency_follows_the_priority(
    peer: WebPushPeer, provider: WebPushProvider, priority: Priority, urgency: str
) -> None:
    await provider.send(push_message(peer.subscribe().address, priority=priority))
    assert peer.accepted[0].headers["urgency"] == urgency


async def test_a_collapse_key_rfc_8030_does_not_allow_as_a_topic_is_hashed_into_one(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    keys = ["order_A-17", "order:A-17 (shipped)", "x" * 33]
    for key in keys:
        await provider.send(push_message(sub.address, push=PushContent(collapse_key=key)))
    hashed = [
        base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()).decode()[:32]
        for key in keys[1:]
    ]
    assert [push.headers["topic"] for push in peer.accepted] == ["order_A-17", *hashed]
    assert [json.loads(push.plaintext)["notification"]["tag"] for push in peer.accepted] == keys


@pytest.mark.parametrize("status", [404, 410])
async def test_a_gone_subscription_is_an_invalid_address(
    peer: WebPushPeer, provider: WebPushProvider, status: int
) -> None:
    sub = peer.subscribe()
    peer.gone(sub, status)
    error = await refusal(provider, push_message(sub.address))
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.INVALID_ADDRESS)
    assert error.message.endswith(": the subscription is gone")
    assert f"HTTP {status}: push.test (errno " in error.message


async def test_a_subscription_the_service_never_made_is_an_invalid_address(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    unknown = subscription(99, peer.origin)
    error = await refusal(provider, push_message(unknown.address))
    assert (error.reason, peer.refusals) == (
        Reason.INVALID_ADDRESS, [(404, "no such subscription")],
    )  # fmt: skip


async def test_payloads_up_to_4096_bytes_encrypted_are_sent_and_bigger_ones_never(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    base = len(payload(push_message(sub.address, body="")))
    fitting = push_message(sub.address, body="x" * (MAX_PLAINTEXT_BYTES - base))
    assert len(payload(fitting)) == MAX_PLAINTEXT_BYTES == 3993
    await provider.send(fitting)
    assert peer.accepted[0].plaintext == payload(fitting)
    requests = peer.requests
    too_big = push_message(sub.address, body="x" * (MAX_PLAINTEXT_BYTES - base + 1))
    error = await refusal(provider, too_big)
    assert (error.error_class, error.reason, error.not_accepted) == (
        ErrorClass.PERMANENT, Reason.PAYLOAD_TOO_LARGE, True,
    )  # fmt: skip
    assert error.message == (
        "push: the push payload is 3994 bytes, over the 3993 that fit into Web Push's 4096 "
        "once encrypted"
    )
    assert peer.requests == requests


async def test_a_push_service_s_413_is_payload_too_large(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    peer.max_push_bytes = 200  # a service that takes less than RFC 8030 asks
    error = await refusal(provider, push_message(peer.subscribe().address))
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.PAYLOAD_TOO_LARGE)
    assert error.message == "push: HTTP 413: push.test (errno 104)"


async def test_a_body_the_browser_cannot_decrypt_is_rejected(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    wrong_auth = subscription_address(sub.endpoint, sub.p256dh, b64url(b"\x01" * 16))
    error = await refusal(provider, push_message(wrong_auth))
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.REJECTED)
    assert peer.refusals == [(400, "cannot decrypt: record 0 does not authenticate")]


@pytest.mark.parametrize(
    ("fault", "status", "not_accepted"),
    [(Fault.RATE_LIMITED, 429, True), (Fault.ERROR, 500, False), (Fault.UNAVAILABLE, 503, True)],
)
async def test_rate_limits_and_server_errors_are_retried_after_retry_after(
    peer: WebPushPeer, provider: WebPushProvider, fault: Fault, status: int, not_accepted: bool
) -> None:
    sub = peer.subscribe()
    peer.fail(fault, times=1, retry_after="12")
    error = await refusal(provider, push_message(sub.address))
    assert (error.error_class, error.retry_after, error.not_accepted, error.reason) == (
        ErrorClass.TRANSIENT, 12.0, not_accepted, None,
    )  # fmt: skip
    assert error.message == f"push: HTTP {status}: push.test (errno 999)"
    assert await provider.send(push_message(sub.address))


async def test_an_endpoint_on_a_private_network_is_refused_without_a_connection(
    peer: WebPushPeer,
) -> None:
    sub = peer.subscribe()
    strict = make_provider(allow_networks=[])
    https_only = make_provider(allow_http_hosts=[])
    cases = [
        (strict, sub.address,
         "push.test resolves to 127.0.0.1, a loopback address (see allow_networks)"),
        (strict, subscription_address("https://10.1.2.3/push/1", sub.p256dh, sub.auth),
         "10.1.2.3 is a private address (see allow_networks)"),
        (https_only, sub.address, "plain http to push.test: use https or list it in"),
    ]  # fmt: skip
    for adapter, address, why in cases:
        error = await refusal(adapter, push_message(address))
        assert (error.error_class, error.reason, error.not_accepted) == (
            ErrorClass.PERMANENT, Reason.REJECTED, True,
        )  # fmt: skip
        assert error.message.startswith(f"push: subscription endpoint refused: {why}")
    await strict.close()
    await https_only.close()
    assert (peer.requests, peer.connections) == (0, set())


def good_keys() -> Subscription:
    return subscription(1, "https://push.example")


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("a-plain-token", "the address is not a Web Push subscription"),
        ("fcm some-fcm-token", "the address is not a Web Push subscription"),
        (subscription_address("https://push.example/p/1", "", ""),
         "the subscription's keys are not a 65-byte p256dh and a 16-byte auth"),
        (subscription_address("https://push.example/p/1", good_keys().p256dh[:-4],
                              good_keys().auth),
         "the subscription's keys are not a 65-byte p256dh and a 16-byte auth"),
        (subscription_address("https://push.example/p/1", good_keys().p256dh,
                              b64url(b"\x00" * 15)),
         "the subscription's keys are not a 65-byte p256dh and a 16-byte auth"),
        (subscription_address("https://push.example/p/1", b64url(b"\x04" + b"\x00" * 64),
                              good_keys().auth),
         "the subscription's p256dh is not a P-256 public key"),
        (subscription_address("https://push.example/p/1", "not*base64", good_keys().auth),
         "the subscription's keys are not base64url"),
    ],
)  # fmt: skip
async def test_a_subscription_whose_keys_do_not_decode_is_an_invalid_address(
    provider: WebPushProvider, address: str, why: str
) -> None:
    error = await refusal(provider, push_message(address))
    assert (error.error_class, error.reason, error.not_accepted) == (
        ErrorClass.PERMANENT, Reason.INVALID_ADDRESS, True,
    )  # fmt: skip
    assert error.message == f"push: {why}"


async def test_an_unreachable_push_service_was_not_accepted(provider: WebPushProvider) -> None:
    sub = subscription(1, f"http://push.test:{free_port()}")
    closed = await refusal(provider, push_message(sub.address))
    unknown = await refusal(
        provider, push_message(subscription(1, "https://nowhere.example").address)
    )
    assert (closed.error_class, closed.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert closed.message.startswith("push: cannot connect to push.test: ")
    assert (unknown.not_accepted, unknown.message) == (
        True, "push: nowhere.example did not resolve (Name or service not known)",
    )  # fmt: skip


async def test_no_error_or_log_line_holds_an_endpoint_a_key_or_a_jwt(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    await provider.send(push_message(sub.address))
    token = peer.accepted[0].token
    gone = peer.subscribe()
    peer.gone(gone)
    impostor = make_provider(OTHER_RAW, allow_networks=[])
    broken = subscription_address(sub.endpoint, sub.p256dh[:-3], sub.auth)
    with structlog.testing.capture_logs() as logs:
        texts = [(await refusal(provider, push_message(gone.address))).message]
        texts.append((await refusal(impostor, push_message(sub.address))).message)
        texts.append((await refusal(provider, push_message(broken))).message)
        peer.fail(Fault.ERROR, times=1)
        texts.append((await refusal(provider, push_message(sub.address))).message)
        texts.append((await refusal(provider, push_message(sub.address, body="x" * 5000))).message)
    await impostor.close()
    everything = " ".join(texts) + str(logs)
    secrets = [sub.endpoint, "/push/", sub.p256dh, sub.auth, gone.p256dh, token, token[:40],
               VAPID_PEM.splitlines()[1], OTHER_RAW, b64url(raw_public(VAPID_KEY))]  # fmt: skip
    assert [secret for secret in secrets if secret in everything] == []


async def test_connections_are_kept_alive_and_the_standalone_stats_count_decryptions(
    peer: WebPushPeer, provider: WebPushProvider
) -> None:
    sub = peer.subscribe()
    for _ in range(20):
        await provider.send(push_message(sub.address))
    assert len(peer.connections) == 1
    async with httpx.AsyncClient() as client:
        port = peer.origin.rpartition(":")[2]
        stats = (await client.get(f"http://127.0.0.1:{port}/_peer/stats")).json()
    assert stats == {"accepted": 20, "requests": 21, "connections": 2, "decrypted": 20}


async def test_the_peer_refuses_what_a_push_service_refuses(peer: WebPushPeer) -> None:
    sub = peer.subscribe()
    port = peer.origin.rpartition(":")[2]
    url = f"http://127.0.0.1:{port}/push/{sub.number}"
    vapid = make_provider().vapid.authorization(peer.origin)
    good = {"authorization": vapid, "ttl": "60", "content-encoding": "aes128gcm"}
    async with httpx.AsyncClient() as client:
        for changed, status in [
            ({"authorization": ""}, 401),
            ({"authorization": vapid.replace("k=", "k=A")}, 401),
            ({"authorization": make_provider().vapid.authorization("http://elsewhere")}, 401),
            ({"ttl": "-1"}, 400),
            ({"ttl": "1.5"}, 400),
            ({"urgency": "urgent"}, 400),
            ({"topic": "has space"}, 400),
            ({"topic": "x" * 33}, 400),
            ({"content-encoding": "aesgcm"}, 400),
            ({}, 400),  # the body is not an aes128gcm message
        ]:
            answer = await client.post(url, content=b"\x00" * 100, headers={**good, **changed})
            assert answer.status_code == status, (changed, answer.text)
        assert (await client.post(url, content=b"\x00" * 4097, headers=good)).status_code == 413
    assert peer.accepted == []


def test_a_vapid_key_that_is_not_p256_is_named_never_shown() -> None:
    for bad in ("not-a-key", b64url(b"\x01" * 31)):
        with pytest.raises(
            ValueError, match=r"push: vapid_private_key_env \(VAPID_KEY\)"
        ) as refused:
            make_provider(bad)
        assert bad not in str(refused.value)
