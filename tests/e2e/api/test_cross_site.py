"""Cross-site request forgery against a running ``clarion api``: a browser that signed in to
the dashboard with HTTP Basic holds those credentials for the service's origin, and a page of
any other site can make it post a form there (``text/plain``, a body shaped like JSON). Such a
post to ``POST /v1/notifications/batch`` or ``POST /v1/dlq/replay`` changes nothing: Basic
credentials work on the dashboard only (401 elsewhere), a JSON body must be declared
``application/json`` (415), and a state-changing request from another site's page is refused
(403). First as curl would send it, then from a real headless Chromium.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
import time
import uuid
from collections.abc import Iterator
from html import escape

import httpx
import pytest
from redis.asyncio import Redis

from streams.core.keys import KeySpace
from tests.conftest import basic
from tests.e2e.api.test_dashboard import Browser, browser_paths, chromium_browser
from tests.e2e.api_service import API_KEY, running_api_process
from tests.integration.dlq_support import dead_lettered, otp

pytestmark = pytest.mark.timeout(180)

EVIL = "https://evil.example"
BEARER = {"Authorization": f"Bearer {API_KEY}"}
BASIC = {"Authorization": basic("fuzz", API_KEY)}
JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain"}

# What a form with enctype="text/plain" posts for one field: "<name>=<value>\r\n". With the
# "=" inside a string, the body is JSON: here in an idempotency key and in a reason.
ITEM = (
    '"recipient": {"id": "u-9", "phone": "+4915112345678"}, "type": "otp", '
    '"data": {"code": "424242"}'
)
BATCH_FIELD = ('{"notifications": [{"idempotency_key": "csrf', f'1", {ITEM}}}]}}')
REPLAY_FIELD = ('{"limit": 10, "operator": "evil", "reason": "', '"}')


def form_body(field: tuple[str, str]) -> bytes:
    name, value = field
    return f"{name}={value}\r\n".encode()


@pytest.fixture
def key_prefix() -> str:
    """The running API's key prefix (``real_redis`` removes its keys afterwards)."""
    return f"csrf-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def api_url(key_prefix: str) -> Iterator[str]:
    with running_api_process(prefix=key_prefix) as (url, _):
        yield url


async def written(redis: Redis, keys: KeySpace) -> tuple[int, int]:
    """What a change leaves behind: the events logged (an accepted notification, a replayed
    delivery) and the dead letters a replay settled."""
    shard = keys.shard(0)
    return int(await redis.xlen(shard.events)), int(await redis.hlen(shard.dlq_resolved))


async def test_a_browsers_credentials_and_a_json_shaped_form_change_nothing(
    api_url: str, real_redis: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    await dead_lettered(real_redis, keys, [otp(1)])
    before = await written(real_redis, keys)
    batch, replay = form_body(BATCH_FIELD), form_body(REPLAY_FIELD)
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        for path, body in (("/v1/notifications/batch", batch), ("/v1/dlq/replay", replay)):
            # As the issue found it: all three at once. Another site's page: 403.
            hostile = {**BASIC, **TEXT, "Origin": EVIL}
            answer = await client.post(path, content=body, headers=hostile)
            assert answer.status_code == 403, answer.text
            assert "Origin: not this service's origin" in answer.json()["detail"]
            # Each defence alone.
            answer = await client.post(path, content=body, headers={**BASIC, **JSON})
            assert answer.status_code == 401, answer.text
            assert "accepted only by the dashboard" in answer.json()["detail"]
            answer = await client.post(path, content=body, headers={**BEARER, **TEXT})
            assert answer.status_code == 415, answer.text
            assert "'application/json' is required" in answer.json()["detail"]
            for browser in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}):
                answer = await client.post(
                    path, content=body, headers={**BEARER, **JSON, **browser}
                )
                assert answer.status_code == 403, answer.text
        assert await written(real_redis, keys) == before

        # The same bodies from a server are taken: the refusals above were not for them.
        accepted = await client.post("/v1/notifications/batch", content=batch,
                                     headers={**BEARER, **JSON})  # fmt: skip
        assert accepted.json()["results"][0]["status_code"] == 202, accepted.text
        replayed = await client.post("/v1/dlq/replay", content=replay, headers={**BEARER, **JSON})
        assert len(replayed.json()["replayed"]) == 1, replayed.text


# --- in a real browser ---------------------------------------------------------------------


def auto_submitting_form(action: str, field: tuple[str, str]) -> bytes:
    """A page that posts ``field`` to ``action`` as soon as it is opened, as text/plain."""
    name, value = (escape(part, quote=True) for part in field)
    return (
        "<!doctype html><title>Win a prize</title>"
        f'<form method="post" enctype="text/plain" action="{escape(action, quote=True)}">'
        f'<input type="hidden" name="{name}" value="{value}"></form>'
        "<script>document.forms[0].submit()</script>"
    ).encode()


@contextlib.contextmanager
def another_site(pages: dict[str, bytes]) -> Iterator[str]:
    """``pages`` served on ``http://localhost:<port>``: another site than ``127.0.0.1``."""

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = pages.get(self.path)
            self.send_response(200 if page else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(page or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wait_for_page(browser: Browser, url: str, within: float = 20) -> str:
    """The text of the page at ``url`` once the browser has got there."""
    deadline = time.monotonic() + within
    while not browser.url.startswith(url):
        assert time.monotonic() < deadline, f"the form did not post: still at {browser.url}"
        time.sleep(0.05)
    return browser.text_of("body")


def attack_in_chromium(api_url: str) -> dict[str, str]:
    """Sign in to the dashboard with Basic, then open another site's pages that post forms
    to the batch and replay endpoints; what the browser showed after each."""
    host = api_url.removeprefix("http://")
    targets = {"/batch": ("/v1/notifications/batch", BATCH_FIELD),
               "/replay": ("/v1/dlq/replay", REPLAY_FIELD)}  # fmt: skip
    shown = {}
    with chromium_browser() as browser:
        # The browser asks for the credentials on the dashboard's 401 and keeps them.
        browser.open(f"http://fuzz:{API_KEY}@{host}/dashboard")
        assert "producer fuzz" in browser.text_of("header")
        browser.open(f"{api_url}/dashboard")  # no credentials in the URL: the kept ones
        assert "producer fuzz" in browser.text_of("header")
        pages = {
            page: auto_submitting_form(api_url + path, field)
            for page, (path, field) in targets.items()
        }
        with another_site(pages) as evil:
            for page, (path, _) in targets.items():
                browser.open(evil + page)
                shown[path] = wait_for_page(browser, api_url + path)
    return shown


async def test_a_cross_site_form_after_a_dashboard_login_changes_nothing_in_chromium(
    api_url: str, real_redis: Redis, key_prefix: str
) -> None:
    browser_paths()  # fail before any work when Chromium is missing
    keys = KeySpace(key_prefix)
    await dead_lettered(real_redis, keys, [otp(1)])
    before = await written(real_redis, keys)

    shown = await asyncio.to_thread(attack_in_chromium, api_url)

    assert await written(real_redis, keys) == before, (
        f"a cross-site form changed something: {shown}"
    )
    for path, text in shown.items():
        assert "403" in text, (path, text)
        assert "a page of another site may not change anything here" in text, (path, text)
