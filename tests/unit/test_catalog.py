"""The type catalog: the shipped clarion.toml, and broken catalogs that must stop start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.catalog import Catalog, CatalogError, load_catalog, parse_catalog
from tests.unit.catalog.examples import PUSH_CATALOG, VALID, broken, catalog_error

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return load_catalog(REPO / "clarion.toml")


def test_the_shipped_catalog_has_the_documented_types(shipped: Catalog) -> None:
    otp = shipped.types["otp"]
    assert (otp.channels, otp.priority, otp.ttl_seconds, otp.opt_out) == (
        ["SMS"],
        "HIGH",
        300,
        False,
    )
    security = shipped.types["security_alert"]
    assert (security.channels, security.priority) == (["EMAIL", "PUSH"], "HIGH")
    order = shipped.types["order_confirmed"]
    assert (order.channels, order.priority) == (["EMAIL", "PUSH", "IN_APP"], "NORMAL")
    marketing = shipped.types["marketing"]
    assert (marketing.channels, marketing.priority, marketing.opt_out) == (
        ["EMAIL", "PUSH"],
        "LOW",
        True,
    )
    assert shipped.default_locale == "en"
    assert shipped.source.endswith("clarion.toml")


def test_the_shipped_catalog_routes_every_channel_to_a_defined_provider(
    shipped: Catalog,
) -> None:
    assert set(shipped.channels) == {"PUSH", "EMAIL", "SMS", "IN_APP"}
    for config in shipped.channels.values():
        assert config.provider in shipped.providers


def test_a_valid_catalog_parses() -> None:
    catalog = parse_catalog(VALID, source="x.toml")
    assert catalog.source == "x.toml"
    assert catalog.types["otp"].ttl_seconds == 300


def test_template_fields_list_the_placeholders_of_title_and_body() -> None:
    catalog = parse_catalog(VALID, source="x.toml")
    assert catalog.template_fields[("otp", "en", "SMS")] == {"code"}
    assert catalog.template_fields[("otp", "en", "EMAIL")] == {"code", "name"}
    assert catalog.template_fields[("otp", "de", "SMS")] == {"code"}


def test_template_locale_falls_back_to_the_language_then_the_default() -> None:
    catalog = parse_catalog(VALID, source="x.toml")
    assert catalog.template_locale("otp", "SMS", "de") == "de"
    assert catalog.template_locale("otp", "SMS", "de-CH") == "de"
    assert catalog.template_locale("otp", "SMS", "fr") == "en"
    assert catalog.template_locale("otp", "SMS", "fr-FR") == "en"
    # de has no EMAIL template, so a German EMAIL uses the default locale.
    assert catalog.template_locale("otp", "EMAIL", "de-CH") == "en"
    # No locale has a PUSH template.
    assert catalog.template_locale("otp", "PUSH", "en") is None


def test_a_ttl_of_the_wrong_type_names_file_type_and_key() -> None:
    message = catalog_error(broken("ttl_seconds = 300", 'ttl_seconds = "300s"'))
    assert message.startswith("x.toml: ")
    assert "types.otp.ttl_seconds" in message


def test_an_unknown_key_in_a_type_names_file_type_and_key() -> None:
    message = catalog_error(broken("opt_out = false", 'opt_out = false\ncolour = "red"'))
    assert message.startswith("x.toml: ")
    assert "types.otp" in message
    assert "colour" in message


def test_an_unknown_priority_names_file_type_and_key() -> None:
    message = catalog_error(broken('priority = "HIGH"', 'priority = "URGENT"'))
    assert message.startswith("x.toml: ")
    assert "types.otp.priority" in message
    assert "URGENT" in message


def test_a_ttl_out_of_range_names_the_type_and_key() -> None:
    message = catalog_error(broken("ttl_seconds = 300", "ttl_seconds = 0"))
    assert "types.otp.ttl_seconds" in message


def test_an_unknown_key_in_a_template_names_its_locale_and_channel() -> None:
    message = catalog_error(
        broken('SMS = { body = "Ihr Code', 'SMS = { colour = "red", body = "Ihr Code')
    )
    assert message.startswith("x.toml: ")
    assert "types.otp.templates.de.SMS" in message
    assert "colour" in message


def test_an_unknown_top_level_key_is_refused() -> None:
    message = catalog_error("defualt_locale = 'en'\n" + VALID)
    assert message.startswith("x.toml: ")
    assert "defualt_locale" in message


def test_a_type_name_that_is_not_a_plain_name_is_refused() -> None:
    message = catalog_error(VALID.replace("types.otp", "types.One-Time"))
    assert message.startswith("x.toml: ")
    assert "types.One-Time" in message


def test_a_type_using_an_unconfigured_channel_is_refused() -> None:
    message = catalog_error(broken('channels = ["SMS"]', 'channels = ["SMS", "PUSH"]'))
    assert message.startswith("x.toml: ")
    assert "types.otp.channels" in message
    assert "PUSH" in message


def test_a_template_for_an_unconfigured_channel_is_refused() -> None:
    message = catalog_error(VALID + 'PUSH = { body = "{{ code }}" }\n')
    assert message.startswith("x.toml: ")
    assert "types.otp.templates.de.PUSH" in message


def test_a_default_channel_without_a_default_locale_template_is_refused() -> None:
    text = broken('channels = ["SMS"]', 'channels = ["SMS", "EMAIL"]').replace(
        'EMAIL = { title = "Code for {{ name }}", body = "Your code is {{ code }}." }\n', ""
    )
    message = catalog_error(text)
    assert message.startswith("x.toml: ")
    assert "types.otp.templates.en.EMAIL" in message


def test_a_default_locale_without_the_template_is_refused() -> None:
    message = catalog_error(broken('default_locale = "en"', 'default_locale = "fr"'))
    assert "types.otp.templates.fr.SMS" in message


def test_a_template_that_does_not_compile_names_its_part_and_line() -> None:
    message = catalog_error(broken("Your code is {{ code }}.", "Your code is {{ code }"))
    assert message.startswith("x.toml: types.otp.templates.en.SMS.body: line 1: ")
    message = catalog_error(broken('title = "Code for {{ name }}"', 'title = "{{ name | nope }}"'))
    assert message.startswith("x.toml: types.otp.templates.en.EMAIL.title: line 1: ")
    assert "nope" in message


def test_an_old_str_format_template_is_refused_saying_what_to_write() -> None:
    message = catalog_error(broken("Ihr Code lautet {{ code }}.", "Ihr Code lautet {code}."))
    assert message.startswith("x.toml: types.otp.templates.de.SMS.body: line 1: ")
    assert "write {{ code }}" in message


def test_template_fields_leave_out_names_under_an_is_defined_guard() -> None:
    guarded = "{% if name is defined %}Hi {{ name }}. {% endif %}Your code is {{ code }}."
    catalog = parse_catalog(broken("Your code is {{ code }}.", guarded), source="x.toml")
    assert catalog.template_fields[("otp", "en", "SMS")] == {"code"}


def test_a_toml_syntax_error_names_the_file() -> None:
    message = catalog_error(VALID + "\n[[[\n")
    assert message.startswith("x.toml: ")


def test_load_catalog_names_the_file_it_read(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(broken('priority = "HIGH"', 'priority = "URGENT"'), encoding="utf-8")
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert "priority" in str(caught.value)


def test_load_catalog_reads_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(VALID, encoding="utf-8")
    assert load_catalog(path).source == str(path)


def test_a_missing_catalog_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert str(path) in str(caught.value)


def test_a_type_may_name_the_producers_that_send_it() -> None:
    catalog = parse_catalog(broken("opt_out = false\n", 'opt_out = false\nproducers = ["auth"]\n'))
    assert catalog.types["otp"].producers == {"auth"}
    assert parse_catalog(VALID).types["otp"].producers is None  # any producer
    error = catalog_error(broken("opt_out = false\n", 'opt_out = false\nproducers = ["a b"]\n'))
    assert "types.otp" in error
    assert "producers" in error


def test_a_type_is_named_to_recipients_by_its_label_or_its_name_in_words() -> None:
    labelled = parse_catalog(
        VALID.replace("opt_out = false", 'opt_out = false\nlabel = "Sign-in codes"')
    )
    assert labelled.types["otp"].label_of("otp") == "Sign-in codes"
    shipped = load_catalog(REPO / "clarion.toml")
    assert shipped.types["security_alert"].label_of("security_alert") == "security alert"
    with pytest.raises(CatalogError, match=r"types\.otp\.label"):
        parse_catalog(VALID.replace("opt_out = false", 'opt_out = false\nlabel = "a\\nb"'))


def test_an_fcm_base_url_without_tls_is_refused_naming_the_field() -> None:
    plain = PUSH_CATALOG.format(channel='provider = "sandbox"').replace(
        'service_account_env = "FCM_ACCOUNT"\n',
        'service_account_env = "FCM_ACCOUNT"\nbase_url = "http://fcm.internal:8080"\n',
    )
    error = catalog_error(plain)
    assert error.startswith("x.toml: providers.fcm.base_url: Expected `str` matching regex")
    assert "'^https://" in error


def test_await_address_is_off_unless_a_type_names_it(shipped: Catalog) -> None:
    assert parse_catalog(VALID).types["otp"].await_address_seconds is None
    assert all(config.await_address_seconds is None for config in shipped.types.values())


def test_await_address_within_the_ttl_is_taken() -> None:
    text = broken("opt_out = false", "opt_out = false\nawait_address_seconds = 300")
    assert parse_catalog(text).types["otp"].await_address_seconds == 300


def test_await_address_longer_than_the_ttl_is_refused_naming_both() -> None:
    message = catalog_error(
        broken("opt_out = false", "opt_out = false\nawait_address_seconds = 301")
    )
    assert message == (
        "x.toml: types.otp.await_address_seconds: 301 s is longer than the type's ttl_seconds (300)"
    )


@pytest.mark.parametrize("value", ["0", "86401", '"10m"', "1.5"])
def test_await_address_out_of_range_or_not_whole_seconds_is_refused(value: str) -> None:
    text = broken("ttl_seconds = 300", "ttl_seconds = 2592000").replace(
        "opt_out = false", f"opt_out = false\nawait_address_seconds = {value}", 1
    )
    message = catalog_error(text)
    assert message.startswith("x.toml: ")
    assert "types.otp.await_address_seconds" in message
