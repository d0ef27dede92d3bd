"""The error answers: a bug is a bare 500 and Redis away a 503 to retry, neither showing
anything internal; each kind of the domain's errors has one status, and one of no kind is a
bare 500; every error an endpoint may give is documented in its schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog
from litestar import Litestar, get
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from app.api.app import create_app
from app.api.errors import STATUS_OF, clarion_error, internal_error, redis_unavailable
from app.catalog import Catalog
from app.settings import Settings
from streams.core import errors
from streams.core.errors import KINDS, ClarionError

SECRET = "postgresql://clarion:hunter2@db/clarion"


@get("/bug")
async def bug() -> None:
    raise KeyError(f"connection {SECRET} broke in handler()")


@get("/aborted")
async def aborted() -> None:
    raise HTTPException(status_code=500, detail=f"client hung up mid-body from {SECRET}")


@get("/redis-away")
async def redis_away() -> None:
    raise RedisConnectionError(f"Error 111 connecting to {SECRET}")


class _OfNoKind(ClarionError):
    """An error of Clarion's that is no kind: a fault of the server."""


@get("/kind/{name:str}")
async def kind(name: FromPath[str]) -> None:
    if name == "none":
        raise _OfNoKind(f"the pool at {SECRET} is closed")
    wait = 7 if name in ("RateLimited", "Unavailable") else None
    raise getattr(errors, name)(f"what is wrong: {name}", retry_after_s=wait)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = Litestar(
        [bug, aborted, redis_away, kind],
        exception_handlers={
            500: internal_error,
            RedisError: redis_unavailable,
            ClarionError: clarion_error,
        },
        logging_config=None,
        debug=False,
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as test_client:
        yield test_client


async def test_a_bug_is_a_bare_500_and_logged_with_its_traceback(
    client: httpx.AsyncClient,
) -> None:
    with structlog.testing.capture_logs() as logs:
        answer = await client.get("/bug")
    assert answer.status_code == 500
    assert answer.json() == {"status_code": 500, "detail": "Internal Server Error"}
    assert "hunter2" not in answer.text
    assert "KeyError" not in answer.text
    [logged] = logs
    assert (logged["event"], logged["log_level"], logged["path"]) == (
        "http.unhandled_error", "error", "/bug",
    )  # fmt: skip
    assert isinstance(logged["exc_info"], KeyError)


async def test_a_bug_behind_a_host_no_url_can_hold_is_logged_once(
    client: httpx.AsyncClient,
) -> None:
    with structlog.testing.capture_logs() as logs:
        answer = await client.get("/bug", headers={"Host": "x:99999"})
    assert answer.status_code == 500
    [logged] = logs
    assert (logged["event"], logged["path"]) == ("http.unhandled_error", "/bug")


async def test_an_http_error_raised_on_purpose_is_no_bug(client: httpx.AsyncClient) -> None:
    with structlog.testing.capture_logs() as logs:
        answer = await client.get("/aborted")
    assert answer.json() == {"status_code": 500, "detail": "Internal Server Error"}
    assert [(line["event"], line["log_level"]) for line in logs] == [("http.aborted", "info")]


async def test_redis_away_is_a_503_to_retry_without_the_error(client: httpx.AsyncClient) -> None:
    with structlog.testing.capture_logs() as logs:
        answer = await client.get("/redis-away")
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "1"
    assert answer.json() == {
        "status_code": 503,
        "detail": "the event log (Redis) is unavailable; retry shortly",
    }
    [logged] = logs
    assert (logged["event"], logged["error"]) == ("http.redis_unavailable", "ConnectionError")
    assert "hunter2" not in repr(logs)


def test_every_kind_of_error_has_one_status_and_no_other_error_has_one() -> None:
    assert set(STATUS_OF) == set(KINDS)
    assert all(400 <= status < 600 for status in STATUS_OF.values())
    # Two kinds of one status would be one kind under two names.
    assert len(set(STATUS_OF.values())) == len(STATUS_OF)


@pytest.mark.parametrize("name", [kind.__name__ for kind in KINDS])
async def test_a_kind_of_error_is_answered_with_its_status_and_detail(
    client: httpx.AsyncClient, name: str
) -> None:
    answer = await client.get(f"/kind/{name}")
    status = STATUS_OF[getattr(errors, name)]
    assert answer.status_code == status
    assert answer.json() == {"status_code": status, "detail": f"what is wrong: {name}"}
    wait = answer.headers.get("Retry-After")
    assert wait == ("7" if name in ("RateLimited", "Unavailable") else None)


async def test_an_error_of_no_kind_is_a_bare_500_logged_as_a_bug(
    client: httpx.AsyncClient,
) -> None:
    with structlog.testing.capture_logs() as logs:
        answer = await client.get("/kind/none")
    assert answer.status_code == 500
    assert answer.json() == {"status_code": 500, "detail": "Internal Server Error"}
    assert "hunter2" not in answer.text
    assert "Retry-After" not in answer.headers
    [logged] = logs
    assert (logged["event"], logged["log_level"]) == ("http.unhandled_error", "error")
    assert isinstance(logged["exc_info"], _OfNoKind)


async def test_every_error_an_endpoint_may_give_is_documented(
    fake: Redis, catalog: Catalog, settings: Settings
) -> None:
    app = create_app(settings, redis=fake, catalog=catalog)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://clarion") as client:
        schema: dict[str, Any] = (await client.get("/schema/openapi.json")).json()
    paths = schema["paths"]
    documented = {
        ("post", "/v1/notifications"): {"202", "400", "401", "403", "409", "413", "422", "503"},
        ("post", "/v1/notifications/batch"): {"200", "400", "401", "403", "413", "422", "503"},
        ("get", "/v1/notifications/{notification_id}"): {"200", "401", "403", "404", "503"},
        ("get", "/v1/deliveries"): {"200", "400", "401", "403", "422", "503"},
    }
    for (method, path), codes in documented.items():
        assert codes <= set(paths[path][method]["responses"]), (method, path)
