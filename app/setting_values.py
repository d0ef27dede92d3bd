"""One setting's value from its environment variable's text: the checks that make a
``CLARION_*`` variable a value of ``app.settings.Settings`` or stop start-up with a
``SettingsError`` that names the variable (and never shows a secret or a password).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from app.catalog.throttles import ThrottleError, parse_cap
from streams.core.connection import cluster_nodes, is_cluster_url, redact
from streams.core.errors import ClarionError

_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class SettingsError(ClarionError):
    """An environment variable has a value Clarion cannot use."""


MIN_DIGEST_SECRET = 16

# An origin is a scheme, a host and maybe a port: nothing else may be in one.
_ORIGIN = re.compile(
    r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?"
)


def origins(raw: str) -> tuple[str, ...]:
    origins = tuple(part.strip().rstrip("/") for part in raw.split(",") if part.strip())
    for origin in origins:
        if not _ORIGIN.fullmatch(origin):
            raise SettingsError(
                f"CLARION_INBOX_ORIGINS: {origin[:100]!r} is no origin (scheme://host[:port])"
            )
    return origins


def digest_secret(raw: str) -> bytes:
    secret = raw.strip()
    if secret and len(secret) < MIN_DIGEST_SECRET:
        # The value itself is never part of a message.
        raise SettingsError(
            f"CLARION_DIGEST_SECRET must have at least {MIN_DIGEST_SECRET} characters"
        )
    return secret.encode()


# What a public URL may hold: RFC 3986's characters, but nothing that would end the
# List-Unsubscribe header's angle brackets or need encoding in a header, and neither "," nor
# ";", where a long header line may be folded.
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9._~!$&'()*+=:@%/\[\]-]+")
# Plain http is for a test on this machine: a recipient's link must be https.
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def public_url(raw: str) -> str:
    url = raw.strip()
    if not url:
        return ""
    wrong = "CLARION_PUBLIC_URL must be the https URL recipients reach Clarion at"
    example = "e.g. https://notify.example.com"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise SettingsError(f"{wrong} ({example}); it is not a URL") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise SettingsError(f"{wrong} ({example}), got {redact(url)!r}")
    if parts.scheme == "http" and parts.hostname not in _LOCAL_HOSTS:
        raise SettingsError(
            f"{wrong}: plain http only for 127.0.0.1 or localhost (tests), got {redact(url)!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise SettingsError(f"{wrong}: without a user name or password")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise SettingsError(f"{wrong}: without a query or fragment, got {url!r}")
    if not _URL_CHARACTERS.fullmatch(url) or port == 0:
        raise SettingsError(
            f"{wrong}: ASCII URL characters only (an international domain in its xn-- form) "
            f"and a port from 1 to 65535, got {url!r}"
        )
    return url.rstrip("/")


def key_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise SettingsError(
            f"CLARION_KEY_PREFIX must be 1-64 letters, digits, '_', '.' or '-', got {prefix!r}"
        )
    return prefix


def log_format(log_format: str) -> Literal["json", "console"]:
    if log_format not in ("json", "console"):
        raise SettingsError(f"CLARION_LOG_FORMAT must be 'json' or 'console', got {log_format!r}")
    return log_format  # type: ignore[return-value]


def redis_url(url: str) -> str:
    if is_cluster_url(url):
        try:
            cluster_nodes(url)
        except ValueError as error:
            raise SettingsError(f"CLARION_REDIS_URL: {error}") from None
    elif not url.startswith(("redis://", "rediss://", "unix://")):
        raise SettingsError(
            "CLARION_REDIS_URL must start with redis://, rediss://, unix:// or (a Redis "
            f"Cluster) redis+cluster://, got {redact(url)!r}"
        )
    return url


def database_url(url: str) -> str:
    if not url.startswith(("postgresql://", "postgres://")):
        raise SettingsError("CLARION_DATABASE_URL must start with postgresql://")
    return url


def integer(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
    return value


def recipient_cap(raw: str) -> tuple[int, int] | None:
    """``CLARION_RECIPIENT_CAP``: ``<limit>/<duration>`` as (limit, seconds); None if empty."""
    try:
        return parse_cap(raw)
    except ThrottleError as error:
        raise SettingsError(f"CLARION_RECIPIENT_CAP: {error}") from None
