"""Providers in the catalog: each kind's keys, which channels a kind can send, failover
lists, and what a worker checks before it starts (secrets from the environment, time limits
inside the lease)."""

from __future__ import annotations

import pytest

from app.catalog import CatalogError, check_for_workers, guarded_providers, parse_catalog
from app.catalog.providers import SmtpConfig, TwilioConfig

TYPES = """
[types.otp]
channels = ["SMS"]
priority = "HIGH"
ttl_seconds = 300
opt_out = false

[types.otp.templates.en]
SMS = { body = "code" }
"""

TWO_SMS = (
    """
[providers.twilio]
kind = "twilio"
account_sid = "AC0123456789abcdef0123456789abcdef"
auth_token_env = "TWILIO_AUTH_TOKEN"
from = "+15005550006"
timeout_seconds = 5

[providers.backup]
kind = "sandbox"

[providers.mail]
kind = "smtp"
host = "smtp.example.com"
from = "Clarion <no-reply@example.com>"
username = "clarion"
password_env = "SMTP_PASSWORD"

[channels.SMS]
providers = ["twilio", "backup"]

[channels.EMAIL]
provider = "mail"
"""
    + TYPES
)


def error_of(text: str) -> str:
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text, "x.toml")
    return str(caught.value)


def test_each_kind_gets_its_keys_and_a_channel_its_failover_order() -> None:
    catalog = parse_catalog(TWO_SMS, "x.toml")
    twilio, mail = catalog.providers["twilio"], catalog.providers["mail"]
    assert isinstance(twilio, TwilioConfig)
    assert isinstance(mail, SmtpConfig)
    assert (twilio.kind, twilio.from_number, twilio.timeout_seconds) == (
        "twilio", "+15005550006", 5,
    )  # fmt: skip
    assert (mail.port, mail.tls, mail.pool_size, mail.max_in_flight) == (587, "starttls", 4, 32)
    assert catalog.channels["SMS"].provider_order == ("twilio", "backup")
    assert catalog.channels["EMAIL"].provider_order == ("mail",)
    # The sandbox has no breaker unless asked for; real kinds have one.
    assert guarded_providers(catalog) == ["twilio", "mail"]
    # Feedback bodies are bounded by each scheme's own default unless the file says other.
    assert twilio.feedback_max_bytes is None
    bounded = parse_catalog(TWO_SMS.replace("timeout_seconds = 5", "feedback_max_bytes = 8192"))
    assert bounded.providers["twilio"].feedback_max_bytes == 8192


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('kind = "twilio"', 'kind = "fax"'), "providers.twilio.kind"),
        (('from = "+15005550006"', ""),
         "providers.twilio: give exactly one of from and messaging_service_sid"),
        (('host = "smtp.example.com"', ""),
         "providers.mail: Object missing required field `host`"),
        (('password_env = "SMTP_PASSWORD"', 'password = "hunter2"'), "providers.mail"),
        (('providers = ["twilio", "backup"]', 'providers = ["twilio", "twilio"]'),
         "channels.SMS.providers: a provider is named twice"),
        (('providers = ["twilio", "backup"]', 'providers = ["twilio", "nobody"]'),
         "channels.SMS.providers: no provider named 'nobody'"),
        (('providers = ["twilio", "backup"]', "providers = []"),
         "channels.SMS.providers: missing: name the channel's provider"),
        (('provider = "mail"', 'provider = "twilio"'),
         "channels.EMAIL.provider: provider 'twilio' is of kind twilio, which cannot send EMAIL"),
        (("timeout_seconds = 5", "feedback_max_bytes = 1023"),
         "providers.twilio.feedback_max_bytes"),
        (("timeout_seconds = 5", "feedback_max_bytes = 4194305"),
         "providers.twilio.feedback_max_bytes"),
    ],
)  # fmt: skip
def test_a_wrong_provider_or_channel_is_refused_naming_it(
    change: tuple[str, str], expected: str
) -> None:
    message = error_of(TWO_SMS.replace(*change))
    assert message.startswith("x.toml: ")
    assert expected in message
    assert "hunter2" not in message


def test_a_worker_needs_every_secret_the_catalog_names() -> None:
    catalog = parse_catalog(TWO_SMS, "x.toml")
    environ = {"TWILIO_AUTH_TOKEN": "t0k3n", "SMTP_PASSWORD": "s3cret"}
    secrets = check_for_workers(catalog, environ, lease_ms=15_000)
    assert secrets == {
        "twilio": {"auth_token_env": "t0k3n"},
        "backup": {},
        "mail": {"password_env": "s3cret"},
    }
    with pytest.raises(CatalogError) as caught:
        check_for_workers(catalog, {"TWILIO_AUTH_TOKEN": "t0k3n", "SMTP_PASSWORD": ""}, 15_000)
    assert str(caught.value) == (
        "x.toml: providers.mail.password_env: environment variable SMTP_PASSWORD is not set"
    )


def test_a_time_limit_must_end_inside_the_lease() -> None:
    catalog = parse_catalog(TWO_SMS, "x.toml")
    environ = {"TWILIO_AUTH_TOKEN": "t", "SMTP_PASSWORD": "p"}
    with pytest.raises(CatalogError) as caught:
        check_for_workers(catalog, environ, lease_ms=5_000)
    assert "providers.twilio.timeout_seconds: 5 s is not shorter than the lease" in str(
        caught.value
    )


def test_the_inbox_calls_nobody_so_its_time_limit_does_not_meet_the_lease() -> None:
    catalog = parse_catalog(
        '[providers.inbox]\nkind = "inbox"\ntimeout_seconds = 10\n'
        '[channels.IN_APP]\nprovider = "inbox"\n',
        "x.toml",
    )
    assert check_for_workers(catalog, {}, lease_ms=2_000) == {"inbox": {}}


@pytest.mark.parametrize(
    ("schemes", "refused"),
    [
        ('["javascript"]', "runs or embeds content"),
        ('["data"]', "runs or embeds content"),
        ('["MyApp"]', "link_schemes"),
        ('["my app"]', "link_schemes"),
    ],
)
def test_an_inbox_takes_only_app_schemes_for_its_links(schemes: str, refused: str) -> None:
    text = f'[providers.inbox]\nkind = "inbox"\nlink_schemes = {schemes}\n'
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text)
    assert refused in str(caught.value)
    parse_catalog('[providers.inbox]\nkind = "inbox"\nlink_schemes = ["myapp", "http"]\n')
