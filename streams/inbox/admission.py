"""How many realtime inbox streams an API process holds, for whom, and how often a
recipient's reconnects may re-read its feeds.

A stream holds a connection (a file descriptor, some 30 KB) for as long as its recipient
token lives. Unbounded, one token opened a thousand of them, and every reconnect with an old
``Last-Event-ID`` re-read the whole feed. So, per API process:

- at most ``streams`` streams in all; past that a new one is refused (``Unavailable``, with
  the seconds to wait);
- at most ``per_recipient`` streams of one recipient (whatever its tokens): a further one
  replaces the recipient's oldest, which is told so (``replaced``) and asked to wait
  ``REPLACED_RETRY_MS`` before it reconnects. Replacing, not refusing, because the oldest
  stream is the likeliest to be a tab left open or a connection already dead (a laptop
  that went to sleep), and the newest is the one its user looks at. But only a stream open
  for ``replace_after_s`` is replaced: while all are younger, a further one is refused
  (``RateLimited``, with the seconds to wait). So tabs past the cap, each reconnecting when
  replaced, replace one stream per ``REPLACED_RETRY_MS`` at most, never one another in a
  loop, and a thousand requests at once leave ``per_recipient`` streams open and are
  otherwise refused;
- at most ``resumes_per_minute`` reconnects of one recipient re-read its feeds in a minute;
  a further one is told ``reset`` (read your inbox again) and re-reads nothing. A re-read
  itself reads at most ``replay_entries`` entries per feed (``InboxFollower``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from streams.core.errors import RateLimited, Unavailable

# How long a replaced stream's browser waits before it reconnects (the SSE ``retry``).
REPLACED_RETRY_MS: Final = 5 * 60 * 1000
# What ``MAXLEN ~`` trimming may leave in a feed beyond its length: Redis trims whole nodes
# of a stream, of up to ``stream-node-max-entries`` (100 unless configured) entries each.
TRIM_SLACK: Final = 100


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """The bounds above (``app.settings``: ``CLARION_INBOX_STREAMS``,
    ``CLARION_INBOX_STREAMS_PER_RECIPIENT``, ``CLARION_INBOX_RESUMES_PER_MINUTE``; the
    feed's length is the inbox provider's ``feed_length``)."""

    streams: int = 500
    per_recipient: int = 5
    resumes_per_minute: int = 10
    replace_after_s: float = 30.0
    feed_length: int = 1000

    @property
    def replay_entries(self) -> int:
        """The most entries one re-read takes from one feed: all a feed can hold."""
        return self.feed_length + TRIM_SLACK


# A stream cannot open now: the recipient's are all young (``RateLimited``), or the process
# holds all it may (``Unavailable``); either says after how many seconds it may.
StreamRefused = RateLimited | Unavailable


def process_full(limits: StreamLimits) -> Unavailable:
    return Unavailable(
        f"this server holds as many inbox streams as it may ({limits.streams}, "
        "CLARION_INBOX_STREAMS); retry after Retry-After",
        retry_after_s=5,
    )


def recipient_full(limits: StreamLimits, wait_s: float) -> RateLimited:
    return RateLimited(
        f"this recipient has {limits.per_recipient} inbox streams open, all opened within "
        f"{limits.replace_after_s:g} s (CLARION_INBOX_STREAMS_PER_RECIPIENT); close one or "
        "retry after Retry-After",
        retry_after_s=max(1, math.ceil(wait_s)),
    )


class ResumeWindow:
    """Which recipients may re-read their feeds now: ``per_minute`` re-reads per recipient
    in each minute of the clock. A fixed window, so the memory is one number for each
    recipient that resumed this minute, dropped when the minute ends."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._minute = -1
        self._counts: dict[str, int] = {}

    def allow(self, recipient_id: str) -> bool:
        """Whether ``recipient_id`` may re-read now; counts the re-read if so."""
        minute = int(self.clock() // 60)
        if minute != self._minute:
            self._minute = minute
            self._counts = {}
        count = self._counts.get(recipient_id, 0)
        if count >= self.per_minute:
            return False
        self._counts[recipient_id] = count + 1
        return True
