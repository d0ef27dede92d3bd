"""API keys: a presented secret finds its key, 401 without a valid one (challenging the way
the endpoint asks), 403 when the key lacks the scope; HTTP Basic only on a dashboard page,
and only for ``read``."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from litestar import Litestar, Request, get
from litestar.datastructures import State

from app.api.auth import KeyRing, authorize, authorize_reader
from app.settings import Settings
from tests.conftest import AUTH, OPS, ORDERS, VIEWER, basic


@get("/send-only")
async def needs_send(request: Request[Any, Any, State]) -> dict[str, str]:
    return {"producer": authorize(request, "send").producer}


@get("/page")
async def needs_read_in_a_browser(request: Request[Any, Any, State]) -> dict[str, str]:
    return {"producer": authorize_reader(request).producer}


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = Litestar(
        [needs_send, needs_read_in_a_browser],
        state=State({"key_ring": KeyRing(settings.api_keys)}),
        logging_config=None,
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as test_client:
        yield test_client


def test_basic_credentials_find_the_key_by_its_secret(settings: Settings) -> None:
    ring = KeyRing(settings.api_keys)
    found = ring.find(basic("orders", "orders-secret").encode(), basic=True)
    assert found is not None
    assert found.producer == "orders"
    # The user part is informational; the secret decides, and may contain a colon.
    assert ring.find(basic("anyone", "orders-secret").encode(), basic=True) == found
    for broken in (b"Basic", b"Basic ", b"Basic %%%", basic("orders", "").encode(),
                   b"Basic " + base64.b64encode(b"no-colon-orders-secret"),
                   b"Digest orders-secret"):  # fmt: skip
        assert ring.find(broken, basic=True) is None
    assert ring.find(b"Bearer orders-secret", basic=True) == found
    # Only where Basic is asked for.
    assert ring.find(basic("orders", "orders-secret").encode()) is None


def test_a_bearer_secret_finds_its_key_whatever_the_case_of_the_scheme(settings: Settings) -> None:
    ring = KeyRing(settings.api_keys)
    for header in (b"Bearer orders-secret", b"bearer orders-secret", b"BEARER  orders-secret "):
        found = ring.find(header)
        assert found is not None
        assert found.producer == "orders"
    for wrong in (None, b"", b"Bearer", b"Bearer ", b"Bearer orders-secret2", b"orders-secret",
                  b"Bearer ORDERS-SECRET"):  # fmt: skip
        assert ring.find(wrong) is None


async def test_a_key_with_the_scope_is_let_in(client: httpx.AsyncClient) -> None:
    answer = await client.get("/send-only", headers=ORDERS)
    assert (answer.status_code, answer.json()) == (200, {"producer": "orders"})
    assert (await client.get("/send-only", headers=AUTH)).json() == {"producer": "auth"}


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong-secret"}, {"Authorization": "Token x"}]
)
async def test_without_a_valid_key_401_challenges_for_a_bearer_key(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    answer = await client.get("/send-only", headers=headers)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="clarion"'
    assert "Bearer <api key>" in answer.json()["detail"]


async def test_a_browser_page_challenges_for_basic_credentials(client: httpx.AsyncClient) -> None:
    answer = await client.get("/page")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Basic realm="clarion"'
    signed_in = await client.get("/page", headers={"Authorization": basic("x", "viewer-secret")})
    assert signed_in.json() == {"producer": "viewer"}


async def test_a_key_without_the_scope_is_403_naming_the_scope(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.get("/send-only", headers=VIEWER)
    assert answer.status_code == 403
    assert answer.json()["detail"] == "this API key lacks the 'send' scope"
    assert "WWW-Authenticate" not in answer.headers


async def test_basic_credentials_elsewhere_are_401_saying_where_they_are_taken(
    client: httpx.AsyncClient,
) -> None:
    # Valid credentials a browser would hold and send with any site's form: refused.
    answer = await client.get("/send-only", headers={"Authorization": basic("x", "orders-secret")})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="clarion"'
    assert answer.json()["detail"] == (
        "Authorization: HTTP Basic credentials are accepted only by the dashboard; "
        "send 'Bearer <api key>'"
    )


async def test_a_browser_page_takes_a_bearer_key_too_and_only_for_read(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/page", headers=VIEWER)).json() == {"producer": "viewer"}
    # An admin key gets nothing more through a page than its read scope: here none.
    for headers in (OPS, {"Authorization": basic("ops", "ops-secret")}):
        answer = await client.get("/page", headers=headers)
        assert answer.status_code == 403
        assert answer.json()["detail"] == "this API key lacks the 'read' scope"
