"""The Web Push adapter against the local push service (tests/peers/webpush.py: HTTP/2 over
TLS on ``h2``, which reads every frame the adapter writes), which checks VAPID as a push
service does and decrypts every message as the browser would, with its own RFC 8291 code: the
plaintext that arrives is the payload builder's JSON, the JWT is verified and reused per
origin, TTL, Urgency and Topic are as the message says at each attempt, each answer is
classified, sends to one push service share one connection and a bounded number of origins
is kept, the SSRF guard keeps the endpoint out of private networks and decides where every
connection goes (TLS checked for the host name), and no endpoint, key or JWT appears in an
error or a log line. ``push.test`` and ``other.test`` resolve to 127.0.0.1 through an
injected resolver that ``allow_networks`` lets through; the peers' certificates name them."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

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
from app.providers import webpush
from app.providers.base import Message, ProviderError, PushContent, Reason
from app.providers.ssrf import Resolver
from app.providers.webpush import WebPushProvider
from app.providers.webpush_message import DEFAULT_TTL_SECONDS, MAX_PLAINTEXT_BYTES, payload
from streams.core.vocabulary import Channel, ErrorClass, Priority
from tests.peers.http2_serving import serve
from tests.peers.webpush import (
    Fault,
    Subscription,
    WebPushPeer,
    b64url,
    raw_public,
    subscription,
)
from tests.servers import free_port

VAPID_KEY = ec.generate_private_key(ec.SECP256R1())
VAPID_PEM = VAPID_KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
OTHER_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RAW = b64url(OTHER_KEY.private_numbers().private_value.to_bytes(32, "big"))
SUBJECT = "mailto:ops@clarion.test"
LINK = "https://shop.example/orders/A-17"
# The names the local push services' certificates are for.
HOSTS = ("push.test", "other.test", "127.0.0.1")
# Every local push service of this process has its certificate from one authority.
CA_PEM = WebPushPeer().ca.cert_pem


async def resolve_locally(host: str, port: int) -> Sequence[str]:
    if host in {"push.test", "other.test", "elsewhere.test"}:
        return ["127.0.0.1"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


class Clock:
    """The adapter's clock, moved by hand; it starts at the real time (the peer checks exp
    against that)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("webpush") / "ca.pem"
    CA_PEM.write_to_path(str(path))
    return str(path)


def make_provider(
    ca_file: str,
    key: str = VAPID_PEM,
    clock: Clock | None = None,
    resolver: Resolver = resolve_locally,
    **overrides: object,
) -> WebPushProvider:
    settings: dict[str, Any] = {
        "kind": "webpush", "vapid_private_key_env": "VAPID_KEY", "subject": SUBJECT,
        "allow_networks": ["127.0.0.0/8"], "ca_file": ca_file,
        "timeout_seconds": 5.0, "connect_timeout_seconds": 2.0, **overrides,
    }  # fmt: skip
    config = msgspec.convert(settings, WebPushConfig)
    return WebPushProvider(
        "push", config, {"vapid_private_key_env": key}, resolver=resolver, clock=clock or Clock()
    )


@contextlib.contextmanager
def push_service(host: str = "push.test", **options: Any) -> Iterator[WebPushPeer]:
    """A local push service reached as ``https://<host>:<port>``."""
    service = WebPushPeer(hosts=HOSTS, **options)
    with serve(service) as running:
        service.origin = f"https://{host}:{running.port}"
        yield service


@pytest.fixture
def peer() -> Iterator[WebPushPeer]:
    with push_service() as service:
        yield service


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def provider(clock: Clock, ca_file: str) -> AsyncIterator[WebPushProvider]:
    adapter = make_provider(ca_file, clock=clock)
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
    assert headers[":authority"] == peer.origin.removeprefix("https://")
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
    with push_service("other.test") as other:
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
    peer: WebPushPeer, ca_file: str
) -> None:
    sub = peer.subscribe()
    peer.application_server_key = raw_public(VAPID_KEY)
    impostor = make_provider(ca_file, OTHER_RAW)
    forbidden = await refusal(impostor, push_message(sub.address))
    await impostor.close()
    stale_clock = Clock()
    stale_clock.now -= 13 * 3600  # its JWT expired an hour ago
    stale = make_provider(ca_file, clock=stale_clock)
    expired = await refusal(stale, push_message(sub.address))
    await stale.close()
    host = peer.origin.removeprefix("https://").partition(":")[0]
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


