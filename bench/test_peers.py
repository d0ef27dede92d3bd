"""The peers of bench/peers.py run their job through real workers on real Redis.

Not a benchmark: a dozen jobs per peer, so the Celery task, the arq job and the code that
starts their workers cannot rot unnoticed between benchmark runs. It belongs to the
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

import pytest
import redis

from bench.peers import (
    STARTERS,
    arq_python,
    delete_run_keys,
    enqueue_and_wait,
    peer_catalog,
    problems_of,
    read_record,
    tally,
)
from streams.keys import KeySpace

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
@pytest.mark.parametrize("system", ["celery", "arq"])
def test_a_peer_sends_every_job_once_and_retries_the_failing_ones(
    system: str, key_prefix: str, tmp_path: Path
) -> None:
    skip_without(system)
    catalog = tmp_path / "clarion.toml"
    peer_catalog(catalog)
    stream = KeySpace(key_prefix).sandbox_sent
    client = redis.Redis.from_url(REDIS_URL)
    try:
        with STARTERS[system](REDIS_URL, key_prefix, catalog, tmp_path) as running:
            _, drained = enqueue_and_wait(running, client, stream, JOBS, "test")
        record = asyncio.run(read_record(REDIS_URL, stream, "0-0"))
    finally:
        delete_run_keys(client, key_prefix)
        client.close()

    run = tally(record, JOBS) | {"drained": drained}
    assert problems_of(system, run) == []
    assert run["sandbox_outcomes"] == {"sent": JOBS, "transient": 2}
    assert run["latency_ms"]["count"] == JOBS
