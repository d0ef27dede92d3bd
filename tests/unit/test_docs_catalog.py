"""The complete catalog of the docs (docs/running/catalog.md, "A complete catalog") is a
catalog Clarion accepts, with every provider kind in it: the example users copy from cannot
drift from what the code checks."""

from __future__ import annotations

import json
import re

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from app.catalog import check_for_workers, parse_catalog
from app.catalog.kinds import KIND_CHANNELS
from tests.conftest import REPO

PAGE = "docs/running/catalog.md"


def docs_catalog() -> str:
    text = (REPO / PAGE).read_text()
    example = text[text.index("\n## A complete catalog\n") :]
    # The first TOML block of the section is the complete example.
    return re.search(r"```toml\n(.*?)```", example, re.DOTALL).group(1)  # type: ignore[union-attr]


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def test_the_docs_catalog_loads_with_every_provider_kind() -> None:
    catalog = parse_catalog(docs_catalog(), PAGE)
    kinds = {config.kind for config in catalog.providers.values()}
    assert kinds == set(KIND_CHANNELS)
    account = {
        "type": "service_account",
        "client_email": "clarion@example-shop.iam.gserviceaccount.com",
        "private_key": pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    environ = {
        "SMTP_PASSWORD": "p",
        "SENDGRID_API_KEY": "SG.k",
        "TWILIO_AUTH_TOKEN": "t",
        "WEBHOOK_SECRET": "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0",
        "FCM_SERVICE_ACCOUNT": json.dumps(account),
        "APNS_KEY": pem(ec.generate_private_key(ec.SECP256R1())),
        "VAPID_PRIVATE_KEY": pem(ec.generate_private_key(ec.SECP256R1())),
    }
    assert set(check_for_workers(catalog, environ, lease_ms=15_000)) == set(catalog.providers)
    assert catalog.channels["EMAIL"].provider_order == ("sendgrid", "relay")
    assert catalog.push_orders == {"fcm": ("fcm",), "apns": ("apns",), "webpush": ("webpush",)}
