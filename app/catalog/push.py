"""Push: the platforms a device target belongs to, how a target is written as a delivery's
address, and the catalog entries of the three push provider kinds.

A recipient names its devices as targets, ``{"platform": "fcm" | "apns", "token": ...}`` or,
for Web Push, the browser's ``PushSubscription.toJSON()`` with ``"platform": "webpush"``. A
delivery carries its target as one string (work items and the delivery state hold addresses
as strings): the platform, a space, and the token, or for Web Push the endpoint and the
subscription's two keys, each after a space. A plain ``push_tokens`` string has no platform
and cannot hold a space (``app.ingest.requests.PushToken``), so it stays as it is and stands
for a token of the PUSH channel's ``default_platform``.

Secrets (the service account, the APNs key, the VAPID key) are the values of environment
variables; ``secrets`` checks each can be used at start-up, naming the variable, never
quoting it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

import msgspec
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from app.catalog.providers import (
    EnvName,
    GuardedConfig,
    ProviderLimits,
    SecretInvalid,
)


class Platform(StrEnum):
    """Where a push target's device gets its notifications from."""

    FCM = "fcm"  # Firebase Cloud Messaging (Android, and iOS or web apps through Firebase)
    APNS = "apns"  # Apple Push Notification service
    WEBPUSH = "webpush"  # a browser's push service (RFC 8030)


PLATFORMS = frozenset(Platform)


@dataclass(frozen=True, slots=True)
class PushAddress:
    """A push delivery's target, read back from its address."""

    # None: a plain token, of the channel's default platform.
    platform: Platform | None
    # FCM and APNs: the device token; Web Push: the subscription's endpoint URL.
    token: str
    # Web Push: the subscription's keys, base64url as the browser gives them.
    p256dh: str = ""
    auth: str = ""


def token_address(platform: Platform, token: str) -> str:
    """The address of an FCM or APNs device token."""
    return f"{platform} {token}"


def subscription_address(endpoint: str, p256dh: str, auth: str) -> str:
    """The address of a Web Push subscription."""
    return f"webpush {endpoint} {p256dh} {auth}"


def parse_address(address: str) -> PushAddress:
    """The target a PUSH address stands for (a plain token when it names no platform)."""
    platform, space, rest = address.partition(" ")
    if not space or platform not in PLATFORMS:
        return PushAddress(None, address)
    if platform == Platform.WEBPUSH:
        endpoint, _, keys = rest.partition(" ")
        p256dh, _, auth = keys.partition(" ")
        return PushAddress(Platform.WEBPUSH, endpoint, p256dh, auth)
    return PushAddress(Platform(platform), rest)


def platform_of(address: str, default: Platform) -> Platform:
    """The platform of a PUSH address, ``default`` for a plain token."""
    platform, space, _ = address.partition(" ")
    if space and platform in PLATFORMS:
        return Platform(platform)
    return default


def b64url_decode(text: str) -> bytes:
    """Base64url with or without padding, as Web Push and VAPID keys are written;
    ``ValueError`` when it is not."""
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not base64url") from None


# A Firebase project id (console.firebase.google.com): 6 to 30 lowercase letters, digits and
# hyphens, starting with a letter.
ProjectId = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")]
# An Apple developer team id or key id: ten characters.
AppleId = Annotated[str, msgspec.Meta(pattern=r"^[A-Z0-9]{10}$")]
HttpsUrl = Annotated[str, msgspec.Meta(pattern=r"^https://[^/?#\s]+(/[^?#\s]*[^/?#\s])?$")]
# A service account's token_uri: https, a host, any path (Google's is oauth2.googleapis.com/token).
_TOKEN_URI = re.compile(r"https://[^/?#\s]+(/[^#\s]*)?")


class ServiceAccount(msgspec.Struct, frozen=True):
    """What Clarion reads of a Google service-account key file (JSON)."""

    client_email: str
    private_key: str
    token_uri: str
    type: str = "service_account"
    private_key_id: str = ""


def service_account(text: str) -> tuple[ServiceAccount, rsa.RSAPrivateKey]:
    """The service account of a key file's text and its RSA key; ``ValueError`` (quoting
    nothing of the text) when it is not one."""
    try:
        account = msgspec.json.decode(text, type=ServiceAccount)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise ValueError(
            "is not a service-account key (JSON with client_email, private_key, token_uri)"
        ) from None
    if account.type != "service_account":
        raise ValueError("is not a service-account key (its type is not service_account)")
    if not _TOKEN_URI.fullmatch(account.token_uri):
        # The token request goes over HTTP/2 and TLS, as every request of the fcm kind.
        raise ValueError("has a token_uri that is not an https URL")
    key = _private_key(account.private_key, "its private_key")
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("has a private_key that is not an RSA key")
    return account, key


