"""Digests of a type: many notifications to one person, one message.

``digest = { window = "10m", key = "{{ data.thread_id }}", max_items = 100 }`` on a type:
its notifications to one recipient with one ``key`` join a digest opened by the first of
them, which closes ``window`` later (or at ``at``, ``"08:00"``, the next such time in the
recipient's time zone: a daily digest), or as soon as it holds ``max_items``. Then one
notification of the type is made, with the joined notifications' data as ``items`` (oldest
first), their number as ``count`` and the digest's ``key``: its templates may use nothing
else (``DIGEST_FIELDS``, checked when the catalog is loaded).

``key`` is a sandboxed Jinja2 template over the notification's ``data`` (``data.<name>``);
without one, all of a recipient's notifications of the type share a digest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
import msgspec
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.catalog.throttles import ThrottleError, parse_duration

# What a digest's notification has in its data, for its templates.
DIGEST_FIELDS = frozenset({"items", "count", "key"})
# The longest a digest stays open: its joined data waits in Redis meanwhile.
MAX_WINDOW_SECONDS = 86_400
MAX_ITEMS = 1000
# The longest key a template may make (longer keys are cut: they only name a digest).
MAX_KEY_CHARS = 200
# A key template that is one field of the data; it runs on the catalog's text only.
_ONE_FIELD = re.compile(r"\{\{\s*data\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
MAX_KEY_TEMPLATE = 1000  # characters of the key's template
_KEYS = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)


class DigestConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``digest`` of a type, as the catalog writes it."""

    # How long after the first notification the digest closes ("10m"); or ``at``.
    window: Annotated[str, msgspec.Meta(max_length=12)] = ""
    # A daily digest: it closes at this local time of the recipient ("08:00").
    at: Annotated[str, msgspec.Meta(max_length=5)] = ""
    # Which notifications share a digest, from their data ("{{ data.thread_id }}").
    key: Annotated[str, msgspec.Meta(max_length=MAX_KEY_TEMPLATE)] = ""
    max_items: Annotated[int, msgspec.Meta(ge=1, le=MAX_ITEMS)] = 100


class DigestError(ValueError):
    """A notification's digest key cannot be made from its data."""


class Digest:
    """A type's digest, checked: when one closes and each notification's key."""

    __slots__ = ("at_minutes", "key", "key_field", "max_items", "window_ms")

    def __init__(self, config: DigestConfig, path: str, fail: Callable[[str, str], Exception]):
        if bool(config.window) == bool(config.at):
            raise fail(path, "give window or at (a daily digest), one of them")
        self.window_ms = 0
        if config.window:
            try:
                seconds = parse_duration(config.window)
            except ThrottleError as error:
                raise fail(f"{path}.window", str(error)) from None
            if seconds > MAX_WINDOW_SECONDS:
                raise fail(f"{path}.window", f"{config.window!r} is longer than a day")
            self.window_ms = seconds * 1000
        self.at_minutes = _minutes(config.at, f"{path}.at", fail) if config.at else -1
        try:
            self.key = _KEYS.from_string(config.key) if config.key else None
            # The usual key, one field of the data ("{{ data.thread_id }}"): read straight
            # from the data when it is text, as the template would render it.
            field = _ONE_FIELD.fullmatch(config.key)
            self.key_field = field.group(1) if field else ""
        except jinja2.TemplateSyntaxError as error:
            raise fail(f"{path}.key", f"line {error.lineno}: {error.message}") from None
        self.max_items = config.max_items

    def key_of(self, data: Mapping[str, Any]) -> str:
        """The digest key of a notification with ``data``; raises ``DigestError``."""
        if self.key is None:
            return ""
        if self.key_field:
            value = data.get(self.key_field)
            if type(value) is str:
                return value[:MAX_KEY_CHARS]
        try:
            return self.key.render(data=data)[:MAX_KEY_CHARS]
        except jinja2.TemplateError as error:
            raise DigestError(f"data: the digest key cannot be made: {error}") from None

    def closes_ms(self, opened_ms: int, timezone: str) -> int:
        """When a digest opened at ``opened_ms`` closes, for a recipient in ``timezone``
        (an IANA name; "" or unknown: UTC)."""
        if self.window_ms:
            return opened_ms + self.window_ms
        zone = _zone(timezone)
        local = datetime.fromtimestamp(opened_ms / 1000, UTC).astimezone(zone)
        hour, minute = divmod(self.at_minutes, 60)
        closes = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if closes <= local:
            closes = (closes + timedelta(days=1)).replace(hour=hour, minute=minute)
        return int(closes.timestamp() * 1000)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name) if name else ZoneInfo("UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _minutes(text: str, path: str, fail: Callable[[str, str], Exception]) -> int:
    """Minutes after midnight of ``"HH:MM"``."""
    hours, colon, minutes = text.partition(":")
    if not (colon and len(hours) == 2 and len(minutes) == 2 and (hours + minutes).isdigit()):
        raise fail(path, f"{text!r} is no time of day: write HH:MM, e.g. '08:00'")
    if int(hours) > 23 or int(minutes) > 59:
        raise fail(path, f"{text!r} is no time of day")
    return int(hours) * 60 + int(minutes)
