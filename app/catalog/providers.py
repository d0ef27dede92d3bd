"""What the catalog says about a provider: its kind, how to reach it, and its limits.

``[providers.<name>]`` in ``clarion.toml`` is one of these structs, chosen by ``kind``.
Every kind shares the limits of ``ProviderLimits``; secrets are never in the file, only the
names of the environment variables that hold them (``password_env = "SMTP_PASSWORD"``).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from streams.core.errors import ClarionError

# An environment variable's name, as a secret's ``*_env`` key gives it.
EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]
# The most ``feedback_max_bytes`` may say: the feedback route's own bound.
MAX_FEEDBACK_BYTES = 4 * 1024 * 1024
# An HTTP API's root: scheme and host (a local peer or a regional endpoint), no trailing slash.
BaseUrl = Annotated[str, msgspec.Meta(pattern=r"^https?://[^/?#\s]+(/[^?#\s]*[^/?#\s])?$")]


class SecretMissing(ClarionError):
    """An environment variable the catalog names for a secret is not set (or empty)."""


class SecretInvalid(SecretMissing):
    """A secret is set but not in the form its kind needs (start-up reports it as it reports
    a missing one)."""


class RateLimit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    per_second: Annotated[float, msgspec.Meta(gt=0)]
    burst: Annotated[int, msgspec.Meta(ge=1)] = 1
    # Share of the rate each priority may use; HIGH always has all of it.
    normal_share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.8
    low_share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.6


class CircuitConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """When a provider's circuit opens: ``failure_share`` of at least ``min_calls`` calls in
    the last ``window_seconds`` failed TRANSIENT. It stays open ``open_seconds``, then lets
    one probe through (half-open) and closes when the probe succeeds."""

    enabled: bool = True
    failure_share: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.5
    min_calls: Annotated[int, msgspec.Meta(ge=1)] = 20
    window_seconds: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 30
    open_seconds: Seconds = 30.0


class ProviderLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What every kind shares: time limits, quota, bulkhead and circuit breaker."""

    # The whole call, connecting included; must end well inside the worker's lease.
    timeout_seconds: Seconds = 10.0
    # Connecting alone (TCP, TLS, the SMTP greeting).
    connect_timeout_seconds: Seconds = 5.0
    rate_limit: RateLimit | None = None
    # The bulkhead: at most this many calls in flight per worker process; a delivery that
    # finds it full waits in ``delayed`` without counting an attempt. 0: no bound.
    max_in_flight: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 32
    circuit: CircuitConfig = CircuitConfig()
    # The Standard Webhooks secret (``whsec_``) the provider signs its feedback callbacks to
    # ``/v1/feedback/<name>`` with (``app.feedback``); kinds with a scheme of their own
    # (Twilio, SendGrid) need none.
    feedback_secret_env: EnvName | None = None
    # The largest feedback callback body taken from the provider (over it: 413, the rest
    # unread); unset, its scheme's own (``app.feedback.callbacks``: Twilio 32 KiB, SendGrid
    # 4 MiB, Standard Webhooks 1 MiB).
    feedback_max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=MAX_FEEDBACK_BYTES)] | None = None

    @property
    def kind(self) -> str:
        """The ``kind`` this configuration was given under (``smtp``, ``sandbox``...)."""
        return str(type(self).__struct_config__.tag)

    def secret_names(self) -> dict[str, str]:
        """Each secret's key in the file (``password_env``) and the variable it names."""
        return {}

    def secrets(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Each secret's key and its value from ``environ``; raises ``SecretMissing``."""
        values: dict[str, str] = {}
        for key, variable in self.secret_names().items():
            value = environ.get(variable, "")
            if not value:
                raise SecretMissing(f"{key}: environment variable {variable} is not set")
            values[key] = value
        return values

    def feedback_secret(self, environ: Mapping[str, str]) -> str:
        """The Standard Webhooks secret of the provider's feedback callbacks ("" without
        ``feedback_secret_env``); raises ``SecretMissing``."""
        variable = self.feedback_secret_env
        if not variable:
            return ""
        value = environ.get(variable, "")
        if not value:
            raise SecretMissing(f"feedback_secret_env: environment variable {variable} is not set")
        try:
            signing_key(value)
        except ValueError as error:
            raise SecretInvalid(
                f"feedback_secret_env: environment variable {variable} {error}"
            ) from None
        return value


class SandboxConfig(ProviderLimits, frozen=True, tag_field="kind", tag="sandbox"):
    """Sends nothing, records every call in Redis (development, tests, benchmarks)."""

    # A second call with an already-sent idempotency key sends nothing new.
    idempotent: bool = True
    # The sandbox stands in for any provider at full speed: no bulkhead and no breaker
    # unless asked for.
    max_in_flight: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    circuit: CircuitConfig = CircuitConfig(enabled=False)


# A URL scheme (RFC 3986), in lower case as link_schemes names them.
LinkScheme = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9+.-]{0,31}$")]
# Schemes no app's own link uses: a browser runs or embeds what follows them.
SCRIPT_SCHEMES = frozenset(
    {"javascript", "data", "vbscript", "blob", "file", "about", "filesystem"}
)


