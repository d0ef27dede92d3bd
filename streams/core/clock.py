"""The wall clock, in the unit Clarion's times travel in: milliseconds since the epoch.

Every process reads it here, so one definition decides the unit and the rounding (down, as
Redis's ``TIME`` is read by the scripts). Scripts use the Redis clock instead (``now_ms`` in
``shared.lua``): processes on hosts whose clocks differ still agree on it. Code that
must be tested at a chosen time takes a clock as an argument, with this as its default.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """This host's time now, in whole milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
