"""The type catalog (``clarion.toml``): notification types, channels and providers, ingest
quotas, and how status webhooks are sent (``status_webhooks``).

A broken catalog stops start-up with a ``CatalogError`` naming the file, the type and the key
(for a template also its part and line: ``templates`` compiles them here, once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from app.catalog.kinds import KIND_CHANNELS, KIND_PLATFORM, ProviderConfig
from app.catalog.providers import SecretMissing
from app.catalog.push import Platform, platform_of
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.catalog.templates import CompiledTemplate, Template, TemplateProblem, compile_template
from app.validation import describe
from streams.core.errors import ClarionError
from streams.core.vocabulary import CHANNELS, Channel, Priority
from streams.delivery.fairness import Fairness

Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
# As in CLARION_API_KEYS (``app.settings``).
ProducerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
# Words for people: one line without control characters.
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$")]


class CatalogError(ClarionError):
    """The catalog file cannot be used; the message names the file and the key."""


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    base_seconds: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    max_seconds: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 6


class ChannelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[channels.<CHANNEL>]``: its provider, or providers in failover order, and retries."""

    provider: Name | None = None
    # Failover order: an attempt goes to the first provider whose circuit is not open, and
    # the next attempt to the next provider after one that certainly did not take the message.
    providers: list[Name] = []
    retry: RetryPolicy = RetryPolicy()
    # SMS: a body longer than this many segments fails (PERMANENT, reason template).
    max_segments: Annotated[int, msgspec.Meta(ge=1, le=20)] = 10
    # PUSH: each platform's providers in failover order; a platform not named here goes to
    # the channel's provider(s), those of them that can send to it.
    platforms: dict[Platform, list[Name]] = {}
    # PUSH: the platform of a plain ``push_tokens`` string.
    default_platform: Platform = Platform.FCM

    @property
    def provider_order(self) -> tuple[str, ...]:
        """The channel's providers, first choice first."""
        return (self.provider,) if self.provider else tuple(self.providers)


class TypeConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1)]
    priority: Priority
    ttl_seconds: Annotated[int, msgspec.Meta(ge=1, le=30 * 86400)]
    # May a recipient switch this type off? An OTP may not.
    opt_out: bool
    templates: dict[str, dict[Channel, Template]]
    # The producers that may send this type; None: any producer with a ``send`` key. An OTP
    # or a security alert is HIGH and cannot be switched off: name who may send it.
    producers: frozenset[ProducerName] | None = None
    # WEBHOOK: where a recipient without a ``webhook_url`` of its own is called.
    webhook_url: str | None = None
    # How recipients see this type named (the unsubscribe page): plain words such as
    # "Order updates"; by default the type's name with spaces for "_".
    label: Label | None = None

    def label_of(self, name: str) -> str:
        """What recipients call this type, ``name`` in the catalog."""
        return self.label or name.replace("_", " ")


class Quota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A sustained rate and how much may come at once."""

    per_second: Annotated[float, msgspec.Meta(gt=0)]
    burst: Annotated[int, msgspec.Meta(ge=1)]


class CampaignLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How much of Redis one producer's campaigns may hold: campaigns open at once (created,
    not yet completed or cancelled), recipients uploaded to one campaign, and recipients
    uploaded to all its open campaigns together. Every uploaded id waits in Redis until its
    notification is generated; Redis runs without eviction, so without these one producer
    could fill it and stop every producer's writes."""

    open: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100
    audience: Annotated[int, msgspec.Meta(ge=1, le=100_000_000)] = 1_000_000
    open_audience: Annotated[int, msgspec.Meta(ge=1, le=1_000_000_000)] = 2_000_000


