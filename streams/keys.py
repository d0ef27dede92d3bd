"""Every Redis key name Clarion uses is built here, and nowhere else.

All keys of one notification share the hash tag of their shard (``{s3}``), so every Lua script
touches a single slot and the same code runs on one Redis and on a Redis Cluster.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field

from streams.vocabulary import Priority


def shard_of(text: str, shards: int) -> int:
    """Stable shard number of a routing string (CRC32, identical across processes and hosts)."""
    return zlib.crc32(text.encode()) % shards


def ingest_routing(producer: str, idempotency_key: str) -> str:
    """The string a notification is sharded by: its producer and idempotency key."""
    return f"{producer}\x00{idempotency_key}"


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """Key names of one shard."""

    prefix: str
    shard: int
    # "<prefix>:{s<shard>}", the start of every key name below: made once, used per key.
    tag: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tag", f"{self.prefix}:{{s{self.shard}}}")

    @property
    def events(self) -> str:
        return f"{self.tag}:events"

    def work(self, priority: Priority) -> str:
        return f"{self.tag}:work:{priority.stream_name}"

    @property
    def work_streams(self) -> list[str]:
        """The three work streams, HIGH first: the order the Lua scripts take them in."""
        return [self.work(Priority.HIGH), self.work(Priority.NORMAL), self.work(Priority.LOW)]

    @property
    def delayed(self) -> str:
        return f"{self.tag}:delayed"

    @property
    def dlq(self) -> str:
        return f"{self.tag}:dlq"

    @property
    def dlq_resolved(self) -> str:
        """How an operator's replay settled each ``dlq`` entry (a hash keyed by entry id)."""
        return f"{self.tag}:dlq:resolved"

    def idempotency(self, producer: str, key: str) -> str:
        return f"{self.tag}:idem:{producer}:{key}"

    def notification(self, notification_id: str) -> str:
        return f"{self.tag}:ntf:{notification_id}"

    def delivery(self, delivery_id: str) -> str:
        return f"{self.tag}:dlv:{delivery_id}"

    def data(self, notification_id: str) -> str:
        """A notification's template data when its work items share it (see ``work_items``):
        a hash of the data (``d``) and how many of its deliveries have yet to end (``n``)."""
        return f"{self.tag}:data:{notification_id}"

    def recipient(self, recipient_id: str) -> str:
        """A recipient's preferences and quiet hours; every shard holds a copy."""
        return f"{self.tag}:rcpt:{recipient_id}"

    @property
    def suppressions(self) -> str:
        """The suppression list (``streams.suppressions``): a hash keyed by channel and
        address digest; every shard holds a copy, so ingest checks it in its own script."""
        return f"{self.tag}:suppressed"


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Key names of a whole deployment: a prefix and a number of shards."""

    prefix: str = "clarion"
    shards: int = 1

    def shard(self, number: int) -> ShardKeys:
        return _shard_keys(self.prefix, number)

    def all_shards(self) -> list[ShardKeys]:
        return [self.shard(n) for n in range(self.shards)]

    def for_ingest(self, producer: str, idempotency_key: str) -> ShardKeys:
        if self.shards == 1:  # the default: no hashing on the ingest path
            return self.shard(0)
        return self.shard(shard_of(ingest_routing(producer, idempotency_key), self.shards))

    def home_of_recipient(self, recipient_id: str) -> ShardKeys:
        """The shard whose event stream records a recipient's PreferenceChanged events."""
        return self.shard(shard_of(recipient_id, self.shards))

    def home_of_address(self, address_digest: str) -> ShardKeys:
        """The shard whose event stream records an address's suppression events."""
        return self.shard(shard_of(address_digest, self.shards))

    def notification_shard(self, notification_id: str) -> ShardKeys:
        """The shard a notification id was issued on (encoded in the id itself)."""
        return self.shard(shard_from_id(notification_id) % self.shards)

    @property
    def sandbox_sent(self) -> str:
        """The sandbox provider's record of every call (a stream)."""
        return f"{self.prefix}:sandbox:sent"

    def sandbox_done(self, idempotency_key: str) -> str:
        """The sandbox's first message id for one idempotency key (a string that expires).

        Its hash tag is the whole name of ``sandbox_sent``, which has none, so all of them
        land in one cluster slot with it and one script may touch them together.
        """
        return f"{self.prefix}:{{{self.sandbox_sent}}}:done:{idempotency_key}"

    @property
    def feedback_inbox(self) -> str:
        """Verified provider callbacks waiting to be matched to their deliveries (a stream).
        Global, not per shard: a callback names no shard. Its keys share a hash tag."""
        return f"{self.prefix}:{{feedback}}:inbox"

    def feedback_seen(self, provider: str, callback: str) -> str:
        """A callback already taken (its replay is refused), until it expires."""
        return f"{self.prefix}:{{feedback}}:seen:{provider}:{callback}"

    @property
    def write_probe(self) -> str:
        """A short-lived key the readiness check writes to learn whether Redis takes writes."""
        return f"{self.prefix}:ready:probe"

    def metric(self, name: str) -> str:
        """The hash holding one metric's counts, summed over every process (see
        ``streams.metrics_recorder``). Global: all metric hashes share a hash tag of their own."""
        return f"{self.prefix}:{{metrics}}:{name}"

    def quota_bucket(self, producer: str, kind: str) -> str:
        """A GCRA bucket of a producer's ingest quota: ``requests`` or ``notifications``.

        Global, not per shard: both buckets of one producer share a hash tag of their own.
        """
        return f"{self.prefix}:{{quota:{producer}}}:{kind}"

    def circuit(self, provider: str) -> str:
        """A provider's circuit breaker (a hash, ``streams.circuit_breaker``): global, not
        per shard, so every worker agrees on it."""
        return f"{self.prefix}:{{circuit:{provider}}}"

    def rate_bucket(self, provider: str, lane: str = "total") -> str:
        """A GCRA bucket of a provider credential: the total, or a priority class's share.

        Global, not per shard: every bucket of one credential shares a hash tag of its own.
        """
        suffix = "" if lane == "total" else f":{lane}"
        return f"{self.prefix}:{{rl:{provider}}}:bucket{suffix}"


@functools.lru_cache(maxsize=4096)
def _shard_keys(prefix: str, number: int) -> ShardKeys:
    """One shared ``ShardKeys`` per shard: looked up for every accepted notification."""
    return ShardKeys(prefix, number)


def shard_from_id(notification_id: str) -> int:
    """Read the shard number that ``ids.new_id`` embedded in an id (0 when not parseable)."""
    try:
        return int(notification_id[-4:], 16)
    except ValueError:
        return 0
