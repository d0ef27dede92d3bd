"""The FAILED dashboard in a real headless Chromium, against real Redis and PostgreSQL.

A notification whose SMS the sandbox refuses for good is accepted, a delivery worker and the
projector run until its delivery is FAILED in the read model, then the dashboard is served by
uvicorn and read by Chromium through chromedriver (W3C WebDriver), signed in with HTTP Basic
sent as an extra header through the DevTools protocol.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import markupsafe
import pytest
import uvicorn
from litestar import Litestar
from litestar.datastructures import State
from redis.asyncio import Redis

from app.api.auth import KeyRing
from app.api.dashboard import DASHBOARD_ROUTES
from app.api.read_model import ReadModel
from app.campaigns.lifecycle import Campaigns
from app.campaigns.specs import CampaignSpec
from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.operations.advisor import DEAD_LETTERS_TEXT
from app.settings import Settings
from projections.projector import Projector
from streams.core.connection import connect as connect_redis
from streams.core.keys import KeySpace
from tests.conftest import DIGEST, REDIS_URL, basic, http_client
from tests.integration.delivery_support import accept, fast_catalog, running_worker, wait_until
from tests.servers import free_port

pytestmark = pytest.mark.timeout(120)

REFUSED = "number does not exist"
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C WebDriver element reference key
ORDERS_BASIC = {"Authorization": basic("orders", "orders-secret")}


def otp(refusal: str) -> dict[str, Any]:
    """An OTP whose SMS the sandbox refuses permanently with ``refusal``."""
    return {
        "recipient": {"id": "u-1", "phone": "+4915112345678"},
        "type": "otp",
        "data": {"code": "4242", "sandbox": {"SMS": {"fail_permanent": refusal}}},
    }


@dataclass(frozen=True)
class Failed:
    notification_id: str
    delivery_id: str


async def fail_deliveries(
    redis: Redis, keys: KeySpace, catalog: Catalog, pool: asyncpg.Pool, bodies: list[dict[str, Any]]
) -> list[Failed]:
    """Accept ``bodies``, deliver and project until each delivery is FAILED and dead-lettered."""
    failed = []
    for n, body in enumerate(bodies):
        answer = await accept(redis, keys, catalog, body, f"dashboard-{n}")
        failed.append(Failed(answer["id"], answer["deliveries"][0]["id"]))
    projector = Projector(redis, pool, keys, consumer="dashboard-test")
    task = asyncio.create_task(projector.run())
    try:
        async with running_worker(redis, keys, catalog):

            async def projected() -> bool:
                async with pool.acquire() as connection:
                    done = await connection.fetchval(
                        "SELECT count(*) FROM delivery d WHERE d.id = ANY($1::uuid[])"
                        " AND d.status = 'FAILED' AND EXISTS (SELECT 1 FROM delivery_event e"
                        " WHERE e.delivery_id = d.id AND e.type = 'DeliveryDeadLettered')",
                        [f.delivery_id for f in failed],
                    )
                return int(done) == len(failed)

            await wait_until(projected, within=30)
    finally:
        projector.stop()
        await task
    return failed


def dashboard_app(
    settings: Settings,
    catalog: Catalog,
    *,
    redis: Redis | None = None,
    pool: asyncpg.Pool | None = None,
    database_url: str | None = None,
) -> Litestar:
    """The dashboard routes with the state entries create_app gives them.

    Given ``redis``/``pool`` it uses them (an in-loop client); given ``database_url`` it opens
    its own Redis client and pool at start-up, in the loop of whoever serves it.
    """  # fmt: skip
    state = State(
        {
            "key_ring": KeyRing(settings.api_keys),
            "key_space": KeySpace(settings.key_prefix, settings.shards),
            "catalog": catalog,
            "redis": redis,
            "read_model": ReadModel(pool),
        }
    )

    async def open_connections(app: Litestar) -> None:
        if database_url is not None:
            app.state.redis = connect_redis(REDIS_URL)
            pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
            app.state.read_model = ReadModel(pool)

    async def close_connections(app: Litestar) -> None:
        if database_url is not None:
            await app.state.read_model.close()
            await app.state.redis.aclose()

    return Litestar(
        route_handlers=DASHBOARD_ROUTES,
        state=state,
        on_startup=[open_connections],
        on_shutdown=[close_connections],
        logging_config=None,
        debug=False,
    )


# --- the browser -------------------------------------------------------------------------


def browser_paths() -> tuple[str, str]:
    """Chromium and chromedriver; the test fails (never skips) without them."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail(
            "headless Chromium is needed for the dashboard test and was not found "
            f"(chromium: {chromium}, chromedriver: {driver}); install it with "
            "`apt-get install -y chromium chromium-driver` (.ci/run does)"
        )
    return chromium, driver


