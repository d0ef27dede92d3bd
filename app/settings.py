"""Settings from the environment. A bad value stops start-up with a message naming the variable.

Owns the settings and their defaults, the producers' API keys and the keys that sign recipient
tokens; ``setting_variables`` declares the variable that sets each setting, its bounds and its
meaning, and ``setting_values`` checks each other value.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import app.inbox.tokens as inbox_tokens
import app.setting_values as values
from app.setting_values import MIN_DIGEST_SECRET, SettingsError
from app.setting_variables import BY_FIELD
from streams.recipients.settings import AddressDigest

# send: notifications; read: the producer's own notifications, deliveries, dead letters and
# the metrics; recipients: recipients' preferences and quiet hours (they belong to the
# deployment, not to a producer); admin: every producer's dead letters and their replay.
Scope = Literal["send", "read", "recipients", "admin"]
SCOPES: frozenset[str] = frozenset({"send", "read", "recipients", "admin"})
_PRODUCER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One producer credential: the SHA-256 digest of its secret and its scopes."""

    producer: str
    secret_sha256: bytes
    scopes: frozenset[str]

    def __repr__(self) -> str:  # never print the digest either
        return f"ApiKey(producer={self.producer!r}, scopes={sorted(self.scopes)})"


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings and their defaults; ``app.setting_variables`` declares the variable that
    sets each, its bounds and its meaning."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    database_url: str = "postgresql://postgres@127.0.0.1:5432/clarion"
    key_prefix: str = "clarion"
    shards: int = 1
    config_path: str = "clarion.toml"
    api_keys: tuple[ApiKey, ...] = field(default=(), repr=False)
    digest_secret: bytes = field(default=b"", repr=False)  # never printed
    host: str = "127.0.0.1"
    port: int = 8000
    idempotency_ttl_seconds: int = 24 * 3600
    max_schedule_seconds: int = 30 * 86400
    # Beyond this far ahead a waiting work item is kept in PostgreSQL (``projections.parking``).
    park_after_seconds: int = 6 * 3600
    max_body_bytes: int = 64 * 1024
    max_batch_body_bytes: int = 16 * 1024 * 1024
    log_format: Literal["json", "console"] = "json"
    log_level: str = "INFO"
    # Delivery workers' lanes: NORMAL's is the widest, as transactional mail is the bulk of
    # the traffic (at 128 instead of 32 a delivery cost a worker 65-69 µs of CPU instead of
    # 85-87).
    lane_high: int = 64
    lane_normal: int = 128
    lane_low: int = 8
    lease_ms: int = 15_000
    max_deliveries: int = 5
    # The default cap per recipient and channel, (limit, seconds); None: off.
    recipient_cap: tuple[int, int] | None = None
    retention_days: int = 30
    stream_retention_seconds: int = 3600
    dlq_retention_seconds: int = 7 * 86400
    delivery_state_retention_seconds: int = 86400
    # The safety net above is for a state the projector never reached
    # (``streams.delivery.state_release``); this one applies once it did.
    projected_state_retention_seconds: int = 300
    public_url: str = ""  # without a trailing "/"
    unsubscribe_ttl_seconds: int = 60 * 86400
    inbox_token_ttl_seconds: int = 3600
    # (key id, secret), the first signing; never printed.
    inbox_token_keys: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    inbox_origins: tuple[str, ...] = ()
    campaign_backlog: int = 100_000
    # The HTTP server's edge, per API process (``app.processes.http_edge``).
    max_header_bytes: int = 32 * 1024
    header_timeout_seconds: int = 10
    body_timeout_seconds: int = 30
    keep_alive_seconds: int = 5
    max_connections: int = 1000
    inbox_streams: int = 500
    inbox_streams_per_recipient: int = 5
    inbox_resumes_per_minute: int = 10

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every ``CLARION_*`` variable; unset ones keep their defaults."""
        env = os.environ if env is None else env
        defaults = cls()

        def text(name: str, default: str) -> str:
            value = env.get(name, "").strip()
            return value or default

        integers = {
            field: values.integer(env, variable, getattr(defaults, field), low, high)
            for field, variable, low, high in _INTEGER_VARIABLES
        }
        if integers["body_timeout_seconds"] < integers["header_timeout_seconds"]:
            raise SettingsError(
                "CLARION_BODY_TIMEOUT must be at least CLARION_HEADER_TIMEOUT, got "
                f"{integers['body_timeout_seconds']} and {integers['header_timeout_seconds']}"
            )
        if integers["inbox_streams"] >= integers["max_connections"]:
            raise SettingsError(
                "CLARION_INBOX_STREAMS must be below CLARION_MAX_CONNECTIONS: each stream holds "
                f"a connection, got {integers['inbox_streams']} and {integers['max_connections']}"
            )
        return cls(
            redis_url=values.redis_url(text("CLARION_REDIS_URL", defaults.redis_url)),
            database_url=values.database_url(text("CLARION_DATABASE_URL", defaults.database_url)),
            key_prefix=values.key_prefix(text("CLARION_KEY_PREFIX", defaults.key_prefix)),
            config_path=text("CLARION_CONFIG", defaults.config_path),
            api_keys=parse_api_keys(env.get("CLARION_API_KEYS", "")),
            digest_secret=values.digest_secret(env.get("CLARION_DIGEST_SECRET", "")),
            inbox_token_keys=parse_inbox_token_keys(env.get("CLARION_INBOX_TOKEN_KEYS", "")),
            host=text("CLARION_HOST", defaults.host),
            public_url=values.public_url(env.get("CLARION_PUBLIC_URL", "")),
            inbox_origins=values.origins(env.get("CLARION_INBOX_ORIGINS", "")),
            log_format=values.log_format(text("CLARION_LOG_FORMAT", defaults.log_format)),
            log_level=text("CLARION_LOG_LEVEL", defaults.log_level).upper(),
            recipient_cap=values.recipient_cap(env.get("CLARION_RECIPIENT_CAP", "")),
            **integers,
        )

    def address_digest(self) -> AddressDigest:
        """The digest that names contact addresses; ``SettingsError`` when no secret is set
        (the API and the workers need one)."""
        if not self.digest_secret:
            raise SettingsError(
                "CLARION_DIGEST_SECRET is not set: give it a random secret of at least "
                f"{MIN_DIGEST_SECRET} characters (e.g. from 'openssl rand -hex 32'). It keys the "
                "digests that name contact addresses; keep it the same across restarts."
            )
        return AddressDigest(self.digest_secret)


# Settings that are whole numbers, read by their bounds.
# field, variable, lowest and highest value
_INTEGER_VARIABLES: tuple[tuple[str, str, int, int], ...] = tuple(
    (v.field, v.name, v.low, v.high)
    for v in BY_FIELD.values()
    if v.low is not None and v.high is not None
)


MAX_INBOX_TOKEN_KEYS = 8


def parse_inbox_token_keys(raw: str) -> tuple[tuple[str, bytes], ...]:
    """Parse ``id:secret,…`` (the first signs recipient tokens, every one verifies them)."""
    keys: list[tuple[str, bytes]] = []
    for position, entry in enumerate(filter(None, (e.strip() for e in raw.split(","))), 1):
        key_id, colon, secret = entry.partition(":")
        # Name the entry by position and key id only: the secret must not reach any log.
        where = f"CLARION_INBOX_TOKEN_KEYS entry {position}"
        if not colon or not inbox_tokens.KEY_ID.fullmatch(key_id):
            raise SettingsError(
                f"{where} must look like <key id>:<secret>, the id 1-16 letters, digits, "
                "'_' or '-' (e.g. k2:$(openssl rand -hex 32))"
            )
        if len(secret.strip()) < MIN_DIGEST_SECRET:
            raise SettingsError(
                f"{where} ({key_id}): the secret needs at least {MIN_DIGEST_SECRET} characters"
            )
        if any(key_id == known for known, _ in keys):
            raise SettingsError(f"{where}: the key id {key_id!r} is given twice")
        keys.append((key_id, secret.strip().encode()))
    if len(keys) > MAX_INBOX_TOKEN_KEYS:
        raise SettingsError(f"CLARION_INBOX_TOKEN_KEYS: at most {MAX_INBOX_TOKEN_KEYS} keys")
    return tuple(keys)


def parse_api_keys(raw: str) -> tuple[ApiKey, ...]:
    """Parse ``producer:secret:scope+scope,…``; a secret may be given as ``sha256=<hex>``."""
    keys: list[ApiKey] = []
    for position, entry in enumerate(filter(None, (e.strip() for e in raw.split(","))), 1):
        parts = entry.split(":")
        # Name the entry by position and producer only: the secret must not reach any log.
        where = f"CLARION_API_KEYS entry {position}"
        if len(parts) != 3:
            raise SettingsError(f"{where} must look like producer:secret:send+read")
        producer, secret, scopes_text = parts
        if not _PRODUCER.match(producer):
            raise SettingsError(f"{where}: producer must be 1-64 letters, digits, '_', '.' or '-'")
        scopes = frozenset(s.strip() for s in scopes_text.split("+") if s.strip())
        if not scopes or not scopes <= SCOPES:
            raise SettingsError(
                f"{where} ({producer}): scopes must be among send, read, recipients, admin "
                "joined by '+'"
            )
        if secret.startswith("sha256="):
            try:
                digest = bytes.fromhex(secret.removeprefix("sha256="))
            except ValueError:
                digest = b""
            if len(digest) != 32:
                raise SettingsError(f"{where} ({producer}): sha256= needs 64 hex digits")
        elif len(secret) < 8:
            raise SettingsError(f"{where} ({producer}): the secret needs at least 8 characters")
        else:
            digest = hashlib.sha256(secret.encode()).digest()
        keys.append(ApiKey(producer, digest, scopes))
    return tuple(keys)
