"""``[status_webhooks]``: how Clarion POSTs final statuses to producers' own URLs.

Producers set their URL through the API (``PUT /v1/status-webhook``); the catalog says which
URLs may be called (the same guard against server-side request forgery as the ``webhook``
provider: https only, public addresses only, unless listed here), the time limits, how many
POSTs a producer's endpoint gets at once, and how long a status is retried before it goes to
the producer's dead letters.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from app.catalog.providers import GuardedConfig, Seconds

# A status is given up at most this long after it was due: a month, as the event history.
MAX_GIVE_UP_SECONDS = 30 * 86400


class StatusRetry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Retries of a failed POST: after a random wait below ``base·2^(attempt-1)`` capped at
    ``max_seconds`` (full jitter; a longer Retry-After is honoured), until the status has
    waited ``give_up_seconds`` since it was due; then it goes to the dead letters."""

    base_seconds: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    max_seconds: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 300.0
    give_up_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_GIVE_UP_SECONDS)] = 86400.0


class StatusWebhooksConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``[status_webhooks]`` in ``clarion.toml``; every key has a default."""

    # Hosts that may be called over plain http (https is required otherwise).
    allow_http_hosts: list[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]{1,253}$")]] = []
    # Networks (CIDR) that may be called although they are loopback, link-local or private.
    allow_networks: list[str] = []
    # A PEM file of CA certificates to trust instead of the system's.
    ca_file: str = ""
    # One POST, connecting included; and connecting alone.
    timeout_seconds: Seconds = 5.0
    connect_timeout_seconds: Seconds = 2.0
    # POSTs in flight to one producer's endpoint: each lane sends its deliveries' statuses
    # in order, one at a time (a delivery always goes to the same lane).
    lanes: Annotated[int, msgspec.Meta(ge=1, le=256)] = 16
    # Statuses one producer's sender holds at once (the rest wait in its outbox in Redis).
    window: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1000
    retry: StatusRetry = StatusRetry()

    def __post_init__(self) -> None:
        # msgspec reports a ValueError raised here as a validation error of the section.
        self.guard()
        if self.window < self.lanes:
            raise ValueError(f"window ({self.window}) must be at least lanes ({self.lanes})")

    def guard(self) -> GuardedConfig:
        """What the SSRF guard and the HTTP client take: the allowed hosts and networks, the
        time limits, and the connections (one per lane)."""
        return GuardedConfig(
            allow_http_hosts=self.allow_http_hosts,
            allow_networks=self.allow_networks,
            ca_file=self.ca_file,
            timeout_seconds=self.timeout_seconds,
            connect_timeout_seconds=self.connect_timeout_seconds,
            max_in_flight=self.lanes,
        )
