"""Fair shares between producers with real worker processes: producer B's LOW notifications
are not stuck behind producer A's backlog of 200,000, and HIGH stays fast meanwhile.

B's share predicts how long its notifications take at most:

    T_B <= t_accept + t_poll + (N_B * (w_A + w_B) / w_B + buffer) / R

where t_accept is how long B's batch took to be accepted, t_poll how long a feeder waits
before it looks again at a full stream, R the LOW delivery rate while B's
notifications were under way, w_A and w_B the producers' weights and ``buffer`` the items a
work stream holds before producers queue (``streams.delivery.fairness``). First in, first out, B
would wait for A's whole remaining backlog instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from redis.asyncio import Redis

from app.catalog import parse_catalog
from app.delivery.feeder import FeederTiming
from app.ingest.fanout import Planner
from app.ingest.ingestor import Ingestor
from app.ingest.requests import NotificationRequest
from streams.core.keys import KeySpace
from tests.conftest import DIGEST
from tests.e2e.processes.test_worker import worker_env, workers
from tests.integration.delivery_support import catalog_text, wait_until

pytestmark = pytest.mark.timeout(240)
BACKLOG, B_COUNT = 200_000, 1000
STALL_S = 0.5  # what a stall of the shared machine may add to the window


def email(n: int) -> NotificationRequest:
    return msgspec.convert(
        {"recipient": {"id": f"r-{n}", "email": f"r-{n}@example.com"}, "type": "marketing",
         "channels": ["EMAIL"], "data": {"subject": "s", "body": "b"}},
        NotificationRequest,
    )  # fmt: skip


def otp(n: int) -> NotificationRequest:
    return msgspec.convert(
        {"recipient": {"id": f"o-{n}", "phone": "+4915112345678"}, "type": "otp",
         "data": {"code": str(n)}},
        NotificationRequest,
    )  # fmt: skip


def id_ms(uuid7: str) -> int:
    """When an id was made (its first 48 bits, ``streams.core.ids``)."""
    return int(uuid7[:8] + uuid7[9:13], 16)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Sends:
    """The sandbox's sends, read as they come: delivery id -> when (ms)."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis, self.stream, self.after = redis, keys.sandbox_sent, "-"
        self.at: dict[str, int] = {}

    async def read(self) -> dict[str, int]:
        while True:
            chunk: Any = await self.redis.xrange(self.stream, self.after, "+", count=10_000)
            for entry_id, fields in chunk:
                if fields[b"outcome"] == b"sent":
                    ms = int(entry_id.split(b"-")[0])
                    self.at.setdefault(fields[b"delivery_id"].decode(), ms)
            if len(chunk) < 10_000:
                return self.at
            self.after = "(" + chunk[-1][0].decode()


async def accept(
    ingestor: Ingestor, producer: str, entries: list[tuple[str, NotificationRequest]]
) -> list[tuple[str, int]]:
    """(delivery id, accepted ms) of each QUEUED delivery."""
    found = []
    for answer in await ingestor.ingest_many(producer, entries):
        assert answer.accepted, answer.error
        accepted = msgspec.json.decode(answer.response)
        found += [
            (d["id"], id_ms(accepted["id"]))
            for d in accepted["deliveries"]
            if d["status"] == "QUEUED"
        ]
    return found


async def test_b_gets_its_share_behind_as_backlog_and_high_stays_fast(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    keys = KeySpace(key_prefix)
    text = catalog_text(rate_limit="")
    catalog_path = tmp_path / "catalog.toml"
    catalog_path.write_text(text)
    catalog = parse_catalog(text, str(catalog_path))
    ingestor = Ingestor(real_redis, keys, Planner(catalog, DIGEST), 3600)
    for start in range(0, BACKLOG, 1000):
        await accept(ingestor, "alpha", [(f"a-{n}", email(n)) for n in range(start, start + 1000)])
    sends = Sends(real_redis, keys)
    with workers(worker_env(key_prefix, catalog_path), [0, 1]):

        async def steady() -> bool:
            return len(await sends.read()) >= 5000

        await wait_until(steady, within=60)
        stop = asyncio.Event()

        async def send_otps() -> list[tuple[str, int]]:
            sent, n = [], 0
            while not stop.is_set():
                n += 1
                sent += await accept(ingestor, "beta", [(f"otp-{n}", otp(n))])
                await asyncio.sleep(0.02)
            return sent

        otps = asyncio.create_task(send_otps())
        b = await accept(ingestor, "beta", [(f"b-{n}", email(BACKLOG + n)) for n in range(B_COUNT)])
        b_ids = {delivery_id for delivery_id, _ in b}

        async def b_sent() -> bool:
            return b_ids <= (await sends.read()).keys()

        await wait_until(b_sent, within=120)
        stop.set()
        otp_sent = await otps
        await asyncio.sleep(0.5)  # the last OTPs
        at = await sends.read()

    accepted = min(ms for _, ms in b)
    accept_s = (max(ms for _, ms in b) - accepted) / 1000
    done = max(at[d] for d in b_ids)
    otp_ids = {d for d, _ in otp_sent}
    window_s = (done - accepted) / 1000
    rate = sum(1 for d, ms in at.items() if accepted <= ms <= done and d not in otp_ids) / window_s
    poll_s = FeederTiming().full_s
    predicted_s = accept_s + poll_s + (B_COUNT * 2 + catalog.fairness.buffer) / rate
    fifo_s = (BACKLOG - sum(1 for d, ms in at.items() if ms < accepted) + B_COUNT) / rate
    # Within its share, with a quarter and half a second to spare for a busy machine (a
    # fresh-clone CI run once took 1.16 s for a predicted 0.80: two workers, the test and
    # Redis share two cores); far from first-in-first-out.
    assert window_s <= 1.25 * predicted_s + STALL_S, (window_s, predicted_s, rate)
    assert window_s < fifo_s / 4, (window_s, fifo_s)
    latencies = [float(at[d] - ms) for d, ms in otp_sent if d in at]
    assert len(latencies) == len(otp_sent)
    assert p99(latencies) < 100, sorted(latencies)[-10:]
