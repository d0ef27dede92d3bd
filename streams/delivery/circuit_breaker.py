"""Circuit breakers of providers, shared by every worker process through Redis.

A provider's circuit is CLOSED while it answers; it OPENS when at least ``failure_share`` of
at least ``min_calls`` calls in the last ``window_seconds`` failed TRANSIENT (timeouts,
5xx, refused connections). While open, no call goes to it: deliveries wait in ``delayed``
without counting an attempt, or go to the channel's next provider. After ``open_seconds``
it is HALF-OPEN: one worker's one delivery probes it (the probe is leased, so one at a time
among all workers); the probe's success closes the circuit, its failure opens it again.

Workers do not ask Redis per delivery. Each counts its calls per provider and reports them
every ``interval_s`` (one script call per provider with calls to report), and each report
answers with the circuit's state, which the worker keeps until the next one: a circuit
opened by one worker is seen by the others within an interval. The decisions are made in
``circuit.lua`` on the Redis clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.core import clock
from streams.core.codec import as_text
from streams.core.connection import being_cancelled
from streams.core.keys import KeySpace
from streams.core.scripts import CIRCUIT, KeyOrArg

log = structlog.get_logger(__name__)

REPORT_INTERVAL_S = 0.2


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class CircuitPolicy:
    """When one provider's circuit opens and for how long (``CircuitConfig`` of the catalog)."""

    failure_share: float
    min_calls: int
    window_seconds: int
    open_seconds: float


@dataclass(frozen=True, slots=True)
class Circuit:
    """A circuit as Redis last answered about it."""

    state: CircuitState = CircuitState.CLOSED
    # OPEN: when it may be probed (Redis clock, ms); HALF_OPEN: when the probe's lease ends.
    until_ms: int = 0
    # Calls and TRANSIENT failures counted in the current window (CLOSED only).
    calls: int = 0
    failures: int = 0
    # How often it opened since its key was made.
    opened: int = 0

    @classmethod
    def of_reply(cls, reply: Sequence[Any]) -> tuple[Circuit, bool]:
        """The circuit a script reply describes, and whether a probe was granted."""
        state = CircuitState(as_text(reply[0]))
        until = int(reply[6]) if state is CircuitState.HALF_OPEN else int(reply[1])
        circuit = cls(state, until, int(reply[2]), int(reply[3]), int(reply[4]))
        return circuit, int(reply[5]) == 1


def circuit_call(
    keys: KeySpace, provider: str, policy: CircuitPolicy, operation: str, *extra: KeyOrArg
) -> tuple[list[KeyOrArg], list[KeyOrArg]]:
    """Keys and arguments of one ``circuit.lua`` call."""
    args: list[KeyOrArg] = [
        operation,
        repr(policy.failure_share),
        policy.min_calls,
        policy.window_seconds,
        round(policy.open_seconds * 1000),
        *extra,
    ]
    return [keys.circuit(provider)], args


@dataclass(slots=True)
class _Tally:
    calls: int = 0
    failures: int = 0


