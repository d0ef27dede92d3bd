"""Every Redis key name Clarion uses is built here, and nowhere else.

All keys of one notification share the hash tag of their shard (``{s3}``), so every Lua script
touches a single slot and the same code runs on one Redis and on a Redis Cluster.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field

from streams.core.grouped_keys import InboxKeys, StatusWebhookKeys
from streams.core.vocabulary import Priority

# Defined in ``grouped_keys``, named here as before.
__all__ = ["InboxKeys", "StatusWebhookKeys"]


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
        """The work streams in the order of ``Priority`` (HIGH first): the order the Lua
        scripts take them in (``WORK_STREAM_NAMES``)."""
        return [self.work(priority) for priority in Priority]

    @property
    def delayed(self) -> str:
        return f"{self.tag}:delayed"

    def queued(self, priority: Priority, producer: str) -> str:
        """A producer's work items of a priority waiting for their turn to enter the work
        stream (a list; ``streams.delivery.fairness``)."""
        return f"{self.tag}:queued:{priority.stream_name}:{producer}"

    def queued_producers(self, priority: Priority) -> str:
        """The producers with work items of a priority waiting in ``queued`` (a set)."""
        return f"{self.tag}:queued:{priority.stream_name}"

    def fair_deficits(self, priority: Priority) -> str:
        """What each producer may still move into a priority's work stream this round (a
        hash: deficit round robin, ``streams.delivery.fairness``)."""
        return f"{self.tag}:fair:{priority.stream_name}"

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
        """A notification's template data when its work items share it (see
        ``streams.delivery.work_items``): a hash of the data (``d``) and how many of its
        deliveries have yet to end (``n``)."""
        return f"{self.tag}:data:{notification_id}"

    def recipient(self, recipient_id: str) -> str:
        """A recipient's preferences and quiet hours; every shard holds a copy."""
        return f"{self.tag}:rcpt:{recipient_id}"

    def awaiting(self, recipient_id: str) -> str:
        """The ``delayed`` members of the recipient's deliveries waiting for an address (a
        sorted set scored by how long each may wait; ``streams.delivery.address_waits``)."""
        return f"{self.tag}:awaiting:{recipient_id}"

    @property
    def recipients_pattern(self) -> str:
        """A SCAN pattern of this shard's ``recipient`` keys."""
        return f"{self.tag}:rcpt:*"

    def recipient_id_of(self, key: bytes | str) -> str:
        """The recipient id a ``recipient`` key of this shard names."""
        name = key.decode() if isinstance(key, bytes) else key
        return name[len(self.tag) + len(":rcpt:") :]

    def inbox(self, recipient_id: str) -> InboxKeys:
        """The keys of a recipient's inbox messages that came through this shard
        (``streams.inbox.store``)."""
        return InboxKeys(f"{self.tag}:inbox:{recipient_id}")

    @property
    def inbox_live(self) -> str:
        """The Pub/Sub channel of inbox changes (``KeySpace.inbox_live``)."""
        return f"{self.prefix}:inbox:live"

    def campaign(self, campaign_id: str) -> CampaignKeys:
        """The keys of a campaign whose home this shard is (``streams.campaigns.store``)."""
        return CampaignKeys(f"{self.tag}:cmp:{campaign_id}")

    def campaigns_of(self, producer: str) -> str:
        """A producer's campaigns, by creation time (a sorted set, on the shard where all of
        the producer's campaigns live: ``KeySpace.campaigns_home``)."""
        return f"{self.tag}:cmps:by:{producer}"

    def campaigns_open(self, producer: str) -> str:
        """How many campaigns a producer has open and the recipients uploaded to them (a
        hash, next to ``campaigns_of``), which its campaign limits cap."""
        return f"{self.tag}:cmps:open:{producer}"

    @property
    def campaigns_due(self) -> str:
        """The campaigns of this shard that a generator should run, by when (a sorted set)."""
        return f"{self.tag}:cmps:due"

    def cancellation_index(self, producer: str, key: str) -> str:
        """The producer's notifications on this shard sent with cancellation key ``key``
        (a sorted set of notification ids scored by when each expires):
        ``POST /v1/cancellations`` reads it."""
        return f"{self.tag}:cancel:{producer}:{key}"

    def digest_open(self, recipient_id: str, type_name: str, key_digest: str) -> str:
        """The digest open for (recipient, type, key), if one is: "<id> <closes ms>" (a
        string); the key by its digest (``streams.digests``); on the recipient's home shard."""
        return f"{self.tag}:dg:open:{type_name}:{key_digest}:{recipient_id}"

    def digest(self, digest_id: str) -> str:
        """A digest: who and what it is for, when it closes, its state (a hash)."""
        return f"{self.tag}:dg:{digest_id}"

    def digest_items(self, digest_id: str) -> str:
        """The notifications that joined a digest, in the order they joined: a list of
        "<notification id> <its data, JSON>"."""
        return f"{self.tag}:dg:{digest_id}:list"

    def digest_joined(self, hour: int) -> str:
        """Which digest each notification made in an hour (since the epoch; its id says)
        joined: a hash by notification id, so that a repeated join finds it."""
        return f"{self.tag}:dg:joined:{hour}"

    @property
    def digests_due(self) -> str:
        """The digests of this shard by when each closes (a sorted set)."""
        return f"{self.tag}:dg:due"

    def campaign_cancelled(self, campaign_id: str) -> str:
        """Set in every shard when a campaign is cancelled (a string that expires): a worker
        about to send one of the campaign's deliveries ends it CANCELLED instead."""
        return f"{self.tag}:campaign:{campaign_id}:cancelled"

    @property
    def suppressions(self) -> str:
        """The suppression list (``streams.recipients.suppressions``): a hash keyed by channel and
        address digest; every shard holds a copy, so ingest checks it in its own script."""
        return f"{self.tag}:suppressed"