class IngestQuota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one producer may ingest: HTTP requests and notifications (a batch counts one
    request and each of its items, a campaign call one request, and a campaign's generator
    each notification); a quota left out is not limited. ``campaigns``: its campaigns'
    limits, which always apply (the defaults when left out)."""

    requests: Quota | None = None
    notifications: Quota | None = None
    campaigns: CampaignLimits = CampaignLimits()


class Quotas(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[quotas]``: the quota of every producer without one of its own (``default``), and
    producers' own quotas, which replace the default for them."""

    default: IngestQuota | None = None
    producers: dict[ProducerName, IngestQuota] = {}

    def of(self, producer: str) -> IngestQuota | None:
        """The quota ``producer`` ingests under; None: no limit."""
        return self.producers.get(producer, self.default)

    def campaigns_of(self, producer: str) -> CampaignLimits:
        """The limits of ``producer``'s campaigns (the defaults without a quota)."""
        quota = self.of(producer)
        return CampaignLimits() if quota is None else quota.campaigns


class Catalog(msgspec.Struct, frozen=True):
    """A loaded, checked catalog plus what is derived from it once."""

    source: str
    default_locale: str
    providers: dict[str, ProviderConfig]
    channels: dict[Channel, ChannelConfig]
    types: dict[str, TypeConfig]
    # (type, locale, channel) -> names the template needs from ``data``.
    template_fields: dict[tuple[str, str, Channel], frozenset[str]]
    quotas: Quotas = Quotas()
    # (type, locale, channel) -> its template, compiled.
    compiled: dict[tuple[str, str, Channel], CompiledTemplate] = {}
    # PUSH: the providers of each platform's targets, first choice first (none: its targets
    # cannot be sent and are suppressed at ingest with ``no_provider``).
    push_orders: dict[Platform, tuple[str, ...]] = {}
    # ``[status_webhooks]``: which producer URLs may be called, time limits, retries.
    status_webhooks: StatusWebhooksConfig = StatusWebhooksConfig()
    # ``[fairness]``: producers' shares of NORMAL and LOW delivery (``streams.delivery.fairness``).
    fairness: Fairness = Fairness()

    def provider_order(self, channel: Channel, address: str) -> tuple[str, ...]:
        """The providers a delivery to ``address`` on ``channel`` goes to, first choice first."""
        if channel != Channel.PUSH:
            return self.channels[channel].provider_order
        return self.push_orders[platform_of(address, self.channels[channel].default_platform)]

    def template_locale(self, type_name: str, channel: Channel, locale: str) -> str | None:
        """The locale whose template is used: exact, then language, then the default."""
        templates = self.types[type_name].templates
        for candidate in (locale, locale.split("-", maxsplit=1)[0], self.default_locale):
            if channel in templates.get(candidate, {}):
                return candidate
        return None


