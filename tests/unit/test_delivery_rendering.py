"""A work item's message from the catalog: the template of its locale, its language or the
default one, filled with its data; what cannot be rendered is a RenderError that says why."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from app.catalog import Catalog
from app.delivery.rendering import RenderError, render
from streams.vocabulary import Channel
from tests.unit.delivery_examples import ITEM


def rendered(catalog: Catalog, **changes: Any) -> tuple[str, str]:
    item = msgspec.structs.replace(ITEM, **changes)
    return render(catalog, item, item.data)


def test_a_message_is_its_template_filled_with_the_data(catalog: Catalog) -> None:
    assert rendered(catalog, data={"code": "424242"}) == (
        "", "Your code is 424242. It expires in 5 minutes.",
    )  # fmt: skip
    title, body = rendered(
        catalog, notification_type="order_confirmed", channel=Channel.EMAIL,
        data={"order_id": "A-7", "unused": "ignored"},
    )  # fmt: skip
    assert (title, body) == ("Order A-7 confirmed", "Thank you! Your order A-7 is confirmed.")


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
    assert rendered(catalog, locale=locale, data={"code": "1"})[1] == body
    # The de templates have no EMAIL: a German EMAIL uses the default locale's.
    assert rendered(catalog, locale=locale, channel=Channel.EMAIL, data={"code": "1"}) == (
        "Your code", "Your code is 1. It expires in 5 minutes.",
    )  # fmt: skip


def test_a_missing_data_field_is_a_render_error_naming_it(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match=r"^the template needs data\.code$"):
        rendered(catalog, data={"token": "1"})


def test_a_type_no_longer_in_the_catalog_is_a_render_error(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match=r"^type 'invoice' is no longer in the catalog$"):
        rendered(catalog, notification_type="invoice")


def test_a_channel_the_type_has_no_template_for_is_a_render_error(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match=r"^type 'otp' has no PUSH template$"):
        rendered(catalog, channel=Channel.PUSH, data={"code": "1"})


def test_data_that_cannot_fill_the_template_is_a_render_error(catalog: Catalog) -> None:
    padded = msgspec.structs.replace(
        catalog, types={**catalog.types, "otp": _with_body(catalog, "Your code is {code:>5d}.")}
    )
    assert rendered(padded, data={"code": 42})[1] == "Your code is    42."
    with pytest.raises(RenderError, match=r"^the template cannot be filled: "):
        rendered(padded, data={"code": "not a number"})


def _with_body(catalog: Catalog, body: str) -> Any:
    otp = catalog.types["otp"]
    template = msgspec.structs.replace(otp.templates["en"][Channel.SMS], body=body)
    templates = {**otp.templates, "en": {**otp.templates["en"], Channel.SMS: template}}
    return msgspec.structs.replace(otp, templates=templates)


def test_a_title_stays_one_line_whatever_the_data_holds(catalog: Catalog) -> None:
    """A line break in a value once reached an email subject: a header of its own."""
    title, body = rendered(
        catalog, notification_type="order_confirmed", channel=Channel.EMAIL,
        data={"order_id": "A-7\r\nBcc: everyone@example.com\x00"},
    )  # fmt: skip
    assert title == "Order A-7  Bcc: everyone@example.com  confirmed"
    assert "\r\n" in body  # the body is not a header: it keeps its lines


def test_shared_data_that_is_gone_fails_the_delivery(catalog: Catalog) -> None:
    with pytest.raises(RenderError, match="no longer in Redis"):
        render(catalog, ITEM, None)