class InboxConfig(ProviderLimits, frozen=True, tag_field="kind", tag="inbox"):
    """Clarion's own inbox (IN_APP): each message goes into its recipient's inbox, which the
    recipient's app reads through ``/v1/inbox`` and follows live."""

    # Messages kept in Redis per recipient (the newest; the read model keeps them all).
    keep: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 200
    # How long a recipient's inbox stays in Redis after its newest message came.
    keep_days: Annotated[int, msgspec.Meta(ge=1, le=3650)] = 30
    # Changes a realtime client can resume from after a reconnect (per recipient), and for
    # how long after the newest change: one away longer reads its inbox again.
    feed_length: Annotated[int, msgspec.Meta(ge=10, le=100_000)] = 1000
    feed_minutes: Annotated[int, msgspec.Meta(ge=1, le=30 * 24 * 60)] = 60
    # URL schemes an IN_APP message's link may have besides https, e.g. ["myapp"] for a
    # mobile app's own links; a message whose link has another is not sent (FAILED).
    link_schemes: Annotated[list[LinkScheme], msgspec.Meta(max_length=16)] = []
    # Writing to Redis needs neither a bulkhead nor a breaker.
    max_in_flight: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    circuit: CircuitConfig = CircuitConfig(enabled=False)

    def __post_init__(self) -> None:
        for scheme in self.link_schemes:
            if scheme in SCRIPT_SCHEMES:
                raise ValueError(f"link_schemes: {scheme!r} runs or embeds content in a browser")

    @property
    def feed(self) -> tuple[int, int]:
        """The feed's length and how long (ms) it lives after its newest change."""
        return self.feed_length, self.feed_minutes * 60_000


class SmtpConfig(ProviderLimits, frozen=True, tag_field="kind", tag="smtp"):
    """Email over SMTP (RFC 5321), through a relay such as Postfix, SES or Mailgun."""

    host: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    from_address: str = msgspec.field(name="from")
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 587
    # none: plain text (a local relay only); starttls: upgrade on the submission port (587);
    # tls: TLS from the first byte (465).
    tls: Literal["none", "starttls", "tls"] = "starttls"
    username: str = ""
    password_env: EnvName | None = None
    # A PEM file of CA certificates to trust instead of the system's (a private relay).
    ca_file: str = ""
    # Connections kept open to the relay per worker process.
    pool_size: Annotated[int, msgspec.Meta(ge=1, le=256)] = 4

    def secret_names(self) -> dict[str, str]:
        return {"password_env": self.password_env} if self.password_env else {}


class SendgridConfig(ProviderLimits, frozen=True, tag_field="kind", tag="sendgrid"):
    """Email through the SendGrid v3 Web API (``POST /v3/mail/send``)."""

    api_key_env: EnvName
    from_address: str = msgspec.field(name="from")
    from_name: str = ""
    base_url: BaseUrl = "https://api.sendgrid.com"
    # The Event Webhook's verification key, as SendGrid's settings show it (base64 of a P-256
    # public key): with it, signed events to ``/v1/feedback/<name>`` are taken (``app.feedback``).
    event_webhook_public_key: str = ""

    def __post_init__(self) -> None:
        if self.event_webhook_public_key:
            event_webhook_key(self.event_webhook_public_key)

    def secret_names(self) -> dict[str, str]:
        return {"api_key_env": self.api_key_env}


