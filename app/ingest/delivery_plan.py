"""One notification's deliveries at ingest: each delivery's fate, its first event and its
work item; and the notification's record and accepted answer, which list them.

``app.ingest.fanout`` checks a request against the catalog and fixes its ids; what it then
knows about one notification (its priority, expiry, the recipient's settings and quiet
window) is a ``NotificationPlan``, which decides, delivery by delivery, whether it is
suppressed (opted out, no address, a dead address, an address on the suppression list, a
push platform no provider sends to), expired (quiet hours past its TTL),
deferred until quiet hours end, waiting for an address (no address, and its type waits for
one: ``await_address_seconds``), or queued.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import msgspec

from app.catalog.steps import PlannedStep
from app.ingest.chains import Chain, Identity
from app.ingest.requests import Accepted, NotificationRequest
from streams.core import codec
from streams.core.events import (
    DeliveryDeferred,
    DeliveryDigested,
    DeliveryExpired,
    DeliveryQueued,
    DeliveryScheduled,
    DeliverySuppressed,
    Event,
    NotificationAccepted,
)
from streams.core.records import DeliveryAtAcceptance, NotificationRecord, encode_record
from streams.core.vocabulary import Channel, Priority
from streams.delivery.address_waits import FIRST_STEP_MS
from streams.delivery.delayed import delayed_member
from streams.delivery.state import DeliveryStatus
from streams.delivery.work_items import UntracedWorkItem, WorkItem, share_data
from streams.ingest.writer import PlannedWork
from streams.recipients.settings import QUIET_HOURS_EXEMPT, AddressDigest

# Enum members looked up through their class cost about 150 ns each on Python 3.11; fan-out
# decides every delivery's fate by them, so they are bound once.
_QUEUED, _SCHEDULED = DeliveryStatus.QUEUED, DeliveryStatus.SCHEDULED
_SUPPRESSED, _EXPIRED = DeliveryStatus.SUPPRESSED, DeliveryStatus.EXPIRED
_DIGESTED = DeliveryStatus.DIGESTED
# What ``deliveries`` plans into: the deliveries at acceptance, the first events, the work
# items, and each suppressed one's channel and reason.
_Out = tuple[list[DeliveryAtAcceptance], list[Event], list[PlannedWork], list[tuple[str, str]]]

_data_encoder = msgspec.json.Encoder()
_response_encoder = msgspec.json.Encoder()


class NotificationPlan(msgspec.Struct, frozen=True, kw_only=True):
    """One notification being planned: what its deliveries' fates and events depend on."""

    id: str
    producer: str
    request: NotificationRequest
    priority: Priority
    locale: str
    now: datetime
    now_ms: int
    expires: datetime
    expires_ms: int
    # When the recipient's quiet window ends, if this notification falls into one (and in ms).
    quiet_until: datetime | None
    quiet_ms: int = 0
    disabled: frozenset[tuple[str, str]]  # (type, channel) pairs the recipient switched off
    invalid: frozenset[tuple[str, str]]  # (channel, address digest) of dead addresses
    # (channel, address) the suppression list stops for this type, and the entry's reason.
    suppressed: dict[tuple[Channel, str], str]
    address_digest: AddressDigest
    # Push addresses of a platform no provider sends to.
    unroutable: frozenset[str] = frozenset()
    # The campaign it belongs to, by its idempotency key ("" for none): each work item says.
    campaign: str = ""
    # The W3C ``traceparent`` its work items carry ("" when tracing is off).
    trace: str = ""
    # Until when (ms) a delivery without an address waits for the recipient's profile to
    # give one (0: it is suppressed at once; ``streams.delivery.address_waits``).
    await_until_ms: int = 0
    # When the producer asked it to go (``send_at``/``delay``; ms, 0: now). Its deliveries
    # wait in ``delayed`` until then (SCHEDULED), and the recipient's preferences and quiet
    # hours are looked at when they come due, not now.
    due_ms: int = 0
    # It joins a digest (``digest`` in the catalog): its deliveries end DIGESTED at once.
    digested: bool = False
    # The type's escalation steps by channel (``app.catalog.steps``), None without.
    steps: dict[Channel, PlannedStep] | None = None

    def accepted(
        self, producer: str, idempotency_key: str, identity: Identity
    ) -> NotificationAccepted:
        """The notification's first event."""
        return NotificationAccepted(
            at=self.now,
            notification_id=self.id,
            producer=producer,
            idempotency_key=idempotency_key,
            notification_type=self.request.type,
            priority=self.priority,
            recipient_id=self.request.recipient.id,
            locale=self.locale,
            expires_at=self.expires,
            delivery_ids=list(identity.delivery_ids),
        )

    def deliveries(
        self, identity: Identity, events: list[Event]
    ) -> tuple[list[DeliveryAtAcceptance], list[PlannedWork], bytes, list[tuple[str, str]]]:
        """Each delivery's state at ingest, its work item unless it ended, the encoded data
        its work items share (else b"") and each suppressed one's channel and reason; first
        events go to ``events``. A fallback made at ingest (``Chain.fallbacks_now``) is
        planned in a second round."""
        if self.digested:
            return self._digested(identity, events), [], b"", []
        chain = Chain(identity, self.steps) if self.steps or identity.fallbacks else None
        shared = self._shared_data(len(identity.pairs))  # for each that gets a work item
        out: _Out = ([], events, [], [])
        rows: Iterable[tuple[tuple[Channel, str], str]]
        rows = zip(identity.pairs, identity.delivery_ids, strict=True)
        while rows:
            self._plan(rows, shared, chain, out)
            rows = chain.fallbacks_now(out[0]) if chain else []
        at_acceptance, _, work, suppressed_at = out
        return at_acceptance, work, shared if work else b"", suppressed_at

    def _plan(
        self,
        rows: Iterable[tuple[tuple[Channel, str], str]],
        shared: bytes,
        chain: Chain | None,
        out: _Out,
    ) -> None:
        """Plan one round of ``deliveries`` into ``out``. Queued and suppressed ones, the
        usual, are planned in the loop: a call per delivery cost fan-out an eighth more
        instructions."""
        at_acceptance, events, work, suppressed_at = out
        nid, now, priority, quiet_until = self.id, self.now, self.priority, self.quiet_until
        type_name, disabled, invalid = self.request.type, self.disabled, self.invalid
        unroutable, suppressed, due_ms = self.unroutable, self.suppressed, self.due_ms
        steps = self.steps
        for (channel, address), did in rows:
            status, reason = _QUEUED, ""
            step = steps.get(channel) if steps else None
            if (type_name, channel) in disabled:
                status, reason = _SUPPRESSED, "opted_out"
            elif not address:
                # Its type may wait for the recipient's profile to give one.
                waits = self.await_until_ms > self.now_ms
                status = _SCHEDULED if waits else _SUPPRESSED
                reason = "awaiting_address" if waits else "no_address"
            elif invalid and (channel, self.address_digest(address)) in invalid:
                status, reason = _SUPPRESSED, "invalid_address"
            elif suppressed and (channel, address) in suppressed:
                status, reason = _SUPPRESSED, suppressed[(channel, address)]
            elif unroutable and address in unroutable:
                status, reason = _SUPPRESSED, "no_provider"
            elif step is not None and step.after_ms:  # a later step: decided when due
                status, reason = _SCHEDULED, "step"
            elif quiet_until is not None and channel not in QUIET_HOURS_EXEMPT:
                status = _SCHEDULED if quiet_until < self.expires else _EXPIRED
                reason = "" if status is _SCHEDULED else "quiet_hours_past_ttl"
            elif due_ms:  # sent later: nothing else about it is decided now
                status, reason = _SCHEDULED, "scheduled"
            if status is _QUEUED:
                at_acceptance.append(DeliveryAtAcceptance(
                    id=did, channel=channel, status=status, reason="", due_ms=0))  # fmt: skip
                events.append(DeliveryQueued(
                    at=now, notification_id=nid, delivery_id=did, version=1,
                    channel=channel, priority=priority,
                ) if chain is None else self._queued(did, channel, step, chain))  # fmt: skip
                item = self._work_item(did, channel, address, shared, chain=chain)
                work.append(PlannedWork(priority, item))
            elif status is _SUPPRESSED:
                at_acceptance.append(DeliveryAtAcceptance(id=did, channel=channel,
                    status=status, reason=reason, due_ms=0))  # fmt: skip
                suppressed_at.append((channel, reason))
                events.append(DeliverySuppressed(
                    at=now, notification_id=nid, delivery_id=did, version=1,
                    channel=channel, reason=reason,  # type: ignore[arg-type]
                ))  # fmt: skip
            else:
                waiting = (at_acceptance, events, work)
                self._unqueued(did, channel, address, shared, status, reason, step, chain, waiting)

    def _queued(
        self, did: str, channel: Channel, step: PlannedStep | None, chain: Chain
    ) -> DeliveryQueued:
        """The first event of a delivery of a notification with steps or fallbacks."""
        return DeliveryQueued(
            at=self.now, notification_id=self.id, delivery_id=did, version=1,
            channel=channel, priority=self.priority, step=step.number if step else 0,
            fallback_of=chain.fallback_of.get(did, ""),
        )  # fmt: skip

    def _digested(self, identity: Identity, events: list[Event]) -> list[DeliveryAtAcceptance]:
        """A notification that joins a digest: none of its deliveries is sent itself."""
        at_acceptance = []
        for (channel, _), did in zip(identity.pairs, identity.delivery_ids, strict=True):
            at_acceptance.append(
                DeliveryAtAcceptance(id=did, channel=channel, status=_DIGESTED, reason="digest")
            )
            events.append(DeliveryDigested(
                at=self.now, notification_id=self.id, delivery_id=did, version=1,
                channel=channel,
            ))  # fmt: skip
        return at_acceptance

    def _unqueued(  # noqa: PLR0917 (the loop's own variables, handed on)
        self,
        did: str,
        channel: Channel,
        address: str,
        shared: bytes,
        status: DeliveryStatus,
        reason: str,
        step: PlannedStep | None,
        chain: Chain | None,
        out: tuple[list[DeliveryAtAcceptance], list[Event], list[PlannedWork]],
    ) -> None:
        """Record a delivery neither queued nor suppressed at ingest: expired, or waiting (a
        later step, sent later, deferred), into ``deliveries``' lists (``out``)."""
        at_acceptance, events, work = out
        until = (self.due_ms or self.quiet_ms) if status is _SCHEDULED else 0
        if reason == "step" and step is not None:
            until = (self.due_ms or self.now_ms) + step.after_ms
        at_acceptance.append(DeliveryAtAcceptance(
            id=did, channel=channel, status=status, reason=reason,
            due_ms=0 if reason == "awaiting_address" else until))  # fmt: skip
        if status is _EXPIRED:
            events.append(DeliveryExpired(
                at=self.now, notification_id=self.id, delivery_id=did, version=1,
                channel=channel, reason=reason,
            ))  # fmt: skip
        else:
            waiting = (did, channel, address, shared, events)
            work.append(self._waiting(*waiting, reason=reason, chain=chain, until=until))

    def encoded(self, at_acceptance: list[DeliveryAtAcceptance]) -> tuple[bytes, bytes]:
        """The notification accepted, encoded twice: the answer that says so (its id and its
        deliveries at ingest), and its record as stored."""
        response = _response_encoder.encode(Accepted(id=self.id, deliveries=at_acceptance))
        record = NotificationRecord(
            id=self.id,
            type=self.request.type,
            priority=self.priority,
            recipient_id=self.request.recipient.id,
            producer=self.producer,
            created_ms=self.now_ms,
            expires_ms=self.expires_ms,
            deliveries=at_acceptance,
            campaign_id=self.campaign,
            cancellation_key=self.request.cancellation_key or "",
        )
        return response, encode_record(record)

    def _shared_data(self, work_items: int) -> bytes:
        """The encoded data when ``work_items`` items share it, else b"" (each carries it)."""
        if work_items < 2 or not self.request.data:
            return b""
        encoded = _data_encoder.encode(self.request.data)
        return encoded if share_data(len(encoded), work_items) else b""

    def _waiting(
        self,
        did: str,
        channel: Channel,
        address: str,
        shared: bytes,
        events: list[Event],
        *,
        reason: str,
        chain: Chain | None,
        until: int,
    ) -> PlannedWork:
        """A delivery that waits at ingest: a later step, sent later, or deferred."""
        if reason in ("scheduled", "step"):
            return self._scheduled(did, channel, address, shared, events, chain=chain, until=until)
        return self._deferred(did, channel, address, shared, events, chain=chain)

    def _deferred(
        self,
        did: str,
        channel: Channel,
        address: str,
        shared: bytes,
        events: list[Event],
        *,
        chain: Chain | None,
    ) -> PlannedWork:
        """A delivery that waits at ingest: for the recipient's quiet hours to end, or, with
        no address, for one (its first look is due in a second:
        ``streams.delivery.address_waits``)."""
        if address:
            quiet_until = self.quiet_until
            assert quiet_until is not None
            events.append(DeliveryDeferred(
                at=self.now, notification_id=self.id, delivery_id=did, version=1,
                channel=channel, reason="quiet_hours", until=quiet_until,
            ))  # fmt: skip
            item = self._work_item(did, channel, address, shared, chain=chain)
            member = delayed_member(self.priority, item)
            return PlannedWork(self.priority, member, epoch_ms(quiet_until))
        due_ms = min(self.now_ms + FIRST_STEP_MS, self.await_until_ms)
        events.append(DeliveryDeferred(
            at=self.now, notification_id=self.id, delivery_id=did, version=1,
            channel=channel, reason="awaiting_address", until=at_ms(due_ms),
        ))  # fmt: skip
        item = self._work_item(
            did, channel, "", shared, await_until_ms=self.await_until_ms, chain=chain
        )
        return PlannedWork(self.priority, delayed_member(self.priority, item), due_ms)

    def _scheduled(
        self,
        did: str,
        channel: Channel,
        address: str,
        shared: bytes,
        events: list[Event],
        *,
        chain: Chain | None,
        until: int,
    ) -> PlannedWork:
        """A delivery that waits in ``delayed`` until ``until``: the producer asked it to go
        later, or it is a later step of its type."""
        step = chain.step(channel) if chain else None
        events.append(DeliveryScheduled(
            at=self.now, notification_id=self.id, delivery_id=did, version=1,
            channel=channel, priority=self.priority, until=at_ms(until),
            step=step.number if step else 0,
            unless=list(step.unless) if step else [],
            fallback_of=chain.fallback_of.get(did, "") if chain else "",
        ))  # fmt: skip
        item = self._work_item(did, channel, address, shared, chain=chain, send_at_ms=until)
        return PlannedWork(self.priority, delayed_member(self.priority, item), until)

    def _work_item(
        self,
        did: str,
        channel: Channel,
        address: str,
        shared: bytes,
        await_until_ms: int = 0,
        *,
        chain: Chain | None = None,
        send_at_ms: int = 0,
    ) -> bytes:
        """The encoded work item of one delivery; without a trace and not waiting for an
        address, as before items carried either."""
        item = UntracedWorkItem(
            delivery_id=did,
            notification_id=self.id,
            notification_type=self.request.type,
            channel=channel,
            priority=self.priority,
            recipient_id=self.request.recipient.id,
            address=address,
            locale=self.locale,
            data={} if shared else self.request.data,
            created_ms=self.now_ms,
            expires_ms=self.expires_ms,
            producer=self.producer,
            shared_data=bool(shared),
            campaign=self.campaign,
        )
        send_at_ms = send_at_ms or self.due_ms
        if self.trace or await_until_ms or send_at_ms or chain:  # only then made twice
            return codec.encode_work_item(
                WorkItem(
                    **msgspec.structs.asdict(item),
                    trace=self.trace,
                    await_until_ms=await_until_ms,
                    send_at_ms=send_at_ms,
                    **(chain.fields(did, channel) if chain else {}),
                )
            )
        return codec.encode(item)


def at_ms(ms: int) -> datetime:
    """The moment ``ms`` milliseconds after the epoch."""
    return datetime.fromtimestamp(ms / 1000, UTC)


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch."""
    return int(moment.timestamp() * 1000)
