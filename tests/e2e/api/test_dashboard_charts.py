"""The dashboard's charts in a real headless Chromium, with a day of data in real PostgreSQL
and Redis: every chart is an SVG of non-zero size, and the screenshot of each chart that has
data shows its lines or bars (pixels of the chart's colours, not a blank frame)."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import msgspec
import pytest
from redis.asyncio import Redis

from app.campaigns.lifecycle import Campaigns
from app.campaigns.specs import CampaignSpec
from app.catalog import Catalog
from app.ingest.fanout import Planner
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import DIGEST, http_client
from tests.e2e.api.test_dashboard import (
    ORDERS_BASIC,
    Browser,
    browser_paths,
    chromium_browser,
    dashboard_app,
    serving,
)
from tests.integration.delivery_support import fast_catalog

pytestmark = pytest.mark.timeout(120)

CHARTS = ("ended", "rates", "dead-letters", "waiting", "oldest", "circuits", "campaigns")
# Colours of app.api.charts: the first two of its palette, and the grey of a bar's track.
BLUE, RED, GREY = (0x05, 0x50, 0xAE), (0xB4, 0x23, 0x18), (0xD1, 0xD9, 0xE0)
# Each chart with data, and a colour it draws its data in (a campaign that has not started
# shows only its track).
DRAWN = {"ended": BLUE, "rates": BLUE, "dead-letters": RED, "waiting": BLUE, "oldest": RED,
         "circuits": RED, "campaigns": GREY}  # fmt: skip


def guarded_catalog() -> Catalog:
    """The fast test catalog with a circuit breaker on the sandbox provider."""
    catalog = fast_catalog()
    sandbox = catalog.providers["sandbox"]
    circuit = msgspec.structs.replace(sandbox.circuit, enabled=True)
    catalog.providers["sandbox"] = msgspec.structs.replace(sandbox, circuit=circuit)
    return catalog


async def a_day_of_data(pool: asyncpg.Pool, redis: Redis, keys: KeySpace, catalog: Catalog) -> None:
    """Deliveries of "orders" ended over the last day (some FAILED), dead letters, waiting
    work, an open circuit and a campaign."""
    # Every minute of the day: 2 to 5 SMS (more in some hours) and 1 to 3 emails, a few
    # FAILED; made in the database, about 8,000 rows.
    await pool.execute(
        "INSERT INTO delivery (id, notification_id, producer, channel, status, updated_at,"
        " version)"
        " SELECT gen_random_uuid(), gen_random_uuid(), 'orders', channel,"
        "  CASE WHEN (m * 7 + k) % 11 = 0 THEN 'FAILED' ELSE 'SENT' END,"
        "  now() - m * interval '1 minute' - k * interval '1 second', 3"
        " FROM generate_series(0, 1439) AS m, generate_series(1, 5) AS k,"
        "  unnest(ARRAY['SMS', 'EMAIL']) AS channel"
        " WHERE k <= CASE channel WHEN 'SMS' THEN 2 + (m / 60) % 4 ELSE 1 + (m / 90) % 3 END"
    )
    now_ms = int(time.time() * 1000)
    for hours_ago in (20, 12, 12, 3, 1, 1, 1):  # oldest first: stream ids only grow
        await redis.xadd(keys.shard(0).dlq, {"f": "v"}, id=f"{now_ms - hours_ago * 3_600_000}-*")
    for _ in range(5):
        await redis.xadd(keys.shard(0).work(Priority.HIGH), {"f": "v"})
    await redis.hset(
        keys.circuit("sandbox"),
        mapping={"state": "open", "until_ms": now_ms + 600_000, "opened": 2},
    )
    campaigns = Campaigns(redis, keys, Planner(catalog, DIGEST), lambda: datetime.now(UTC))
    spring = CampaignSpec(type="marketing", name="Spring", data={"subject": "s", "body": "b"})
    campaign = await campaigns.create("orders", spring)
    await campaigns.add_recipients("orders", campaign.id, ["a", "b", "c", "d"], "")


def pixels(png: bytes) -> list[tuple[int, int, int]]:
    """The RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium makes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    data = b""
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        data += body if kind == b"IDAT" else b""
        chunks.setdefault(kind, body)
        at += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8, depth
    assert color in (2, 6), color
    step = 3 if color == 2 else 4
    raw, stride = zlib.decompress(data), width * step
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for x in range(stride):
            left = line[x - step] if x >= step else 0
            up, corner = previous[x], previous[x - step] if x >= step else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (
                    line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)
                ) & 0xFF
        rows.append(bytes(line))
        previous = line
    return [tuple(row[x : x + 3]) for row in rows for x in range(0, stride, step)]  # type: ignore[misc]


def near(pixel: tuple[int, int, int], color: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 24 for a, b in zip(pixel, color, strict=True))


def check_charts_in_chromium(browser: Browser, base_url: str, shots: Path) -> None:
    browser.cdp("Network.enable", {})
    browser.cdp("Network.setExtraHTTPHeaders", {"headers": ORDERS_BASIC})
    browser.open(f"{base_url}/dashboard")
    sizes = browser.script(
        "return [...document.querySelectorAll('#charts svg.chart')].map(s => {"
        " const r = s.getBoundingClientRect(); return [s.parentElement.id, r.width, r.height]; })"
    )
    assert [name for name, _, _ in sizes] == [f"chart-{c}" for c in CHARTS]
    assert all(w > 100 and h > 50 for _, w, h in sizes), sizes
    browser.screenshot(shots / "dashboard-charts.png")
    for chart, colour in DRAWN.items():
        browser.script(f"document.querySelector('#chart-{chart}').scrollIntoView()")
        element = browser.find(f"#chart-{chart} svg")
        png = base64.b64decode(browser.call("GET", f"/element/{element}/screenshot"))
        (shots / f"chart-{chart}.png").write_bytes(png)
        seen = pixels(png)
        drawn = sum(1 for p in seen if near(p, colour))
        assert drawn > 30, f"{chart}: {drawn} pixels of its colour in {len(seen)}"
    assert "no data" not in browser.text_of("#charts")


async def test_the_dashboard_draws_a_day_of_data_in_chromium(
    real_redis: Redis, key_prefix: str, database_url: str, pool: asyncpg.Pool,
    settings: Settings, tmp_path: Path,
) -> None:  # fmt: skip
    browser_paths()
    catalog = guarded_catalog()
    keys = KeySpace(key_prefix)
    await a_day_of_data(pool, real_redis, keys, catalog)
    # Over plain HTTP first: the page reloads itself, and its CSP still allows no script.
    async with http_client(dashboard_app(settings, catalog, redis=real_redis, pool=pool)) as c:
        answer = await c.get("/dashboard", headers=ORDERS_BASIC)
    assert answer.status_code == 200
    assert '<meta http-equiv="refresh" content="60">' in answer.text
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    assert "script" not in answer.headers["content-security-policy"]
    assert "<script" not in answer.text

    app = dashboard_app(settings, catalog, database_url=database_url)

    def browse() -> None:
        with serving(app) as base_url, chromium_browser() as browser:
            check_charts_in_chromium(browser, base_url, tmp_path)

    await asyncio.to_thread(browse)
