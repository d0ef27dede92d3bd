"""What a worker process says at start-up about one-click unsubscribe links."""

from __future__ import annotations

import structlog

from app.catalog import Catalog, parse_catalog
from app.processes.worker import say_whether_emails_can_be_unsubscribed, worker_options
from app.settings import Settings
from tests.conftest import DIGEST_SECRET, REPO


def said(catalog: Catalog, settings: Settings) -> list[dict[str, object]]:
    with structlog.testing.capture_logs() as logs:
        say_whether_emails_can_be_unsubscribed(catalog, worker_options(settings))
    return logs


def test_without_a_public_url_the_worker_warns_once_naming_the_types(catalog: Catalog) -> None:
    [line] = said(catalog, Settings(digest_secret=DIGEST_SECRET))
    assert line["event"] == "worker.unsubscribe_links_off"
    assert line["log_level"] == "warning"
    assert "CLARION_PUBLIC_URL is not set" in str(line["detail"])
    assert line["types"] == ["marketing", "order_confirmed"]  # security_alert is not opt-out


def test_with_a_public_url_the_worker_says_nothing(catalog: Catalog) -> None:
    settings = Settings(digest_secret=DIGEST_SECRET, public_url="https://notify.example.com")
    assert worker_options(settings).unsubscribe is not None
    assert said(catalog, settings) == []


def test_without_emails_to_unsubscribe_from_it_is_only_information() -> None:
    text = (REPO / "clarion.toml").read_text().replace("opt_out = true", "opt_out = false")
    [line] = said(parse_catalog(text, "t.toml"), Settings(digest_secret=DIGEST_SECRET))
    assert (line["log_level"], line["types"]) == ("info", [])


def test_the_default_recipient_cap_reaches_the_worker() -> None:
    assert worker_options(Settings()).recipient_cap is None
    assert worker_options(Settings(recipient_cap=(100, 3600))).recipient_cap == (100, 3600)
