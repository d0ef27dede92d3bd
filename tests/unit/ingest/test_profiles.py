"""A notification planned with the recipient's profile: the profile's addresses and locale
where the request gives none; a request's own email address, phone number, webhook URL or
devices win for that notification (any device given replaces all of the profile's)."""

from __future__ import annotations

import msgspec
import pytest

from app.ingest.profiles import Profile, decode, merged
from app.ingest.requests import FcmTarget, NotificationRequest

PROFILE = Profile(
    email="anna@example.com", phone="+4915112345678", push_tokens=["plain"],
    push_targets=[FcmTarget(token="f-1")], webhook_url="https://hooks.example.com/a",
    locale="de", timezone="Europe/Berlin", attributes={"plan": "pro"},
)  # fmt: skip


def request(recipient: dict[str, object], **fields: object) -> NotificationRequest:
    body = {"recipient": recipient, "type": "t", **fields}
    return msgspec.convert(body, NotificationRequest)


def test_the_profile_fills_in_what_the_request_leaves_out() -> None:
    planned = merged(request({"id": "u"}), PROFILE)
    given = planned.recipient
    assert (given.email, given.phone, given.webhook_url) == (
        "anna@example.com", "+4915112345678", "https://hooks.example.com/a",
    )  # fmt: skip
    assert (given.push_tokens, given.push_targets) == (["plain"], [FcmTarget(token="f-1")])
    assert planned.locale == "de"


def test_what_the_request_gives_wins_for_that_notification() -> None:
    own = request({"id": "u", "email": "own@example.com", "push_tokens": ["mine"]}, locale="en")
    planned = merged(own, PROFILE)
    given = planned.recipient
    assert (given.email, given.phone) == ("own@example.com", "+4915112345678")
    assert (given.push_tokens, given.push_targets) == (["mine"], [])
    assert planned.locale == "en"


def test_a_stored_profile_decodes_and_none_is_none() -> None:
    assert decode(msgspec.json.encode(PROFILE)) == PROFILE
    assert decode(b"") is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timezone": "Nowhere/Else"}, "timezone: unknown time zone"),
        ({"attributes": {f"k{n}": n for n in range(51)}}, "attributes: at most 50"),
        ({"push_tokens": ["t"] * 20, "push_targets": [{"platform": "fcm", "token": "x"}]},
         "at most 20"),
    ],
)  # fmt: skip
def test_a_profile_beyond_its_bounds_is_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=message):
        msgspec.convert(fields, Profile)
