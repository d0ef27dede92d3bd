"""The type catalog (``clarion.toml``): notification types, channels and providers.

A broken catalog stops start-up with a ``CatalogError`` naming the file, the type and the key.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from app.validation import describe
from streams.vocabulary import Channel, Priority

Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
# As in CLARION_API_KEYS (``app.settings``).
ProducerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class CatalogError(Exception):
    """The catalog file cannot be used; the message names the file and the key."""


class Template(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    body: str
    # EMAIL subject, PUSH or IN_APP title; SMS has none.
    title: str = ""


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    base_seconds: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    max_seconds: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 6


class RateLimit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    per_second: Annotated[float, msgspec.Meta(gt=0)]
    burst: Annotated[int, msgspec.Meta(ge=1)] = 1
    # Share of the rate each priority may use; HIGH always has all of it.
    normal_share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.8
    low_share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.6


class ProviderConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: Literal["sandbox"]
    # sandbox: a second call with an already-sent idempotency key sends nothing new.
    idempotent: bool = True
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    rate_limit: RateLimit | None = None


class ChannelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    provider: Name
    retry: RetryPolicy = RetryPolicy()


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


class Quota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A sustained rate and how much may come at once."""

    per_second: Annotated[float, msgspec.Meta(gt=0)]
    burst: Annotated[int, msgspec.Meta(ge=1)]


class IngestQuota(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one producer may ingest: HTTP requests and notifications (a batch counts one
    request and each of its items); a quota left out is not limited."""

    requests: Quota | None = None
    notifications: Quota | None = None


class Quotas(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[quotas]``: the quota of every producer without one of its own (``default``), and
    producers' own quotas, which replace the default for them."""

    default: IngestQuota | None = None
    producers: dict[ProducerName, IngestQuota] = {}

    def of(self, producer: str) -> IngestQuota | None:
        """The quota ``producer`` ingests under; None: no limit."""
        return self.producers.get(producer, self.default)


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

    def template_locale(self, type_name: str, channel: Channel, locale: str) -> str | None:
        """The locale whose template is used: exact, then language, then the default."""
        templates = self.types[type_name].templates
        for candidate in (locale, locale.split("-", maxsplit=1)[0], self.default_locale):
            if channel in templates.get(candidate, {}):
                return candidate
        return None


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

    sections = {"default_locale", "providers", "channels", "types", "quotas"}
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
    fields = _cross_check(providers, channels, types, default_locale, fail)
    return Catalog(
        source=source,
        default_locale=default_locale,
        providers=providers,
        channels=channels,
        types=types,
        template_fields=fields,
        quotas=convert(document.get("quotas", {}), Quotas, "quotas"),
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


def _cross_check(
    providers: dict[str, ProviderConfig],
    channels: dict[Channel, ChannelConfig],
    types: dict[str, TypeConfig],
    default_locale: str,
    fail: Callable[[str, str], CatalogError],
) -> dict[tuple[str, str, Channel], frozenset[str]]:
    """Check references between sections; return the fields each template needs."""
    for channel, config in channels.items():
        if config.provider not in providers:
            raise fail(f"channels.{channel}.provider", f"no provider named {config.provider!r}")
    fields: dict[tuple[str, str, Channel], frozenset[str]] = {}
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
                    fields[(type_name, locale, channel)] = _template_fields(template)
                except ValueError as error:
                    raise fail(key, str(error)) from None
    return fields


def _template_fields(template: Template) -> frozenset[str]:
    """Names a template reads from ``data``; only plain ``{name}`` placeholders are allowed."""
    names: set[str] = set()
    for text in (template.title, template.body):
        _collect_fields(text, names)
    return frozenset(names)


def _collect_fields(text: str, names: set[str]) -> None:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as error:
        raise ValueError(f"not a valid template: {error}") from None
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        if not field.isidentifier():
            # Attribute and index lookups would let data reach into Python objects.
            raise ValueError(f"placeholder {{{field}}} must be a plain name like {{code}}")
        names.add(field)
        if spec:  # a spec may hold placeholders of its own: {amount:>{width}}
            _collect_fields(spec, names)
