"""The README's complete provider catalog is a catalog Clarion accepts, with every provider
kind in it: the example users copy from cannot drift from what the code checks."""

from __future__ import annotations

import re

from app.catalog import KIND_CHANNELS, check_for_workers, parse_catalog
from tests.conftest import REPO


def readme_catalog() -> str:
    text = (REPO / "README.md").read_text()
    providers = text[text.index("\n## Providers\n") :]
    # The first TOML block of the section is the complete example.
    return re.search(r"```toml\n(.*?)```", providers, re.DOTALL).group(1)  # type: ignore[union-attr]


def test_the_readme_catalog_loads_with_every_provider_kind() -> None:
    catalog = parse_catalog(readme_catalog(), "README.md")
    kinds = {config.kind for config in catalog.providers.values()}
    assert kinds == set(KIND_CHANNELS)
    environ = {
        "SMTP_PASSWORD": "p",
        "SENDGRID_API_KEY": "SG.k",
        "TWILIO_AUTH_TOKEN": "t",
        "WEBHOOK_SECRET": "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0",
    }
    assert set(check_for_workers(catalog, environ, lease_ms=15_000)) == set(catalog.providers)
    assert catalog.channels["EMAIL"].provider_order == ("sendgrid", "relay")
