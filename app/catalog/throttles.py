"""Per-recipient rate caps ("throttles"): how many deliveries one recipient may get in a
window, configured per type or per category of types, plus a deployment-wide default.

``throttle = { limit = 3, per = "1h", channels = ["EMAIL"], action = "suppress" }`` on a type
(``[types.<name>]``) or a category (``[categories.<name>]``): at most ``limit`` deliveries per
recipient within any window of ``per``; without ``channels`` counted across all the type's
channels, with it per recipient and channel, and only on those channels. Over it a delivery
is SUPPRESSED (``suppress``) or waits until the window allows it (``defer``), reason
``throttled``. A type's own throttle wins over its category's. ``CLARION_RECIPIENT_CAP``
(``"100/1h"``) caps every other type's deliveries per recipient and channel, HIGH excepted.

``rules_of`` resolves them once, into the ``Rule`` of each throttled type: the worker then
pays one dict lookup per delivery, and nothing at all when no type is throttled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import msgspec

from streams.core.vocabulary import Channel, Priority

Action = Literal["suppress", "defer"]
# The longest window: a recipient's log of a longer one would outlive any notification TTL.
MAX_PER_SECONDS = 30 * 86400
MAX_LIMIT = 100_000
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Scope of the default cap's counts (a type's scope is ``t:<type>``, a category's ``c:<name>``).
DEFAULT_SCOPE = "default"


class ThrottleError(ValueError):
    """A throttle's value cannot be used; the message says why."""


def parse_duration(text: str) -> int:
    """Seconds of a duration such as ``"30s"``, ``"10m"``, ``"1h"`` or ``"1d"``: digits then
    one unit. Read character by character, once (no regular expression)."""
    if not isinstance(text, str) or len(text) < 2 or len(text) > 12:
        raise ThrottleError(f"{text!r} is no duration: write digits and a unit, e.g. '1h'")
    digits, unit = text[:-1], text[-1]
    if unit not in _UNITS or not all("0" <= c <= "9" for c in digits):
        raise ThrottleError(
            f"{text!r} is no duration: write digits and a unit (s, m, h or d), e.g. '10m'"
        )
    seconds = int(digits) * _UNITS[unit]
    if not 1 <= seconds <= MAX_PER_SECONDS:
        raise ThrottleError(f"{text!r} is outside 1s to {MAX_PER_SECONDS // 86400}d")
    return seconds


def parse_cap(text: str) -> tuple[int, int] | None:
    """``CLARION_RECIPIENT_CAP``: ``"<limit>/<duration>"`` (``"100/1h"``) as (limit, seconds);
    None for an empty text (no default cap)."""
    text = text.strip()
    if not text:
        return None
    limit, slash, per = text.partition("/")
    if not slash or not limit.isascii() or not limit.isdigit():
        raise ThrottleError(f"{text[:40]!r} is no cap: write <limit>/<duration>, e.g. '100/1h'")
    if not 1 <= int(limit) <= MAX_LIMIT:
        raise ThrottleError(f"the limit {limit} is outside 1 to {MAX_LIMIT}")
    return int(limit), parse_duration(per)


class ThrottleConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``throttle = {...}`` of a type or a category, as the file gives it."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT)]
    per: str
    channels: Annotated[list[Channel], msgspec.Meta(min_length=1)] | None = None
    action: Action = "suppress"


class CategoryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[categories.<name>]``: what the types naming it (``category = "<name>"``) share."""

    throttle: ThrottleConfig | None = None


class Rule(msgspec.Struct, frozen=True):
    """A resolved throttle: counted in ``scope`` (per recipient, and per channel when
    ``per_channel``), on ``channels`` only (None: every channel)."""

    scope: str
    limit: int
    per_seconds: int
    action: Action
    channels: frozenset[Channel] | None = None
    per_channel: bool = False

    def applies_to(self, channel: Channel) -> bool:
        return self.channels is None or channel in self.channels

    def key_scope(self, channel: Channel) -> str:
        """The scope part of the recipient's key for a delivery on ``channel``."""
        return f"{self.scope}:{channel}" if self.per_channel else self.scope


def rule_of(scope: str, config: ThrottleConfig) -> Rule:
    """``config`` resolved; ``ThrottleError`` names what is wrong with ``per``."""
    channels = None if config.channels is None else frozenset(config.channels)
    return Rule(
        scope=scope,
        limit=config.limit,
        per_seconds=parse_duration(config.per),
        action=config.action,
        channels=channels,
        per_channel=channels is not None,
    )


def rules_of(
    explicit: dict[str, Rule],
    priorities: dict[str, Priority],
    default_cap: tuple[int, int] | None,
) -> dict[str, Rule]:
    """The rule of each throttled type: its own or its category's (``explicit``), else the
    default cap (per recipient and channel, suppress) for a type that is not HIGH."""
    rules = dict(explicit)
    if default_cap is not None:
        limit, per_seconds = default_cap
        cap = Rule(DEFAULT_SCOPE, limit, per_seconds, "suppress", per_channel=True)
        for name, priority in priorities.items():
            if name not in rules and priority != Priority.HIGH:
                rules[name] = cap
    return rules


def log_scopes(
    explicit: dict[str, Rule],
    priorities: dict[str, Priority],
    default_cap: tuple[int, int] | None,
) -> list[str]:
    """Every scope a recipient's throttle logs may have under these throttles, each also
    per channel: what erasing a recipient deletes (``app.recipients.erasure``)."""
    scopes = {rule.scope for rule in rules_of(explicit, priorities, default_cap).values()}
    return sorted(scopes | {f"{scope}:{channel}" for scope in scopes for channel in Channel})


def explicit_rules(
    types: dict[str, tuple[str | None, ThrottleConfig | None, list[Channel]]],
    categories: dict[str, CategoryConfig],
    fail: Callable[[str, str], Exception],
) -> dict[str, Rule]:
    """The throttle each type has of its own or through its category, checked: ``types``
    gives each type's (category, throttle, channels); ``fail(key, problem)`` makes the
    error that names the type (or category) and the field."""
    by_category: dict[str, Rule] = {}
    for name, config in categories.items():
        if config.throttle is not None:
            key = f"categories.{name}.throttle"
            by_category[name] = _checked(f"c:{name}", config.throttle, key, None, fail)
    rules: dict[str, Rule] = {}
    for name, (category, throttle, channels) in types.items():
        if category is not None and category not in categories:
            raise fail(f"types.{name}.category", f"category {category!r} is not in [categories]")
        if throttle is not None:
            key = f"types.{name}.throttle"
            rules[name] = _checked(f"t:{name}", throttle, key, channels, fail)
        elif category is not None and category in by_category:
            rules[name] = by_category[category]
    return rules


def _checked(
    scope: str,
    config: ThrottleConfig,
    key: str,
    channels: list[Channel] | None,
    fail: Callable[[str, str], Exception],
) -> Rule:
    try:
        rule = rule_of(scope, config)
    except ThrottleError as error:
        raise fail(f"{key}.per", str(error)) from None
    if channels is not None and rule.channels is not None:
        foreign = sorted(rule.channels - set(channels))
        if foreign:
            raise fail(f"{key}.channels", f"{foreign[0]} is not one of the type's channels")
    return rule
