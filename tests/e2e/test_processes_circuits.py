"""A provider's circuit breaker shared by two delivery worker processes, against real Redis
and the local Twilio peer: failures counted by both open it for both, no call reaches the
provider while it is open (the deliveries wait without spending attempts), and once the
provider answers again one probe closes it and every delivery is sent once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.core.events import DeliveryDeferred
from streams.core.keys import KeySpace
from streams.delivery.circuit_breaker import CircuitState, read_circuits
from tests.conftest import stream_events
from tests.e2e.processes.test_worker import accept_many, statuses, worker_env, workers
from tests.integration.delivery_support import wait_until
from tests.peers.serving import Fault, serve
from tests.peers.twilio import PEER_SID, PEER_TOKEN, TwilioPeer

pytestmark = pytest.mark.timeout(120)

CATALOG = """
[providers.sms]
kind = "twilio"
account_sid = "{sid}"
auth_token_env = "TEST_TWILIO_TOKEN"
from = "+15005550006"
base_url = "{base_url}"
timeout_seconds = 2
circuit = {{ min_calls = 10, failure_share = 0.5, window_seconds = 30, open_seconds = 1.5 }}

[channels.SMS]
provider = "sms"
retry = {{ base_seconds = 0.2, max_seconds = 0.5, max_attempts = 20 }}

[types.otp]
channels = ["SMS"]
priority = "HIGH"
ttl_seconds = 300
opt_out = false

[types.otp.templates.en]
SMS = {{ body = "Your code is {{{{ code }}}}" }}
"""


async def test_two_workers_share_one_circuit_and_one_probe_closes_it(
    real_redis: Redis, key_prefix: str, tmp_path: Path
) -> None:
    keys = KeySpace(key_prefix)
    peer = TwilioPeer()
    with serve(peer) as served:
        catalog_path = tmp_path / "clarion.toml"
        catalog_path.write_text(CATALOG.format(sid=PEER_SID, base_url=served.base_url))
        env = worker_env(key_prefix, catalog_path, TEST_TWILIO_TOKEN=PEER_TOKEN)
        peer.fail(Fault.UNAVAILABLE, retry_after=None)  # 503 to every call
        bodies = [
            {"recipient": {"id": f"u-{n}", "phone": "+14155550123"}, "type": "otp",
             "data": {"code": str(n)}}
            for n in range(40)
        ]  # fmt: skip
        with workers(env, [0, 1]):
            ids = await accept_many(real_redis, keys, catalog_path, bodies, "c")

            async def opened() -> bool:
                circuits = await read_circuits(real_redis, keys, ["sms"])
                return circuits["sms"].state is CircuitState.OPEN

            await wait_until(opened, within=20)
            await asyncio.sleep(0.5)  # calls in flight when it opened have answered by now
            calls_when_open = peer.requests
            await asyncio.sleep(0.8)  # still open: no call reaches the provider
            assert peer.requests == calls_when_open
            peer.heal()

            async def all_sent() -> bool:
                return (await statuses(real_redis, keys, ids))["SENT"] == len(ids)

            await wait_until(all_sent, within=40)
        circuits = await read_circuits(real_redis, keys, ["sms"])
    assert circuits["sms"].state is CircuitState.CLOSED
    assert circuits["sms"].opened >= 1
    # Each delivery was sent once, and waiting for the circuit spent no attempts.
    assert len(peer.accepted) == len(ids)
    events = await stream_events(real_redis, keys.shard(0).events)
    assert any(isinstance(e, DeliveryDeferred) and e.reason == "circuit_open" for e in events)
