"""A work item's message from the catalog: the template of its locale, its language or the
default one, filled with its data; what cannot be rendered is a RenderError that says why."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from app.catalog import Catalog, parse_catalog
from app.delivery.rendering import Rendered, RenderError, render
from streams.core.vocabulary import Channel
from tests.conftest import REPO
from tests.unit.delivery_examples import ITEM

SHIPPED_OTP_SMS = "Your code is {{ code }}. It expires in 5 minutes."


def rendered(catalog: Catalog, **changes: Any) -> Rendered:
    item = msgspec.structs.replace(ITEM, **changes)
    return render(catalog, item, item.data)


def with_otp_sms(body: str, max_segments: int | None = None) -> Catalog:
    """The shipped catalog with another English OTP SMS template (and SMS segment limit)."""
    text = (REPO / "clarion.toml").read_text()
    assert SHIPPED_OTP_SMS in text, "clarion.toml changed: update this test"
    text = text.replace(SHIPPED_OTP_SMS, body.replace('"', '\\"'), 1)
    if max_segments is not None:
        text = text.replace("[channels.SMS]\n", f"[channels.SMS]\nmax_segments = {max_segments}\n")
    return parse_catalog(text, "test.toml")


def test_a_message_is_its_template_filled_with_the_data(catalog: Catalog) -> None:
    assert rendered(catalog, data={"code": "424242"}) == Rendered(
        "", "Your code is 424242. It expires in 5 minutes.", sms_encoding="GSM-7", sms_segments=1
    )
    email = rendered(
        catalog, notification_type="order_confirmed", channel=Channel.EMAIL,
        data={"order_id": "A-7", "unused": "ignored"},
    )  # fmt: skip
    assert email == Rendered("Order A-7 confirmed", "Thank you! Your order A-7 is confirmed.")


@pytest.mark.parametrize(
    ("locale", "body"),
    [
        ("de", "Ihr Code lautet 1. Er ist 5 Minuten gültig."),
        ("de-CH", "Ihr Code lautet 1. Er ist 5 Minuten gültig."),  # the language's template
        ("fr-FR", "Your code is 1. It expires in 5 minutes."),  # the default locale's
    ],
)
def test_the_locale_falls_back_to_its_language_then_the_default(
    catalog: Catalog, locale: str, body: str
) -> None:
    assert rendered(catalog, locale=locale, data={"code": "1"}).body == body
    # The de templates have no EMAIL: a German EMAIL uses the default locale's.
    email = rendered(catalog, locale=locale, channel=Channel.EMAIL, data={"code": "1"})
    assert (email.title, email.body) == ("Your code", "Your code is 1. It expires in 5 minutes.")


def test_a_missing_data_field_is_a_render_error_naming_it(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match=r"^the template needs data\.code$"):
        rendered(catalog, data={"token": "1"})


def test_a_type_no_longer_in_the_catalog_is_a_render_error(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match=r"^type 'invoice' is no longer in the catalog$"):
        rendered(catalog, notification_type="invoice")


def test_a_channel_the_type_has_no_template_for_is_a_render_error(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match=r"^type 'otp' has no PUSH template$"):
        rendered(catalog, channel=Channel.PUSH, data={"code": "1"})


def test_data_that_cannot_fill_the_template_is_a_render_error() -> None:
    padded = with_otp_sms('Your code is {{ "%5d" | format(code) }}.')
    assert rendered(padded, data={"code": 42}).body == "Your code is    42."
    with pytest.raises(RenderError, match=r"^the template cannot be filled: "):
        rendered(padded, data={"code": "not a number"})


def test_an_attribute_escape_from_the_sandbox_is_a_render_error() -> None:
    escaping = with_otp_sms("{{ code.__class__.__mro__ }}")
    with pytest.raises(RenderError, match=r"^the template cannot be filled: .*unsafe"):
        rendered(escaping, data={"code": "1"})


def test_an_sms_reports_its_encoding_and_segments() -> None:
    catalog = with_otp_sms("{{ code }}")
    long = rendered(catalog, data={"code": "a" * 161})
    assert (long.sms_encoding, long.sms_segments) == ("GSM-7", 2)
    emoji = rendered(catalog, data={"code": "Dein Code 🙂"})
    assert (emoji.sms_encoding, emoji.sms_segments) == ("UCS-2", 1)


def test_an_sms_over_the_channels_max_segments_is_a_render_error() -> None:
    catalog = with_otp_sms("{{ code }}", max_segments=2)
    assert rendered(catalog, data={"code": "a" * 306}).sms_segments == 2
    with pytest.raises(RenderError, match=r"^the SMS takes 3 segments \(GSM-7\), over the "
                       r"channel's max_segments of 2$"):  # fmt: skip
        rendered(catalog, data={"code": "a" * 307})


def test_other_channels_have_no_sms_encoding(catalog: Catalog) -> None:
    push = rendered(catalog, notification_type="security_alert", channel=Channel.PUSH,
                    data={"message": "new login"})  # fmt: skip
    assert (push.sms_encoding, push.sms_segments) == ("", 0)


def test_a_title_stays_one_line_whatever_the_data_holds(catalog: Catalog) -> None:
    """A line break in a value once reached an email subject: a header of its own."""
    email = rendered(
        catalog, notification_type="order_confirmed", channel=Channel.EMAIL,
        data={"order_id": "A-7\r\nBcc: everyone@example.com\x00"},
    )  # fmt: skip
    title, body = email.title, email.body
    assert title == "Order A-7  Bcc: everyone@example.com  confirmed"
    assert "\r\n" in body  # the body is not a header: it keeps its lines


def test_shared_data_that_is_gone_fails_the_delivery(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match="no longer in Redis"):
        render(catalog, ITEM, None)
