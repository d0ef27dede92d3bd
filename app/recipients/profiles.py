"""Changing recipient profiles (their shape and how ingest uses them: ``app.ingest.profiles``):
what a change changed, devices added and removed, and the bound on what is kept.

Every change is a ``RecipientProfileChanged`` event naming what changed, never a value.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from app.ingest.profiles import Profile
from app.ingest.requests import MAX_PUSH_TARGETS, PushTarget, target_address
from streams.core.errors import Invalid

MAX_PROFILE_BYTES: Final = 16 * 1024
FIELDS: Final = (
    "email", "phone", "push_tokens", "push_targets", "webhook_url", "locale", "timezone",
    "attributes",
)  # fmt: skip


class ProfileError(Invalid, ValueError):
    """The profile cannot be kept; the message names the field."""


class TargetsPatch(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``PATCH /v1/recipients/{id}/push-targets``: devices to add and to remove."""

    add: Annotated[list[PushTarget], msgspec.Meta(max_length=MAX_PUSH_TARGETS)] = []
    remove: Annotated[list[PushTarget], msgspec.Meta(max_length=MAX_PUSH_TARGETS)] = []


_encoder = msgspec.json.Encoder()


def encode(profile: Profile) -> bytes:
    """The profile as stored; ``ProfileError`` when it is too large to keep."""
    raw = _encoder.encode(profile)
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"body: a profile is at most {MAX_PROFILE_BYTES} bytes as JSON")
    return raw


def changed(before: Profile | None, after: Profile | None) -> list[str]:
    """The fields that differ (all that are set, when one side is absent)."""
    old, new = before or Profile(), after or Profile()
    return [name for name in FIELDS if getattr(old, name) != getattr(new, name)]


def patched(profile: Profile | None, patch: TargetsPatch) -> Profile:
    """``profile`` with devices added (once each, after those it has) and removed (a device
    is the same when its address is: platform and token, or the subscription's endpoint)."""
    current = profile or Profile()
    gone = {_device(target) for target in patch.remove}
    kept = [target for target in current.push_targets if _device(target) not in gone]
    known = {_device(target) for target in kept}
    for target in patch.add:
        if _device(target) not in known and _device(target) not in gone:
            kept.append(target)
            known.add(_device(target))
    try:
        return msgspec.structs.replace(current, push_targets=kept)
    except ValueError as error:
        raise ProfileError(str(error)) from None


def _device(target: PushTarget) -> str:
    address = target_address(target)
    return " ".join(address.split(" ")[:2])  # a subscription is its endpoint