class TwilioConfig(ProviderLimits, frozen=True, tag_field="kind", tag="twilio"):
    """SMS through the Twilio Messages API (``POST /2010-04-01/Accounts/{sid}/Messages.json``).
    Sends from ``from`` (a number) or through ``messaging_service_sid``: one of the two."""

    account_sid: Annotated[str, msgspec.Meta(pattern=r"^AC[0-9a-fA-F]{32}$")]
    auth_token_env: EnvName
    from_number: str = msgspec.field(default="", name="from")
    messaging_service_sid: Annotated[str, msgspec.Meta(pattern=r"^(MG[0-9a-fA-F]{32})?$")] = ""
    base_url: BaseUrl = "https://api.twilio.com"

    def __post_init__(self) -> None:
        # Either one number sends, or the service picks among its senders: with both or
        # neither the file would not say which sender the recipients see.
        if bool(self.from_number) == bool(self.messaging_service_sid):
            raise ValueError("give exactly one of from and messaging_service_sid")

    def secret_names(self) -> dict[str, str]:
        return {"auth_token_env": self.auth_token_env}


class GuardedConfig(ProviderLimits, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A kind whose URLs come from recipients (webhooks, Web Push subscriptions): where it may
    connect is checked against server-side request forgery (``app.providers.ssrf``)."""

    # Hosts that may be reached over plain http (https is required otherwise).
    allow_http_hosts: list[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]{1,253}$")]] = []
    # Networks (CIDR) that may be reached although they are loopback, link-local or private.
    allow_networks: list[str] = []
    # A PEM file of CA certificates to trust instead of the system's (receivers inside
    # allow_networks with a private CA).
    ca_file: str = ""

    def __post_init__(self) -> None:
        # msgspec reports a ValueError raised here as a validation error of the provider,
        # so the catalog names ``providers.<name>`` and the value at start-up.
        for value in self.allow_networks:
            try:
                ipaddress.ip_network(value)
            except ValueError:
                raise ValueError(
                    f"allow_networks: {value!r} is not a network in CIDR form (10.0.0.0/8)"
                ) from None

    @property
    def networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """``allow_networks``, parsed."""
        return tuple(ipaddress.ip_network(value) for value in self.allow_networks)


class WebhookConfig(GuardedConfig, frozen=True, tag_field="kind", tag="webhook"):
    """Signed POSTs to the recipient's or the type's URL (Standard Webhooks)."""

    # The signing secret, ``whsec_`` and base64, as Standard Webhooks libraries make it.
    secret_env: EnvName

    def secret_names(self) -> dict[str, str]:
        return {"secret_env": self.secret_env}

    def secrets(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The signing secret; ``SecretInvalid`` (naming the variable, never its value) if
        it is not a Standard Webhooks secret."""
        values = super().secrets(environ)
        try:
            signing_key(values["secret_env"])
        except ValueError as error:
            raise SecretInvalid(
                f"secret_env: environment variable {self.secret_env} {error}"
            ) from None
        return values


# Standard Webhooks: a symmetric secret is at least 24 random bytes.
MIN_SIGNING_KEY_BYTES = 24


def event_webhook_key(text: str) -> ec.EllipticCurvePublicKey:
    """SendGrid's Event Webhook verification key; ``ValueError`` naming the setting."""
    try:
        key = serialization.load_der_public_key(base64.b64decode(text, validate=True))
    except ValueError:  # binascii.Error is one, and so is a key that does not parse
        raise ValueError("event_webhook_public_key: not a base64 public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise ValueError("event_webhook_public_key: not a P-256 (ECDSA) public key")
    return key


def signing_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret; ``ValueError`` (without the secret)."""
    prefix, _, encoded = secret.partition("_")
    try:
        if prefix != "whsec" or not encoded:
            raise ValueError
        # Padding is optional, as in the Standard Webhooks libraries.
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except ValueError:  # binascii.Error is one
        raise ValueError("is not a Standard Webhooks secret (whsec_ then base64)") from None
    if len(key) < MIN_SIGNING_KEY_BYTES:
        raise ValueError(f"holds {len(key)} bytes: a signing secret needs at least 24")
    return key
