"""GET /v1/notifications/{id} and GET /v1/deliveries against real Redis and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest
from litestar import Litestar
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.settings import Settings
from projections.projector import Projector
from projections.queries import projection_lag_ms
from projections.rows import apply, rows_of
from streams.core.consumer_groups import PROJECTOR_GROUP
from streams.core.ids import new_id
from streams.core.keys import KeySpace
from tests.conftest import AUTH, ORDERS, VIEWER, http_client
from tests.integration.api_support import OTP, accept, deliveries, status_of
from tests.integration.delivery_support import fast_catalog, running_worker, wait_until
from tests.integration.projection_support import entries, steps_and_a_fallback

Client = httpx.AsyncClient
TERMINAL = {"SENT", "FAILED", "EXPIRED", "SUPPRESSED"}

# EMAIL and IN_APP are queued; PUSH is suppressed at once (no push token).
ORDER = {
    "recipient": {"id": "user-2", "email": "anna@example.com"},
    "type": "order_confirmed",
    "data": {"order_id": "A-17"},
}


def with_data(body: dict[str, Any], **data: Any) -> dict[str, Any]:
    return {**body, "data": {**body["data"], **data}}


@pytest.fixture
def fast() -> Catalog:
    return fast_catalog()


@pytest.fixture
def keys(key_prefix: str) -> KeySpace:
    return KeySpace(key_prefix)


@pytest.fixture
def app(settings: Settings, real_redis: Redis, fast: Catalog, pool: asyncpg.Pool) -> Litestar:
    return create_app(settings, redis=real_redis, catalog=fast, db=pool)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    async with http_client(app) as test_client:
        yield test_client


@asynccontextmanager
async def running_projector(
    redis: Redis, pool: asyncpg.Pool, keys: KeySpace
) -> AsyncIterator[Projector]:
    projector = Projector(redis, pool, keys, consumer="test-projector")
    task = asyncio.create_task(projector.run())
    try:
        yield projector
    finally:
        projector.stop()
        await asyncio.wait_for(task, 20)


async def drained(redis: Redis, keys: KeySpace) -> bool:
    """Every events entry was read by the projector and acknowledged (so committed)."""
    stream = keys.shard(0).events
    groups = [g for g in await redis.xinfo_groups(stream) if g["name"] == PROJECTOR_GROUP.encode()]
    if not groups or (await redis.xpending(stream, PROJECTOR_GROUP))["pending"]:
        return False
    last = groups[0]["last-delivered-id"].decode()
    return not await redis.xrange(stream, f"({last}", "+", count=1)


async def delivery_state(redis: Redis, keys: KeySpace, delivery_id: str) -> dict[str, str]:
    raw = await redis.hgetall(keys.shard(0).delivery(delivery_id))  # type: ignore[misc]
    return {k.decode(): v.decode() for k, v in raw.items()}


async def settle(
    redis: Redis, keys: KeySpace, pool: asyncpg.Pool, catalog: Catalog, *accepted: dict[str, Any]
) -> None:
    """Run a worker and the projector until every delivery ended and all is projected."""
    waiting = [d["id"] for a in accepted for d in a["deliveries"] if d["status"] not in TERMINAL]
    async with running_projector(redis, pool, keys):
        async with running_worker(redis, keys, catalog):

            async def ended() -> bool:
                for delivery_id in waiting:
                    state = await delivery_state(redis, keys, delivery_id)
                    if state.get("status") not in TERMINAL:
                        return False
                return True

            await wait_until(ended, within=20)
        await wait_until(lambda: drained(redis, keys), within=20)


async def count(pool: asyncpg.Pool, table: str) -> int:
    async with pool.acquire() as connection:
        return int(await connection.fetchval(f"SELECT count(*) FROM {table}"))


def ids_of(answer: dict[str, Any]) -> list[str]:
    return [delivery["id"] for delivery in answer["deliveries"]]


async def test_right_after_acceptance_the_write_model_answers(
    client: Client, pool: asyncpg.Pool
) -> None:
    accepted = await accept(client, ORDER, "k1")
    response = await status_of(client, accepted["id"])
    assert response.status_code == 200, response.text
    assert await count(pool, "notification") == 0  # nothing projected: this came from Redis
    body = response.json()
    assert body["id"] == accepted["id"]
    assert body["type"] == "order_confirmed"
    assert body["priority"] == "NORMAL"
    assert body["recipient_id"] == "user-2"
    assert datetime.fromisoformat(body["created_at"]).tzinfo is not None
    assert [(d["id"], d["channel"], d["status"]) for d in body["deliveries"]] == [
        (d["id"], d["channel"], d["status"]) for d in accepted["deliveries"]
    ]
    assert [d["status"] for d in body["deliveries"]] == ["QUEUED", "SUPPRESSED", "QUEUED"]
    for delivery in body["deliveries"]:
        assert delivery["attempts"] == 0
        assert delivery["error_class"] is None
        assert delivery["last_error"] is None
        assert delivery["provider_message_id"] is None
        assert delivery["updated_at"] == body["created_at"]
    assert isinstance(body["projection_lag_ms"], int)


async def test_after_projection_the_read_model_answers_and_agrees_with_the_write_model(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool, fast: Catalog
) -> None:
    retried = await accept(client, with_data(OTP, sandbox={"SMS": {"fail_transient": 1}}), "k1")
    order = await accept(client, ORDER, "k2")
    await settle(real_redis, keys, pool, fast, retried, order)

    answers = {}
    for accepted in (retried, order):
        response = await status_of(client, accepted["id"])
        assert response.status_code == 200, response.text
        body = answers[accepted["id"]] = response.json()
        assert ids_of(body) == ids_of(accepted)  # in the order of acceptance
        assert body["projection_lag_ms"] == 0
        for delivery in body["deliveries"]:
            state = await delivery_state(real_redis, keys, delivery["id"])
            if not state:  # ended at acceptance: no worker touched it
                assert delivery["status"] == "SUPPRESSED"
                continue
            assert delivery["status"] == state["status"]
            assert delivery["attempts"] == int(state["attempts"])
            assert delivery["provider_message_id"] == state.get("provider_message_id")
    sms = answers[retried["id"]]["deliveries"][0]
    assert (sms["status"], sms["attempts"], sms["error_class"]) == ("SENT", 2, "TRANSIENT")
    assert sms["provider_message_id"]
    email = answers[order["id"]]["deliveries"][0]
    assert (email["channel"], email["status"], email["attempts"]) == ("EMAIL", "SENT", 1)

    # With the write model gone, the same answers still come: from PostgreSQL.
    shard = keys.shard(0)
    for accepted in (retried, order):
        await real_redis.delete(
            shard.notification(accepted["id"]), *[shard.delivery(i) for i in ids_of(accepted)]
        )
        response = await status_of(client, accepted["id"])
        assert response.status_code == 200
        assert response.json() == answers[accepted["id"]]


async def test_a_suppressed_deliverys_reason_is_in_both_models_answers(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool, fast: Catalog
) -> None:
    order = await accept(client, ORDER, "k1")  # no push token: PUSH is suppressed at once
    push = order["deliveries"][1]
    assert (push["channel"], push["status"], push["reason"]) == ("PUSH", "SUPPRESSED", "no_address")

    def reasons(body: dict[str, Any]) -> list[tuple[str, str | None]]:
        return [(d["status"], d["reason"]) for d in body["deliveries"]]

    from_redis = (await status_of(client, order["id"])).json()
    assert reasons(from_redis) == [("QUEUED", None), ("SUPPRESSED", "no_address"), ("QUEUED", None)]

    await settle(real_redis, keys, pool, fast, order)
    shard = keys.shard(0)
    await real_redis.delete(
        shard.notification(order["id"]), *[shard.delivery(i) for i in ids_of(order)]
    )
    from_postgresql = (await status_of(client, order["id"])).json()
    assert reasons(from_postgresql) == [
        ("SENT", None),
        ("SUPPRESSED", "no_address"),
        ("SENT", None),
    ]
    listed = (await deliveries(client, "?status=SUPPRESSED")).json()["deliveries"]
    assert [(d["id"], d["reason"]) for d in listed] == [(push["id"], "no_address")]


async def test_another_producers_unknown_and_malformed_ids_are_404(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    accepted = await accept(client, OTP, "k1")
    unknown = "01a22000-0000-7000-8000-000000000000"
    # Before projection (answered from Redis) and after (from PostgreSQL).
    for phase in ("write model", "read model"):
        if phase == "read model":
            async with running_projector(real_redis, pool, keys):
                await wait_until(lambda: drained(real_redis, keys))
            assert await count(pool, "notification") == 1
        for notification_id, headers in [
            (accepted["id"], VIEWER),  # a producer with the read scope, not the owner
            (unknown, ORDERS),
            ("not-a-uuid", ORDERS),
            (accepted["id"][:-1], ORDERS),
        ]:
            response = await status_of(client, notification_id, headers)
            assert response.status_code == 404, (phase, notification_id)
            assert response.json()["detail"] == "notification not found"
        assert (await status_of(client, accepted["id"])).status_code == 200
        assert (await status_of(client, accepted["id"].upper())).json()["id"] == accepted["id"]


async def test_status_failed_lists_exactly_the_failed_deliveries(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool, fast: Catalog
) -> None:
    failing = await accept(client, with_data(OTP, sandbox={"SMS": {"fail_permanent": "x"}}), "k1")
    fine = await accept(client, OTP, "k2")
    order = await accept(client, ORDER, "k3")
    await settle(real_redis, keys, pool, fast, failing, fine, order)

    response = await deliveries(client, "?status=FAILED")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["next_cursor"] is None
    assert body["projection_lag_ms"] == 0
    [failed] = body["deliveries"]
    assert failed["id"] == failing["deliveries"][0]["id"]
    assert failed["notification_id"] == failing["id"]
    assert (failed["status"], failed["channel"], failed["type"]) == ("FAILED", "SMS", "otp")
    assert failed["producer"] == "orders"
    assert failed["error_class"] == "PERMANENT"
    assert failed["last_error"] == "x"
    assert failed["attempts"] == 1
    state = await delivery_state(real_redis, keys, failed["id"])
    assert (state["status"], state["last_error"]) == ("FAILED", "x")

    by_class = (await deliveries(client, "?error_class=PERMANENT")).json()["deliveries"]
    assert [d["id"] for d in by_class] == [failed["id"]]
    sent = (await deliveries(client, "?status=SENT")).json()["deliveries"]
    assert sorted(d["id"] for d in sent) == sorted(
        ids_of(fine) + [d["id"] for d in order["deliveries"] if d["status"] == "QUEUED"]
    )
    # Another producer sees none of them.
    other = await deliveries(client, "?status=FAILED", headers=VIEWER)
    assert other.status_code == 200
    assert other.json()["deliveries"] == []


@pytest.fixture
async def five(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> dict[str, list[str]]:
    """Five projected deliveries (all as accepted): an order's three and two OTPs."""
    order = await accept(client, ORDER, "k1")
    otps = [await accept(client, OTP, f"k{n}") for n in (2, 3)]
    async with running_projector(real_redis, pool, keys):
        await wait_until(lambda: drained(real_redis, keys))
    assert await count(pool, "delivery") == 5
    return {
        "order": ids_of(order),
        "otp": [i for accepted in otps for i in ids_of(accepted)],
        "email": [ids_of(order)[0]],
    }


