"""Which provider an attempt goes to: failover order, circuit breakers and bulkheads.

A channel names its providers in order (``providers = ["primary", "backup"]``). A delivery
starts with the first; after an attempt that certainly did not reach its provider
(``ProviderError.not_accepted``) the work item's ``failover`` counter moves it on to the
next, round the list. A provider whose circuit is open is passed over for the next one; a
half-open one gets the delivery as its probe when no other worker is probing it. When every
provider's circuit is open the delivery waits, without counting an attempt, until the
first of them may be probed.

The bulkhead bounds a provider's calls in flight in this worker process
(``max_in_flight``): a provider that hangs holds at most that many of the lanes' slots, so
deliveries through other providers keep theirs. A delivery that finds the bound full waits
in ``delayed`` for about a second, without counting an attempt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from app.catalog import Catalog, guarded_providers
from app.catalog.push import Platform, platform_of
from streams.core.events import DeferReason
from streams.core.vocabulary import Channel
from streams.delivery.circuit_breaker import CircuitBreakers, CircuitPolicy, CircuitState
from streams.delivery.work_items import WorkItem

_PUSH = Channel.PUSH

# How long a delivery waits when its provider's bulkhead is full: long enough for a slot to
# free up, short against any TTL.
BULKHEAD_WAIT_MS = 1000
# How long a delivery waits whose push platform has no provider (the catalog lost it while
# the delivery waited): until its TTL ends, unless the catalog gets one back meanwhile.
NO_PROVIDER_WAIT_MS = 60_000


@dataclass(frozen=True, slots=True)
class Route:
    """Where an attempt goes: a provider (``probe``: as its half-open circuit's probe), or
    nowhere yet: wait until ``until_ms`` for ``reason``."""

    provider: str = ""
    probe: bool = False
    until_ms: int = 0
    reason: DeferReason = "circuit_open"


class Bulkheads:
    """Calls in flight per provider in this process, each against its bound (0: none)."""

    def __init__(self, bounds: dict[str, int]) -> None:
        self.bounds = {name: bound for name, bound in bounds.items() if bound > 0}
        self.in_flight = dict.fromkeys(self.bounds, 0)

    def try_enter(self, provider: str) -> bool:
        bound = self.bounds.get(provider)
        if bound is None:
            return True
        if self.in_flight[provider] >= bound:
            return False
        self.in_flight[provider] += 1
        return True

    def leave(self, provider: str) -> None:
        if provider in self.bounds:
            self.in_flight[provider] -= 1


def circuit_policies(catalog: Catalog) -> dict[str, CircuitPolicy]:
    """The circuit policy of every provider that has its breaker on."""
    circuits = {name: catalog.providers[name].circuit for name in guarded_providers(catalog)}
    return {
        name: CircuitPolicy(
            circuit.failure_share, circuit.min_calls, circuit.window_seconds, circuit.open_seconds
        )
        for name, circuit in circuits.items()
    }


class Router:
    """Chooses each attempt's provider."""

    def __init__(self, catalog: Catalog, breakers: CircuitBreakers, bulkheads: Bulkheads) -> None:
        self.breakers = breakers
        self.bulkheads = bulkheads
        # Each channel's providers, and for PUSH each platform's ("PUSH apns").
        self._orders: dict[str, tuple[str, ...]] = {
            channel: config.provider_order for channel, config in catalog.channels.items()
        }
        push = catalog.channels.get(Channel.PUSH)
        self._default_platform = push.default_platform if push else Platform.FCM
        for platform, order in catalog.push_orders.items():
            self._orders[f"PUSH {platform}"] = order
        # Each provider's probe lease: a probe may take the whole call's time limit.
        self._probe_lease_ms = {
            name: round(config.timeout_seconds * 1000) + 1000
            for name, config in catalog.providers.items()
        }
        # Channels with one provider and no breaker skip every check but the bulkhead.
        # (Their routes are made once: routing is on every delivery's path.)
        self._plain = {
            lane: Route(order[0])
            for lane, order in self._orders.items()
            if len(order) == 1 and not breakers.guarded(order[0])
        }
        self._unbounded = {
            lane: route
            for lane, route in self._plain.items()
            if route.provider not in bulkheads.bounds
        }

    def _lane(self, item: WorkItem) -> str:
        """The key of ``item``'s provider list: its channel, for PUSH with its platform."""
        if item.channel != _PUSH:
            return item.channel
        return f"PUSH {platform_of(item.address, self._default_platform)}"

    def route_now(self, item: WorkItem, now_ms: int) -> Route | None:
        """``route`` without waiting, where that is possible (a channel with one provider and
        no breaker); None: await ``route``."""
        lane = self._lane(item)
        route = self._unbounded.get(lane)
        if route is not None:
            return route
        plain = self._plain.get(lane)
        if plain is None:
            return None
        return plain if self.bulkheads.try_enter(plain.provider) else _full(now_ms)

    async def route(self, item: WorkItem, now_ms: int) -> Route:
        """The provider for ``item``'s next attempt, or how long it must wait. A route to a
        provider holds a place in its bulkhead: ``done`` gives it back."""
        route = self.route_now(item, now_ms)
        if route is not None:
            return route
        order = self._orders[self._lane(item)]
        if not order:  # a push platform without providers since the catalog changed
            return Route(until_ms=now_ms + NO_PROVIDER_WAIT_MS, reason="no_provider")
        first = item.failover % len(order)
        waits: list[int] = []
        for step in range(len(order)):
            provider = order[(first + step) % len(order)]
            circuit = self.breakers.circuit(provider)
            if not self.breakers.guarded(provider) or circuit.state is CircuitState.CLOSED:
                return Route(provider) if self.bulkheads.try_enter(provider) else _full(now_ms)
            if circuit.until_ms > now_ms:  # open, or half-open with its probe out
                waits.append(circuit.until_ms)
                continue
            if not self.bulkheads.try_enter(provider):
                return _full(now_ms)
            if await self.breakers.try_probe(provider, self._probe_lease_ms[provider]):
                return Route(provider, probe=True)
            self.bulkheads.leave(provider)
            waits.append(max(self.breakers.circuit(provider).until_ms, now_ms + 1000))
        # Every circuit is open: wait for the first probe, spread a little so the waiting
        # deliveries do not all come back in the same instant.
        return Route(until_ms=min(waits) + random.randrange(250), reason="circuit_open")

    def done(self, provider: str) -> None:
        """The attempt routed to ``provider`` is over."""
        self.bulkheads.leave(provider)


def _full(now_ms: int) -> Route:
    """Wait for a place in a full bulkhead."""
    wait = BULKHEAD_WAIT_MS + random.randrange(BULKHEAD_WAIT_MS // 2)
    return Route(until_ms=now_ms + wait, reason="bulkhead_full")
