"""The peers of bench/peers.py run their job through real workers on real Redis.

Not a benchmark: a dozen jobs per configuration of each peer (``bench/peer_configs.py``), so
the Celery task in every pool, the arq job, their enqueuers and the code that starts their
workers cannot rot unnoticed between benchmark runs. It belongs to the
benchmarks, not to the product's test suite (``make test`` does not collect it)::

    make bench-check                     # installs the bench extra and the arq environment
    .venv/bin/pytest bench/test_peers.py # skips a peer whose packages are missing

Redis: ``CLARION_TEST_REDIS_URL``, as for the test suite (default: local).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.harness import SandboxRecord
from bench.peer_configs import ARQ, CELERY, CLARION, Config
from bench.peers import (
    GOALS,
    arq_python,
    best_of,
    comparisons,
    delete_run_keys,
    enqueue_and_wait,
    peer_catalog,
    problems_of,
    read_record,
    start,
    tally,
)
from bench.report_summary import peers_figures, peers_tables
from streams.core.ids import new_id
from streams.core.keys import KeySpace

REDIS_URL = os.environ.get("CLARION_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
JOBS = 12  # jobs 0 and 10 fail once (bench.peer_job.FAIL_EVERY)


@pytest.fixture
def key_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def skip_without(system: str) -> None:
    """Skip, saying how to install it, when a peer's packages are missing."""
    if system == "celery" and importlib.util.find_spec("celery") is None:
        pytest.skip("Celery is not installed: .venv/bin/pip install -e '.[dev,bench]'")
    if system == "arq" and not arq_python().exists():
        pytest.skip(
            "the arq peer's environment is missing: make bench-check creates it "
            "(or .venv/bin/python bench/peers.py --systems arq --quick)"
        )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("config", [*CELERY, *ARQ], ids=lambda config: config.name)
def test_a_peer_sends_every_job_once_and_retries_the_failing_ones(
    config: Config, key_prefix: str, tmp_path: Path
) -> None:
    skip_without(config.system)
    catalog = tmp_path / "clarion.toml"
    peer_catalog(catalog)
    stream = KeySpace(key_prefix).sandbox_sent
    client = redis.Redis.from_url(REDIS_URL)
    try:
        with start(config, REDIS_URL, key_prefix, catalog, tmp_path) as running:
            enqueued, drained = enqueue_and_wait(running, client, stream, JOBS, "test")
        record = asyncio.run(read_record(REDIS_URL, stream, "0-0"))
    finally:
        delete_run_keys(client, key_prefix)
        client.close()

    run = tally(record, JOBS, enqueued.sent_ms) | {"drained": drained}
    assert problems_of(config.name, run) == []
    assert run["sandbox_outcomes"] == {"sent": JOBS, "transient": 2}
    assert run["latency_ms"]["count"] == JOBS


def sandbox_record(sent_ms: dict[str, int]) -> SandboxRecord:
    """A sandbox record of one ``sent`` entry per delivery, at the given ms."""
    record = SandboxRecord(first_sent_ms=dict(sent_ms), entries=len(sent_ms))
    record.outcomes["sent"] = len(sent_ms)
    record.last_sent_ms = max(sent_ms.values())
    return record


def test_a_clarion_job_is_timed_from_when_its_batch_was_sent() -> None:
    # Two batches sent at 1,000 and 1,500 ms; the API minted the ids later (at 5,000 ms),
    # which must not shorten the run: the clock starts at the first send.
    first, second = new_id(0, now_ms=5_000), new_id(0, now_ms=5_000)
    record = sandbox_record({first: 2_000, second: 3_000})
    run = tally(record, 2, {first: 1_000, second: 1_500})
    assert run["span_s"] == 2.0
    assert run["deliveries_per_s"] == 1.0
    assert run["latency_ms"]["p50"] == 1_000.0  # 2,000 - 1,000
    assert run["latency_ms"]["max"] == 1_500.0  # 3,000 - 1,500


def test_a_peer_job_is_timed_from_the_id_minted_before_its_enqueue() -> None:
    first, second = new_id(0, now_ms=1_000), new_id(0, now_ms=1_200)
    run = tally(sandbox_record({first: 1_500, second: 2_000}), 2)
    assert run["span_s"] == 1.0
    assert run["latency_ms"]["max"] == 800.0


def a_run(system: str, per_s: float, problems: list[str] | None = None) -> dict[str, Any]:
    config = {"clarion": CLARION, "celery": CELERY[0], "arq": ARQ[0]}[system]
    return {
        "system": system,
        "config": config.description(),
        "jobs": 1000,
        "enqueue_per_s": 2 * per_s,
        "deliveries_per_s": per_s,
        "latency_ms": {"p50": 1.0, "p99": 2.0},
        "delivered": 1000,
        "repeated_sends": 0,
        "problems": problems or [],
    }


def test_the_best_trustworthy_configuration_of_each_peer_meets_clarion_against_its_goal() -> None:
    runs = {
        "clarion": a_run("clarion", 10_000),
        "celery-a": a_run("celery", 400),
        "celery-b": a_run("celery", 600),
        "celery-lossy": a_run("celery", 5_000, ["celery-lossy: 3 of 1000 jobs never reached"]),
        "arq-a": a_run("arq", 900),
        "arq-b": a_run("arq", 800),
    }
    compared = comparisons(runs)

    assert best_of(runs, "celery") == "celery-b"  # the lossy one is not eligible
    assert compared["celery"] == {
        "best": "celery-b",
        "best_deliveries_per_s": 600,
        "clarion_deliveries_per_s": 10_000,
        "deliveries_per_s": 16.67,
        "goal": GOALS["celery"],
        "reached": False,
    }
    assert compared["arq"]["best"] == "arq-a"
    assert compared["arq"]["reached"] is True  # 11.11 >= 10

    result = {"runs": runs, "ratios": compared, "parameters": {"job": "the job"}}
    judged = {f["figure"]: f["pass"] for f in peers_figures(result) if f["pass"] is not None}
    assert judged == {
        "Clarion ÷ best Celery (celery-b): deliveries/s": False,
        "Clarion ÷ best arq (arq-a): deliveries/s": True,
    }
    text = "\n".join(peers_tables(result))
    assert "celery-b (best)" in text
    assert "| Clarion ÷ best Celery (celery-b) | 16.67 | >= 20.00 | **not reached** |" in text
