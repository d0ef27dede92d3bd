"""Per-recipient rate caps in the worker: which leased deliveries their recipient's throttle
refuses, asked in one batched call before routing (``streams.delivery.throttles``).

The rule of each throttled type is resolved once (``app.catalog.throttles.rules_of``: the
type's own throttle, its category's, or the deployment's default cap). With none at all the
worker has no ``Throttling`` and pays nothing; otherwise a delivery of a type without one
costs a dict lookup, and only deliveries with a rule are counted in Redis.
"""

from __future__ import annotations

from redis.asyncio import Redis

from app.catalog import Catalog
from app.catalog.throttles import Rule, rules_of
from streams.core.keys import KeySpace
from streams.delivery.decisions import Throttled
from streams.delivery.leases import LeasedDelivery
from streams.delivery.throttles import ThrottleRequest, Throttles


class Throttling:
    """Counts leased deliveries against their recipients' throttles."""

    def __init__(self, throttles: Throttles, rules: dict[str, Rule]) -> None:
        self._throttles = throttles
        self._rules = rules

    @classmethod
    def of(
        cls, redis: Redis, keys: KeySpace, catalog: Catalog, default_cap: tuple[int, int] | None
    ) -> Throttling | None:
        """The throttling of ``catalog``'s types and the default cap; None when no type has
        a throttle (nothing to count, nothing to pay)."""
        priorities = {name: config.priority for name, config in catalog.types.items()}
        rules = rules_of(catalog.throttles, priorities, default_cap)
        return cls(Throttles(redis, keys), rules) if rules else None

    async def sift(
        self, held: list[LeasedDelivery], now_ms: int
    ) -> tuple[list[LeasedDelivery], list[tuple[LeasedDelivery, Throttled]]]:
        """``held`` without the deliveries their throttle refuses, and those with the
        decision for each (suppressed, or deferred until the window allows it, never past
        the TTL: then it expires when it comes due). Counts the others once each."""
        rules = self._rules
        asked: list[tuple[LeasedDelivery, Rule]] = []
        for leased in held:
            item = leased.item
            rule = rules.get(item.notification_type)
            # One past its TTL expires in routing: it takes no place in the window.
            if rule is not None and rule.applies_to(item.channel) and now_ms < item.expires_ms:
                asked.append((leased, rule))
        if not asked:
            return held, []
        waits = await self._throttles.count([_request(leased, rule) for leased, rule in asked])
        refused = [
            (leased, _decision(leased, rule, wait, now_ms))
            for (leased, rule), wait in zip(asked, waits, strict=True)
            if wait > 0
        ]
        if not refused:
            return held, []
        gone = {leased.item.delivery_id for leased, _ in refused}
        return [leased for leased in held if leased.item.delivery_id not in gone], refused


def _request(leased: LeasedDelivery, rule: Rule) -> ThrottleRequest:
    item = leased.item
    scope = rule.key_scope(item.channel)
    return (item.recipient_id, scope, rule.limit, rule.per_seconds * 1000, item.delivery_id)


def _decision(leased: LeasedDelivery, rule: Rule, wait_ms: int, now_ms: int) -> Throttled:
    until_ms = min(now_ms + wait_ms, leased.item.expires_ms) if rule.action == "defer" else 0
    return Throttled(
        rule.action, rule.limit, rule.per_seconds, scope=rule.key_scope(leased.item.channel),
        until_ms=until_ms,
    )  # fmt: skip