class WebDriverError(AssertionError):
    """A WebDriver command that failed; ``error`` is the W3C error code."""

    def __init__(self, message: str, error: str | None) -> None:
        super().__init__(message)
        self.error = error


STALE_ATTEMPTS = 5


def replaced(error: WebDriverError) -> bool:
    """Whether a command failed because the page replaced its element: a stale reference,
    or (chromedriver reading a node a navigation just detached) an inspector error saying
    the node is not in the document."""
    return error.error == "stale element reference" or (
        error.error == "unknown error" and "does not belong to the document" in str(error)
    )


class Browser:
    """A minimal W3C WebDriver client for one chromedriver session."""

    def __init__(self, http: httpx.Client, session: str) -> None:
        self.http = http
        self.session = session

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, f"/session/{self.session}{path}", json=body)
        value = response.json()["value"]
        if response.status_code != 200:
            error = value.get("error") if isinstance(value, dict) else None
            raise WebDriverError(f"WebDriver {method} {path}: {value}", error)
        return value

    def cdp(self, command: str, params: dict[str, Any]) -> Any:
        """A Chrome DevTools Protocol command (what Selenium's execute_cdp_cmd sends)."""
        return self.call("POST", "/goog/cdp/execute", {"cmd": command, "params": params})

    def open(self, url: str) -> None:
        self.call("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self.call("GET", "/url"))

    def find(self, css: str) -> str:
        """The first element matching ``css`` (waiting up to the implicit wait)."""
        found = self.call("POST", "/element", {"using": "css selector", "value": css})
        return str(found[ELEMENT])

    def text(self, element: str) -> str:
        return str(self.call("GET", f"/element/{element}/text"))

    def text_of(self, css: str) -> str:
        """The text of the first element matching ``css``, looked up again when the page
        replaced the element between finding and reading it (a navigation or a re-render)."""
        for _ in range(STALE_ATTEMPTS):
            element = self.find(css)
            try:
                return self.text(element)
            except WebDriverError as error:
                if not replaced(error):
                    raise
        raise AssertionError(f"{css} was replaced {STALE_ATTEMPTS} times while being read")

    def click(self, element: str) -> None:
        self.call("POST", f"/element/{element}/click", {})

    def log(self, kind: str) -> list[dict[str, Any]]:
        """The entries of log ``kind`` since it was last read (chromedriver's log command)."""
        return list(self.call("POST", "/se/log", {"type": kind}))

    def script(self, source: str) -> Any:
        """What ``source``, a function body, returns when run in the page."""
        return self.call("POST", "/execute/sync", {"script": source, "args": []})

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("GET", "/screenshot")))
        return path


