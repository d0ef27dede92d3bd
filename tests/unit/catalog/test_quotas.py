"""A catalog's ingest quotas: per producer with a default, campaign limits, refused values."""

from __future__ import annotations

from app.catalog import parse_catalog
from tests.unit.catalog.examples import VALID, catalog_error


def test_quotas_are_read_per_producer_with_a_default() -> None:
    text = VALID + (
        "\n[quotas.default]\nrequests = { per_second = 10, burst = 20 }\n"
        "\n[quotas.producers.marketing]\nnotifications = { per_second = 5, burst = 50 }\n"
    )
    quotas = parse_catalog(text).quotas
    default, marketing = quotas.of("orders"), quotas.of("marketing")
    assert default is not None
    assert default.requests is not None
    assert (default.requests.per_second, default.requests.burst) == (10, 20)
    assert marketing is not None
    assert marketing.requests is None
    assert parse_catalog(VALID).quotas.of("orders") is None


def test_campaign_limits_apply_by_default_and_per_producer() -> None:
    text = VALID + (
        "\n[quotas.producers.marketing]\ncampaigns = { open = 5, audience = 10 }\n"
        "\n[quotas.producers.orders]\nrequests = { per_second = 10, burst = 20 }\n"
    )
    quotas = parse_catalog(text).quotas
    limits = quotas.campaigns_of("marketing")
    assert (limits.open, limits.audience, limits.open_audience) == (5, 10, 2_000_000)
    for producer in ("orders", "anyone"):  # an entry without them, or none: the defaults
        limits = quotas.campaigns_of(producer)
        assert (limits.open, limits.audience, limits.open_audience) == (100, 1_000_000, 2_000_000)
    error = catalog_error(VALID + "\n[quotas.default]\ncampaigns = { open = 0 }\n")
    assert "quotas" in error
    assert "open" in error


def test_a_bad_quota_names_its_key() -> None:
    error = catalog_error(VALID + "\n[quotas.default]\nrequests = { per_second = 0, burst = 1 }\n")
    assert "quotas" in error
    assert "per_second" in error