async def test_pagination_walks_every_delivery_once_newest_first(
    client: Client, pool: asyncpg.Pool, five: dict[str, list[str]]
) -> None:
    async with pool.acquire() as connection:
        expected = [
            str(row["id"])
            for row in await connection.fetch(
                "SELECT id FROM delivery ORDER BY updated_at DESC, id DESC"
            )
        ]
    seen: list[dict[str, Any]] = []
    cursors: list[str | None] = []
    query = "?limit=2"
    while True:
        response = await deliveries(client, query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["deliveries"]) <= 2
        seen += page["deliveries"]
        cursors.append(page["next_cursor"])
        if page["next_cursor"] is None:
            break
        query = f"?limit=2&cursor={page['next_cursor']}"
    assert [d["id"] for d in seen] == expected
    assert sorted(expected) == sorted(five["order"] + five["otp"])
    assert [c is not None for c in cursors] == [True, True, False]
    keyset = [(d["updated_at"], d["id"]) for d in seen]
    assert keyset == sorted(keyset, reverse=True)
    # A page that ends exactly at the last row says so.
    whole = (await deliveries(client, "?limit=5")).json()
    assert len(whole["deliveries"]) == 5
    assert whole["next_cursor"] is None
    assert len((await deliveries(client)).json()["deliveries"]) == 5  # default limit 50