@contextlib.contextmanager
def chromium_browser(logs: tuple[str, ...] = ()) -> Iterator[Browser]:
    """Headless Chromium driven by a chromedriver process of its own; ``logs`` names the
    logs it keeps for ``Browser.log`` ("browser": the console, "performance": DevTools
    events, every request among them)."""
    chromium, chromedriver = browser_paths()
    port = free_port()
    driver = subprocess.Popen(
        [chromedriver, f"--port={port}", "--allowed-ips=127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    profile = tempfile.TemporaryDirectory(prefix="clarion-chromium-")
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.TransportError):
                if http.get("/status").json()["value"]["ready"]:
                    break
            if driver.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromedriver did not start (exit code {driver.poll()})")
            time.sleep(0.05)
        options = {
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={profile.name}", "--window-size=1440,1000",
            ],
        }  # fmt: skip
        capabilities = {
            "goog:chromeOptions": options,
            "goog:loggingPrefs": dict.fromkeys(logs, "ALL"),
        }
        created = http.post(
            "/session", json={"capabilities": {"alwaysMatch": capabilities}}
        ).json()["value"]
        assert "sessionId" in created, f"chromedriver refused the session: {created}"
        browser = Browser(http, created["sessionId"])
        try:
            browser.call("POST", "/timeouts", {"implicit": 5000, "pageLoad": 30000})
            yield browser
        finally:
            with contextlib.suppress(httpx.HTTPError):
                http.delete(f"/session/{browser.session}")
    finally:
        http.close()
        driver.terminate()
        try:
            driver.wait(10)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
        profile.cleanup()


