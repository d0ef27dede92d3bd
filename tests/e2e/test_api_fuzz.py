"""Property-based fuzzing of the HTTP API from its own OpenAPI schema (schemathesis).

A real ``clarion api`` process, real Redis and PostgreSQL: schemathesis generates valid and
invalid requests for every operation the schema documents and checks each answer: never a
5xx, status codes and bodies as documented, content types as documented. The same requests
again as a browser on another site's page would send them (cross-site request forgery):
never a 5xx, and nothing that changes state is taken.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import ChecksConfig
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from app.api.app import create_app
from app.catalog import load_catalog
from app.settings import Settings, parse_api_keys
from tests.conftest import DIGEST_SECRET, REPO, basic, connect_test_redis
from tests.e2e.api_service import API_KEY, API_KEYS, running_api

BATCH_PATH = "/v1/notifications/batch"
EXAMPLES_PER_OPERATION = 40
CROSS_SITE_EXAMPLES_PER_OPERATION = 5
# What a browser adds to a request another site's page makes it send: the dashboard's Basic
# credentials it holds, a form's content type, the page's origin or the browser's word on it.
CROSS_SITE_HEADERS: list[dict[str, str]] = [
    {"Authorization": basic("fuzz", API_KEY), "Content-Type": "text/plain",
     "Origin": "https://evil.example"},
    {"Authorization": basic("fuzz", API_KEY), "Content-Type": "application/x-www-form-urlencoded",
     "Origin": "null", "Sec-Fetch-Site": "cross-site"},
    {"Authorization": f"Bearer {API_KEY}", "Origin": "https://evil.example"},
    {"Authorization": f"Bearer {API_KEY}", "Sec-Fetch-Site": "same-site"},
    {"Authorization": f"Bearer {API_KEY}", "Origin": "https://evil.example\u00ff",
     "Sec-Fetch-Site": "\u00ff"},
    {"Authorization": basic("fuzz", API_KEY), "Content-Type": "multipart/form-data; boundary=x"},
]  # fmt: skip
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# Authenticated by a provider's signature, not by anything a browser holds (so exempt).
FEEDBACK_PATH = "/v1/feedback/{provider}"


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    """A running API with its own key prefix and database, all scopes for one producer."""
    with running_api() as url:
        yield url


def _documented_schema() -> dict[str, object]:
    """The OpenAPI document the service serves at /schema, built without a server."""
    settings = Settings(
        api_keys=parse_api_keys(API_KEYS),
        digest_secret=DIGEST_SECRET,
    )
    redis = connect_test_redis()  # not connected: building the app needs no I/O
    app = create_app(settings, redis=redis, catalog=load_catalog(REPO / "clarion.toml"))
    # Through JSON, as /schema serves it: generated examples hold Python objects until then.
    return msgspec.json.decode(msgspec.json.encode(app.openapi_schema.to_schema()))  # type: ignore[no-any-return]


schema = schemathesis.openapi.from_dict(_documented_schema())
# An invalid body may be refused for its size before its fields are read: a list far past
# its maxItems is a body over the limit, and 413 is the right answer to it.
schema.config.checks.negative_data_rejection = ChecksConfig.from_dict(
    {
        "negative_data_rejection": {
            "expected-statuses": [
                "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428",
                "429", "5xx",
            ]
        }
    }
).negative_data_rejection  # fmt: skip


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_documented_and_never_a_server_error(
    case: schemathesis.Case, api_url: str
) -> None:
    excluded = [
        # A schema-valid body may still be refused for what only the catalog knows (an
        # unknown type, a template's missing data field): a 422 naming the field is right.
        positive_data_acceptance
    ]
    if case.operation.path == BATCH_PATH:
        # A batch answers 200 with a result per item: an invalid item fails alone, with its
        # own 422, while the valid ones are accepted (checked in test_api_notifications).
        excluded.append(negative_data_rejection)
    case.call_and_validate(
        base_url=api_url,
        headers={"Authorization": f"Bearer {API_KEY}"},
        excluded_checks=excluded,
    )


@schema.parametrize()
@settings(
    max_examples=CROSS_SITE_EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_a_browsers_cross_site_request_is_refused_and_never_a_server_error(
    case: schemathesis.Case, api_url: str
) -> None:
    for headers in CROSS_SITE_HEADERS:
        response = case.call(base_url=api_url, headers=headers)
        assert response.status_code < 500, (headers, response.status_code, response.text)
        if case.method.upper() not in SAFE_METHODS and case.operation.path != FEEDBACK_PATH:
            # Refused, if not for where it comes from then for what it lacks or holds.
            assert 400 <= response.status_code < 500, (
                headers, case.method, case.formatted_path, response.status_code, response.text,
            )  # fmt: skip
