"""``clarion campaign status`` against real Redis (and a PostgreSQL it cannot reach)."""

from __future__ import annotations

import asyncio

from click.testing import CliRunner

from app.catalog import load_catalog
from app.cli.main import main
from streams.core.connection import connect
from streams.core.keys import KeySpace
from tests.conftest import REDIS_URL, REPO, delete_prefix
from tests.integration.campaign_support import MARKETING, always, parts

UNREACHABLE_DB = "postgresql://postgres@127.0.0.1:1/clarion"


async def _generated(prefix: str, recipients: int) -> str:
    redis = connect(REDIS_URL)
    try:
        campaigns, generator = parts(redis, KeySpace(prefix), load_catalog(REPO / "clarion.toml"))
        campaign = await campaigns.create("orders", MARKETING)
        ids = [f"u-{i}" for i in range(recipients)]
        await campaigns.add_recipients("orders", campaign.id, ids, "")
        await campaigns.start("orders", campaign.id)
        await generator.run(campaign.id, always)
        return campaign.id
    finally:
        await redis.aclose()


async def _clean(prefix: str) -> None:
    redis = connect(REDIS_URL)
    await delete_prefix(redis, prefix)
    await redis.aclose()


def invoke(prefix: str, *args: str) -> tuple[int, str]:
    env = {
        "CLARION_KEY_PREFIX": prefix,
        "CLARION_REDIS_URL": REDIS_URL,
        "CLARION_DATABASE_URL": UNREACHABLE_DB,
    }
    result = CliRunner().invoke(main, ["campaign", "status", *args], env=env)
    return result.exit_code, result.output


def test_status_shows_a_campaigns_progress_with_a_bar(key_prefix: str) -> None:
    campaign_id = asyncio.run(_generated(key_prefix, 1500))
    try:
        code, output = invoke(key_prefix, campaign_id, "--watch")  # ends: it completed
    finally:
        asyncio.run(_clean(key_prefix))
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0] == f"(marketing) {campaign_id}  completed"
    assert lines[1].startswith(f"[{'#' * 30}] 100.0%  1,500 / 1,500 recipients")
    assert lines[2] == "generated 1,500 · skipped 0 · repeated 0 · remaining 0"
    assert lines[3] == "deliveries: the read model is not reachable"


def test_status_names_what_is_wrong(key_prefix: str) -> None:
    code, output = invoke(key_prefix, "not-an-id")
    assert code == 2
    assert "a campaign id (a UUID)" in output
    code, output = invoke(key_prefix, "019bc123-4567-7abc-8def-0123456789ab")
    assert code == 1
    assert "no campaign '019bc123-4567-7abc-8def-0123456789ab'" in output
