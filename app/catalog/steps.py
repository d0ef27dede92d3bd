"""Escalation steps and channel fallbacks of a type.

``steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "15m", unless = "read" },
{ channel = "EMAIL", after = "1h", unless = ["read", "delivered"] }]`` on a type: each listed
channel of the type goes ``after`` its notification was accepted (or was due, when sent
later), unless by then an earlier step's delivery was read (an IN_APP message) or delivered
(confirmed by provider feedback, or read); such a step ends SKIPPED with that reason. The
type's channels not listed go at once, as without steps.

``fallback = { PUSH = "SMS" }``: a delivery on the key's channel that fails permanently (an
invalid token, a refused address), or cannot be made at ingest because the address is
missing or known dead, is replaced by one on the value's channel, once per notification.

``planned_steps`` checks a type's steps against its channels and TTL and gives each stepped
channel's ``PlannedStep`` (``Catalog.steps``); ``check_fallback`` checks its fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Annotated, get_args

import msgspec

from app.catalog.throttles import ThrottleError, parse_duration
from streams.core.events import StepCondition
from streams.core.vocabulary import Channel

CONDITIONS: frozenset[str] = frozenset(get_args(StepCondition))
# The longest a step may wait: an ended delivery's state is kept a day
# (``streams.delivery.store.STATE_RETENTION_MS``) when later steps look at it.
MAX_AFTER_MS = 86_400_000
# Suppression reasons at ingest after which a fallback is made at once.
FALLBACK_AT_INGEST: frozenset[str] = frozenset({"no_address", "invalid_address", "no_provider"})


class Step(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One step of a type's chain, as the catalog writes it."""

    channel: Channel
    # "15m", "1h", "30s", "1d" (digits and one unit); omitted: at once.
    after: Annotated[str, msgspec.Meta(max_length=12)] = ""
    # "read", "delivered", or a list of them: any one that holds skips the step.
    unless: StepCondition | list[StepCondition] = []

    def conditions(self) -> tuple[StepCondition, ...]:
        """``unless`` as a tuple, each condition once, in the order written."""
        given = [self.unless] if isinstance(self.unless, str) else self.unless
        return tuple(dict.fromkeys(given))


class PlannedStep(msgspec.Struct, frozen=True):
    """What a channel of a type with steps waits for: its place in the chain (from 1), how
    long after acceptance it goes, and the conditions that skip it."""

    number: int
    after_ms: int
    unless: tuple[StepCondition, ...]


def planned_steps(
    type_name: str,
    steps: list[Step],
    channels: list[Channel],
    ttl_seconds: int,
    fail: Callable[[str, str], Exception],
) -> dict[Channel, PlannedStep]:
    """Check a type's ``steps`` against its channels and TTL; each step's plan by channel.

    A step with ``unless`` goes later than every earlier step: sooner, none of them could have
    been read or delivered yet."""
    planned: dict[Channel, PlannedStep] = {}
    for number, step in enumerate(steps, start=1):
        key = f"types.{type_name}.steps[{number - 1}]"
        if step.channel not in channels:
            raise fail(f"{key}.channel", f"{step.channel} is not one of the type's channels")
        if step.channel in planned:
            raise fail(f"{key}.channel", f"{step.channel} has a step already")
        after_ms = _after_ms(step, key, ttl_seconds, fail)
        unless = step.conditions()
        earlier = list(planned)
        if unless and not earlier:
            raise fail(f"{key}.unless", "the first step has no earlier step to look at")
        if "read" in unless and Channel.IN_APP not in earlier:
            raise fail(
                f"{key}.unless",
                "'read' needs an earlier IN_APP step: only inbox messages are read",
            )
        last = max(planned.values(), key=lambda p: p.after_ms, default=None)
        if unless and last is not None and after_ms <= last.after_ms:
            raise fail(
                f"{key}.after",
                f"it goes {_when(step)}, not later than steps[{last.number - 1}] "
                f"({_when(steps[last.number - 1])}): a step with unless must go later than "
                "every earlier step, or its conditions could never hold",
            )
        planned[step.channel] = PlannedStep(number, after_ms, unless)
    return planned


def _when(step: Step) -> str:
    """A step's ``after`` as written, for a message."""
    return f"after {step.after!r}" if step.after else "at once"


def _after_ms(step: Step, key: str, ttl_seconds: int, fail: Callable[[str, str], Exception]) -> int:
    """A step's ``after`` in milliseconds (0 when omitted), within a day and the TTL."""
    if not step.after:
        return 0
    try:
        after_ms = parse_duration(step.after) * 1000
    except ThrottleError as error:
        raise fail(f"{key}.after", str(error)) from None
    if after_ms > MAX_AFTER_MS:
        raise fail(
            f"{key}.after",
            f"{step.after!r} is longer than a day: the earlier steps' states it looks at "
            "are kept a day after they end",
        )
    if after_ms >= ttl_seconds * 1000:
        raise fail(
            f"{key}.after",
            f"{step.after!r} is not shorter than the type's ttl_seconds ({ttl_seconds}): "
            "the step would always expire",
        )
    return after_ms


def check_fallback(
    type_name: str,
    fallback: dict[Channel, Channel],
    channels: list[Channel],
    templated: Collection[Channel],
    fail: Callable[[str, str], Exception],
) -> None:
    """Check a type's ``fallback``: each key one of its channels, each value another channel
    with a template in the default locale (``templated``: the channels that have one) and not
    one of its channels already."""
    for source, target in fallback.items():
        key = f"types.{type_name}.fallback.{source}"
        if source not in channels:
            raise fail(key, f"{source} is not one of the type's channels")
        if target == source:
            raise fail(key, f"{target} cannot fall back to itself")
        if target in channels:
            raise fail(key, f"{target} is one of the type's channels already")
        if target not in templated:
            raise fail(key, f"{target} needs a template in the default locale")
