"""Fan-out: from one accepted request to one planned delivery per channel and address.

Pure computation, no I/O: given the catalog, the request, the recipient's settings and the
clock, it checks the request against the catalog (its type, who may send it, its channels and
their templates' fields), fixes its ids, and prepares everything the ingest script writes;
each delivery's fate is decided by ``app.ingest.delivery_plan``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from app import tracing
from app.catalog import Catalog
from app.catalog.digests import DigestError
from app.ingest.chains import Fallback, Identity
from app.ingest.delivery_plan import NotificationPlan, epoch_ms
from app.ingest.fingerprints import fingerprint
from app.ingest.quiet_hours import window_end
from app.ingest.requests import Accepted, NotificationRequest, digest_data_error, target_address
from app.ingest.schedule import DEFAULT_MAX_SCHEDULE_SECONDS, ScheduleError, due_ms
from streams.campaigns.ids import campaign_of
from streams.core import codec
from streams.core.errors import Forbidden, Invalid
from streams.core.events import Event
from streams.core.ids import new_ids
from streams.core.keys import ShardKeys
from streams.core.records import NotificationRecord
from streams.core.vocabulary import Channel, Priority
from streams.digests.ids import is_digest_close
from streams.ingest.writer import IngestItem
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import AddressDigest
from streams.recipients.suppressions import EMPTY as EMPTY_LIST
from streams.recipients.suppressions import ListView, address_field

_HIGH = Priority.HIGH  # bound once: looked up per notification

_response_encoder = msgspec.json.Encoder()
_MAX_ROUTES = 4096


def accepted_body(record: NotificationRecord) -> bytes:
    """The body that says a notification was accepted, from its record."""
    return _response_encoder.encode(Accepted(id=record.id, deliveries=record.deliveries))


class FanoutError(Invalid, ValueError):
    """The request cannot be fanned out; the message names the field."""


class NotAllowed(Forbidden, ValueError):
    """The producer may not send this type."""


def addresses_by_channel(
    request: NotificationRequest, channels: list[Channel], type_webhook_url: str | None = None
) -> list[tuple[Channel, str]]:
    """Each channel with each of its addresses; "" where the recipient has none (WEBHOOK:
    the recipient's URL, else the type's)."""
    recipient = request.recipient
    pairs: list[tuple[Channel, str]] = []
    for channel in channels:
        if channel == "PUSH":
            if recipient.push_tokens or recipient.push_targets:  # each once, in order given
                addresses = [*recipient.push_tokens, *map(target_address, recipient.push_targets)]
                pairs += [(channel, address) for address in dict.fromkeys(addresses)]
            else:
                pairs.append((channel, ""))
        elif channel == "EMAIL":
            pairs.append((channel, recipient.email or ""))
        elif channel == "SMS":
            pairs.append((channel, recipient.phone or ""))
        elif channel == "WEBHOOK":
            pairs.append((channel, recipient.webhook_url or type_webhook_url or ""))
        else:
            pairs.append((channel, recipient.id))
    return pairs


class _Route(msgspec.Struct, frozen=True):
    """The channels of a (type, requested channels, locale) choice, each with the locale of
    its template and the ``data`` fields that template needs."""

    channels: tuple[Channel, ...]
    templates: tuple[tuple[Channel, str, frozenset[str]], ...]
    # Every field some template needs (the union of the templates' fields): one check when
    # the request has them all.
    required: frozenset[str]


class _Moment:
    """An acceptance time and what is derived from it: a batch's notifications share one."""

    __slots__ = ("expiries", "ms", "now")

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.ms = epoch_ms(now)
        # TTL in seconds -> (expiry, expiry in ms). A moment lasts one request or batch, so
        # this holds at most one entry per notification of it.
        self.expiries: dict[int, tuple[datetime, int]] = {}

    def expiry(self, ttl_seconds: int) -> tuple[datetime, int]:
        expiry = self.expiries.get(ttl_seconds)
        if expiry is None:
            expiry = (self.now + timedelta(seconds=ttl_seconds), self.ms + ttl_seconds * 1000)
            self.expiries[ttl_seconds] = expiry
        return expiry


