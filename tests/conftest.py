"""Shared fixtures: a clean Redis keyspace per test, on real Redis and on fakeredis."""

from __future__ import annotations

import base64
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import asyncpg
import fakeredis
import httpx
import pytest
import redis as sync_redis
from litestar import Litestar
from redis.asyncio import Redis, RedisCluster

from app.api.app import create_app
from app.catalog import Catalog, load_catalog
from app.ingest.requests import NotificationRequest, Recipient
from app.settings import Settings, parse_api_keys
from projections.database import connect
from streams.core import codec
from streams.core.connection import connect_cluster, connect_sync
from streams.core.events import AnyEvent
from streams.recipients.settings import AddressDigest
from tests.pg import throwaway_database

REPO = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("CLARION_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
API_KEYS = (
    "orders:orders-secret:send+read,auth:auth-secret:send,viewer:viewer-secret:read,"
    "profiles:profiles-secret:recipients,ops:ops-secret:admin,"
    "orders:orders-crm-secret:send+read+recipients"
)
ORDERS = {"Authorization": "Bearer orders-secret"}
# The same producer's key that may also choose recipients by their profiles (segments).
ORDERS_CRM = {"Authorization": "Bearer orders-crm-secret"}
AUTH = {"Authorization": "Bearer auth-secret"}
VIEWER = {"Authorization": "Bearer viewer-secret"}
# A user-profile service: may read and change recipients' settings, nothing else.
PROFILES = {"Authorization": "Bearer profiles-secret"}
# An operator: every producer's dead letters.
OPS = {"Authorization": "Bearer ops-secret"}
# What a body the API decodes as JSON is declared as (415 otherwise).
JSON = {"Content-Type": "application/json"}
DIGEST_SECRET = b"test-digest-secret"
DIGEST = AddressDigest(DIGEST_SECRET)
# A marketing notification to a recipient with an email address and a push token.
REQUEST = NotificationRequest(
    recipient=Recipient(id="user-5", email="x@example.com", push_tokens=["t"]),
    type="marketing",
    data={"subject": "s", "body": "b"},
)


def basic(producer: str, secret: str) -> str:
    """An HTTP Basic ``Authorization`` value, as a browser sends it."""
    return "Basic " + base64.b64encode(f"{producer}:{secret}".encode()).decode()


class Clock:
    """A settable clock for tests that depend on the time of day."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def notification_id(name: str) -> str:
    """A notification id (a UUIDv7, as Clarion makes them, of the hour the tests started)
    named by ``name``: the same name, the same id."""
    millis = f"{_TESTS_START_MS:012x}"
    return f"{millis[:8]}-{millis[8:]}-7000-8000-{uuid.uuid5(uuid.NAMESPACE_OID, name).hex[:12]}"


_TESTS_START_MS = int(datetime.now(UTC).timestamp() * 1000)


async def delete_prefix(redis: Redis, prefix: str) -> None:
    """Remove every key under ``prefix:``."""
    batch: list[bytes] = []
    async for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await redis.unlink(*batch)
            batch.clear()
    if batch:
        await redis.unlink(*batch)


async def stream_events(redis: Redis, stream: str) -> list[AnyEvent]:
    """Every event in an ``events`` stream, in order."""
    entries = await redis.xrange(stream)
    return [event for _, fields in entries for event in codec.decode_events(fields[b"e"])]


@pytest.fixture
def key_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(REPO / "clarion.toml")


# CLARION_TEST_REDIS_URL may name a Redis Cluster (``redis+cluster://host:port,...``):
# ``make test-cluster`` runs the integration suite against a local one.
ON_CLUSTER = REDIS_URL.startswith("redis+cluster://")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a cluster, skip the tests marked ``standalone_redis``."""
    if not ON_CLUSTER:
        return
    skip = pytest.mark.skip(
        reason="needs one Redis: hiredis packing and restarting one server are for one Redis"
    )
    for item in items:
        if item.get_closest_marker("standalone_redis"):
            item.add_marker(skip)


def connect_test_redis(**options: Any) -> Redis:
    """A client of the test Redis (a cluster's when ``ON_CLUSTER``: it answers the commands
    the tests send as a Redis does)."""
    if ON_CLUSTER:
        return cast(Redis, connect_cluster(REDIS_URL, **options))
    return Redis.from_url(REDIS_URL, **options)


def sync_test_redis() -> sync_redis.Redis:
    """A synchronous client of the test Redis (a cluster's when ``ON_CLUSTER``)."""
    return connect_sync(REDIS_URL)


def unlink_prefix(prefix: str) -> None:
    """Remove every key under ``prefix:`` from the test Redis (every node of a cluster)."""
    redis = sync_test_redis()
    try:
        for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
            redis.unlink(key)
    finally:
        redis.close()


async def on_every_node(redis: Redis, *command: Any) -> None:
    """Send a command that names no key to the Redis, or to every node of the cluster."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()
        for node in redis.get_nodes():  # one by one: redis-py sends "ACL ..." to no node
            await redis.execute_command(*command, target_nodes=node)  # with ALL_NODES
    else:
        await redis.execute_command(*command)


@asynccontextmanager
async def connect_real_redis(key_prefix: str) -> AsyncIterator[Redis]:
    """The real Redis server; every key under ``key_prefix`` is removed afterwards."""
    redis = connect_test_redis()
    try:
        await redis.ping()
    except OSError as error:  # fail loudly: the suite promises real-Redis coverage
        pytest.fail(f"Redis at {REDIS_URL} is not reachable: {error}")
    try:
        yield redis
    finally:
        await delete_prefix(redis, key_prefix)
        await redis.aclose()


@pytest.fixture
async def real_redis(key_prefix: str) -> AsyncIterator[Redis]:
    async with connect_real_redis(key_prefix) as redis:
        yield redis


@pytest.fixture(params=["real", "fake"])
async def redis(request: pytest.FixtureRequest, key_prefix: str) -> AsyncIterator[Redis]:
    """Every test using this runs twice: against real Redis and against fakeredis."""
    if request.param == "real":
        async with connect_real_redis(key_prefix) as real:
            yield real
        return
    fake = fakeredis.FakeAsyncRedis()
    yield fake
    await fake.aclose()


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database per test, dropped afterwards."""
    async with throwaway_database() as url:
        yield url


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the test's database, created and migrated as the projector's would be."""
    pool = await connect(database_url)
    yield pool
    await pool.close()


@pytest.fixture
async def fake() -> AsyncIterator[Redis]:
    """A fakeredis client of its own, for fast unit tests of stream logic."""
    redis = fakeredis.FakeAsyncRedis()
    yield redis
    await redis.aclose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def settings(key_prefix: str) -> Settings:
    return Settings(
        key_prefix=key_prefix, api_keys=parse_api_keys(API_KEYS), digest_secret=DIGEST_SECRET
    )


@pytest.fixture
def make_app(
    redis: Redis, catalog: Catalog, clock: Clock, settings: Settings
) -> Callable[..., Litestar]:
    def make(**overrides: object) -> Litestar:
        merged = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
        return create_app(merged, redis=redis, catalog=catalog, clock=clock)

    return make


def http_client(app: Litestar) -> httpx.AsyncClient:
    """An HTTP client calling ``app`` in this event loop (the Redis client lives here too)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://clarion")


@pytest.fixture
async def client(make_app: Callable[..., Litestar]) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(make_app()) as test_client:
        yield test_client
