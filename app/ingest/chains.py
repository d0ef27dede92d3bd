"""A notification's ids, and what its escalation steps and fallbacks add to its work items.

``Identity`` fixes the ids once per request (a STALE round re-plans with the same ones),
including each fallback's (``Fallback``), so a fallback is made once however often it is
asked for. ``Chain`` (``app.catalog.steps`` says what steps and fallbacks mean) gives each
work item the fields its steps and fallback need, and says which fallbacks are made at
ingest already.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.catalog.steps import FALLBACK_AT_INGEST, PlannedStep
from streams.core.records import DeliveryAtAcceptance
from streams.core.vocabulary import Channel, DeliveryStatus

_SUPPRESSED = DeliveryStatus.SUPPRESSED


class Fallback(msgspec.Struct, frozen=True):
    """The delivery that replaces the notification's deliveries on ``source`` if they fail
    permanently (``fallback`` in the catalog): its channel, address ("": the recipient's
    profile gives it then) and id, fixed at ingest so that it is made once."""

    source: Channel
    channel: Channel
    address: str
    delivery_id: str


class Identity(msgspec.Struct, frozen=True):
    """Ids fixed once per request, so a STALE round re-plans with the same ones; and the key
    of the digest it joins, made once of its data."""

    notification_id: str
    # (channel, address) pairs in fan-out order, and one delivery id for each.
    pairs: tuple[tuple[Channel, str], ...]
    delivery_ids: tuple[str, ...]
    # The type's fallbacks for the notification's channels.
    fallbacks: tuple[Fallback, ...] = ()
    # Its digest's key (``digest`` in the catalog), None when it joins none.
    digest_key: str | None = None


class Chain:
    """A notification's escalation steps and fallbacks, as its work items carry them: which
    earlier deliveries a step looks at, which deliveries are looked at (their states are
    kept after they end), and which fallback replaces a delivery that fails."""

    __slots__ = ("by_channel", "fallback_of", "fallbacks", "steps")

    def __init__(self, identity: Identity, steps: dict[Channel, PlannedStep] | None) -> None:
        self.steps = steps or {}
        self.by_channel: dict[Channel, list[str]] = {}
        for (channel, _), did in zip(identity.pairs, identity.delivery_ids, strict=True):
            self.by_channel.setdefault(channel, []).append(did)
        self.fallbacks = {fallback.source: fallback for fallback in identity.fallbacks}
        # A fallback made at ingest: its id -> the first delivery it replaces.
        self.fallback_of: dict[str, str] = {}

    def step(self, channel: Channel) -> PlannedStep | None:
        return self.steps.get(channel)

    def fields(self, did: str, channel: Channel) -> dict[str, Any]:
        """The work item's fields of steps and fallbacks."""
        step = self.steps.get(channel)
        fields: dict[str, Any] = {}
        if step is not None:
            fields["step"] = step.number
            if step.unless:
                fields["unless"] = list(step.unless)
                fields["watch"] = [
                    earlier
                    for other, plan in self.steps.items()
                    if plan.number < step.number
                    for earlier in self.by_channel.get(other, ())
                ]
            fields["watched"] = any(
                plan.unless and plan.number > step.number for plan in self.steps.values()
            )
        fallback = self.fallbacks.get(channel)
        if fallback is not None and did == self.by_channel[channel][0]:
            # One delivery of the channel carries it (the first device's push): a fallback
            # carried by several could be made by each, and sent twice.
            fields["fallback"] = [fallback.delivery_id, fallback.channel, fallback.address]
        return fields

    def fallbacks_now(
        self, at_acceptance: list[DeliveryAtAcceptance]
    ) -> list[tuple[tuple[Channel, str], str]]:
        """The fallbacks to make at ingest, once: those whose channel's deliveries were all
        suppressed for want of a usable address (missing, known dead, no provider)."""
        made = []
        for source, fallback in list(self.fallbacks.items()):
            replaced = [d for d in at_acceptance if d.channel == source]
            if replaced and all(
                d.status is _SUPPRESSED and d.reason in FALLBACK_AT_INGEST for d in replaced
            ):
                made.append(((fallback.channel, fallback.address), fallback.delivery_id))
                self.fallback_of[fallback.delivery_id] = replaced[0].id
            del self.fallbacks[source]  # decided: at ingest, or by a failure later
        return made
