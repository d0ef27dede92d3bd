"""``AsyncClarion`` against a running ``clarion api`` (its own key prefix and database, real
Redis and PostgreSQL), and its retries against the local Clarion of ``tests.peers.clarion``:
the same behaviour as the blocking client, on asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import msgspec
import pytest

from clarion_client import (
    BATCH_LIMIT,
    AsyncClarion,
    AuthError,
    CampaignSpec,
    Clarion,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    Notification,
    Recipient,
    RetryPolicy,
)
from tests.e2e.api_service import API_KEY, running_api
from tests.peers.clarion import AUTH_DETAIL, BATCH, ClarionPeer, accepted
from tests.peers.serving import serve
from tests.servers import free_port

FAST = RetryPolicy(max_attempts=4, max_elapsed_s=20, base_delay_s=0.01, max_delay_s=0.05)


def otp(recipient: str = "user-42", phone: str = "+4915112345678") -> Notification:
    return Notification(
        recipient=Recipient(id=recipient, phone=phone), type="otp", data={"code": "424242"}
    )


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    with running_api() as url:
        yield url


async def test_send_repeat_and_read_back(api_url: str) -> None:
    async with AsyncClarion(api_url, API_KEY) as clarion:
        first = await clarion.send(otp(), idempotency_key="login-42-1")
        again = await clarion.send(otp(), idempotency_key="login-42-1")
        status = await clarion.get_notification(first.id)
    assert again == first
    assert (status.id, status.type, status.priority) == (first.id, "otp", "HIGH")
    assert [d.channel for d in status.deliveries] == ["SMS"]


async def test_sent_later_then_cancelled_by_id_and_by_key(api_url: str) -> None:
    base = otp("user-46")
    async with AsyncClarion(api_url, API_KEY) as clarion:
        later = await clarion.send(msgspec.structs.replace(base, delay="PT30M"))
        keyed = await clarion.send(
            msgspec.structs.replace(base, delay=600, cancellation_key="async-o-1")
        )
        status = await clarion.get_notification(later.id)
        cancelled = await clarion.cancel(later.id)
        by_key = await clarion.cancel_by_key("async-o-1")
        after = await clarion.get_notification(keyed.id)
    [delivery] = later.deliveries
    assert (delivery.status, delivery.reason) == ("SCHEDULED", "scheduled")
    assert status.deliveries[0].due_at == delivery.due_at
    assert delivery.due_at is not None
    assert 1790 <= (delivery.due_at - datetime.now(UTC)).total_seconds() <= 1800
    assert [d.status for d in cancelled.deliveries] == ["CANCELLED"]
    assert (by_key.notifications, by_key.cancelled, by_key.sending) == (1, 1, 0)
    assert [(d.status, d.due_at) for d in after.deliveries] == [("CANCELLED", None)]


async def test_a_recipient_token_is_made_and_revoked(api_url: str) -> None:
    async with AsyncClarion(api_url, API_KEY) as clarion:
        made = await clarion.create_inbox_token("user-43")
        before = await clarion.revoke_inbox_tokens("user-43")
        later = await clarion.create_inbox_token("user-43")
    assert before.recipient_id == made.recipient_id == "user-43"
    async with httpx.AsyncClient(base_url=api_url) as app:
        for token, status in ((made.token, 401), (later.token, 200)):
            answer = await app.get("/v1/inbox", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == status


async def test_a_batch_past_the_limit_goes_in_parts(api_url: str) -> None:
    batch_requests = []

    async def count(request: httpx.Request) -> None:
        if request.url.path == BATCH:
            batch_requests.append(request)

    notifications = [otp(f"user-{i}") for i in range(BATCH_LIMIT + 1)]
    async with httpx.AsyncClient(event_hooks={"request": [count]}) as http:
        clarion = AsyncClarion(api_url, API_KEY, http_client=http)
        results = await clarion.send_batch(notifications, idempotency_key="week-49")
    assert len(batch_requests) == 2
    assert [r.idempotency_key for r in results] == [f"week-49:{i}" for i in range(1001)]
    assert all(r.accepted for r in results)
    assert len({r.id for r in results}) == 1001


async def test_errors_carry_the_servers_status_and_detail(api_url: str) -> None:
    async with AsyncClarion(api_url, API_KEY) as clarion:
        with pytest.raises(InvalidRequestError) as invalid:
            await clarion.send(otp(phone="0151"))
        with pytest.raises(NotFoundError):
            await clarion.get_notification("not-a-uuid")
    assert invalid.value.status_code == 422
    assert invalid.value.detail.startswith("recipient.phone: Expected `str` matching regex")
    async with AsyncClarion(api_url, "not-the-key") as stranger:
        with pytest.raises(AuthError) as refused:
            await stranger.get_notification("0192f0c4-0000-7000-8000-000000000000")
    assert (refused.value.status_code, refused.value.detail) == (401, AUTH_DETAIL)


async def test_a_campaign_from_draft_to_running(api_url: str) -> None:
    spec = CampaignSpec(type="marketing", data={"subject": "S", "body": "B"}, rate=100)
    async with AsyncClarion(api_url, API_KEY) as clarion:
        draft = await clarion.create_campaign(spec)
        uploaded = await clarion.upload_recipients(draft.id, ["u-1", "u-2", "u-1"])
        started = await clarion.start_campaign(draft.id)
        with pytest.raises(ConflictError, match="cannot start a campaign that is"):
            await clarion.start_campaign(draft.id)
        progress = await clarion.get_campaign(draft.id)
    assert (draft.state, draft.rate_limit) == ("draft", 100)
    assert uploaded.audience == 3
    assert started.state in ("running", "completed")
    assert (progress.id, progress.audience) == (draft.id, 3)


def test_both_clients_offer_the_same_calls() -> None:
    def calls(client: type[object]) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(method)
            for name, method in vars(client).items()
            if callable(method) and not name.startswith("_") and name not in ("close", "aclose")
        }

    assert calls(AsyncClarion) == calls(Clarion)
    assert all(
        inspect.iscoroutinefunction(getattr(AsyncClarion, name)) for name in calls(AsyncClarion)
    )


@pytest.fixture
def peer() -> ClarionPeer:
    return ClarionPeer("peer-key")


async def test_retries_keep_the_key_and_honour_retry_after(peer: ClarionPeer) -> None:
    peer.answer_next(429, "over quota", retry_after="1")
    peer.answer_next(409, "a request with this key is still in flight", retry_after="0")
    with serve(peer) as served:
        started = time.monotonic()
        async with AsyncClarion(served.base_url, "peer-key", retry=FAST) as clarion:
            answer = await clarion.send(otp(), idempotency_key="k-1")
        assert time.monotonic() - started >= 1
    assert peer.keys() == ["k-1"] * 3
    assert answer.id == accepted("k-1")["id"]


async def test_a_conflict_that_outlasts_the_attempts_is_raised(peer: ClarionPeer) -> None:
    peer.answer_next(409, "still in flight", retry_after="0", times=FAST.max_attempts)
    with serve(peer) as served:
        async with AsyncClarion(served.base_url, "peer-key", retry=FAST) as clarion:
            with pytest.raises(ConflictError, match="409: still in flight"):
                await clarion.send(otp())
    assert len(peer.seen) == FAST.max_attempts


async def test_a_refused_connection_is_retried_until_the_server_answers(
    peer: ClarionPeer,
) -> None:
    port = free_port()
    later = contextlib.ExitStack()
    attempts = []

    async def start_the_server_on_the_second_attempt(request: httpx.Request) -> None:
        attempts.append(request.headers["Idempotency-Key"])
        if len(attempts) == 2:
            await asyncio.to_thread(later.enter_context, serve(peer, port))

    hooks = {"request": [start_the_server_on_the_second_attempt]}
    with later:
        async with httpx.AsyncClient(event_hooks=hooks) as http:
            url = f"http://127.0.0.1:{port}"
            clarion = AsyncClarion(url, "peer-key", retry=FAST, http_client=http)
            await clarion.send(otp(), idempotency_key="k-2")
    assert attempts == ["k-2", "k-2"]
    assert peer.keys() == ["k-2"]


async def test_batch_items_answered_409_are_sent_again_alone(peer: ClarionPeer) -> None:
    peer.item_statuses = {"b:0": [409, 409]}
    with serve(peer) as served:
        async with AsyncClarion(served.base_url, "peer-key", retry=FAST) as clarion:
            results = await clarion.send_batch([otp(), otp()], idempotency_key="b")
    assert [r.status_code for r in results] == [202, 202]
    sent = [[n["idempotency_key"] for n in json.loads(r.body)["notifications"]] for r in peer.seen]
    assert sent == [["b:0", "b:1"], ["b:0"], ["b:0"]]