class Planner:
    """Turns validated requests into ingest items according to the catalog."""

    def __init__(
        self,
        catalog: Catalog,
        address_digest: AddressDigest,
        max_schedule_seconds: int = DEFAULT_MAX_SCHEDULE_SECONDS,
    ) -> None:
        self.catalog = catalog
        # How far ahead ``send_at`` and ``delay`` may be (``CLARION_MAX_SCHEDULE``).
        self.max_schedule_seconds = max_schedule_seconds
        # Names the addresses a provider reported dead (``RecipientSettings.invalid``).
        self.address_digest = address_digest
        # (type, requested channels, locale) -> what the catalog says about that choice.
        # Locales come from requests, so the cache is emptied when it grows past its cap.
        self._routes: dict[tuple[str, tuple[Channel, ...], str], _Route] = {}
        self._moment = _Moment(utc_now())
        # Whether some push platform has no provider: its targets are suppressed.
        self._push_gaps = not all(catalog.push_orders.values())

    def channels(self, request: NotificationRequest) -> list[Channel]:
        """The request's channels, or the type's defaults; raises ``FanoutError``."""
        locale = request.locale or self.catalog.default_locale
        route_key = (request.type, tuple(request.channels or ()), locale)
        route = self._routes.get(route_key)
        if route is None:
            route = self._route(request.type, route_key[1], locale)
            if len(self._routes) >= _MAX_ROUTES:
                self._routes.clear()
            self._routes[route_key] = route
        if not route.required.issubset(request.data):
            for channel, locale_used, fields in route.templates:
                if not fields.issubset(request.data):
                    name = sorted(fields - request.data.keys())[0]
                    raise FanoutError(
                        f"data.{name}: required by the {request.type} {channel} template "
                        f"({locale_used})"
                    )
        return list(route.channels)

    def _route(self, type_name: str, requested: tuple[Channel, ...], locale: str) -> _Route:
        """Check a (type, channels, locale) choice against the catalog once."""
        type_config = self.catalog.types.get(type_name)
        if type_config is None:
            known = ", ".join(sorted(self.catalog.types))
            raise FanoutError(f"type: unknown notification type {type_name!r} (known: {known})")
        channels = requested or tuple(type_config.channels)
        if len(set(channels)) != len(channels):
            raise FanoutError("channels: each channel may be listed once")
        templates = []
        fallbacks = [type_config.fallback[c] for c in channels if c in type_config.fallback]
        for channel in [*channels, *fallbacks]:  # a fallback's template is needed too
            used = self.catalog.template_locale(type_name, channel, locale)
            if used is None:
                raise FanoutError(f"channels: type {type_name!r} has no {channel} template")
            fields = self.catalog.template_fields[(type_name, used, channel)]
            templates.append((channel, used, fields))
        required = frozenset().union(*(fields for _, _, fields in templates))
        if type_name in self.catalog.digests:
            # Its notifications join digests: only a digest's own notification fills its
            # templates, with what every digest gives (``app.catalog.digests``).
            required = frozenset()
        return _Route(channels, tuple(templates), required)

    def is_high(self, request: NotificationRequest) -> bool:
        """Whether ``request`` is planned HIGH (False for a type not in the catalog: it will
        be refused)."""
        type_config = self.catalog.types.get(request.type)
        priority = request.priority or (type_config.priority if type_config else None)
        return priority == _HIGH

    def check_sender(self, producer: str, type_name: str) -> None:
        """Raise ``NotAllowed`` unless ``producer`` may send notifications of ``type_name``
        (an unknown type is left to ``identity`` to name)."""
        type_config = self.catalog.types.get(type_name)
        allowed = type_config.producers if type_config is not None else None
        if allowed is not None and producer not in allowed:
            raise NotAllowed(
                f"type: producer {producer!r} may not send {type_name!r} notifications"
            )

    def identity(
        self,
        shard: ShardKeys,
        request: NotificationRequest,
        notification_id: str = "",
        now: datetime | None = None,
        key: str = "",
    ) -> Identity:
        """Check the request against the catalog (and its send time against ``now``, the
        time it is planned at) and fix its ids (the notification's may be given: a later
        round keeps it); raises ``FanoutError``. ``key``: its idempotency key (a digest's own
        notification is not joined to a digest)."""
        channels = self.channels(request)  # checks that the type exists
        if request.send_at is not None or request.delay is not None:
            self.due_ms(request, epoch_ms(now or utc_now()))  # checks how far ahead
        type_config = self.catalog.types[request.type]
        digest, digest_key = self.catalog.digests.get(request.type), None
        if digest is not None and not is_digest_close(key):
            try:
                digest_key = digest.key_of(request.data)
            except DigestError as error:
                raise FanoutError(str(error)) from None
            if too_deep := digest_data_error(request.data):
                raise FanoutError(too_deep)
        pairs = addresses_by_channel(request, channels, type_config.webhook_url)
        if not type_config.fallback:  # the usual: as before types had fallbacks
            new_id, *delivery_ids = new_ids(shard.shard, 1 + len(pairs))
            return Identity(
                notification_id or new_id, tuple(pairs), tuple(delivery_ids), digest_key=digest_key
            )
        fallback = [(source, target) for source, target in type_config.fallback.items()
                    if source in channels]  # fmt: skip
        new_id, *delivery_ids = new_ids(shard.shard, 1 + len(pairs) + len(fallback))
        fallbacks = tuple(
            Fallback(source, target, addresses_by_channel(request, [target])[0][1], fallback_id)
            for (source, target), fallback_id in zip(
                fallback, delivery_ids[len(pairs) :], strict=True
            )
        )
        return Identity(
            notification_id or new_id, tuple(pairs), tuple(delivery_ids[: len(pairs)]),
            fallbacks=fallbacks, digest_key=digest_key,
        )  # fmt: skip

    def due_ms(self, request: NotificationRequest, now_ms: int) -> int:
        """When ``request`` is due (ms; 0: now); raises ``FanoutError`` naming the field."""
        try:
            return due_ms(request.send_at, request.delay, now_ms, self.max_schedule_seconds)
        except ScheduleError as error:
            raise FanoutError(str(error)) from None

    def _moment_of(self, now: datetime) -> _Moment:
        if self._moment.now is not now:  # a new request or batch
            self._moment = _Moment(now)
        return self._moment

    def plan(
        self,
        *,
        shard: ShardKeys,
        producer: str,
        idempotency_key: str,
        request: NotificationRequest,
        identity: Identity,
        settings: RecipientSettings,
        now: datetime,
        request_fingerprint: str | None = None,
        suppressions: ListView = EMPTY_LIST,
    ) -> IngestItem:
        """Everything the ingest script writes for this request (``suppressions``: the list
        as the last round found it)."""
        opt_out = self.catalog.types[request.type].opt_out
        checks, known, suppressed = self._suppressed(identity, suppressions, opt_out)
        campaign = campaign_of(idempotency_key)
        notification = self._notification(
            producer, request, identity, settings, now, suppressed=suppressed, campaign=campaign,
            digested=request.type in self.catalog.digests and not is_digest_close(idempotency_key),
        )  # fmt: skip
        events: list[Event] = [notification.accepted(producer, idempotency_key, identity)]
        at_acceptance, work, shared_data, suppressed_at = notification.deliveries(identity, events)
        response, record = notification.encoded(at_acceptance)
        return IngestItem(
            shard=shard,
            priority=notification.priority,
            producer=producer,
            idempotency_key=idempotency_key,
            notification_id=notification.id,
            recipient_id=request.recipient.id,
            fingerprint=request_fingerprint or fingerprint(request),
            settings_version=settings.version,
            suppression_version=suppressions.version,
            suppression_checks=checks,
            suppressions_known=known,
            response=response,
            record=record,
            events=codec.encode_events(events),
            work=work,
            shared_data=shared_data,
            expires_ms=notification.expires_ms,
            suppressed=suppressed_at,
            cancellation_key=request.cancellation_key or "",
        )

    def _notification(
        self,
        producer: str,
        request: NotificationRequest,
        identity: Identity,
        settings: RecipientSettings,
        now: datetime,
        *,
        suppressed: dict[tuple[Channel, str], str],
        campaign: str,
        digested: bool = False,
    ) -> NotificationPlan:
        type_config = self.catalog.types[request.type]
        priority = request.priority or type_config.priority
        if type(priority) is not Priority:  # a request built in code, not decoded
            priority = Priority(priority)
        moment = self._moment_of(now)
        ttl_seconds = request.ttl_seconds or type_config.ttl_seconds
        due = 0
        if request.send_at is not None or request.delay is not None:
            due = self.due_ms(request, moment.ms)
        if due:
            # Sent later: its TTL counts from then, and the recipient's preferences and
            # quiet hours are looked at then (``app.delivery.awaiting``).
            expires_ms = due + ttl_seconds * 1000
            expires = datetime.fromtimestamp(expires_ms / 1000, UTC)
        else:
            expires, expires_ms = moment.expiry(ttl_seconds)
        quiet_until = (
            window_end(settings.quiet_hours, now)
            if settings.quiet_hours is not None and priority != _HIGH and not due
            else None
        )
        return NotificationPlan(
            id=identity.notification_id,
            producer=producer,
            request=request,
            priority=priority,
            locale=request.locale or self.catalog.default_locale,
            now=now,
            now_ms=moment.ms,
            expires=expires,
            expires_ms=expires_ms,
            quiet_until=quiet_until,
            quiet_ms=epoch_ms(quiet_until) if quiet_until is not None else 0,
            disabled=settings.disabled if type_config.opt_out and not due else frozenset(),
            invalid=settings.invalid,
            suppressed=suppressed,
            address_digest=self.address_digest,
            unroutable=self._unroutable(identity) if self._push_gaps else frozenset(),
            campaign=campaign,
            trace=tracing.traceparent() if tracing.ENABLED else "",
            await_until_ms=_await_until(type_config.await_address_seconds, moment.ms, expires_ms)
            if type_config.await_address_seconds is not None
            else 0,
            due_ms=due,
            steps=self.catalog.steps.get(request.type),
            digested=digested,
        )

    def _suppressed(
        self, identity: Identity, suppressions: ListView, opt_out: bool
    ) -> tuple[str, str, dict[tuple[Channel, str], str]]:
        """The suppression list's fields of the notification's addresses and those of them
        active (both space-separated, as the ingest script checks them), and the addresses an
        active entry stops for this type, with the entry's reason. Nothing while the list is
        empty: no digest is computed then."""
        if not suppressions.version:
            return "", "", {}
        fields: list[str] = []
        stopped: dict[tuple[Channel, str], str] = {}
        for channel, address in identity.pairs:
            if not address:
                continue
            field = address_field(channel, self.address_digest(address))
            fields.append(field)
            entry = suppressions.active.get(field)
            if entry is not None and entry.applies(opt_out):
                stopped[(channel, address)] = entry.reason
        known = " ".join(field for field in fields if field in suppressions.active)
        return " ".join(fields), known, stopped

    def _unroutable(self, identity: Identity) -> frozenset[str]:
        """The notification's push addresses whose platform has no provider."""
        return frozenset(
            address
            for channel, address in identity.pairs
            if channel == "PUSH" and address and not self.catalog.provider_order(channel, address)
        )


def _await_until(await_seconds: int | None, now_ms: int, expires_ms: int) -> int:
    """Until when a delivery without an address waits for one (0: it does not wait): the
    type's ``await_address_seconds``, never past the notification's expiry."""
    return 0 if await_seconds is None else min(now_ms + await_seconds * 1000, expires_ms)


def utc_now() -> datetime:
    return datetime.now(UTC)
