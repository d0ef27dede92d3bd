"""Campaign benchmark: how fast a campaign's recipients become queued deliveries, and what a
large campaign holds in Redis.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/campaigns.py                       # 200,000 recipients
    .venv/bin/python bench/campaigns.py --quick               # 40,000
    .venv/bin/python bench/campaigns.py --memory              # 1,000,000, delivered as well

It starts the API (``clarion api``) and one delivery worker (``clarion worker``, which runs
the campaign generator) on a fresh key prefix, with the shipped catalog without rate limits.
Each recipient gets a profile with an email address (written before the clock starts, as a
producer's recipients would already have). Then, through the API: a ``marketing``
campaign is created, its recipients uploaded in parts of 10,000 and the campaign started.

- generation (default): the worker may queue the whole campaign (``CLARION_CAMPAIGN_BACKLOG``
  above its size), so nothing but generation is measured: recipients per second from the
  generator's start to the campaign's completion, by the campaign's own record, with the
  CPU seconds of the worker and of Redis. Target on two cores: 30,000 recipients/s.
- ``--memory``: the default backlog (100,000) and two workers delivering to the sandbox; Redis's
  ``used_memory`` is sampled every half second from the start until every delivery ended.
  Reported: the memory before the campaign (profiles and uploaded audience included), its
  peak, and what is left when it is done, in bytes per recipient.

The result is printed and written to ``bench/results/campaigns-<UTC timestamp>.json``
(``campaigns_memory-…`` with ``--memory``).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis
import uvloop

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.ingest.profiles import Profile
from app.recipients.profiles import encode
from bench.harness import (
    HEALTH_PATH,
    REPO,
    BenchError,
    add_redis_url,
    api_client,
    clarion_executable,
    cpu_snapshot,
    delete_prefix,
    free_port,
    log_findings,
    print_problems,
    redis_pid,
    result_head,
    running,
    service_env,
    unlimited_catalog,
    wait_healthy,
    write_result,
)
from streams.campaigns.store import CampaignStore
from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from streams.recipients.settings import RecipientSettingsStore

RECIPIENTS = 200_000
QUICK_RECIPIENTS = 40_000
MEMORY_RECIPIENTS = 1_000_000
UPLOAD = 10_000
PRODUCER = "bench"  # the producer of the benchmark's API key (bench.harness.service_env)
TARGET_PER_S = 30_000
CAMPAIGN = {"type": "marketing", "name": "bench", "data": {"subject": "Sale", "body": "Now"}}


async def give_profiles(redis_url: str, keys: KeySpace, count: int) -> None:
    """A profile with an email address for recipients ``r-0`` … ``r-<count - 1>``."""
    client = connect(redis_url, max_connections=64)
    store = RecipientSettingsStore(client, keys)

    async def one(number: int) -> None:
        profile = encode(Profile(email=f"r-{number}@example.com"))
        await store.update_profile(f"r-{number}", lambda _: (profile, ["email"]))

    try:
        for start in range(0, count, 50):
            await asyncio.gather(*(one(n) for n in range(start, min(count, start + 50))))
    finally:
        await client.aclose()


async def start_campaign(base_url: str, count: int) -> str:
    """Create, fill and start the campaign through the API; its id."""
    async with api_client(base_url, 2) as api:
        created = await api.post("/v1/campaigns", json=CAMPAIGN)
        _expect(created, 201)
        campaign_id: str = created.json()["id"]
        for start in range(0, count, UPLOAD):
            ids = [f"r-{n}" for n in range(start, min(count, start + UPLOAD))]
            uploaded = await api.post(
                f"/v1/campaigns/{campaign_id}/recipients", json={"recipients": ids}
            )
            _expect(uploaded, 200)
        _expect(await api.post(f"/v1/campaigns/{campaign_id}/start"), 200)
    return campaign_id


def _expect(answer: httpx.Response, status: int) -> None:
    if answer.status_code != status:
        raise BenchError(f"{answer.request.url}: {answer.status_code} {answer.text[:300]}")


async def follow(
    redis_url: str, keys: KeySpace, campaign_id: str, count: int, sample_memory: bool
) -> dict[str, Any]:
    """Wait until the campaign completed (and, when sampling memory, its deliveries
    ended); its record's figures and the memory samples."""
    client = connect(redis_url)
    store = CampaignStore(client, keys)
    memory: list[int] = []
    deadline = time.monotonic() + max(120.0, count / 500)
    try:
        while time.monotonic() < deadline:
            if sample_memory:
                memory.append(int((await client.info("memory"))["used_memory"]))
            campaign = await store.get(campaign_id)
            assert campaign is not None
            if campaign.state == "completed" and (
                not sample_memory or await store.backlog(Priority.LOW, PRODUCER) == 0
            ):
                return {"campaign": campaign, "memory": memory}
            await asyncio.sleep(0.5 if sample_memory else 0.05)
        raise BenchError(f"the campaign did not complete within {max(120.0, count / 500)} s")
    finally:
        await client.aclose()


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    prefix = f"bench-{secrets.token_hex(6)}"
    keys = KeySpace(prefix)
    port = free_port()
    catalog = scratch / "campaigns.toml"
    unlimited_catalog(REPO / "clarion.toml", catalog)
    env = service_env(prefix, args.redis_url, port, catalog)
    if not args.memory:
        env["CLARION_CAMPAIGN_BACKLOG"] = str(args.recipients + 1000)
    clarion = str(clarion_executable())
    workers = 2 if args.memory else 1
    logs = {
        name: scratch / f"{name}.log" for name in ("api", *(f"worker{n}" for n in range(workers)))
    }
    client = redis.Redis.from_url(args.redis_url)
    try:
        uvloop.run(give_profiles(args.redis_url, keys, args.recipients))
        with ExitStack() as stack:
            api = stack.enter_context(running([clarion, "api", "--workers", "1"], env, logs["api"]))
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(api, base_url + HEALTH_PATH, logs["api"])
            baseline = int(client.info("memory")["used_memory"])
            campaign_id = uvloop.run(start_campaign(base_url, args.recipients))
            uploaded = int(client.info("memory")["used_memory"])
            processes = [
                stack.enter_context(
                    running([clarion, "worker", "--slot", str(n)], env, logs[f"worker{n}"])
                )
                for n in range(workers)
            ]
            groups = {"worker": [p.pid for p in processes]}
            server = redis_pid(args.redis_url)
            before = cpu_snapshot(groups, server, postgres=False)
            followed = uvloop.run(
                follow(args.redis_url, keys, campaign_id, args.recipients, args.memory)
            )
            used = cpu_snapshot(groups, server, postgres=False).used(before)
            left = int(client.info("memory")["used_memory"])
    finally:
        delete_prefix(client, prefix)
        client.close()
    campaign = followed["campaign"]
    elapsed_s = (campaign.ended_ms - campaign.started_ms) / 1000
    figures: dict[str, Any] = {
        "recipients": args.recipients,
        "generated": campaign.generated,
        "skipped": campaign.skipped,
        "repeated": campaign.repeated,
        "generation_s": round(elapsed_s, 3),
        "recipients_per_s": round((campaign.generated + campaign.skipped) / elapsed_s, 1),
        "workers": workers,
        "cpu_s": used,
        "logs": {name: log_findings(path) for name, path in logs.items()},
    }
    if args.memory:
        peak = max(followed["memory"], default=uploaded)
        figures["memory"] = {
            "before_upload_bytes": baseline,
            "after_upload_bytes": uploaded,
            "peak_bytes": peak,
            "after_bytes": left,
            "audience_bytes_per_recipient": round((uploaded - baseline) / args.recipients, 1),
            "peak_above_start_bytes_per_recipient": round((peak - baseline) / args.recipients, 1),
            "left_bytes_per_recipient": round((left - baseline) / args.recipients, 1),
            "samples": len(followed["memory"]),
        }
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--recipients", type=int, default=RECIPIENTS)
    parser.add_argument("--quick", action="store_true", help=f"--recipients {QUICK_RECIPIENTS}")
    parser.add_argument(
        "--memory",
        action="store_true",
        help=f"--recipients {MEMORY_RECIPIENTS:,}, delivered, Redis memory sampled",
    )
    add_redis_url(parser, "the services")
    args = parser.parse_args()
    if args.quick:
        args.recipients = QUICK_RECIPIENTS
    if args.memory and args.recipients == RECIPIENTS:
        args.recipients = MEMORY_RECIPIENTS
    started = datetime.now(UTC)
    client = redis.Redis.from_url(args.redis_url)
    kind = "campaigns_memory" if args.memory else "campaigns"
    result: dict[str, Any] = {**result_head(kind, started, client), "problems": []}
    client.close()
    with tempfile.TemporaryDirectory(prefix="clarion-bench-") as scratch:
        figures = run(args, Path(scratch))
    result |= figures
    result["targets"] = {"recipients_per_s": TARGET_PER_S}
    if figures["generated"] + figures["skipped"] != args.recipients:
        result["problems"].append(
            f"{figures['generated'] + figures['skipped']:,} of {args.recipients:,} recipients"
        )
    result["problems"] += [
        f"{name}: {found['errors']} error lines"
        for name, found in figures["logs"].items()
        if found["errors"]
    ]
    per = {g: round(s * 1e6 / args.recipients, 1) for g, s in figures["cpu_s"].items()}
    result["cpu_us_per_recipient"] = per
    print(
        f"\ncampaigns: {args.recipients:,} recipients generated in {figures['generation_s']} s: "
        f"{figures['recipients_per_s']:,.0f} recipients/s (target >= {TARGET_PER_S:,}); "
        f"CPU us per recipient: {per}"
    )
    if args.memory:
        memory = figures["memory"]
        print(
            f"Redis memory: {memory['before_upload_bytes'] / 2**20:,.0f} MiB before, "
            f"{memory['after_upload_bytes'] / 2**20:,.0f} MiB with the audience uploaded, "
            f"peak {memory['peak_bytes'] / 2**20:,.0f} MiB, "
            f"{memory['after_bytes'] / 2**20:,.0f} MiB when every delivery ended"
        )
    write_result(kind, result, started)
    if result["problems"]:
        print_problems(result["problems"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