async def test_filters_by_channel_type_and_time(client: Client, five: dict[str, list[str]]) -> None:
    async def ids(query: str) -> list[str]:
        response = await deliveries(client, query)
        assert response.status_code == 200, response.text
        return sorted(d["id"] for d in response.json()["deliveries"])

    assert await ids("?channel=SMS") == sorted(five["otp"])
    assert await ids("?type=order_confirmed") == sorted(five["order"])
    assert await ids("?type=order_confirmed&channel=EMAIL") == five["email"]
    assert await ids("?type=otp&channel=EMAIL") == []
    assert await ids("?status=SUPPRESSED&type=order_confirmed") == [five["order"][1]]
    assert await ids("?type=marketing") == []
    everything = sorted(five["order"] + five["otp"])
    assert await ids("?since=2000-01-01T00:00:00Z") == everything
    assert await ids("?since=2000-01-01T00:00:00%2B00:00") == everything
    assert await ids("?since=2000-01-01T00:00:00+00:00") == everything  # '+' read as a space
    assert await ids("?since=2999-01-01") == []
    assert await ids("?until=2000-01-01T00:00:00Z") == []
    assert await ids("?since=2000-01-01&until=2999-01-01") == everything


def _cursor_of(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        (
            "status=BOGUS",
            "status: must be one of QUEUED, SCHEDULED, SENDING, SENT, FAILED, EXPIRED, "
            "SUPPRESSED, DELIVERED",
        ),
        ("status=failed", "status: must be one of"),
        ("channel=FAX", "channel: must be one of PUSH, EMAIL, SMS, IN_APP"),
        ("error_class=OOPS", "error_class: must be one of TRANSIENT, PERMANENT, POISON, BUG"),
        ("type=" + "t" * 65, "type: 1-64 printable characters are required"),
        ("type=", "type: 1-64 printable characters are required"),
        ("since=yesterday", "since: must be an ISO 8601 time"),
        ("until=2026-13-01", "until: must be an ISO 8601 time"),
        ("limit=0", "limit: must be an integer from 1 to 500"),
        ("limit=501", "limit: must be an integer from 1 to 500"),
        ("limit=ten", "limit: must be an integer from 1 to 500"),
        ("limit=-1", "limit: must be an integer from 1 to 500"),
        ("cursor=not-a-cursor", "cursor: invalid"),
        ("cursor=" + _cursor_of({"t": 1}), "cursor: invalid"),
        ("cursor=" + _cursor_of([1, "not-a-uuid"]), "cursor: invalid"),
        ("cursor=" + _cursor_of([10**20, "01a22000-0000-7000-8000-000000000000"]), "cursor: "),
    ],
)
async def test_invalid_parameters_are_422_naming_them(
    client: Client, query: str, detail: str
) -> None:
    response = await deliveries(client, f"?{query}")
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(detail)


