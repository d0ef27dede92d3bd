"""What one-click unsubscribe costs: per email in the worker, and per request at the API.

Run from anywhere with the project's virtualenv::

    .venv/bin/python bench/unsubscribe.py                 # 20,000 tokens, 4,000 requests
    .venv/bin/python bench/unsubscribe.py --requests 1000

- **Per email**: making a link's token (HMAC-SHA256) and reading one back, and building an
  SMTP message (``app.providers.smtp.build_email``) with and without the two header fields;
  each the best of five rounds, in microseconds per operation.
- **Per request**: the API application (``create_app``, real Redis, called through ASGI in
  this process, so neither uvicorn nor a network is counted) answering ``GET`` (the page:
  no Redis call), a first one-click ``POST`` per recipient (the opt-out is written: a read,
  the script, the hash read back) and a repeated one (already off: one read), 16 requests
  at a time; requests per second, and each request's time from call to answer (with 16 in
  one event loop, that includes waiting for the others).

Keys live under a random ``bench-<hex>`` prefix and are deleted at the end; the result is
printed and written to ``bench/results/unsubscribe-<UTC timestamp>.json``, which replaces the
older unsubscribe results there.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import redis
import redis.asyncio as aredis

if __package__ in {None, ""}:  # run as a script: make the ``bench`` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.api.app import create_app
from app.catalog import load_catalog
from app.logging import configure_logging
from app.providers.base import Message
from app.providers.smtp import build_email
from app.settings import Settings
from app.unsubscribe import OptOut, UnsubscribeLinks, UnsubscribeTokens
from bench.harness import (
    BENCH_DIGEST_SECRET,
    REPO,
    add_redis_url,
    delete_prefix,
    format_table,
    latency_summary,
    result_head,
    write_result,
)
from streams.core.vocabulary import Channel

CONCURRENCY = 16
ONE_CLICK = b"List-Unsubscribe=One-Click"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def per_operation_us(works: dict[str, Callable[[], object]], count: int) -> dict[str, float]:
    """Microseconds per call of each of ``works``: the best of five rounds of ``count`` calls,
    the rounds of all of them taken in turn, so a busy moment of the machine hits them alike."""
    best = dict.fromkeys(works, float("inf"))
    for _ in range(5):
        for name, work in works.items():
            started = time.perf_counter()
            for _ in range(count):
                work()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: round(seconds / count * 1e6, 2) for name, seconds in best.items()}


def per_email(count: int) -> dict[str, float]:
    """The worker's added cost per email: the token, and the SMTP message's two fields."""
    tokens = UnsubscribeTokens(BENCH_DIGEST_SECRET)
    links = UnsubscribeLinks("https://notify.example.com", tokens, 60 * 86400)
    now = time.time()
    token = tokens.make(OptOut("user-4242", "order_confirmed", Channel.EMAIL, int(now) + 3600))
    plain = Message(
        delivery_id="0193c5a0-7f3e-7abc-8def-0123456789ab", idempotency_key="k",
        channel=Channel.EMAIL, address="anna@example.com", title="Order A-17 confirmed",
        body="Thank you! Your order A-17 is confirmed.", attempt=1,
        html="<p>Your order <b>A-17</b> is confirmed.</p>",
    )  # fmt: skip
    url = links.url("user-4242", "order_confirmed", Channel.EMAIL, now)
    linked = replace(plain, unsubscribe_url=url)
    sender, msg_id = "Shop <no-reply@shop.example>", "<x@shop.example>"
    return per_operation_us(
        {
            "link_make_us": lambda: links.url("user-4242", "order_confirmed", Channel.EMAIL, now),
            "token_read_us": lambda: tokens.read(token, now),
            "smtp_message_us": lambda: build_email(plain, plain.address, sender, msg_id),
            "smtp_message_with_link_us": lambda: build_email(linked, plain.address, sender, msg_id),
        },
        count,
    )


async def requests_per_second(
    count: int, request: Callable[[int], Awaitable[httpx.Response]]
) -> dict[str, float]:
    """``count`` requests, ``CONCURRENCY`` at a time: requests per second and latencies (ms)."""
    latencies: list[float] = []
    queue = iter(range(count))

    async def client_loop() -> None:
        for n in queue:
            started = time.perf_counter()
            response = await request(n)
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"answered {response.status_code}: {response.text[:200]}")

    started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - started
    return {"requests_per_s": round(count / elapsed), **latency_summary(latencies)}


async def per_request(redis_url: str, prefix: str, count: int) -> dict[str, dict[str, float]]:
    """The API answering the page, first one-click POSTs, and repeated ones."""
    client = aredis.Redis.from_url(redis_url)
    settings = Settings(key_prefix=prefix, digest_secret=BENCH_DIGEST_SECRET)
    app = create_app(settings, redis=client, catalog=load_catalog(REPO / "clarion.toml"))
    tokens = UnsubscribeTokens(BENCH_DIGEST_SECRET)
    expires = int(time.time()) + 3600
    paths = [
        f"/v1/unsubscribe/{tokens.make(OptOut(f'user-{n}', 'marketing', Channel.EMAIL, expires))}"
        for n in range(count)
    ]
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            return {
                "page": await requests_per_second(count, lambda n: http.get(paths[n])),
                "first_post": await requests_per_second(
                    count, lambda n: http.post(paths[n], content=ONE_CLICK, headers=FORM)
                ),
                "repeated_post": await requests_per_second(
                    count, lambda n: http.post(paths[n], content=ONE_CLICK, headers=FORM)
                ),
            }
    finally:
        await client.aclose()


def main() -> None:
    """Measure, print, and write the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000, help="operations per round")
    parser.add_argument("--requests", type=int, default=4_000, help="requests per kind")
    add_redis_url(parser, "the recipients' settings")
    args = parser.parse_args()
    configure_logging("json", "WARNING")  # one line per recorded opt-out would be measured too
    started = datetime.now(UTC)
    sync = redis.Redis.from_url(args.redis_url)
    prefix = f"bench-{secrets.token_hex(4)}"
    result = result_head("unsubscribe", started, sync)
    try:
        result["per_email"] = per_email(args.tokens)
        result["per_request"] = asyncio.run(per_request(args.redis_url, prefix, args.requests))
    finally:
        delete_prefix(sync, prefix)
        sync.close()
    result["requests"] = args.requests
    result["tokens"] = args.tokens
    email = result["per_email"]
    print(format_table(
        ["per email (µs)", "value"],
        [[name, f"{value:.1f}"] for name, value in email.items()],
    ))  # fmt: skip
    print()
    print(format_table(
        ["per request", "req/s", "p50 ms", "p99 ms"],
        [[kind, f"{f['requests_per_s']:,}", f"{f['p50']:.1f}", f"{f['p99']:.1f}"]
         for kind, f in result["per_request"].items()],
    ))  # fmt: skip
    write_result("unsubscribe", result, started)


if __name__ == "__main__":
    main()
