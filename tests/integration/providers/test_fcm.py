"""The FCM adapter against the local FCM peer (HTTP/2 over TLS on ``h2``, which reads every
frame the adapter writes), which checks the OAuth grant's JWT signature and every access
token: the message arrives with its notification, data and each platform's options (the TTL
the time left at that attempt), sends share one multiplexed connection per worker (or
``connections``), the token request included when the token endpoint is on the same server
and over a connection of its own when it is not, one token serves many sends and is made
anew before it ends (one request however many sends wait), a 401 refreshes it once, each FCM
error code maps to its class and reason, a failed token request never counts as sent, and no
token appears in an error or a log line."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog

from app.catalog.providers import ProviderLimits
from app.catalog.push import FcmConfig
from app.providers.base import Message, ProviderError, PushContent, Reason
from app.providers.fcm import FcmProvider
from app.providers.http2 import Client
from streams.core.vocabulary import ErrorClass, Priority
from tests.peers.fcm import PROJECT, Fault, FcmPeer
from tests.peers.http2_serving import Served, serve
from tests.servers import free_port, wait_for_port

TOKEN = "dQw4w9WgXcQ:APA91bH" + "x" * 140


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    FcmPeer().ca.cert_pem.write_to_path(str(path))  # every peer of the process has this CA
    return str(path)


@pytest.fixture
def peer() -> Iterator[tuple[FcmPeer, Served]]:
    fcm = FcmPeer()
    with serve(fcm) as served:
        fcm.origin = served.base_url
        yield fcm, served


def make_provider(
    served: Served, account: str, ca_file: str, clock: Any = None, **settings: Any
) -> FcmProvider:
    config = msgspec.convert(
        {"kind": "fcm", "project_id": PROJECT, "service_account_env": "FCM_ACCOUNT",
         "base_url": served.base_url, "ca_file": ca_file, **settings},
        FcmConfig,
    )  # fmt: skip
    extra = {} if clock is None else {"clock": clock}
    return FcmProvider("fcm", config, {"service_account_env": account}, **extra)


@pytest.fixture
async def provider(peer: tuple[FcmPeer, Served], ca_file: str) -> AsyncIterator[FcmProvider]:
    fcm, served = peer
    adapter = make_provider(served, fcm.service_account_json(), ca_file)
    yield adapter
    await adapter.close()


def push(address: str = f"fcm {TOKEN}", ttl_ms: int = 600_000, **content: Any) -> Message:
    return Message(
        delivery_id="0192f0c4-0000-7000-8000-000000000001",
        idempotency_key="k",
        channel="PUSH",
        address=address,
        title="Order A-17 shipped",
        body="It is on its way.",
        attempt=1,
        priority=Priority.HIGH,
        expires_ms=int(time.time() * 1000) + ttl_ms,
        push=PushContent(**content),
    )


async def refusal(provider: FcmProvider, message: Message) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.send(message)
    assert TOKEN not in caught.value.message
    assert "ya29." not in caught.value.message
    return caught.value


async def test_a_message_arrives_with_notification_data_and_platform_options(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    name = await provider.send(
        push(data={"order": "A-17"}, badge=2, sound="default",
             link="https://shop.example/orders/A-17", collapse_key="order-A-17")
    )  # fmt: skip
    [sent] = fcm.accepted
    assert name == sent.name
    assert name.startswith(f"projects/{PROJECT}/messages/")
    message = sent.message
    assert message["token"] == TOKEN
    assert message["notification"] == {"title": "Order A-17 shipped", "body": "It is on its way."}
    assert message["data"] == {"order": "A-17", "link": "https://shop.example/orders/A-17"}
    android = message["android"]
    assert (android["priority"], android["collapse_key"]) == ("HIGH", "order-A-17")
    assert android["ttl"] in {"599s", "600s"}
    assert android["notification"] == {"sound": "default"}
    headers = message["apns"]["headers"]
    assert (headers["apns-priority"], headers["apns-collapse-id"]) == ("10", "order-A-17")
    assert message["apns"]["payload"] == {"aps": {"sound": "default", "badge": 2}}
    assert message["webpush"]["headers"]["Urgency"] == "high"
    assert message["webpush"]["fcm_options"] == {"link": "https://shop.example/orders/A-17"}


async def test_a_plain_token_and_a_normal_priority(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    await provider.send(dataclasses.replace(push(TOKEN), priority=Priority.LOW))
    sent = fcm.accepted[0].message
    assert sent["token"] == TOKEN
    assert (sent["android"]["priority"], sent["apns"]["headers"]["apns-priority"]) == (
        "NORMAL",
        "5",
    )
    assert "data" not in sent


async def test_the_ttl_is_the_time_left_at_each_attempt(
    peer: tuple[FcmPeer, Served], ca_file: str
) -> None:
    fcm, served = peer
    clock = Clock()
    adapter = make_provider(served, fcm.service_account_json(), ca_file, clock)
    message = dataclasses.replace(push(), expires_ms=int(clock.now * 1000) + 600_000)
    try:
        await adapter.send(message)
        clock.now += 7
        await adapter.send(message)
    finally:
        await adapter.close()
    assert [s.message["android"]["ttl"] for s in fcm.accepted] == ["600s", "593s"]
    assert [s.message["webpush"]["headers"]["TTL"] for s in fcm.accepted] == ["600", "593"]


async def test_one_access_token_serves_many_concurrent_sends(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    await asyncio.gather(*(provider.send(push()) for _ in range(200)))
    assert len(fcm.accepted) == 200
    assert fcm.token_requests == 1 == provider.token_requests
    # One connection carried the token request and every send, many of them at once.
    assert fcm.connections == 1
    assert fcm.max_open >= 50


async def test_connections_spreads_sends_over_that_many_connections(
    peer: tuple[FcmPeer, Served], ca_file: str
) -> None:
    fcm, served = peer
    adapter = make_provider(served, fcm.service_account_json(), ca_file, connections=3)
    try:
        await asyncio.gather(*(adapter.send(push()) for _ in range(60)))
    finally:
        await adapter.close()
    assert (len(fcm.accepted), fcm.connections) == (60, 3)


async def test_a_token_endpoint_on_another_server_gets_a_connection_of_its_own(
    ca_file: str,
) -> None:
    fcm = FcmPeer()  # one peer behind two servers: the tokens one issues, the other accepts
    with serve(fcm) as messages, serve(fcm) as tokens:
        fcm.origin = tokens.base_url
        adapter = make_provider(messages, fcm.service_account_json(), ca_file)
        try:
            await asyncio.gather(*(adapter.send(push()) for _ in range(20)))
        finally:
            await adapter.close()
    assert (len(fcm.accepted), fcm.token_requests, fcm.connections) == (20, 1, 2)


async def test_the_token_is_made_anew_before_it_ends(
    peer: tuple[FcmPeer, Served], ca_file: str
) -> None:
    fcm, served = peer
    fcm.token_lifetime = 600
    fcm.leeway = 600  # the adapter's clock moves ahead of the peer's below
    clock = Clock()
    adapter = make_provider(served, fcm.service_account_json(), ca_file, clock)
    try:
        await adapter.send(push())
        clock.now += 500  # 100 s left: more than a tenth of 600, so still used
        await adapter.send(push())
        assert fcm.token_requests == 1
        clock.now += 45  # 55 s left: under a tenth of the lifetime
        await asyncio.gather(*(adapter.send(push()) for _ in range(20)))
    finally:
        await adapter.close()
    assert fcm.token_requests == 2  # one new token for all twenty sends


async def test_a_401_makes_a_new_token_once_and_sends(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    await provider.send(push())
    fcm.revoke_tokens()
    await provider.send(push())
    assert (fcm.token_requests, len(fcm.accepted)) == (2, 2)
    assert fcm.refusals == [(401, "UNAUTHENTICATED")]


async def test_sends_refused_together_by_a_401_share_one_new_token(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    await provider.send(push())
    fcm.revoke_tokens()
    await asyncio.gather(*(provider.send(push()) for _ in range(30)))
    assert (fcm.token_requests, len(fcm.accepted)) == (2, 31)


async def test_a_second_401_is_transient_and_not_accepted(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    fcm.fail_with(401, "THIRD_PARTY_AUTH_ERROR", times=2)
    error = await refusal(provider, push())
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "THIRD_PARTY_AUTH_ERROR" in error.message


@pytest.mark.parametrize(
    ("status", "code", "error_class", "reason", "not_accepted", "wait"),
    [
        (404, "UNREGISTERED", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS, False, None),
        (403, "SENDER_ID_MISMATCH", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS, False, None),
        (400, "INVALID_ARGUMENT", ErrorClass.PERMANENT, Reason.REJECTED, False, None),
        (429, "QUOTA_EXCEEDED", ErrorClass.TRANSIENT, None, True, 30.0),
        (503, "UNAVAILABLE", ErrorClass.TRANSIENT, None, True, 30.0),
        (500, "INTERNAL", ErrorClass.TRANSIENT, None, False, 30.0),
    ],
)
async def test_each_fcm_error_code_has_its_class_and_reason(
    peer: tuple[FcmPeer, Served],
    provider: FcmProvider,
    status: int,
    code: str,
    error_class: ErrorClass,
    reason: Reason | None,
    not_accepted: bool,
    wait: float | None,
) -> None:
    fcm, _ = peer
    fcm.fail_with(status, code, retry_after=None if wait is None else "30")
    error = await refusal(provider, push())
    assert (error.error_class, error.reason, error.not_accepted) == (
        error_class,
        reason,
        not_accepted,
    )
    assert error.retry_after == wait
    assert error.message.startswith(f"fcm: HTTP {status}: {code}")


async def test_an_unregistered_token_is_an_invalid_address(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    fcm.unregister(TOKEN)
    error = await refusal(provider, push())
    assert error.reason is Reason.INVALID_ADDRESS


async def test_a_message_over_4096_bytes_is_refused_before_any_request(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    error = await refusal(provider, push(data={"blob": "x" * 4000}))
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.PAYLOAD_TOO_LARGE)
    assert fcm.requests == 0


async def test_a_service_account_the_endpoint_refuses_is_transient_and_not_accepted(
    peer: tuple[FcmPeer, Served], ca_file: str
) -> None:
    fcm, served = peer
    other = FcmPeer(fcm.origin)  # same token URL, another key: the signature does not verify
    adapter = make_provider(served, other.service_account_json(), ca_file)
    try:
        error = await refusal(adapter, push())
    finally:
        await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "token endpoint refused" in error.message
    assert fcm.accepted == []


async def test_no_token_reaches_a_log_line(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    fcm.unregister(TOKEN)
    with structlog.testing.capture_logs() as logs:
        await refusal(provider, push())
    text = json.dumps(logs)
    assert TOKEN not in text
    assert "ya29." not in text


async def test_a_token_request_without_an_answer_is_not_accepted(
    peer: tuple[FcmPeer, Served], ca_file: str
) -> None:
    fcm, served = peer
    fcm.fail(Fault.HANG, times=1)  # the first request, the token's, gets no answer
    adapter = make_provider(served, fcm.service_account_json(), ca_file, timeout_seconds=0.3)
    try:
        error = await refusal(adapter, push())
        fcm.released.set()
        assert await adapter.send(push())  # the next send makes a token and goes out
    finally:
        await adapter.close()
    # The token request may have reached the endpoint; the message certainly was not sent.
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert error.message == (
        "fcm: no access token (token endpoint: no answer (ReadTimeout)); nothing was sent"
    )
    # Two token requests made, the first held unanswered: the peer granted one.
    assert (adapter.token_requests, fcm.token_requests, len(fcm.accepted)) == (2, 1, 1)


async def test_an_unreachable_token_endpoint_is_not_accepted(
    peer: tuple[FcmPeer, Served], ca_file: str
) -> None:
    fcm, served = peer
    fcm.origin = f"https://127.0.0.1:{free_port()}"  # nobody listens there
    adapter = make_provider(served, fcm.service_account_json(), ca_file)
    try:
        error = await refusal(adapter, push())
    finally:
        await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert error.message.startswith("fcm: no access token (token endpoint: not sent (ConnectError")
    assert fcm.requests == 0


async def test_a_connection_lost_after_the_send_left_may_have_sent(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    await provider.send(push())  # a token is kept: the next request is the send itself
    fcm.fail(Fault.DROP, times=1)
    error = await refusal(provider, push())
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, False)
    assert "it may have sent" in error.message
    assert await provider.send(push())  # a new connection
    assert fcm.connections == 2


async def test_a_server_without_trusted_certificate_is_refused_before_sending(
    peer: tuple[FcmPeer, Served],
) -> None:
    fcm, served = peer
    adapter = make_provider(served, fcm.service_account_json(), "")  # certifi's CAs only
    try:
        error = await refusal(adapter, push())
    finally:
        await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "TLSError" in error.message
    assert fcm.requests == 0


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[Served, str, str]]:
    """``tests.peers.fcm_standalone`` in its own process: address, CA file, account."""
    port = free_port()
    command = [sys.executable, "-m", "tests.peers.fcm_standalone", "--port", str(port),
               "--cert-dir", str(tmp_path)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield Served(port), str(tmp_path / "ca.pem"), (tmp_path / "account.json").read_text()
    finally:
        process.terminate()
        process.wait(10)


async def test_the_standalone_peer_checks_the_same_over_another_http2_server(
    standalone: tuple[Served, str, str],
) -> None:
    served, ca_file, account = standalone
    adapter = make_provider(served, account, ca_file)
    wrong_project = make_provider(served, account, ca_file, project_id="another-project")
    stats = Client("peer", ProviderLimits(), served.base_url, ca_file=ca_file)
    try:
        sent = await asyncio.gather(*(adapter.send(push()) for _ in range(300)))
        error = await refusal(adapter, push(data={"blob": "x" * 4000}))
        refused = await refusal(wrong_project, push())
        answer = json.loads((await stats.request(b"GET", "/_peer/stats", [], b"")).body)
    finally:
        for closing in (adapter, wrong_project, stats):
            await closing.close()
    assert len(set(sent)) == 300
    assert error.reason is Reason.PAYLOAD_TOO_LARGE
    assert refused.message == "fcm: HTTP 403: PERMISSION_DENIED Permission denied on the project"
    assert answer == {
        "accepted": 300, "requests": 2 + 300 + 1 + 1, "connections": 3, "token_requests": 2
    }  # fmt: skip


async def test_a_busy_token_endpoint_is_waited_for_as_it_asks(
    peer: tuple[FcmPeer, Served], provider: FcmProvider
) -> None:
    fcm, _ = peer
    fcm.fail(Fault.UNAVAILABLE, times=1, retry_after="5")  # the token request
    error = await refusal(provider, push())
    assert (error.error_class, error.not_accepted, error.retry_after) == (
        ErrorClass.TRANSIENT, True, 5.0,
    )  # fmt: skip
    assert error.message.startswith(
        "fcm: the token endpoint refused the service account (HTTP 503)"
    )
    assert await provider.send(push())
