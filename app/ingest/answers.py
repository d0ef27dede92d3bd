"""What ingest answers for one notification: accepted (with the body that says so), or the
error of ``streams.core.errors`` it was refused with. The API gives each error its status; a
campaign's generator tries again those a later try may not meet."""

from __future__ import annotations

import msgspec
import structlog

from app.ingest.fanout import accepted_body
from streams.core.errors import ClarionError, Conflict, Invalid, Unavailable
from streams.core.records import decode_record
from streams.digests.store import DigestJoin, Joined
from streams.ingest.writer import IngestReply

log = structlog.get_logger(__name__)

# Seconds to wait before trying again after an error that a later try may not meet (a
# twin in flight, settings that kept changing, Redis refusing writes).
RETRY_S = 1


class IngestAnswer(msgspec.Struct, frozen=True):
    """What one notification's request is answered with: accepted (``response``, the body
    that says so) unless ``error`` says why not. An error with ``retry_after_s`` may be
    accepted when tried again."""

    response: bytes = b""  # the body of an accepted notification
    replayed: bool = False  # an earlier answer for the same key and body
    error: ClarionError | None = None
    # The digest it joined as it was accepted, and how (``app.ingest.digests``); None: none,
    # or it joins after.
    joined: tuple[DigestJoin, Joined] | None = None
    # Replayed: the digest its record names, which it joined as it was first accepted ("":
    # none, or it joined after).
    joined_before: str = ""

    @property
    def accepted(self) -> bool:
        return self.error is None


def refused(error: ClarionError) -> IngestAnswer:
    return IngestAnswer(error=error)


def unavailable() -> IngestAnswer:
    """The answer when Redis could not be asked at all."""
    return refused(
        Unavailable("the event log (Redis) is unavailable; retry shortly", retry_after_s=RETRY_S)
    )


def answer_of(response: bytes, reply: IngestReply) -> IngestAnswer:
    """The answer to a notification the ingest script replied ``reply`` to; ``response``
    is its body if it was accepted."""
    if reply.kind == "OK":
        return IngestAnswer(response=response)
    if reply.kind == "DUP":
        if not reply.record:  # it expired, with the key, in the moment since the script ran
            return refused(
                Conflict(
                    "Idempotency-Key: its first notification just expired; retry",
                    retry_after_s=RETRY_S,
                )
            )
        record = decode_record(reply.record)
        return IngestAnswer(
            response=accepted_body(record), replayed=True, joined_before=record.digest_id
        )
    if reply.kind == "BROKEN":
        if reply.error.startswith("WRONGTYPE"):
            # A key holding the wrong type: damage in Redis that an operator must look at.
            log.error("ingest.key_broken", error=reply.error)
        # Otherwise Redis refused the write (out of memory, read-only, loading), which every
        # request meets alike: readiness says so once, not a log line per notification.
        return refused(
            Unavailable(
                "the event log (Redis) refused this notification; retry later",
                retry_after_s=RETRY_S,
            )
        )
    if reply.kind == "CONFLICT":
        # The key is taken by another body: the same request fails the same way again.
        return refused(Invalid("Idempotency-Key: already used for a different notification body"))
    return refused(
        Conflict(
            "Idempotency-Key: a request with this key is still in flight; retry shortly",
            retry_after_s=RETRY_S,
        )
    )
