"""When a notification is to go: now, or later by ``send_at`` or ``delay``.

``send_at`` is an RFC 3339 time with its offset (msgspec decodes it; a time without an offset
is refused, as it names no moment). ``delay`` is a number of seconds or an ISO 8601 duration
of weeks, days, hours, minutes and seconds (``PT15M``, ``P1DT12H``, ``PT0.5S``); years and
months are refused, as their length depends on the calendar. Either one, not both; not
further ahead than the deployment's ``CLARION_MAX_SCHEDULE`` (30 days by default). A
``send_at`` in the past is sent at once (a producer's clock a little ahead of ours must not
fail its requests).

The duration parser reads each character once, without a regular expression.
"""

from __future__ import annotations

from datetime import datetime

DEFAULT_MAX_SCHEDULE_SECONDS = 30 * 86400

# ISO 8601 duration designators allowed before and after the "T", with their seconds.
_DATE_UNITS = {"W": 7 * 86400, "D": 86400}
_TIME_UNITS = {"H": 3600, "M": 60, "S": 1}
_MAX_DURATION_TEXT = 64


class ScheduleError(ValueError):
    """``send_at`` or ``delay`` cannot be used; the message names the field and why."""


def duration_seconds(text: str) -> float:
    """Seconds in an ISO 8601 duration (``P1DT2H``); raises ``ScheduleError``."""
    if len(text) > _MAX_DURATION_TEXT:
        raise ScheduleError(f"delay: at most {_MAX_DURATION_TEXT} characters")
    if len(text) < 3 or text[0] != "P":
        raise ScheduleError("delay: an ISO 8601 duration such as PT15M or P1DT2H, or seconds")
    units, total, number, seen_any, in_time = _DATE_UNITS, 0.0, "", False, False
    order = "WDHMS"
    last = -1
    for char in text[1:]:
        if char.isdigit() or (char == "." and "." not in number):
            number += char
            continue
        if char == "T" and not in_time and not number:
            units, in_time = _TIME_UNITS, True
            continue
        if char in ("Y",) or (char == "M" and not in_time):
            raise ScheduleError("delay: years and months are not durations of fixed length")
        seconds = units.get(char)
        if seconds is None or not number or number == "." or order.index(char) <= last:
            raise ScheduleError(f"delay: {text!r} is not an ISO 8601 duration")
        if "." in number and char != "S":
            raise ScheduleError("delay: only seconds may have a fraction")
        last = order.index(char)
        total += float(number) * seconds
        number, seen_any = "", True
    if number or not seen_any or (in_time and last < order.index("H")):
        raise ScheduleError(f"delay: {text!r} is not an ISO 8601 duration")
    return total


def due_ms(
    send_at: datetime | None, delay: float | str | None, now_ms: int, max_seconds: int
) -> int:
    """When a notification is due (ms since the epoch), 0 for now; raises ``ScheduleError``."""
    if send_at is not None and delay is not None:
        raise ScheduleError("send_at, delay: give one of them, not both")
    if send_at is not None:
        due = int(send_at.timestamp() * 1000)
        field = "send_at"
    elif delay is not None:
        seconds = duration_seconds(delay) if isinstance(delay, str) else float(delay)
        if seconds < 0:
            raise ScheduleError("delay: may not be negative")
        due = now_ms + int(seconds * 1000)
        field = "delay"
    else:
        return 0
    if due - now_ms > max_seconds * 1000:
        raise ScheduleError(
            f"{field}: at most {_said(max_seconds)} ahead (CLARION_MAX_SCHEDULE={max_seconds})"
        )
    return due if due > now_ms else 0


def _said(seconds: int) -> str:
    if seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day" + ("s" if days != 1 else "")
    return f"{seconds} seconds"
