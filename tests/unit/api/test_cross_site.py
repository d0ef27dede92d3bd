"""Cross-site request forgery: a state-changing request a page of another site made a browser
send is refused (403) before any handler runs; servers, the service's own pages, safe
methods, the inbox's configured origins on the inbox, and the paths whose credential is in
the request itself pass."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from litestar import Litestar, Request, route
from litestar.middleware import DefineMiddleware

from app.api.cross_site import CrossSiteGuard, public_origin

APP_ORIGIN = "https://app.example.com"
PUBLIC_URL = "https://notify.example.com/clarion"
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
PATHS = [
    "/v1/notifications/batch",
    "/v1/dlq/replay",
    "/v1/inbox/read-all",
    "/v1/feedback/twilio",
    "/v1/unsubscribe/token",
]


@pytest.fixture
async def calls() -> list[str]:
    return []


@pytest.fixture
async def client(calls: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    @route(PATHS, http_method=METHODS, status_code=200)
    async def changed(request: Request[Any, Any, Any]) -> None:
        calls.append(f"{request.method} {request.url.path}")

    app = Litestar(
        [changed],
        middleware=[
            DefineMiddleware(CrossSiteGuard, public_url=PUBLIC_URL, inbox_origins=(APP_ORIGIN,))
        ],
        logging_config=None,
    )
    transport = httpx.ASGITransport(app=app)
    # The host the service is reached at here, as a proxy in front of it might call it.
    async with httpx.AsyncClient(transport=transport, base_url="http://10.0.0.7:8000") as test:
        yield test


FOREIGN = [
    ({"Origin": "https://evil.example"}, "Origin: not this service's origin"),
    ({"Origin": "null"}, "Origin: not this service's origin"),
    ({"Origin": "http://10.0.0.7:8001"}, "Origin: not this service's origin"),
    ({"Origin": "https://notify.example.com.evil.example"}, "Origin: not this service's origin"),
    ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"),
    ({"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, "cross-site"),
    ({"Sec-Fetch-Site": "same-site", "Origin": "https://user-content.example.com"}, "same-site"),
    # The browser's word on the site counts over an Origin that claims to be the service's.
    ({"Sec-Fetch-Site": "cross-site", "Origin": "https://notify.example.com"}, "cross-site"),
]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize(("headers", "why"), FOREIGN)
async def test_another_sites_change_is_403_saying_why_and_reaches_no_handler(
    client: httpx.AsyncClient, calls: list[str], method: str, headers: dict[str, str], why: str
) -> None:
    for path in ("/v1/notifications/batch", "/v1/dlq/replay", "/v1/inbox/read-all"):
        answer = await client.request(method, path, headers=headers, content=b'{"a": 1}')
        assert answer.status_code == 403, answer.text
        assert answer.headers["content-type"] == "application/json"
        detail = answer.json()["detail"]
        assert why in detail
        assert "a page of another site may not change anything here" in detail
    assert calls == []


OWN = [
    {},  # no browser: a server, curl, the client library
    {"Origin": "https://notify.example.com"},  # CLARION_PUBLIC_URL's origin
    {"Origin": "HTTPS://Notify.Example.com"},
    {"Origin": "http://10.0.0.7:8000"},  # the host the request was sent to
    {"Origin": "https://10.0.0.7:8000"},  # behind a TLS-terminating proxy
    {"Sec-Fetch-Site": "same-origin", "Origin": "https://notify.example.com"},
    # A page with Referrer-Policy: no-referrer posts to its own origin as Origin: null.
    {"Sec-Fetch-Site": "same-origin", "Origin": "null"},
    {"Sec-Fetch-Site": "none"},  # the user's own doing (a bookmark, the address bar)
]


@pytest.mark.parametrize("headers", OWN)
async def test_a_change_from_no_browser_or_the_services_own_pages_passes(
    client: httpx.AsyncClient, calls: list[str], headers: dict[str, str]
) -> None:
    answer = await client.post("/v1/dlq/replay", headers=headers)
    assert answer.status_code == 200, answer.text
    assert calls == ["POST /v1/dlq/replay"]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_safe_method_passes_from_any_site(
    client: httpx.AsyncClient, calls: list[str], method: str
) -> None:
    headers = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    answer = await client.request(method, "/v1/notifications/batch", headers=headers)
    assert answer.status_code == 200
    assert calls == [f"{method} /v1/notifications/batch"]


async def test_the_inbox_takes_changes_from_its_configured_origins_only(
    client: httpx.AsyncClient, calls: list[str]
) -> None:
    for site in ("cross-site", "same-site", None):
        headers = {"Origin": APP_ORIGIN, **({"Sec-Fetch-Site": site} if site else {})}
        assert (await client.post("/v1/inbox/read-all", headers=headers)).status_code == 200
        # Only on the inbox: the producer API is not the app's to call.
        assert (await client.post("/v1/dlq/replay", headers=headers)).status_code == 403
    assert calls == ["POST /v1/inbox/read-all"] * 3


@pytest.mark.parametrize("path", ["/v1/feedback/twilio", "/v1/unsubscribe/token"])
async def test_paths_whose_credential_is_in_the_request_itself_pass_from_any_site(
    client: httpx.AsyncClient, calls: list[str], path: str
) -> None:
    # A provider's signed callback; an unsubscribe link's token, posted by a mail client.
    headers = {"Origin": "https://mail.example", "Sec-Fetch-Site": "cross-site"}
    assert (await client.post(path, headers=headers)).status_code == 200
    assert calls == [f"POST {path}"]


async def test_origin_null_is_not_the_services_own_even_without_a_host() -> None:
    async def changed(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("reached")

    guard = CrossSiteGuard(changed, public_url="", inbox_origins=())
    scope = {"method": "POST", "path": "/v1/dlq/replay", "headers": [(b"origin", b"null")]}
    assert guard.refusal(scope) is not None  # type: ignore[arg-type]
    with_empty_host = {**scope, "headers": [(b"host", b""), (b"origin", b"null")]}
    assert guard.refusal(with_empty_host) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("public_url", "origin"),
    [
        ("", None),
        ("https://notify.example.com", b"https://notify.example.com"),
        ("https://Notify.Example.com:443/clarion", b"https://notify.example.com"),
        ("https://notify.example.com:8443", b"https://notify.example.com:8443"),
        ("http://127.0.0.1:8000", b"http://127.0.0.1:8000"),
        ("http://localhost:80", b"http://localhost"),
        ("http://[::1]:8000", b"http://[::1]:8000"),
    ],
)
def test_the_public_origin_is_as_a_browser_names_it(public_url: str, origin: bytes | None) -> None:
    assert public_origin(public_url) == origin
