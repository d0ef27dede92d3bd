"""The type catalog (``clarion.toml``): notification types, channels and providers
(``channels``), ingest quotas (``quotas``), how status webhooks are sent
(``status_webhooks``), per-recipient rate caps of types and categories (``throttles``), and
types' escalation steps and channel fallbacks (``steps``).

A broken catalog stops start-up with a ``CatalogError`` naming the file, the type and the key
(for a template also its part and line: ``templates`` compiles them here, once, and
``template_fields`` reads the data each one requires).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from app.catalog.channels import ChannelConfig, Name, check_channels, push_orders
from app.catalog.digests import DIGEST_FIELDS, Digest, DigestConfig
from app.catalog.kinds import ProviderConfig
from app.catalog.providers import SecretMissing
from app.catalog.push import Platform, platform_of
from app.catalog.quotas import ProducerName, Quotas
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.catalog.steps import PlannedStep, Step, check_fallback, planned_steps
from app.catalog.templates import CompiledTemplate, Template, TemplateProblem, compile_template
from app.catalog.throttles import CategoryConfig, Rule, ThrottleConfig, explicit_rules
from app.validation import describe
from streams.core.errors import ClarionError
from streams.core.vocabulary import Channel, Priority
from streams.delivery.fairness import Fairness

# Words for people: one line without control characters.
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$")]
# The top-level keys of a catalog file.
_SECTIONS = frozenset({
    "default_locale", "providers", "channels", "types", "quotas", "status_webhooks",
    "fairness", "categories",
})  # fmt: skip
# The longest a type's deliveries may wait for an address (``await_address_seconds``).
MAX_AWAIT_ADDRESS_SECONDS = 86400
# Converts a value of the file to a type, or raises ``CatalogError`` naming its path.
Converter = Callable[[Any, Any, str], Any]


class CatalogError(ClarionError):
    """The catalog file cannot be used; the message names the file and the key."""


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
    # A delivery without an address waits this long for the recipient's profile to give one
    # (re-checked with backoff, released at once by a profile change), then is SUPPRESSED
    # ``no_address``; None (the default): suppressed at once. At most the TTL and a day.
    await_address_seconds: (
        Annotated[int, msgspec.Meta(ge=1, le=MAX_AWAIT_ADDRESS_SECONDS)] | None
    ) = None
    # The category it belongs to (``[categories.<name>]``), whose throttle it then shares.
    category: Name | None = None
    # At most ``limit`` deliveries per recipient within ``per`` (``app.catalog.throttles``);
    # wins over its category's.
    throttle: ThrottleConfig | None = None
    # Escalation steps: channels that go later, unless an earlier one was read or delivered
    # (``app.catalog.steps``); None: every channel at once.
    steps: Annotated[list[Step], msgspec.Meta(min_length=1)] | None = None
    # A channel whose delivery fails permanently is replaced by another: ``{ PUSH = "SMS" }``.
    fallback: dict[Channel, Channel] = {}
    # Its notifications to one recipient are joined into one (``app.catalog.digests``).
    digest: DigestConfig | None = None

    def label_of(self, name: str) -> str:
        """What recipients call this type, ``name`` in the catalog."""
        return self.label or name.replace("_", " ")


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
    # ``[categories.<name>]``, and the throttle of each type with one of its own or through
    # its category (the default cap is the worker's: ``app.catalog.throttles.rules_of``).
    categories: dict[str, CategoryConfig] = {}
    throttles: dict[str, Rule] = {}
    # Each type with ``steps``: its stepped channels' plans.
    steps: dict[str, dict[Channel, PlannedStep]] = {}
    # Each type with a ``digest``: it checked.
    digests: dict[str, Digest] = {}

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

    unknown = sorted(set(document) - _SECTIONS)
    if unknown:
        raise fail(unknown[0], "unknown key")
    default_locale: str = convert(document.get("default_locale", "en"), str, "default_locale")
    providers = _read_providers(document, convert)
    channels = _read_channels(document, convert)
    types = _read_types(document, convert)
    compiled = _cross_check(providers, channels, types, default_locale, fail)
    categories = _read_categories(document, convert)
    throttled = {
        name: (t.category, t.throttle, [*t.channels, *_template_channels(t)])
        for name, t in types.items()
    }
    return Catalog(
        source=source,
        default_locale=default_locale,
        providers=providers,
        channels=channels,
        types=types,
        template_fields={key: template.fields for key, template in compiled.items()},
        quotas=convert(document.get("quotas", {}), Quotas, "quotas"),
        compiled=compiled,
        push_orders=push_orders(providers, channels.get(Channel.PUSH)),
        status_webhooks=convert(
            document.get("status_webhooks", {}), StatusWebhooksConfig, "status_webhooks"
        ),
        fairness=convert(document.get("fairness", {}), Fairness, "fairness"),
        categories=categories,
        throttles=explicit_rules(throttled, categories, fail),
        steps={
            name: planned_steps(name, t.steps, t.channels, t.ttl_seconds, fail)
            for name, t in types.items()
            if t.steps is not None
        },
        digests={
            name: _digest(name, t, compiled, fail)
            for name, t in types.items()
            if t.digest is not None
        },
    )


def _digest(
    name: str,
    config: TypeConfig,
    compiled: Mapping[tuple[str, str, Channel], CompiledTemplate],
    fail: Callable[[str, str], CatalogError],
) -> Digest:
    """A type's digest, checked: HIGH notifications are never held back to be joined, and
    its templates need nothing but what every digest gives."""
    assert config.digest is not None
    if config.priority == Priority.HIGH:
        raise fail(f"types.{name}.digest", "a HIGH type is sent at once, never digested")
    for (type_name, locale, channel), template in compiled.items():
        unknown = sorted(template.fields - DIGEST_FIELDS) if type_name == name else []
        if unknown:
            raise fail(
                f"types.{name}.templates.{locale}.{channel}",
                f"a digest's templates are filled with {', '.join(sorted(DIGEST_FIELDS))}; "
                f"{unknown[0]!r} is none of them",
            )
    return Digest(config.digest, f"types.{name}.digest", fail)


def _read_providers(document: dict[str, Any], convert: Converter) -> dict[str, ProviderConfig]:
    """``[providers.<name>]``, each converted on its own."""
    providers: dict[str, ProviderConfig] = {}
    for name, value in convert(document.get("providers", {}), dict[str, Any], "providers").items():
        convert(name, Name, f"providers.{name}")
        providers[name] = convert(value, ProviderConfig, f"providers.{name}")
    return providers


def _read_channels(document: dict[str, Any], convert: Converter) -> dict[Channel, ChannelConfig]:
    """``[channels.<CHANNEL>]``, each converted on its own."""
    channels: dict[Channel, ChannelConfig] = {}
    for name, value in convert(document.get("channels", {}), dict[str, Any], "channels").items():
        channel = convert(name, Channel, f"channels.{name}")
        channels[channel] = convert(value, ChannelConfig, f"channels.{name}")
    return channels


def _read_types(document: dict[str, Any], convert: Converter) -> dict[str, TypeConfig]:
    """``[types.<name>]``, each converted on its own after its templates."""
    types: dict[str, TypeConfig] = {}
    for name, value in convert(document.get("types", {}), dict[str, Any], "types").items():
        convert(name, Name, f"types.{name}")
        _check_templates(name, value, convert)
        types[name] = convert(value, TypeConfig, f"types.{name}")
    return types


def _read_categories(document: dict[str, Any], convert: Converter) -> dict[str, CategoryConfig]:
    """``[categories.<name>]``, each converted on its own."""
    categories: dict[str, CategoryConfig] = {}
    raw = convert(document.get("categories", {}), dict[str, Any], "categories")
    for name, value in raw.items():
        convert(name, Name, f"categories.{name}")
        categories[name] = convert(value, CategoryConfig, f"categories.{name}")
    return categories


def _template_channels(config: TypeConfig) -> set[Channel]:
    """Every channel the type has a template for, in any locale."""
    return {channel for by_channel in config.templates.values() for channel in by_channel}


def _check_templates(type_name: str, value: Any, convert: Converter) -> None:
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


def _cross_check(
    providers: dict[str, ProviderConfig],
    channels: dict[Channel, ChannelConfig],
    types: dict[str, TypeConfig],
    default_locale: str,
    fail: Callable[[str, str], CatalogError],
) -> dict[tuple[str, str, Channel], CompiledTemplate]:
    """Check references between sections; return every template compiled."""
    check_channels(providers, channels, fail)
    compiled: dict[tuple[str, str, Channel], CompiledTemplate] = {}
    for type_name, type_config in types.items():
        awaited = type_config.await_address_seconds
        if awaited is not None and awaited > type_config.ttl_seconds:
            raise fail(
                f"types.{type_name}.await_address_seconds",
                f"{awaited} s is longer than the type's ttl_seconds ({type_config.ttl_seconds})",
            )
        for channel in type_config.channels:
            if channel not in channels:
                raise fail(f"types.{type_name}.channels", f"channel {channel} is not configured")
            if channel not in type_config.templates.get(default_locale, {}):
                raise fail(
                    f"types.{type_name}.templates.{default_locale}.{channel}",
                    "missing: every default channel needs a template in the default locale",
                )
        check_fallback(
            type_name, type_config.fallback, type_config.channels,
            type_config.templates.get(default_locale, {}), fail,
        )  # fmt: skip
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
