"""Quiet hours: when a recipient's window ends, in the recipient's own time zone."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from streams.core.errors import Invalid
from streams.core.events import QuietHoursSetting

# Anchored and bounded: reads at most six characters of any string.
_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
# A name longer than this is not echoed back in full in the error.
_SHOWN_NAME = 64


class QuietHoursError(Invalid, ValueError):
    """A quiet-hours setting that cannot be used; the message names the field."""


def check(setting: QuietHoursSetting) -> None:
    """Raise ``QuietHoursError`` unless start, end and timezone are usable."""
    for name in ("start", "end"):
        if not _CLOCK.match(getattr(setting, name)):
            raise QuietHoursError(f"{name}: expected a time like 22:00 (HH:MM, 24-hour clock)")
    if setting.start == setting.end:
        raise QuietHoursError("end: must differ from start (an empty window makes no sense)")
    if setting.timezone not in _iana_zones():
        raise _not_a_zone(setting.timezone)
    _zone(setting.timezone)


@functools.cache
def _iana_zones() -> frozenset[str]:
    # A name is looked up in the list of zones instead of handed to ZoneInfo: ZoneInfo opens
    # it as a path under the tz database, so "Europe" (a directory), a 300-character name or
    # one with a NUL byte fails with whatever the file system says. "localtime" is a link
    # some systems put there to the host's own zone, which is no zone a recipient lives in.
    return frozenset(available_timezones() - {"localtime"})


def _zone(name: str) -> ZoneInfo:
    # Also for settings stored earlier: a zone a later tz database dropped fails here with a
    # QuietHoursError like a misspelt one, never with the file system's error.
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _not_a_zone(name) from None


def _not_a_zone(name: str) -> QuietHoursError:
    shown = repr(name) if len(name) <= _SHOWN_NAME else f"{name[:_SHOWN_NAME]!r}…"
    return QuietHoursError(f"timezone: {shown} is not an IANA time zone like Europe/Berlin")


def _clock(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def window_end(setting: QuietHoursSetting, now: datetime) -> datetime | None:
    """The UTC instant the quiet window containing ``now`` ends, or None outside a window.

    Times are wall-clock times in the recipient's zone, so a window "22:00-08:00" ends at
    08:00 local on the day after a daylight-saving change too. An end time that falls into a
    spring-forward gap is shifted by the gap (02:30 becomes 03:30); one that occurs
    twice in autumn ends it at the later occurrence: neither shortens the window.
    """
    zone = _zone(setting.timezone)
    local = now.astimezone(zone)
    start, end = _clock(setting.start), _clock(setting.end)
    wall = local.time().replace(tzinfo=None)
    if start < end:
        inside = start <= wall < end
        end_date = local.date()
    else:  # the window spans midnight
        inside = wall >= start or wall < end
        end_date = local.date() + timedelta(days=1) if wall >= start else local.date()
    if not inside:
        return None
    return _to_utc(datetime.combine(end_date, end), zone)


def _to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    # For a wall time that exists once both folds agree. An ambiguous one (autumn) has two
    # instants and a missing one (spring) two readings; the later one never shortens the
    # window: 02:30 in a 02:00-03:00 gap is read with the offset before the change (03:30).
    return max(
        wall.replace(tzinfo=zone, fold=0).astimezone(UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
    )
