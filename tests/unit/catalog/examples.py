"""Catalogs to parse in the catalog's tests: a small valid one, one with every push provider
kind, and how to read the error a broken one stops start-up with."""

from __future__ import annotations

import pytest

from app.catalog import CatalogError, parse_catalog

VALID = """\
default_locale = "en"

[providers.sandbox]
kind = "sandbox"

[channels.SMS]
provider = "sandbox"

[channels.EMAIL]
provider = "sandbox"

[types.otp]
channels = ["SMS"]
priority = "HIGH"
ttl_seconds = 300
opt_out = false

[types.otp.templates.en]
SMS = { body = "Your code is {{ code }}." }
EMAIL = { title = "Code for {{ name }}", body = "Your code is {{ code }}." }

[types.otp.templates.de]
SMS = { body = "Ihr Code lautet {{ code }}." }
"""


def broken(old: str, new: str) -> str:
    """VALID with one piece of text replaced (which must be there)."""
    assert old in VALID
    return VALID.replace(old, new, 1)


def catalog_error(text: str) -> str:
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text, source="x.toml")
    return str(caught.value)


PUSH_CATALOG = """\
[providers.sandbox]
kind = "sandbox"

[providers.fcm]
kind = "fcm"
project_id = "clarion-test"
service_account_env = "FCM_ACCOUNT"

[providers.apns]
kind = "apns"
team_id = "TEAM123456"
key_id = "KEY1234567"
key_env = "APNS_KEY"
topic = "com.example.app"

[providers.apns_backup]
kind = "apns"
team_id = "TEAM123456"
key_id = "KEY7654321"
key_env = "APNS_KEY"
topic = "com.example.app"

[channels.PUSH]
{channel}

[types.news]
channels = ["PUSH"]
priority = "LOW"
ttl_seconds = 3600
opt_out = true

[types.news.templates.en]
PUSH = {{ title = "News", body = "{{{{ headline }}}}" }}
"""
