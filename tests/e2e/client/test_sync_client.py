"""``Clarion``, the blocking client, against a running ``clarion api`` (its own key prefix and
database, real Redis and PostgreSQL): sending, batches cut at the server's limit, status,
idempotent repeats, campaigns, and errors with the server's detail. Its retries against the
local Clarion of ``tests.peers.clarion``, which fails on demand."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import pytest

from clarion_client import (
    BATCH_LIMIT,
    UPLOAD_LIMIT,
    AuthError,
    BatchItem,
    CampaignSpec,
    Clarion,
    ConflictError,
    ConnectionFailedError,
    InvalidRequestError,
    NotFoundError,
    Notification,
    RateLimitedError,
    Recipient,
    RetryPolicy,
    UnavailableError,
)
from tests.e2e.api_service import API_KEY, running_api
from tests.peers.clarion import AUTH_DETAIL, BATCH, ClarionPeer, accepted
from tests.peers.serving import Fault, serve
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


@pytest.fixture
def clarion(api_url: str) -> Iterator[Clarion]:
    with Clarion(api_url, API_KEY) as client:
        yield client


def test_a_sent_notification_can_be_read_back(clarion: Clarion) -> None:
    accepted = clarion.send(otp(), idempotency_key="login-42-1")
    [delivery] = accepted.deliveries
    assert (delivery.channel, delivery.status) == ("SMS", "QUEUED")
    status = clarion.get_notification(accepted.id)
    assert (status.id, status.type, status.recipient_id) == (accepted.id, "otp", "user-42")
    assert [d.id for d in status.deliveries] == [delivery.id]


def test_sent_later_it_waits_scheduled_until_cancelled_by_id_or_key(clarion: Clarion) -> None:
    send_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    base = otp("user-45")
    later = clarion.send(msgspec.structs.replace(base, send_at=send_at, cancellation_key="o-9"))
    [delivery] = later.deliveries
    assert (delivery.status, delivery.reason, delivery.due_at) == (
        "SCHEDULED", "scheduled", send_at
    )  # fmt: skip
    [shown] = clarion.get_notification(later.id).deliveries
    assert (shown.status, shown.reason, shown.due_at) == ("SCHEDULED", "scheduled", send_at)
    [keyed, by_seconds] = clarion.send_batch([
        msgspec.structs.replace(base, delay="P1DT2H", cancellation_key="o-9"),
        msgspec.structs.replace(base, delay=90.5),
    ])  # fmt: skip
    assert keyed.deliveries is not None
    assert keyed.deliveries[0].due_at is not None
    assert by_seconds.deliveries is not None
    assert by_seconds.deliveries[0].status == "SCHEDULED"

    cancelled = clarion.cancel(later.id)
    assert cancelled.id == later.id
    assert [(d.id, d.channel, d.status) for d in cancelled.deliveries] == [
        (delivery.id, "SMS", "CANCELLED")
    ]
    assert clarion.cancel(later.id) == cancelled  # again: the same answer
    [now_cancelled] = clarion.get_notification(later.id).deliveries
    assert (now_cancelled.status, now_cancelled.due_at) == ("CANCELLED", None)
    assert now_cancelled.reason == "notification cancelled by fuzz"
    by_key = clarion.cancel_by_key("o-9")
    assert (by_key.key, by_key.notifications, by_key.cancelled, by_key.sent) == ("o-9", 2, 2, 0)
    assert keyed.id is not None
    [gone] = clarion.get_notification(keyed.id).deliveries
    assert (gone.status, gone.reason) == ("CANCELLED", "cancelled by key o-9 by fuzz")
    assert clarion.cancel_by_key("no-such-key").notifications == 0
    with pytest.raises(NotFoundError):
        clarion.cancel("0192f0c4-0000-7000-8000-000000000000")
    with pytest.raises(InvalidRequestError, match="delay: years and months"):
        clarion.send(msgspec.structs.replace(base, delay="P1M"))
    with pytest.raises(InvalidRequestError, match="send_at"):
        clarion.send(msgspec.structs.replace(base, send_at=datetime(2030, 1, 1, 12)))


def test_a_recipients_log_is_read_and_its_filters_checked(clarion: Clarion) -> None:
    # This API runs no projector: the log (from the read model) is empty, yet answered.
    page = clarion.recipient_deliveries("user-44", channel="SMS", since=datetime.now(UTC))
    assert (page.recipient_id, page.deliveries, page.next_cursor) == ("user-44", [], None)
    with pytest.raises(InvalidRequestError, match="status: must be one of"):
        clarion.recipient_deliveries("user-44", status="LOST")


def test_a_recipient_token_is_made_and_revoked(clarion: Clarion, api_url: str) -> None:
    made = clarion.create_inbox_token("user-42", ttl_seconds=600)
    assert (made.recipient_id, made.token.startswith("d.")) == ("user-42", True)
    assert 590 <= (made.expires_at - datetime.now(UTC)).total_seconds() <= 600
    inbox = f"{api_url}/v1/inbox"
    app = {"Authorization": f"Bearer {made.token}"}
    assert httpx.get(inbox, headers=app).status_code == 200
    revoked = clarion.revoke_inbox_tokens("user-42")
    assert revoked.recipient_id == "user-42"
    assert revoked.revoked_before <= datetime.now(UTC) + timedelta(seconds=5)
    assert httpx.get(inbox, headers=app).status_code == 401
    later = clarion.create_inbox_token("user-42")
    assert httpx.get(inbox, headers={"Authorization": f"Bearer {later.token}"}).status_code == 200


def test_the_same_key_answers_the_same_notification(clarion: Clarion) -> None:
    first = clarion.send(otp(), idempotency_key="login-42-2")
    assert clarion.send(otp(), idempotency_key="login-42-2") == first
    # Without a key each call is a new notification.
    assert clarion.send(otp()).id != clarion.send(otp()).id


def test_a_batch_larger_than_the_limit_goes_in_parts_and_answers_in_order(api_url: str) -> None:
    batch_requests = []

    def count(request: httpx.Request) -> None:
        if request.url.path == BATCH:
            batch_requests.append(request)

    notifications = [otp(f"user-{i}") for i in range(2 * BATCH_LIMIT + 500)]
    notifications[1234] = otp("user-1234", phone="0151")  # not E.164: this one alone fails
    with httpx.Client(event_hooks={"request": [count]}) as http:
        clarion = Clarion(api_url, API_KEY, http_client=http)
        results = clarion.send_batch(notifications, idempotency_key="campaign-week-49")
        assert len(batch_requests) == 3
        again = clarion.send_batch(notifications, idempotency_key="campaign-week-49")
    assert [r.idempotency_key for r in results] == [f"campaign-week-49:{i}" for i in range(2500)]
    refused = results.pop(1234)
    assert refused.status_code == 422
    assert refused.detail is not None
    assert "recipient.phone" in refused.detail
    assert all(r.accepted for r in results)
    assert len({r.id for r in results}) == 2499
    # The same call again is answered with the same notifications, part by part.
    assert [r.id for r in again if r.accepted] == [r.id for r in results]


def test_batch_items_may_bring_their_own_keys(clarion: Clarion) -> None:
    own = BatchItem(recipient=Recipient(id="u-7", phone="+4915112345678"), type="otp",
                    data={"code": "1"}, idempotency_key="order-7-otp")  # fmt: skip
    [mine, derived] = clarion.send_batch([own, otp("u-8")], idempotency_key="b")
    assert (mine.idempotency_key, derived.idempotency_key) == ("order-7-otp", "b:1")
    assert clarion.send_batch([own])[0].id == mine.id


def test_errors_carry_the_servers_status_and_detail(clarion: Clarion, api_url: str) -> None:
    with pytest.raises(InvalidRequestError) as invalid:
        clarion.send(otp(phone="0151"))
    assert invalid.value.status_code == 422
    assert invalid.value.detail.startswith("recipient.phone: Expected `str` matching regex")
    clarion.send(otp(), idempotency_key="login-42-3")
    with pytest.raises(InvalidRequestError, match="already used for a different notification"):
        clarion.send(otp(phone="+4915100000000"), idempotency_key="login-42-3")
    with pytest.raises(InvalidRequestError, match="'campaign:' is reserved for campaigns"):
        clarion.send(otp(), idempotency_key="campaign:x")
    with pytest.raises(NotFoundError) as unknown:
        clarion.get_notification("0192f0c4-0000-7000-8000-000000000000")
    assert unknown.value.status_code == 404
    with Clarion(api_url, "not-the-key") as stranger, pytest.raises(AuthError) as refused:
        stranger.send(otp())
    assert (refused.value.status_code, refused.value.detail) == (401, AUTH_DETAIL)


def test_a_campaign_from_draft_to_running(api_url: str) -> None:
    sent: list[httpx.Request] = []
    recipients = [f"user-{i}" for i in range(UPLOAD_LIMIT + 2000)]
    spec = CampaignSpec(type="marketing", name="Spring sale", data={"subject": "S", "body": "B"})
    with httpx.Client(event_hooks={"request": [sent.append]}) as http:
        clarion = Clarion(api_url, API_KEY, http_client=http)
        draft = clarion.create_campaign(spec)
        with pytest.raises(ConflictError, match="upload its recipients before starting it"):
            clarion.start_campaign(draft.id)  # a 409 of a campaign is its state: not retried
        assert len(sent) == 2
        uploaded = clarion.upload_recipients(draft.id, recipients, idempotency_key="spring-1")
        assert [r.headers["Idempotency-Key"] for r in sent[2:]] == ["spring-1:0", "spring-1:1"]
        repeated = clarion.upload_recipients(draft.id, recipients, idempotency_key="spring-1")
        started = clarion.start_campaign(draft.id)
        progress = clarion.get_campaign(draft.id)
        with pytest.raises(NotFoundError, match="campaign: no campaign"):
            clarion.get_campaign("no-such-campaign")
    assert (draft.name, draft.state, draft.audience) == ("Spring sale", "draft", 0)
    assert (uploaded.added, uploaded.audience) == (12_000, 12_000)
    assert repeated.audience == 12_000  # the same upload again added nobody
    assert started.state in ("running", "completed")
    assert (progress.id, progress.audience) == (draft.id, 12_000)


@pytest.fixture
def peer() -> ClarionPeer:
    return ClarionPeer("peer-key")


@pytest.fixture
def peer_url(peer: ClarionPeer) -> Iterator[str]:
    with serve(peer) as served:
        yield served.base_url


def test_429_and_503_are_retried_with_the_same_key_after_retry_after(
    peer: ClarionPeer, peer_url: str
) -> None:
    peer.answer_next(429, "over quota", retry_after="1")
    peer.answer_next(503, "the event log (Redis) is unavailable", retry_after="1")
    peer.answer_next(409, "a request with this key is still in flight")  # no Retry-After
    started = time.monotonic()
    with Clarion(peer_url, "peer-key", retry=FAST) as clarion:
        answer = clarion.send(otp(), idempotency_key="k-1")
    assert time.monotonic() - started >= 2  # both Retry-After waits were kept
    assert peer.keys() == ["k-1"] * 4
    assert answer.id == accepted("k-1")["id"]


def test_a_generated_key_is_kept_by_every_retry(peer: ClarionPeer, peer_url: str) -> None:
    peer.answer_next(503, "unavailable", times=2)
    with Clarion(peer_url, "peer-key", retry=FAST) as clarion:
        clarion.send(otp())
    [key] = set(peer.keys())
    assert key is not None
    assert len(peer.seen) == 3


def test_when_attempts_run_out_the_last_error_is_raised(peer: ClarionPeer, peer_url: str) -> None:
    peer.answer_next(429, "over quota", retry_after="0", times=FAST.max_attempts)
    with Clarion(peer_url, "peer-key", retry=FAST) as clarion, pytest.raises(RateLimitedError) as e:
        clarion.send(otp())
    assert (e.value.status_code, e.value.detail, e.value.retry_after_s) == (429, "over quota", 0)
    assert len(peer.seen) == FAST.max_attempts
    peer.answer_next(503, "unavailable", retry_after="60")
    with Clarion(peer_url, "peer-key", retry=FAST) as clarion, pytest.raises(UnavailableError):
        clarion.send(otp())  # a wait past the time budget is not started


def test_a_campaign_is_not_created_again_after_an_answer(peer: ClarionPeer, peer_url: str) -> None:
    peer.answer_next(503, "the event log (Redis) is unavailable", retry_after="0")
    clarion = Clarion(peer_url, "peer-key", retry=FAST)
    with clarion, pytest.raises(UnavailableError, match="unavailable"):
        clarion.create_campaign(CampaignSpec(type="marketing"))
    assert len(peer.seen) == 1  # it may have been made: only the caller can tell


def test_a_lost_answer_is_retried_under_the_same_key_but_not_for_a_campaign(
    peer: ClarionPeer, peer_url: str
) -> None:
    peer.fail(Fault.HANG, times=1)  # the first request is read, and never answered
    with Clarion(peer_url, "peer-key", retry=FAST, timeout_s=2) as clarion:
        clarion.send(otp(), idempotency_key="k-3")
        assert (peer.requests, peer.accepted) == (2, ["k-3"])
        peer.fail(Fault.HANG, times=1)
        with pytest.raises(ConnectionFailedError, match="ReadTimeout"):
            clarion.create_campaign(CampaignSpec(type="marketing"))
    assert peer.requests == 3


def test_other_errors_are_not_retried(peer: ClarionPeer, peer_url: str) -> None:
    peer.answer_next(400, "Idempotency-Key: at most 255 characters")
    with Clarion(peer_url, "peer-key", retry=FAST) as clarion, pytest.raises(InvalidRequestError):
        clarion.send(otp())
    with Clarion(peer_url, "wrong-key", retry=FAST) as clarion, pytest.raises(AuthError):
        clarion.send(otp())
    assert len(peer.seen) == 2


def test_a_refused_connection_is_retried_until_the_server_answers(peer: ClarionPeer) -> None:
    port = free_port()
    later = contextlib.ExitStack()
    attempts = []

    def start_the_server_on_the_second_attempt(request: httpx.Request) -> None:
        attempts.append(request.headers["Idempotency-Key"])
        if len(attempts) == 2:
            later.enter_context(serve(peer, port))

    hooks = {"request": [start_the_server_on_the_second_attempt]}
    with later, httpx.Client(event_hooks=hooks) as http:
        clarion = Clarion(f"http://127.0.0.1:{port}", "peer-key", retry=FAST, http_client=http)
        clarion.send(otp(), idempotency_key="k-2")
    assert attempts == ["k-2", "k-2"]
    assert peer.keys() == ["k-2"]


def test_a_connection_that_never_answers_raises_after_the_attempts(peer: ClarionPeer) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Clarion(url, "peer-key", retry=FAST) as clarion:
        with pytest.raises(ConnectionFailedError, match="ConnectError") as failed:
            clarion.send(otp())
        with pytest.raises(ConnectionFailedError):
            clarion.get_notification("n-1")
    assert failed.value.status_code is None


def test_batch_items_answered_409_or_503_are_sent_again_alone(
    peer: ClarionPeer, peer_url: str
) -> None:
    peer.item_statuses = {"b:1": [409], "b:2": [503, 503]}
    with Clarion(peer_url, "peer-key", retry=FAST) as clarion:
        results = clarion.send_batch([otp(), otp(), otp(), otp()], idempotency_key="b")
    assert [r.status_code for r in results] == [202] * 4
    sent = [[n["idempotency_key"] for n in request_items(r.body)] for r in peer.seen]
    assert sent == [["b:0", "b:1", "b:2", "b:3"], ["b:1", "b:2"], ["b:2"]]


def request_items(body: bytes) -> list[dict[str, str]]:
    return list(json.loads(body)["notifications"])