async def test_without_the_read_scope_403_and_without_a_key_401(client: Client) -> None:
    accepted = await accept(client, OTP, "k1")
    for headers, code in ((AUTH, 403), ({}, 401)):
        assert (await status_of(client, accepted["id"], headers)).status_code == code
        assert (await deliveries(client, "", headers)).status_code == code
        assert (await deliveries(client, "?status=BOGUS", headers)).status_code == code


async def test_projection_lag_is_reported_until_the_projector_drained(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    assert await projection_lag_ms(real_redis, keys) == 0  # no stream yet
    accepted = await accept(client, OTP, "k1")
    await asyncio.sleep(0.05)
    # No projector has ever run (no group): the first entry is waiting.
    lag = (await status_of(client, accepted["id"])).json()["projection_lag_ms"]
    assert lag >= 50
    assert (await deliveries(client)).json()["projection_lag_ms"] >= lag

    async with running_projector(real_redis, pool, keys):
        await wait_until(lambda: drained(real_redis, keys))
    assert (await status_of(client, accepted["id"])).json()["projection_lag_ms"] == 0
    assert (await deliveries(client)).json()["projection_lag_ms"] == 0

    # An entry read but not acknowledged (a projector busy with it, or dead) counts too.
    await accept(client, OTP, "k2")
    stream = keys.shard(0).events
    await real_redis.xreadgroup(PROJECTOR_GROUP, "slow-projector", {stream: ">"}, count=10)
    await asyncio.sleep(0.05)
    assert await projection_lag_ms(real_redis, keys) >= 50
    pending = await real_redis.xpending_range(stream, PROJECTOR_GROUP, "-", "+", 10)
    await real_redis.xack(stream, PROJECTOR_GROUP, *[entry["message_id"] for entry in pending])
    assert await projection_lag_ms(real_redis, keys) == 0


async def test_the_openapi_schema_documents_both_endpoints(client: Client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    single = schema["paths"]["/v1/notifications/{notification_id}"]["get"]
    assert [(p["name"], p["in"]) for p in single["parameters"]] == [("notification_id", "path")]
    listing = schema["paths"]["/v1/deliveries"]["get"]
    parameters = {p["name"]: p for p in listing["parameters"]}
    assert set(parameters) == {
        "status", "channel", "type", "error_class", "since", "until", "limit", "cursor",
    }  # fmt: skip
    assert all(p["in"] == "query" and not p["required"] for p in parameters.values())
    assert {"FAILED", "CANCELLED", "SKIPPED"} <= set(parameters["status"]["schema"]["enum"])
    assert parameters["limit"]["schema"]["maximum"] == 500
    assert {"200", "404"} <= set(single["responses"])
    assert {"200", "422", "503"} <= set(listing["responses"])
    view = schema["components"]["schemas"]["DeliveryView"]
    assert "SKIPPED" in json.dumps(schema["components"]["schemas"])
    assert view["properties"]["step"]["type"] == "integer"
    assert {"step", "fallback_of"}.isdisjoint(view.get("required", []))


async def project_all(redis: Redis, pool: asyncpg.Pool, keys: KeySpace) -> None:
    """Run the projector (no worker) until it read every event."""
    async with running_projector(redis, pool, keys):
        await wait_until(lambda: drained(redis, keys), within=20)


async def test_a_scheduled_deliverys_due_time_is_shown_from_both_models(
    client: Client, real_redis: Redis, keys: KeySpace, pool: asyncpg.Pool
) -> None:
    later = await accept(client, {**ORDER, "delay": "PT2H"}, "k1")
    due_ms = {d["id"]: d["due_ms"] for d in later["deliveries"] if d["status"] == "SCHEDULED"}
    assert len(due_ms) == 2  # EMAIL and IN_APP; PUSH is suppressed at once
    due = {i: datetime.fromtimestamp(ms / 1000, UTC) for i, ms in due_ms.items()}
    now = await accept(client, ORDER, "k2")

    def shown(body: dict[str, Any]) -> list[tuple[str, str | None, datetime | None]]:
        return [
            (d["status"], d["reason"], d["due_at"] and datetime.fromisoformat(d["due_at"]))
            for d in body["deliveries"]
        ]

    expected = [
        ("SCHEDULED", "scheduled", due[ids_of(later)[0]]),
        ("SUPPRESSED", "no_address", None),
        ("SCHEDULED", "scheduled", due[ids_of(later)[2]]),
    ]
    from_redis = (await status_of(client, later["id"])).json()
    assert await count(pool, "notification") == 0  # nothing projected: this came from Redis
    assert shown(from_redis) == expected
    assert [d["due_at"] for d in (await status_of(client, now["id"])).json()["deliveries"]] == [
        None, None, None,
    ]  # fmt: skip

    await project_all(real_redis, pool, keys)
    shard = keys.shard(0)
    await real_redis.delete(shard.notification(later["id"]))
    from_postgresql = (await status_of(client, later["id"])).json()
    assert from_postgresql["projection_lag_ms"] == 0
    assert shown(from_postgresql) == expected

    listed = (await deliveries(client, "?status=SCHEDULED")).json()["deliveries"]
    assert {(d["id"], datetime.fromisoformat(d["due_at"])) for d in listed} == set(due.items())
    queued = (await deliveries(client, "?status=QUEUED")).json()["deliveries"]
    assert {d["due_at"] for d in queued} == {None}


async def test_the_write_model_shows_a_states_due_time_only_while_it_is_scheduled(
    client: Client, real_redis: Redis, keys: KeySpace
) -> None:
    accepted = await accept(client, ORDER, "k1")
    email, _, in_app = ids_of(accepted)
    retry_ms = 1_900_000_000_000
    shard = keys.shard(0)
    # As a worker leaves them: a retry waiting in SCHEDULED, and one sent since (its hash
    # keeps the due_ms of the retry before).
    await real_redis.hset(  # type: ignore[misc]
        shard.delivery(email),
        mapping={"status": "SCHEDULED", "version": 3, "attempts": 1, "due_ms": retry_ms},
    )
    await real_redis.hset(  # type: ignore[misc]
        shard.delivery(in_app),
        mapping={"status": "SENT", "version": 5, "attempts": 2, "due_ms": retry_ms},
    )
    body = (await status_of(client, accepted["id"])).json()
    retry_at = datetime.fromtimestamp(retry_ms / 1000, UTC)
    assert [
        (d["status"], d["due_at"] and datetime.fromisoformat(d["due_at"]))
        for d in body["deliveries"]
    ] == [("SCHEDULED", retry_at), ("SUPPRESSED", None), ("SENT", None)]


async def test_a_step_a_fallback_and_a_skipped_step_show_what_they_are(
    client: Client, pool: asyncpg.Pool
) -> None:
    nid, first, step, fallback = (new_id(0) for _ in range(4))
    story = steps_and_a_fallback(nid, first, step, fallback, producer="orders")
    await apply(pool, "s0", rows_of(0, entries(story)))
    answer = await status_of(client, nid)
    assert answer.status_code == 200, answer.text
    shown = [
        (d["id"], d["channel"], d["status"], d["reason"], d["step"], d["fallback_of"])
        for d in answer.json()["deliveries"]
    ]
    assert shown == [
        (first, "EMAIL", "FAILED", None, 0, None),
        (step, "SMS", "SKIPPED", "read", 2, None),
        (fallback, "PUSH", "SENT", None, 0, first),
    ]
    listed = (await deliveries(client, "?status=SKIPPED")).json()["deliveries"]
    assert [(d["id"], d["step"], d["reason"], d["notification_id"]) for d in listed] == [
        (step, 2, "read", nid)
    ]
    everything = (await deliveries(client)).json()["deliveries"]
    assert {d["id"]: d["fallback_of"] for d in everything} == {
        first: None, step: None, fallback: first,
    }  # fmt: skip


async def test_the_write_model_shows_no_step_or_fallback_until_the_read_model_has_it(
    client: Client,
) -> None:
    accepted = await accept(client, ORDER, "k1")
    body = (await status_of(client, accepted["id"])).json()
    assert {(d["step"], d["fallback_of"]) for d in body["deliveries"]} == {(0, None)}