@dataclass
class CircuitBreakers:
    """One worker process's view of its providers' circuits, and its reports of calls."""

    redis: Redis
    keys: KeySpace
    policies: Mapping[str, CircuitPolicy]
    interval_s: float = REPORT_INTERVAL_S
    _circuits: dict[str, Circuit] = field(default_factory=dict)
    _tallies: dict[str, _Tally] = field(default_factory=dict)

    def guarded(self, provider: str) -> bool:
        """Whether ``provider`` has a circuit breaker at all."""
        return provider in self.policies

    def circuit(self, provider: str) -> Circuit:
        """The provider's circuit as last reported (CLOSED when never heard of)."""
        return self._circuits.get(provider, Circuit())

    def record(self, provider: str, *, failed: bool) -> None:
        """Count one call's answer: ``failed`` for a TRANSIENT failure, else it answered."""
        if provider not in self.policies:
            return
        tally = self._tallies.setdefault(provider, _Tally())
        tally.calls += 1
        tally.failures += failed

    async def try_probe(self, provider: str, lease_ms: int) -> bool:
        """Claim the probe of a half-open circuit for ``lease_ms``; whether it is ours."""
        reply = await self._call(provider, "probe", lease_ms)
        return reply is not None and reply[1]

    async def probe_done(self, provider: str, *, ok: bool) -> None:
        """The probe answered (``ok``: not a TRANSIENT failure): close or reopen."""
        opened = self.circuit(provider).opened
        reply = await self._call(provider, "probe_done", "1" if ok else "0")
        if reply is not None:
            self._log_change(provider, opened)

    async def report(self) -> None:
        """Send the counted calls and refresh every provider's circuit."""
        tallies, self._tallies = self._tallies, {}
        providers = list(self.policies)
        calls = [
            circuit_call(
                self.keys,
                provider,
                self.policies[provider],
                "report",
                tallies.get(provider, _Tally()).calls,
                tallies.get(provider, _Tally()).failures,
            )
            for provider in providers
        ]
        if not calls:
            return
        replies = await CIRCUIT.run_many(self.redis, calls, return_exceptions=True)
        for provider, reply in zip(providers, replies, strict=True):
            if isinstance(reply, Exception):
                continue  # kept as last known; the counts of one interval are lost
            opened = self.circuit(provider).opened
            self._circuits[provider], _ = Circuit.of_reply(reply)
            self._log_change(provider, opened)

    async def run(self) -> None:
        """Report every ``interval_s`` until cancelled."""
        while True:
            try:
                await self.report()
            except (RedisError, OSError) as error:
                log.warning("circuit.report_failed", error=type(error).__name__)
            if being_cancelled():
                # A cancellation the client turned into an error, or swallowed: the sleep
                # would not be interrupted again, and the worker would never stop.
                raise asyncio.CancelledError
            await asyncio.sleep(self.interval_s)

    async def _call(
        self, provider: str, operation: str, *extra: KeyOrArg
    ) -> tuple[Circuit, bool] | None:
        keys, args = circuit_call(self.keys, provider, self.policies[provider], operation, *extra)
        try:
            reply = await CIRCUIT(self.redis, keys, args)
        except (RedisError, OSError) as error:
            log.warning("circuit.call_failed", provider=provider, error=type(error).__name__)
            return None
        circuit, granted = Circuit.of_reply(reply)
        self._circuits[provider] = circuit
        return circuit, granted

    def _log_change(self, provider: str, opened_before: int) -> None:
        circuit = self.circuit(provider)
        if circuit.opened > opened_before:
            log.warning("circuit.opened", provider=provider, until_ms=circuit.until_ms)


async def read_circuits(
    redis: Redis, keys: KeySpace, providers: Sequence[str]
) -> dict[str, Circuit]:
    """Every named provider's circuit as Redis holds it (for status views; changes nothing).
    An open circuit whose time is up shows as HALF_OPEN: the next delivery probes it."""
    now_ms = clock.now_ms()
    pipe = redis.pipeline(transaction=False)
    for provider in providers:
        pipe.hmget(keys.circuit(provider), "state", "until_ms", "probe_until_ms", "opened")
    circuits: dict[str, Circuit] = {}
    for provider, (state, until, probe_until, opened) in zip(
        providers, await pipe.execute(), strict=True
    ):
        current = CircuitState(as_text(state)) if state else CircuitState.CLOSED
        until_ms = int(until or 0)
        if current is CircuitState.OPEN and until_ms <= now_ms:
            current, until_ms = CircuitState.HALF_OPEN, 0
        elif current is CircuitState.HALF_OPEN:
            until_ms = int(probe_until or 0)
        circuits[provider] = Circuit(current, until_ms, opened=int(opened or 0))
    return circuits