@contextlib.contextmanager
def serving(app: Litestar) -> Iterator[str]:
    """``app`` served by uvicorn on a free local port in a thread; its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped during start-up"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        listener.close()


def read_dashboard_in_chromium(base_url: str, failed: Failed, screenshots: Path) -> list[Path]:
    """What a person does: open the dashboard, find the failure, open its timeline."""
    shots = []
    with chromium_browser() as browser:
        browser.cdp("Network.enable", {})
        browser.cdp("Network.setExtraHTTPHeaders", {"headers": ORDERS_BASIC})
        browser.open(f"{base_url}/dashboard")

        row = browser.text_of(f'tr[data-delivery="{failed.delivery_id}"]')
        assert REFUSED in row
        assert "SMS" in row
        assert "PERMANENT" in row
        assert "otp" in row
        assert int(browser.text_of("#dlq-size")) >= 1
        assert "100.0 %" in browser.text_of("#rates")
        shots.append(browser.screenshot(screenshots / "dashboard.png"))

        browser.click(browser.find(f'tr[data-delivery="{failed.delivery_id}"] a.timeline'))
        events = browser.text_of("#events")
        assert browser.url == f"{base_url}/dashboard/notifications/{failed.notification_id}"
        for event in ("NotificationAccepted", "DeliveryQueued", "DeliveryFailed",
                      "DeliveryDeadLettered"):  # fmt: skip
            assert event in events
        assert REFUSED in events
        assert "PERMANENT" in events
        assert failed.delivery_id in events
        shots.append(browser.screenshot(screenshots / "timeline.png"))
    return shots


async def test_an_operator_finds_a_failed_delivery_and_its_timeline_in_chromium(
    real_redis: Redis,
    key_prefix: str,
    database_url: str,
    pool: asyncpg.Pool,
    settings: Settings,
    tmp_path: Path,
) -> None:
    browser_paths()  # fail before any work when Chromium is missing
    catalog = fast_catalog()
    keys = KeySpace(key_prefix)
    [failed] = await fail_deliveries(real_redis, keys, catalog, pool, [otp(REFUSED)])

    app = dashboard_app(settings, catalog, database_url=database_url)

    def browse() -> list[Path]:
        with serving(app) as base_url:
            return read_dashboard_in_chromium(base_url, failed, tmp_path)

    shots = await asyncio.to_thread(browse)
    for shot in shots:
        assert shot.stat().st_size > 10_000, f"{shot} looks empty"


# --- the same pages over plain HTTP: auth, scoping, escaping, filters --------------------


async def test_the_dashboard_is_scoped_escaped_and_guarded(
    real_redis: Redis, key_prefix: str, pool: asyncpg.Pool, settings: Settings
) -> None:
    catalog = fast_catalog()
    keys = KeySpace(key_prefix)
    refused, hostile = await fail_deliveries(
        real_redis, keys, catalog, pool, [otp(REFUSED), otp(HOSTILE)]
    )
    campaigns = Campaigns(real_redis, keys, Planner(catalog, DIGEST), lambda: datetime.now(UTC))
    spring = CampaignSpec(
        type="marketing", name="<i>Spring</i>", data={"subject": "s", "body": "b"}
    )
    campaign = await campaigns.create("orders", spring)
    await campaigns.add_recipients("orders", campaign.id, ["a", "b", "c"], "")
    app = dashboard_app(settings, catalog, redis=real_redis, pool=pool)
    async with http_client(app) as client:
        # No credentials, a wrong secret, a broken header: the browser is asked to sign in.
        for headers in ({}, {"Authorization": basic("orders", "wrong-secret")},
                        {"Authorization": "Basic !!!"}):  # fmt: skip
            response = await client.get("/dashboard", headers=headers)
            assert response.status_code == 401
            assert response.headers["WWW-Authenticate"] == 'Basic realm="clarion"'
            assert response.headers["content-type"].startswith("text/html")
        # The Bearer form works too; a key without the read scope is refused.
        bearer = await client.get("/dashboard", headers={"Authorization": "Bearer orders-secret"})
        assert bearer.status_code == 200
        no_read = await client.get(
            "/dashboard", headers={"Authorization": basic("auth", "auth-secret")}
        )
        assert no_read.status_code == 403

        page = (await client.get("/dashboard", headers=ORDERS_BASIC)).text
        assert refused.delivery_id in page
        # The producer's campaigns, with their progress (a name is shown, not interpreted).
        assert f'data-campaign="{campaign.id}"' in page
        assert "&lt;i&gt;Spring&lt;/i&gt;" in page
        assert '<progress max="3" value="0">' in page
        assert hostile.delivery_id in page
        # The advisor's hints, as GET /v1/ops/lag gives them: two dead letters are open.
        assert '<p data-problem="dead letters">' in page
        assert str(markupsafe.escape(DEAD_LETTERS_TEXT)) in page
        assert "2 open" in page
        # A provider's text is shown, never interpreted.
        assert HOSTILE not in page
        escaped = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;"
        assert escaped in page
        assert "<script" not in page

        # Filters narrow the list; a value outside the known ones is a readable 400.
        bugs = (await client.get("/dashboard?error_class=BUG", headers=ORDERS_BASIC)).text
        assert refused.delivery_id not in bugs
        assert "no failed delivery matches these filters" in bugs
        sms = await client.get(
            "/dashboard?channel=SMS&type=otp&error_class=PERMANENT", headers=ORDERS_BASIC
        )
        assert refused.delivery_id in sms.text
        assert 'value="SMS" selected' in sms.text
        odd = await client.get("/dashboard?channel=FAX", headers=ORDERS_BASIC)
        assert odd.status_code == 400
        assert "channel must be one of" in odd.text

        # Another producer sees none of it, and not the timeline either.
        viewer = {"Authorization": basic("viewer", "viewer-secret")}
        theirs = (await client.get("/dashboard", headers=viewer)).text
        assert refused.delivery_id not in theirs
        assert campaign.id not in theirs
        timeline_path = f"/dashboard/notifications/{refused.notification_id}"
        assert (await client.get(timeline_path, headers=viewer)).status_code == 404
        assert (await client.get(timeline_path, headers=ORDERS_BASIC)).status_code == 200
        not_an_id = await client.get("/dashboard/notifications/nope", headers=ORDERS_BASIC)
        assert not_an_id.status_code == 404

    # Without the read model the pages say so.
    offline = dashboard_app(settings, catalog, redis=real_redis, pool=None)
    async with http_client(offline) as client:
        for path in ("/dashboard", timeline_path):
            response = await client.get(path, headers=ORDERS_BASIC)
            assert response.status_code == 503
            assert "the read model (PostgreSQL) is unavailable" in response.text
