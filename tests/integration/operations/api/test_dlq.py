"""``GET /v1/dlq`` and ``POST /v1/dlq/replay`` against real Redis: answers, checks, scopes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog
from app.settings import Settings, parse_api_keys
from streams.core.keys import KeySpace
from tests.conftest import API_KEYS, AUTH, DIGEST_SECRET, JSON, ORDERS, VIEWER, http_client
from tests.integration.delivery_support import running_worker, sandbox_calls, wait_until
from tests.integration.dlq_support import EMAIL_BODY, dead_lettered, otp

pytestmark = pytest.mark.timeout(60)

ADMIN = {"Authorization": "Bearer ops-admin-secret"}
SEND_ONLY = {"Authorization": "Bearer auth-secret"}
REPLAY = {"limit": 10, "operator": "anna", "reason": "provider outage over"}


@pytest.fixture
async def api(
    real_redis: Redis, key_prefix: str, catalog: Catalog
) -> AsyncIterator[httpx.AsyncClient]:
    keys = parse_api_keys(f"{API_KEYS},ops:ops-admin-secret:admin")
    settings = Settings(key_prefix=key_prefix, api_keys=keys, digest_secret=DIGEST_SECRET)
    app = create_app(settings, redis=real_redis, catalog=catalog)
    async with http_client(app) as client:
        yield client


async def test_an_operator_inspects_replays_and_watches_the_dlq_drain(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    ids, catalog = await dead_lettered(real_redis, keys, [otp(0), otp(1), EMAIL_BODY])

    view = (await api.get("/v1/dlq", params={"samples": "2"}, headers=ORDERS)).json()
    assert (view["open"], view["resolved"]) == (3, 0)
    assert view["by_error_class"] == {"TRANSIENT": 3}
    assert view["by_channel"] == {"SMS": 2, "EMAIL": 1}
    assert view["by_type"] == {"otp": 2, "order_confirmed": 1}
    assert [s["delivery_id"] for s in view["samples"]] == ids[:2]
    sample = view["samples"][0]
    assert sample["last_error"] == "provider unreachable (outage)"
    assert sample["recipient_id"] in {"u-0", "u-1", "u-9"}
    assert sample["attempts"] == 1
    everything = (await api.get("/v1/dlq", params={"samples": "3"}, headers=ORDERS)).text
    assert "+4915112345678" not in everything
    assert "anna@example.com" not in everything

    body = {**REPLAY, "limit": 2, "dry_run": True}
    dry = (await api.post("/v1/dlq/replay", json=body, headers=ADMIN)).json()
    assert dry["dry_run"] is True
    assert [r["delivery_id"] for r in dry["replayed"]] == ids[:2]
    assert (await api.get("/v1/dlq", headers=ORDERS)).json()["open"] == 3

    async with running_worker(real_redis, keys, catalog):
        answer = await api.post("/v1/dlq/replay", json={**REPLAY, "limit": 2}, headers=ADMIN)
        assert answer.status_code == 200
        assert [r["outcome"] for r in answer.json()["replayed"]] == ["replayed", "replayed"]
        assert (await api.get("/v1/dlq", headers=ORDERS)).json()["open"] == 1

        async def sent_twice() -> bool:
            calls = await sandbox_calls(real_redis, keys)
            return sorted(c["delivery_id"] for c in calls if c["outcome"] == "sent") == sorted(
                ids[:2]
            )

        await wait_until(sent_twice)
    view = (await api.get("/v1/dlq", headers=ORDERS)).json()
    assert (view["open"], view["resolved"]) == (1, 2)


async def test_the_view_filters_like_a_replay(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str
) -> None:
    await dead_lettered(real_redis, KeySpace(key_prefix), [otp(0), EMAIL_BODY])
    params = {"channel": "EMAIL", "type": "order_confirmed", "error_class": "TRANSIENT"}
    view = (await api.get("/v1/dlq", params=params, headers=ORDERS)).json()
    assert (view["open"], view["by_channel"]) == (1, {"EMAIL": 1})
    later = (await api.get("/v1/dlq", params={"since": "2999-01-01"}, headers=ORDERS)).json()
    assert later["open"] == 0


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"limit": None}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"operator": None}, "operator"),
        ({"operator": "  "}, "operator"),
        ({"reason": None}, "reason"),
        ({"type": "nope"}, "type"),
        ({"channel": "FAX"}, "channel"),
        ({"error_class": "SOMETIMES"}, "error_class"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"delivery_ids": ["not-an-id"]}, "delivery_ids[0]"),
        ({"dry_run": "yes"}, "dry_run"),
        ({"fax": 1}, "fax"),
    ],
)
async def test_an_invalid_replay_is_422_naming_the_field(
    api: httpx.AsyncClient, change: dict[str, Any], named: str
) -> None:
    body = {**REPLAY, **change}
    body = {name: value for name, value in body.items() if value is not None}
    answer = await api.post("/v1/dlq/replay", json=body, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert named in answer.json()["detail"]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"samples": "101"}, "samples"),
        ({"samples": "-1"}, "samples"),
        ({"type": "nope"}, "type"),
        ({"channel": "FAX"}, "channel"),
        ({"until": "soon"}, "until"),
        ({"since": "1969-12-31T23:59:59Z"}, "since"),
    ],
)
async def test_an_invalid_view_filter_is_422_naming_it(
    api: httpx.AsyncClient, params: dict[str, str], named: str
) -> None:
    answer = await api.get("/v1/dlq", params=params, headers=ORDERS)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(named)


async def test_broken_json_is_400(api: httpx.AsyncClient) -> None:
    answer = await api.post("/v1/dlq/replay", content=b"{limit", headers={**ADMIN, **JSON})
    assert answer.status_code == 400


async def test_replay_needs_send_or_admin_and_the_view_read_or_admin(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.post("/v1/dlq/replay", json=REPLAY)).status_code == 401
    assert (await api.post("/v1/dlq/replay", json=REPLAY, headers=VIEWER)).status_code == 403
    assert (await api.get("/v1/dlq")).status_code == 401
    assert (await api.get("/v1/dlq", headers=SEND_ONLY)).status_code == 403
    assert (await api.get("/v1/dlq", headers=ADMIN)).status_code == 200


async def test_a_producer_sees_and_replays_only_its_own_dead_letters(
    api: httpx.AsyncClient, real_redis: Redis, key_prefix: str
) -> None:
    """Every ``read`` key once listed every producer's dead letters, recipient ids included."""
    await dead_lettered(real_redis, KeySpace(key_prefix), [otp(0), EMAIL_BODY])  # orders'
    others = (await api.get("/v1/dlq", params={"samples": "5"}, headers=VIEWER)).json()
    assert (others["open"], others["samples"]) == (0, [])
    own = (await api.get("/v1/dlq", headers=ORDERS)).json()
    assert own["open"] == 2
    assert {s["producer"] for s in own["samples"]} == {"orders"}
    assert (await api.get("/v1/dlq", headers=ADMIN)).json()["open"] == 2

    body = {**REPLAY, "dry_run": True}
    foreign = (await api.post("/v1/dlq/replay", json=body, headers=AUTH)).json()
    assert foreign["replayed"] == []
    mine = (await api.post("/v1/dlq/replay", json=body, headers=ORDERS)).json()
    assert len(mine["replayed"]) == 2
    forced = await api.post("/v1/dlq/replay", json={**body, "force": True}, headers=ORDERS)
    assert forced.status_code == 403
    assert "force" in forced.json()["detail"]
    everyone = await api.post("/v1/dlq/replay", json={**body, "force": True}, headers=ADMIN)
    assert len(everyone.json()["replayed"]) == 2
