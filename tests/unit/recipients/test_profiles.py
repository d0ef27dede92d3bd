"""Changing a profile: what changed is named field by field, devices are added once each and
removed by their address (a Web Push subscription by its endpoint), and a profile too large
to keep is refused naming the bound."""

from __future__ import annotations

import pytest

from app.ingest.profiles import Profile
from app.ingest.requests import (
    ApnsTarget,
    FcmTarget,
    SubscriptionKeys,
    WebPushTarget,
)
from app.recipients.profiles import (
    MAX_PROFILE_BYTES,
    ProfileError,
    TargetsPatch,
    changed,
    encode,
    patched,
)

APNS = ApnsTarget(token="ab" * 32)
FCM = FcmTarget(token="f-1")


def subscription(auth: str) -> WebPushTarget:
    keys = SubscriptionKeys(p256dh="B" + "a" * 86, auth=auth)
    return WebPushTarget(endpoint="https://push.example.net/p/1", keys=keys)


def test_what_changed_is_named_field_by_field() -> None:
    before = Profile(email="a@example.com", locale="de")
    assert changed(None, before) == ["email", "locale"]
    assert changed(before, Profile(email="a@example.com", locale="en")) == ["locale"]
    assert changed(before, before) == []
    assert changed(before, None) == ["email", "locale"]


def test_devices_are_added_once_and_removed_by_address() -> None:
    profile = patched(None, TargetsPatch(add=[APNS, FCM, APNS]))
    assert profile.push_targets == [APNS, FCM]
    profile = patched(profile, TargetsPatch(remove=[APNS], add=[subscription("c" * 22)]))
    assert profile.push_targets == [FCM, subscription("c" * 22)]
    # A subscription renewed with new keys is the same device: removing it by its endpoint.
    profile = patched(profile, TargetsPatch(remove=[subscription("d" * 22)]))
    assert profile.push_targets == [FCM]
    # Added and removed in one patch: removed.
    assert patched(profile, TargetsPatch(add=[APNS], remove=[APNS])).push_targets == [FCM]


def test_more_than_twenty_devices_or_too_large_a_profile_is_refused() -> None:
    full = Profile(push_tokens=["t"] * 20)
    with pytest.raises(ProfileError, match="at most 20"):
        patched(full, TargetsPatch(add=[FCM]))
    big = Profile(attributes={f"k{n}": "v" * 256 for n in range(50)}, push_tokens=["t" * 400] * 20)
    with pytest.raises(ProfileError, match=f"at most {MAX_PROFILE_BYTES} bytes"):
        encode(big)
    assert (
        encode(Profile(email="a@example.com")) == b'{"email":"a@example.com","phone":null,'
        b'"push_tokens":[],"push_targets":[],"webhook_url":null,"locale":null,"timezone":null,'
        b'"attributes":{}}'
    )
