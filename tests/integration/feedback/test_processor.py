"""Provider feedback end to end, against real Redis, PostgreSQL, a worker and the projector:
a notification is sent through the sandbox, a signed callback about its message comes in
over the API, and the processor moves its delivery (DELIVERED; FAILED with the bounce's
reason, its address then suppressed, so the next notification is SUPPRESSED hard_bounce); a
complaint suppresses the address for what may be opted out of and an older dead letter's
replay is refused; a callback about a message nobody sent is answered 200 and counted as
unmatched once the window ends; applying the same feedback twice changes nothing (and is
counted as a duplicate skipped); a complaint counts as an unsubscribe from its message's type
and channel, read from a real ``/metrics``."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook

from app.api.app import create_app
from app.catalog import Catalog, parse_catalog
from app.feedback import processor as feedback_processor
from app.feedback.processor import FeedbackProcessor
from app.metrics import FEEDBACK, FEEDBACK_UNMATCHED
from app.settings import Settings
from projections.projector import PROJECTED_STATE_RETENTION_MS, Projector
from streams.core.events import ProviderFeedbackReceived
from streams.core.keys import KeySpace
from streams.feedback.store import FIELD, Feedback, encode
from streams.metrics.recorder import MetricsRecorder, read_counters
from streams.recipients.suppressions import SuppressionStore
from tests.conftest import DIGEST, ORDERS, http_client, stream_events
from tests.integration.api_support import post, sample, scrape
from tests.integration.delivery_support import catalog_text, running_worker, state, wait_until

pytestmark = pytest.mark.timeout(60)

SECRET = "whsec_" + base64.b64encode(b"feedback-secret-for-tests-1234").decode()
ORDER = {
    "recipient": {"id": "u-f", "email": "anna@example.com"},
    "type": "order_confirmed", "channels": ["EMAIL"], "data": {"order_id": "A-1"},
}  # fmt: skip


def feedback_catalog() -> Catalog:
    text = catalog_text(attempts=1).replace(
        'kind = "sandbox"\n', 'kind = "sandbox"\nfeedback_secret_env = "SANDBOX_FEEDBACK"\n', 1
    )
    return parse_catalog(text, "feedback.toml")


@pytest.fixture
async def api(
    real_redis: Redis, settings: Settings, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, redis=real_redis, catalog=feedback_catalog(), db=pool,
                     environ={"SANDBOX_FEEDBACK": SECRET})  # fmt: skip
    async with http_client(app) as client:
        yield client


def callback(message_id: str, feedback: str, webhook_id: str, **extra: str) -> dict[str, Any]:
    body = json.dumps({"message_id": message_id, "feedback": feedback, **extra})
    signature = Webhook(SECRET).sign(webhook_id, datetime.now(UTC), body)
    headers = {"webhook-id": webhook_id, "webhook-timestamp": str(int(time.time())),
               "webhook-signature": signature, "content-type": "application/json"}  # fmt: skip
    return {"content": body.encode(), "headers": headers}


async def sent_message(redis: Redis, keys: KeySpace, delivery_id: str) -> str:
    async def sent() -> bool:
        return (await state(redis, keys, delivery_id)).get("status") == "SENT"

    await wait_until(sent)
    return (await state(redis, keys, delivery_id))["provider_message_id"]


class Running:
    """The projector (letting projected states go after ``projected_state_retention_ms``)
    and the feedback processor, running until the block ends."""

    def __init__(
        self,
        redis: Redis,
        pool: asyncpg.Pool,
        keys: KeySpace,
        *,
        projected_state_retention_ms: int = PROJECTED_STATE_RETENTION_MS,
    ) -> None:
        async def pool_of() -> asyncpg.Pool:
            return pool

        self.metrics = MetricsRecorder(redis, keys)
        self.projector = Projector(
            redis, pool, keys, consumer="p",
            projected_state_retention_ms=projected_state_retention_ms,
        )  # fmt: skip
        self.processor = FeedbackProcessor(
            redis, keys, pool_of, consumer="f", state_retention_ms=60_000, metrics=self.metrics
        )
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Running:
        self.tasks = [asyncio.create_task(self.projector.run()),
                      asyncio.create_task(self.processor.run())]  # fmt: skip
        return self

    async def __aexit__(self, *_: object) -> None:
        self.projector.stop()
        self.processor.stop()
        await asyncio.gather(*self.tasks)


async def status_is(pool: asyncpg.Pool, delivery_id: str, status: str) -> bool:
    row = await pool.fetchrow("SELECT status FROM delivery WHERE id = $1", delivery_id)
    return row is not None and row["status"] == status


async def test_a_receipt_delivers_and_a_bounce_fails_and_suppresses(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    first = (await post(api, ORDER, key="o-1")).json()["deliveries"][0]["id"]
    second = (await post(api, {**ORDER, "recipient": {"id": "u-g", "email": "bert@example.com"}},
                         key="o-2")).json()["deliveries"][0]["id"]  # fmt: skip
    async with (
        running_worker(real_redis, keys, feedback_catalog()),
        Running(real_redis, pool, keys) as running,
    ):
        delivered = await sent_message(real_redis, keys, first)
        bounced = await sent_message(real_redis, keys, second)
        answer = await api.post("/v1/feedback/sandbox", **callback(delivered, "delivered", "w1"))
        assert (answer.status_code, answer.json()) == (200, {"received": 1})
        bounce = callback(bounced, "bounced", "w2", detail="550 5.1.1 no such user",
                          address="bert@example.com", channel="EMAIL")  # fmt: skip
        assert (await api.post("/v1/feedback/sandbox", **bounce)).status_code == 200
        # The same callback again is a replay.
        replay = await api.post("/v1/feedback/sandbox", **bounce)
        assert (replay.status_code, replay.json()["detail"]) == (
            409, "callback: already received (a replay)",
        )  # fmt: skip
        await wait_until(lambda: status_is(pool, first, "DELIVERED"))
        await wait_until(lambda: status_is(pool, second, "FAILED"))
        await running.metrics.flush()

    assert (await state(real_redis, keys, first))["status"] == "DELIVERED"
    failed = await pool.fetchrow("SELECT * FROM delivery WHERE id = $1", second)
    assert (failed["error_class"], failed["reason"]) == ("PERMANENT", "bounced")
    assert failed["last_error"] == "bounced: 550 5.1.1 no such user"
    events = [e for e in await stream_events(real_redis, keys.shard(0).events)
              if isinstance(e, ProviderFeedbackReceived)]  # fmt: skip
    assert [(e.feedback, e.status, e.feedback_id) for e in events] == [
        ("delivered", "DELIVERED", "w1"), ("bounced", "FAILED", "w2"),
    ]  # fmt: skip
    entry = await SuppressionStore(real_redis, keys).get("EMAIL", DIGEST("bert@example.com"))
    assert entry is not None
    assert (entry.reason, entry.source) == ("hard_bounce", "feedback:sandbox")
    again = await post(api, {**ORDER, "recipient": {"id": "u-h", "email": "bert@example.com"}},
                       key="o-3")  # fmt: skip
    assert again.json()["deliveries"][0]["reason"] == "hard_bounce"
    counts = await read_counters(real_redis, keys, [FEEDBACK])
    assert counts[FEEDBACK.name] == {("sandbox", "delivered"): 1, ("sandbox", "bounced"): 1}


async def test_a_callback_about_an_unknown_message_is_taken_and_counted_unmatched(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str, pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(feedback_processor, "MATCH_WINDOW_MS", 300)
    keys = KeySpace(key_prefix)
    taken = await api.post("/v1/feedback/sandbox", **callback("nobody-sent-it", "delivered", "u1"))
    assert taken.status_code == 200
    async with Running(real_redis, pool, keys) as running:

        async def counted() -> bool:
            await running.metrics.flush()
            found = await read_counters(real_redis, keys, [FEEDBACK_UNMATCHED])
            return found[FEEDBACK_UNMATCHED.name] == {("sandbox",): 1}

        await wait_until(counted)
    assert await real_redis.xlen(keys.feedback_inbox) == 0  # dropped once counted


async def test_feedback_for_an_unknown_provider_or_unsigned_is_refused(
    api: httpx.AsyncClient,
) -> None:
    unknown = await api.post("/v1/feedback/nobody", **callback("m", "delivered", "x1"))
    assert (unknown.status_code, unknown.json()["detail"]) == (
        404, "provider: 'nobody' takes no feedback here",
    )  # fmt: skip
    unsigned = await api.post("/v1/feedback/sandbox", content=b"{}")
    assert unsigned.status_code == 401


async def test_a_complaint_suppresses_the_address_and_an_older_dead_letter_stays_unsent(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    failing = {**ORDER, "data": {"order_id": "A-0",
               "sandbox": {"EMAIL": {"fail_permanent": "mailbox busy"}}}}  # fmt: skip
    dead = (await post(api, failing, key="o-0")).json()["deliveries"][0]["id"]
    sent = (await post(api, ORDER, key="o-1")).json()["deliveries"][0]["id"]
    store = SuppressionStore(real_redis, keys)
    async with (
        running_worker(real_redis, keys, feedback_catalog()),
        Running(real_redis, pool, keys),
    ):
        message = await sent_message(real_redis, keys, sent)

        async def dead_lettered() -> bool:
            return (await state(real_redis, keys, dead)).get("status") == "FAILED"

        await wait_until(dead_lettered)
        complaint = callback(message, "complained", "c1", address="anna@example.com",
                             channel="EMAIL")  # fmt: skip
        assert (await api.post("/v1/feedback/sandbox", **complaint)).status_code == 200

        async def suppressed() -> bool:
            return await store.get("EMAIL", DIGEST("anna@example.com")) is not None

        await wait_until(suppressed)
    # The delivery it was about stays as it was: a complaint is no failure.
    assert (await state(real_redis, keys, sent))["status"] == "SENT"
    later = (await post(api, ORDER, key="o-2")).json()["deliveries"][0]
    assert (later["status"], later["reason"]) == ("SUPPRESSED", "complaint")
    body = {"limit": 10, "operator": "anna", "reason": "mailbox fixed"}
    replay = await api.post("/v1/dlq/replay", json=body, headers=ORDERS)
    assert replay.status_code == 200
    [skipped] = replay.json()["skipped"]
    assert (skipped["delivery_id"], skipped["outcome"]) == (dead, "suppressed_complaint")
    assert "suppression list (complaint)" in skipped["detail"]


async def test_a_complaint_counts_as_an_unsubscribe_once_and_its_repeat_as_a_duplicate(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str, pool: asyncpg.Pool
) -> None:
    keys = KeySpace(key_prefix)
    sent = (await post(api, ORDER, key="o-1")).json()["deliveries"][0]["id"]
    async with (
        running_worker(real_redis, keys, feedback_catalog()),
        Running(real_redis, pool, keys) as running,
    ):
        message = await sent_message(real_redis, keys, sent)
        await wait_until(lambda: status_is(pool, sent, "SENT"))  # matched from the read model
        complaint = callback(message, "complained", "c1")
        assert (await api.post("/v1/feedback/sandbox", **complaint)).status_code == 200
        receipt = callback(message, "delivered", "d1")
        assert (await api.post("/v1/feedback/sandbox", **receipt)).status_code == 200
        await wait_until(lambda: status_is(pool, sent, "DELIVERED"))
        # The complaint read again (as after a crash before its acknowledgement): applied
        # already, so skipped.
        again = Feedback(provider="sandbox", feedback_id="c1", message_id=message,
                         kind="complained", received_ms=int(time.time() * 1000))  # fmt: skip
        await running.processor.process([("0-1", {FIELD.encode(): encode(again)})])
        await running.metrics.flush()
        samples = await scrape(api)
    unsubscribes = "clarion_unsubscribes_total"
    complained = {"type": "order_confirmed", "channel": "EMAIL", "source": "feedback"}
    assert sample(samples, unsubscribes, **complained) == 1
    assert sum(v for (name, _), v in samples.items() if name == unsubscribes) == 1  # no receipt
    assert sample(samples, "clarion_duplicates_skipped_total", layer="feedback") == 1