async def test_an_endpoint_on_a_private_network_or_over_plain_http_is_refused_unconnected(
    peer: WebPushPeer, ca_file: str
) -> None:
    sub = peer.subscribe()
    strict = make_provider(ca_file, allow_networks=[])
    allowing = make_provider(ca_file)
    plain = sub.endpoint.replace("https://", "http://")
    cases = [
        (strict, sub.address,
         "push.test resolves to 127.0.0.1, a loopback address (see allow_networks)"),
        (strict, subscription_address("https://10.1.2.3/push/1", sub.p256dh, sub.auth),
         "10.1.2.3 is a private address (see allow_networks)"),
        (allowing, subscription_address(plain, sub.p256dh, sub.auth),
         "the endpoint is not an https URL (push services use TLS)"),
    ]  # fmt: skip
    for adapter, address, why in cases:
        error = await refusal(adapter, push_message(address))
        assert (error.error_class, error.reason, error.not_accepted) == (
            ErrorClass.PERMANENT, Reason.REJECTED, True,
        )  # fmt: skip
        assert error.message == f"push: subscription endpoint refused: {why}"
    await strict.close()
    await allowing.close()
    assert (peer.requests, peer.connections) == (0, 0)


class ChangingDns:
    """A resolver whose answer for a name changes after the first lookup (DNS rebinding)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def test_a_connection_goes_only_where_the_guard_checked_and_each_new_one_is_checked(
    peer: WebPushPeer, ca_file: str
) -> None:
    # push.test resolves nowhere but through the guard: a send that reaches the push service
    # was connected to the address the guard checked, with no lookup of its own.
    dns = ChangingDns(["127.0.0.1"], ["10.0.0.1"])
    adapter = make_provider(ca_file, resolver=dns)
    sub = peer.subscribe()
    for _ in range(3):
        await adapter.send(push_message(sub.address))
    await adapter.close()  # the next send needs a new connection, so a new lookup
    error = await refusal(adapter, push_message(sub.address))
    await adapter.close()
    assert (error.reason, error.not_accepted, error.message) == (
        Reason.REJECTED, True, "push: subscription endpoint refused: push.test resolves to "
        "10.0.0.1, a private address (see allow_networks)",
    )  # fmt: skip
    assert (dns.asked, peer.connections, len(peer.accepted)) == (["push.test"] * 2, 1, 3)
    assert peer.server_names == ["push.test"]  # SNI: the host name, not the address


async def test_tls_is_checked_for_the_endpoint_s_host_name_and_against_ca_file(
    peer: WebPushPeer, ca_file: str
) -> None:
    # elsewhere.test reaches the same server, whose certificate does not name it.
    sub = peer.subscribe()
    port = peer.origin.rpartition(":")[2]
    elsewhere = subscription_address(f"https://elsewhere.test:{port}/push/1", sub.p256dh, sub.auth)
    adapter, untrusting = make_provider(ca_file), make_provider("")  # certifi's CAs
    mismatch = await refusal(adapter, push_message(elsewhere))
    unknown_ca = await refusal(untrusting, push_message(sub.address))
    await adapter.close()
    await untrusting.close()
    for error in (mismatch, unknown_ca):
        assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert mismatch.message.startswith("push: TLS with elsewhere.test refused: Hostname mismatch")
    assert unknown_ca.message.startswith("push: TLS with push.test refused: ")
    assert "certificate" in unknown_ca.message
    assert peer.requests == 0


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
    sub = subscription(1, f"https://push.test:{free_port()}")
    closed = await refusal(provider, push_message(sub.address))
    unknown = await refusal(
        provider, push_message(subscription(1, "https://nowhere.example").address)
    )
    assert (closed.error_class, closed.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert closed.message == "push: cannot connect to push.test: Connection refused"
    assert (unknown.not_accepted, unknown.message) == (
        True, "push: nowhere.example did not resolve (Name or service not known)",
    )  # fmt: skip


async def test_no_error_or_log_line_holds_an_endpoint_a_key_or_a_jwt(
    peer: WebPushPeer, provider: WebPushProvider, ca_file: str
) -> None:
    sub = peer.subscribe()
    await provider.send(push_message(sub.address))
    token = peer.accepted[0].token
    gone = peer.subscribe()
    peer.gone(gone)
    impostor = make_provider(ca_file, OTHER_RAW, allow_networks=[])
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


async def test_sends_to_one_push_service_share_one_connection_many_at_once(
    peer: WebPushPeer, provider: WebPushProvider, ca_file: str
) -> None:
    subs = [peer.subscribe() for _ in range(5)]
    peer.delay = 0.05  # each answer waits: the sends are open at once
    await asyncio.gather(*(provider.send(push_message(s.address)) for s in subs * 20))
    await provider.send(push_message(subs[0].address))
    assert (len(peer.accepted), peer.connections) == (101, 1)
    assert peer.max_open == 100  # as concurrent streams
    port = peer.origin.rpartition(":")[2]
    async with httpx.AsyncClient(
        http2=True, verify=ssl.create_default_context(cafile=ca_file)
    ) as client:
        stats = (await client.get(f"https://127.0.0.1:{port}/_peer/stats")).json()
    assert stats == {"accepted": 101, "requests": 102, "connections": 2, "decrypted": 101}


async def test_an_origin_in_use_is_kept_and_past_the_bound_an_idle_one_is_closed(
    peer: WebPushPeer, provider: WebPushProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webpush, "MAX_ORIGINS", 1)
    peer.delay = 0.3  # the first send is still in flight while the other origin is used
    first = asyncio.ensure_future(provider.send(push_message(peer.subscribe().address)))
    with push_service("other.test") as other:
        await asyncio.sleep(0.1)
        await provider.send(push_message(other.subscribe().address))
        await first  # not failed by the other origin taking its place
        peer.delay = 0.0
        await provider.send(push_message(other.subscribe().address))
        # push.test's connection was closed once its send was done: a new one now.
        await provider.send(push_message(peer.subscribe().address))
        await provider.send(push_message(other.subscribe().address))
    assert (len(peer.accepted), len(other.accepted)) == (2, 3)
    assert (peer.connections, other.connections) == (2, 2)


async def test_no_answer_in_time_or_a_broken_connection_may_have_sent(
    peer: WebPushPeer, ca_file: str
) -> None:
    adapter = make_provider(ca_file, timeout_seconds=0.3)
    sub = peer.subscribe()
    peer.fail(Fault.HANG, times=1)
    late = await refusal(adapter, push_message(sub.address))
    peer.fail(Fault.DROP, times=1)
    dropped = await refusal(adapter, push_message(sub.address))
    await adapter.send(push_message(sub.address))
    await adapter.close()
    assert (late.error_class, late.not_accepted, late.message) == (
        ErrorClass.TRANSIENT, False, "push: push.test did not answer in time",
    )  # fmt: skip
    assert (dropped.error_class, dropped.not_accepted, dropped.message) == (
        ErrorClass.TRANSIENT, False, "push: connection to push.test broke (ConnectionLost)",
    )  # fmt: skip
    assert len(peer.accepted) == 1


async def test_the_peer_refuses_what_a_push_service_refuses(
    peer: WebPushPeer, ca_file: str
) -> None:
    sub = peer.subscribe()
    port = peer.origin.rpartition(":")[2]
    url = f"https://127.0.0.1:{port}/push/{sub.number}"
    vapid = make_provider(ca_file).vapid.authorization(peer.origin)
    elsewhere = make_provider(ca_file).vapid.authorization("https://elsewhere")
    good = {"authorization": vapid, "ttl": "60", "content-encoding": "aes128gcm"}
    async with httpx.AsyncClient(
        http2=True, verify=ssl.create_default_context(cafile=ca_file)
    ) as client:
        for changed, status in [
            ({"authorization": ""}, 401),
            ({"authorization": vapid.replace("k=", "k=A")}, 401),
            ({"authorization": elsewhere}, 401),
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
            make_provider("", bad)
        assert bad not in str(refused.value)