def p256_key(text: str) -> ec.EllipticCurvePrivateKey:
    """A P-256 private key from PEM (an APNs ``.p8`` file, a VAPID key in PEM) or from the
    raw 32 bytes in base64url (how web-push libraries print a VAPID private key)."""
    if "-----BEGIN" in text:
        key = _private_key(text, "the key")
    else:
        raw = b64url_decode(text.strip())
        if len(raw) != 32:
            raise ValueError("is neither a PEM key nor 32 bytes of base64url")
        key = ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("is not a P-256 (ES256) private key")
    return key


def _private_key(pem: str, what: str) -> object:
    try:
        return load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError(f"holds {what}, which is not an unencrypted PEM private key") from None


def _checked(
    config: ProviderLimits, values: dict[str, str], key: str, check: Callable[[str], object]
) -> None:
    """Raise ``SecretInvalid`` naming ``key``'s variable when ``check`` refuses its value."""
    variable = config.secret_names()[key]
    try:
        check(values[key])
    except ValueError as error:
        raise SecretInvalid(f"{key}: environment variable {variable} {error}") from None


class FcmConfig(ProviderLimits, frozen=True, tag_field="kind", tag="fcm"):
    """Push through the FCM HTTP v1 API (``POST /v1/projects/{project}/messages:send``),
    authorised by OAuth 2 access tokens made from a service account's key."""

    project_id: ProjectId
    # The service-account key file's JSON text (Firebase console, Service accounts).
    service_account_env: EnvName
    # https only: the adapter speaks HTTP/2 over TLS (ALPN h2), as FCM does.
    base_url: HttpsUrl = "https://fcm.googleapis.com"
    # A PEM file of CA certificates to trust instead of certifi's (a private gateway), for
    # base_url and the service account's token_uri alike.
    ca_file: str = ""
    # HTTP/2 connections per worker process; each carries up to the server's stream limit.
    connections: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1

    def secret_names(self) -> dict[str, str]:
        return {"service_account_env": self.service_account_env}

    def secrets(self, environ: Mapping[str, str]) -> dict[str, str]:
        values = super().secrets(environ)
        _checked(self, values, "service_account_env", service_account)
        return values


class ApnsConfig(ProviderLimits, frozen=True, tag_field="kind", tag="apns"):
    """Push through APNs over HTTP/2 with token-based authentication (an ES256 key)."""

    team_id: AppleId
    key_id: AppleId
    # The ``.p8`` signing key's PEM text.
    key_env: EnvName
    # The app's bundle id (``apns-topic``).
    topic: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9.-]{1,200}$")]
    # Production; https://api.sandbox.push.apple.com for development builds.
    base_url: HttpsUrl = "https://api.push.apple.com"
    push_type: Literal["alert", "background"] = "alert"
    ca_file: str = ""
    # HTTP/2 connections per worker process; each carries up to the server's stream limit.
    connections: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1

    def secret_names(self) -> dict[str, str]:
        return {"key_env": self.key_env}

    def secrets(self, environ: Mapping[str, str]) -> dict[str, str]:
        values = super().secrets(environ)
        _checked(self, values, "key_env", p256_key)
        return values


class WebPushConfig(GuardedConfig, frozen=True, tag_field="kind", tag="webpush"):
    """Web Push (RFC 8030) with aes128gcm encryption (RFC 8291) and VAPID (RFC 8292), over
    HTTP/2 and TLS. The endpoints come from browsers' subscriptions, so where it may connect
    is checked as for webhooks (``allow_networks``); they are https only, so
    ``allow_http_hosts`` is refused (``ca_file`` trusts a private push service)."""

    # The VAPID private key: PEM, or its 32 bytes in base64url.
    vapid_private_key_env: EnvName
    # Who the push services may contact about these messages (VAPID ``sub``).
    subject: Annotated[str, msgspec.Meta(pattern=r"^(mailto:[^\s]+|https://[^\s]+)$")]

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.allow_http_hosts:
            raise ValueError(
                "allow_http_hosts: Web Push endpoints are https only (push services speak "
                "HTTP/2 over TLS); trust a private push service's CA with ca_file"
            )

    def secret_names(self) -> dict[str, str]:
        return {"vapid_private_key_env": self.vapid_private_key_env}

    def secrets(self, environ: Mapping[str, str]) -> dict[str, str]:
        values = super().secrets(environ)
        _checked(self, values, "vapid_private_key_env", p256_key)
        return values
