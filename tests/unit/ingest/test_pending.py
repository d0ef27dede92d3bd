"""A request being ingested is planned with the profile its recipient's settings hold, and as
given when they hold none."""

from __future__ import annotations

import msgspec

from app.ingest.pending import NO_SETTINGS, with_profile_of
from app.ingest.profiles import Profile
from app.ingest.requests import NotificationRequest, Recipient
from streams.recipients.read import RecipientSettings
from tests.conftest import REQUEST


def test_without_a_profile_the_request_is_planned_as_given() -> None:
    assert with_profile_of(REQUEST, NO_SETTINGS) is REQUEST


def test_the_profile_in_the_settings_fills_in_what_the_request_leaves_out() -> None:
    given = NotificationRequest(recipient=Recipient(id="user-5"), type="marketing")
    profile = Profile(email="anna@example.com", locale="de")
    settings = RecipientSettings(version=3, profile=msgspec.json.encode(profile))
    planned = with_profile_of(given, settings)
    assert (planned.recipient.id, planned.recipient.email) == ("user-5", "anna@example.com")
    assert planned.locale == "de"
    assert given.recipient.email is None  # the request given stays as it was
