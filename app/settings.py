"""Settings from the environment. A bad value stops start-up with a message naming the variable.

Owns the settings and their defaults, which variable sets each, the producers' API keys and
the keys that sign recipient tokens; ``setting_values`` checks each other value.
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
    redis_url: str = "redis://127.0.0.1:6379/0"
    database_url: str = "postgresql://postgres@127.0.0.1:5432/clarion"
    key_prefix: str = "clarion"
    shards: int = 1
    config_path: str = "clarion.toml"
    api_keys: tuple[ApiKey, ...] = field(default=(), repr=False)
    # Keys the digests that name contact addresses (CLARION_DIGEST_SECRET); never printed.
    digest_secret: bytes = field(default=b"", repr=False)
    host: str = "127.0.0.1"
    port: int = 8000
    # How long a producer's Idempotency-Key is remembered.
    idempotency_ttl_seconds: int = 24 * 3600
    # Largest accepted body of a single POST and of a batch.
    max_body_bytes: int = 64 * 1024
    max_batch_body_bytes: int = 16 * 1024 * 1024
    log_format: Literal["json", "console"] = "json"
    log_level: str = "INFO"
    # Delivery workers: sends in flight per process and priority, lease, poison threshold.
    # NORMAL's lane is the widest: transactional mail is the bulk of the traffic, and a
    # wider lane means larger batches per Redis round trip (at 128 instead of 32 a delivery
    # cost a worker 65-69 µs of CPU instead of 85-87).
    lane_high: int = 64
    lane_normal: int = 128
    lane_low: int = 8
    lease_ms: int = 15_000
    max_deliveries: int = 5
    # Days of event history PostgreSQL keeps (daily partitions of delivery_event).
    retention_days: int = 30
    # Seconds Redis keeps stream entries every consumer group is done with (events, work).
    stream_retention_seconds: int = 3600
    # Seconds the dead-letter stream keeps an entry (its audit trail and replay source).
    dlq_retention_seconds: int = 7 * 86400
    # Seconds a delivery's state hash lives on in Redis after the delivery ended SENT,
    # EXPIRED or SUPPRESSED; a FAILED one's lives as long as its dead letter.
    delivery_state_retention_seconds: int = 86400
    # Seconds an ended delivery's state stays in Redis once the read model has it (except a
    # FAILED one's); the retention above is then only the safety net for a state the
    # projector never reached (``streams.delivery.state_release``).
    projected_state_retention_seconds: int = 300
    # The https base URL recipients reach Clarion at (CLARION_PUBLIC_URL, without a trailing
    # "/"): unsubscribe links start with it. "" adds no List-Unsubscribe header.
    public_url: str = ""
    # Seconds an unsubscribe link works after its email was sent (CLARION_UNSUBSCRIBE_TTL).
    unsubscribe_ttl_seconds: int = 60 * 86400
    # Seconds a recipient token works when its request asks for no other (CLARION_INBOX_TOKEN_TTL).
    inbox_token_ttl_seconds: int = 3600
    # The keys that sign recipient tokens, (key id, secret), the first signing
    # (CLARION_INBOX_TOKEN_KEYS); none: one derived from the digest secret. Never printed.
    inbox_token_keys: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    # Web origins whose pages may call the inbox API (CLARION_INBOX_ORIGINS, comma-separated,
    # e.g. "https://app.example.com"); none: only same-origin pages (the demo) may.
    inbox_origins: tuple[str, ...] = ()
    # Work items of a campaign's priority that may wait before its generator makes more
    # (CLARION_CAMPAIGN_BACKLOG): what a campaign of any size holds of itself in Redis.
    campaign_backlog: int = 100_000
    # The HTTP server's edge, per API process (``app.processes.http_edge``): the largest
    # request head (request line and headers), how long a client may take to send it, how
    # long an idle kept-alive connection stays open, and the connections and requests a
    # process holds at once (past that a request is answered 503).
    max_header_bytes: int = 32 * 1024
    header_timeout_seconds: int = 10
    # How long a request body may go without a byte coming (CLARION_BODY_TIMEOUT).
    body_timeout_seconds: int = 30
    keep_alive_seconds: int = 5
    max_connections: int = 1000
    # Inbox streams (``GET /v1/inbox/stream``) per API process and per recipient in it, and
    # how many times a minute a recipient's reconnects may re-read its feeds.
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
            for field, (variable, low, high) in _INTEGER_VARIABLES.items()
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


# Settings that are whole numbers: field -> (variable, lowest, highest value).
_INTEGER_VARIABLES: dict[str, tuple[str, int, int]] = {
    "shards": ("CLARION_SHARDS", 1, 1024),
    "port": ("CLARION_PORT", 1, 65535),
    "idempotency_ttl_seconds": ("CLARION_IDEMPOTENCY_TTL", 60, 30 * 86400),
    "max_body_bytes": ("CLARION_MAX_BODY_BYTES", 1024, 1 << 30),
    "max_batch_body_bytes": ("CLARION_MAX_BATCH_BODY_BYTES", 1024, 1 << 30),
    "lane_high": ("CLARION_LANE_HIGH", 1, 10_000),
    "lane_normal": ("CLARION_LANE_NORMAL", 1, 10_000),
    "lane_low": ("CLARION_LANE_LOW", 1, 10_000),
    "lease_ms": ("CLARION_LEASE_MS", 100, 3_600_000),
    "max_deliveries": ("CLARION_MAX_DELIVERIES", 1, 1000),
    "retention_days": ("CLARION_RETENTION_DAYS", 1, 3650),
    "stream_retention_seconds": ("CLARION_STREAM_RETENTION", 60, 30 * 86400),
    "dlq_retention_seconds": ("CLARION_DLQ_RETENTION", 3600, 3650 * 86400),
    "delivery_state_retention_seconds": ("CLARION_DELIVERY_STATE_RETENTION", 3600, 3650 * 86400),
    "projected_state_retention_seconds": ("CLARION_PROJECTED_STATE_RETENTION", 0, 86400),
    "unsubscribe_ttl_seconds": ("CLARION_UNSUBSCRIBE_TTL", 3600, 3650 * 86400),
    "inbox_token_ttl_seconds": ("CLARION_INBOX_TOKEN_TTL", 60, 12 * 3600),
    "campaign_backlog": ("CLARION_CAMPAIGN_BACKLOG", 1000, 100_000_000),
    "max_header_bytes": ("CLARION_MAX_HEADER_BYTES", 4096, 1 << 20),
    "header_timeout_seconds": ("CLARION_HEADER_TIMEOUT", 1, 300),
    "body_timeout_seconds": ("CLARION_BODY_TIMEOUT", 1, 3600),
    "keep_alive_seconds": ("CLARION_KEEP_ALIVE", 1, 300),
    "max_connections": ("CLARION_MAX_CONNECTIONS", 16, 1_000_000),
    "inbox_streams": ("CLARION_INBOX_STREAMS", 1, 1_000_000),
    "inbox_streams_per_recipient": ("CLARION_INBOX_STREAMS_PER_RECIPIENT", 1, 100),
    "inbox_resumes_per_minute": ("CLARION_INBOX_RESUMES_PER_MINUTE", 1, 10_000),
}


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