@dataclass(frozen=True, slots=True)
class CampaignKeys:
    """The keys of one campaign, on its home shard's hash tag."""

    base: str

    @property
    def record(self) -> str:
        """The campaign: its spec, state and progress (a hash)."""
        return self.base

    @property
    def audience(self) -> str:
        """Its recipients, in chunks of up to 1000 ids (a list)."""
        return f"{self.base}:aud"

    @property
    def audience_draft(self) -> str:
        """A segment's recipients while they are being selected (a list)."""
        return f"{self.base}:aud:new"

    @property
    def uploads(self) -> str:
        """The upload keys already taken, with what each added (a hash)."""
        return f"{self.base}:up"

    @property
    def lease(self) -> str:
        """Held by the one generator running the campaign."""
        return f"{self.base}:lease"


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

    def campaigns_home(self, producer: str) -> ShardKeys:
        """The shard a producer's campaigns live on (and the one their ids name)."""
        return self.shard(shard_of(producer, self.shards))

    def campaign_home(self, campaign_id: str) -> ShardKeys:
        """The shard a campaign's keys and events live on (encoded in its id, as a
        notification's is)."""
        return self.notification_shard(campaign_id)

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
    def inbox_live(self) -> str:
        """The Pub/Sub channel every inbox change is published on, for the API processes'
        realtime streams (one subscription per process)."""
        return f"{self.prefix}:inbox:live"

    @property
    def write_probe(self) -> str:
        """A short-lived key the readiness check writes to learn whether Redis takes writes."""
        return f"{self.prefix}:ready:probe"

    def metric(self, name: str) -> str:
        """The hash holding one metric's counts, summed over every process (see
        ``streams.metrics.recorder``). Global: all metric hashes share a hash tag of their own."""
        return f"{self.prefix}:{{metrics}}:{name}"

    @property
    def worker_heartbeats(self) -> str:
        """The delivery workers' latest reports, one field per consumer (a hash; see
        ``streams.metrics.heartbeats``), beside the metric hashes."""
        return f"{self.prefix}:{{metrics}}:worker_heartbeats"

    def quota_bucket(self, producer: str, kind: str) -> str:
        """A GCRA bucket of a producer's ingest quota: ``requests`` or ``notifications``.

        Global, not per shard: both buckets of one producer share a hash tag of their own.
        """
        return f"{self.prefix}:{{quota:{producer}}}:{kind}"

    def circuit(self, provider: str) -> str:
        """A provider's circuit breaker (a hash, ``streams.delivery.circuit_breaker``): global, not
        per shard, so every worker agrees on it."""
        return f"{self.prefix}:{{circuit:{provider}}}"

    def status_webhooks(self, producer: str) -> StatusWebhookKeys:
        """The keys of one producer's status webhook (``streams.status_webhooks.store``)."""
        return StatusWebhookKeys(f"{self.prefix}:{{hooks:{producer}}}")

    @property
    def status_webhook_producers(self) -> str:
        """The producers with a status webhook (a set), read by the status-webhooks process."""
        return f"{self.prefix}:{{hooks}}:producers"

    @property
    def status_webhook_version(self) -> str:
        """A counter every change of any producer's status webhook increments, so the
        status-webhooks process rereads the configurations only when one changed."""
        return f"{self.prefix}:{{hooks}}:version"

    @property
    def status_webhook_lease(self) -> str:
        """Which status-webhooks process is the active one (a string that expires)."""
        return f"{self.prefix}:{{hooks}}:lease"

    def rate_bucket(self, provider: str, lane: str = "total") -> str:
        """A GCRA bucket of a provider credential: the total, or a priority class's share.

        Global, not per shard: every bucket of one credential shares a hash tag of its own.
        """
        suffix = "" if lane == "total" else f":{lane}"
        return f"{self.prefix}:{{rl:{provider}}}:bucket{suffix}"

    def throttle(self, recipient_id: str, scope: str) -> str:
        """A recipient's sliding-window log of one throttle scope (a sorted set of delivery
        ids scored by ms; ``streams.delivery.throttles``). ``scope`` is ``t:<type>``,
        ``c:<category>`` or ``default``, then ``:<CHANNEL>`` when counted per channel.

        Global, not per shard: every log of one recipient shares a hash tag of its own.
        """
        return f"{self.prefix}:{{thr:{recipient_id}}}:{scope}"


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