def feedback_secrets(catalog: Catalog, environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """What the API needs to verify providers' feedback callbacks: each Twilio provider's
    auth token and each ``feedback_secret_env``, per provider. Raises ``CatalogError``."""
    secrets: dict[str, dict[str, str]] = {}
    for name, config in catalog.providers.items():
        if config.kind != "twilio" and not config.feedback_secret_env:
            continue
        try:
            values = config.secrets(environ) if config.kind == "twilio" else {}
            secret = config.feedback_secret(environ)
        except SecretMissing as error:
            raise CatalogError(f"{catalog.source}: providers.{name}.{error}") from None
        secrets[name] = {key: value for key, value in values.items() if key == "auth_token_env"}
        if secret:
            secrets[name]["feedback_secret_env"] = secret
    return secrets


def check_for_workers(
    catalog: Catalog, environ: Mapping[str, str], lease_ms: int
) -> dict[str, dict[str, str]]:
    """What a delivery worker needs beyond the file: every provider's secrets from
    ``environ`` (returned per provider) and time limits inside the lease (a call that may
    outlast its lease would be taken over and made twice). Raises ``CatalogError``."""
    secrets: dict[str, dict[str, str]] = {}
    for name, config in catalog.providers.items():
        key = f"{catalog.source}: providers.{name}"
        try:
            secrets[name] = config.secrets(environ)
        except SecretMissing as error:
            raise CatalogError(f"{key}.{error}") from None
        # The inbox calls nobody: its time limit is never used.
        if config.kind != "inbox" and config.timeout_seconds * 1000 >= lease_ms:
            raise CatalogError(
                f"{key}.timeout_seconds: {config.timeout_seconds:g} s is not shorter than the "
                f"lease (CLARION_LEASE_MS={lease_ms}): a call could outlast its lease"
            )
    return secrets


def guarded_providers(catalog: Catalog) -> list[str]:
    """The providers with a circuit breaker, in the catalog's order."""
    return [name for name, config in catalog.providers.items() if config.circuit.enabled]


def load_catalog(path: str | Path) -> Catalog:
    """Read and check the catalog file; raise ``CatalogError`` naming what is wrong."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise CatalogError(f"{source}: cannot read the catalog: {error.strerror}") from None
    return parse_catalog(raw, source)


def parse_catalog(raw: bytes | str, source: str = "clarion.toml") -> Catalog:
    """Check a catalog given as TOML text."""
    try:
        document = msgspec.toml.decode(raw)
    except msgspec.DecodeError as error:
        raise CatalogError(f"{source}: not valid TOML: {error}") from None

    def fail(key: str, problem: str) -> CatalogError:
        return CatalogError(f"{source}: {key}: {problem}")

    def convert(value: Any, target: Any, path: str) -> Any:
        # Entry by entry, so an error names the provider, channel or type it is about
        # (msgspec itself writes a mapping key as `[...]`).
        try:
            return msgspec.convert(value, target)
        except msgspec.ValidationError as error:
            raise CatalogError(f"{source}: {describe(error, path)}") from None

    sections = {
        "default_locale", "providers", "channels", "types", "quotas", "status_webhooks",
        "fairness",
    }  # fmt: skip
    unknown = sorted(set(document) - sections)
    if unknown:
        raise fail(unknown[0], "unknown key")
    default_locale: str = convert(document.get("default_locale", "en"), str, "default_locale")
    providers: dict[str, ProviderConfig] = {}
    for name, value in convert(document.get("providers", {}), dict[str, Any], "providers").items():
        convert(name, Name, f"providers.{name}")
        providers[name] = convert(value, ProviderConfig, f"providers.{name}")
    channels: dict[Channel, ChannelConfig] = {}
    for name, value in convert(document.get("channels", {}), dict[str, Any], "channels").items():
        channel = convert(name, Channel, f"channels.{name}")
        channels[channel] = convert(value, ChannelConfig, f"channels.{name}")
    types: dict[str, TypeConfig] = {}
    for name, value in convert(document.get("types", {}), dict[str, Any], "types").items():
        convert(name, Name, f"types.{name}")
        _check_templates(name, value, convert)
        types[name] = convert(value, TypeConfig, f"types.{name}")
    compiled = _cross_check(providers, channels, types, default_locale, fail)
    return Catalog(
        source=source,
        default_locale=default_locale,
        providers=providers,
        channels=channels,
        types=types,
        template_fields={key: template.fields for key, template in compiled.items()},
        quotas=convert(document.get("quotas", {}), Quotas, "quotas"),
        compiled=compiled,
        push_orders=_push_orders(providers, channels.get(Channel.PUSH)),
        status_webhooks=convert(
            document.get("status_webhooks", {}), StatusWebhooksConfig, "status_webhooks"
        ),
        fairness=convert(document.get("fairness", {}), Fairness, "fairness"),
    )


def _check_templates(type_name: str, value: Any, convert: Callable[[Any, Any, str], Any]) -> None:
    """Check each template on its own, so an error names its locale and channel."""
    templates = convert(
        value.get("templates", {}) if isinstance(value, dict) else {},
        dict[str, dict[str, Any]],
        f"types.{type_name}.templates",
    )
    for locale, by_channel in templates.items():
        for channel, template in by_channel.items():
            path = f"types.{type_name}.templates.{locale}.{channel}"
            convert(channel, Channel, path)
            convert(template, Template, path)


def _check_channels(
    providers: dict[str, ProviderConfig],
    channels: dict[Channel, ChannelConfig],
    fail: Callable[[str, str], CatalogError],
) -> None:
    """Each channel names providers that exist and can send it (PUSH: each platform's
    providers can send to that platform)."""
    for channel, config in channels.items():
        if config.provider and config.providers:
            raise fail(f"channels.{channel}", "give provider or providers, not both")
        key = f"channels.{channel}.provider" if config.provider else f"channels.{channel}.providers"
        if config.platforms and channel != Channel.PUSH:
            raise fail(f"channels.{channel}.platforms", "only the PUSH channel has platforms")
        if not config.provider_order and not config.platforms:
            raise fail(key, "missing: name the channel's provider")
        _check_order(key, config.provider_order, channel, providers, fail)
        for platform, order in config.platforms.items():
            path = f"channels.{channel}.platforms.{platform}"
            if not order:
                raise fail(path, "missing: name the platform's provider")
            _check_order(path, tuple(order), channel, providers, fail)
            for name in order:
                kind = providers[name].kind
                if KIND_PLATFORM.get(kind, platform) != platform:
                    raise fail(path, f"provider {name!r} is of kind {kind}, not {platform}")


def _check_order(
    key: str,
    order: tuple[str, ...],
    channel: Channel,
    providers: dict[str, ProviderConfig],
    fail: Callable[[str, str], CatalogError],
) -> None:
    if len(set(order)) < len(order):
        raise fail(key, "a provider is named twice")
    for name in order:
        if name not in providers:
            raise fail(key, f"no provider named {name!r}")
        kind = providers[name].kind
        if channel not in KIND_CHANNELS.get(kind, CHANNELS):
            raise fail(key, f"provider {name!r} is of kind {kind}, which cannot send {channel}")


def _push_orders(
    providers: dict[str, ProviderConfig], push: ChannelConfig | None
) -> dict[Platform, tuple[str, ...]]:
    """Each platform's providers: its own list, else those of the channel's that can send
    to it (a sandbox stands in for any platform)."""
    if push is None:
        return {}
    orders: dict[Platform, tuple[str, ...]] = {}
    for platform in Platform:
        own = push.platforms.get(platform)
        orders[platform] = (
            tuple(own)
            if own
            else tuple(
                name
                for name in push.provider_order
                if KIND_PLATFORM.get(providers[name].kind, platform) == platform
            )
        )
    return orders


def _cross_check(
    providers: dict[str, ProviderConfig],
    channels: dict[Channel, ChannelConfig],
    types: dict[str, TypeConfig],
    default_locale: str,
    fail: Callable[[str, str], CatalogError],
) -> dict[tuple[str, str, Channel], CompiledTemplate]:
    """Check references between sections; return every template compiled."""
    _check_channels(providers, channels, fail)
    compiled: dict[tuple[str, str, Channel], CompiledTemplate] = {}
    for type_name, type_config in types.items():
        for channel in type_config.channels:
            if channel not in channels:
                raise fail(f"types.{type_name}.channels", f"channel {channel} is not configured")
            if channel not in type_config.templates.get(default_locale, {}):
                raise fail(
                    f"types.{type_name}.templates.{default_locale}.{channel}",
                    "missing: every default channel needs a template in the default locale",
                )
        for locale, by_channel in type_config.templates.items():
            for channel, template in by_channel.items():
                key = f"types.{type_name}.templates.{locale}.{channel}"
                if channel not in channels:
                    raise fail(key, f"channel {channel} is not configured")
                try:
                    compiled[(type_name, locale, channel)] = compile_template(template, channel)
                except TemplateProblem as problem:
                    raise fail(f"{key}.{problem.part}", str(problem)) from None
    return compiled
