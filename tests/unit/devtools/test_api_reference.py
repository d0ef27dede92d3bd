"""The HTTP API's reference: built from the app's schema without Redis or PostgreSQL, it
lists every operation with who may call it, and every named schema; the same every time."""

from __future__ import annotations

import json
import re

import pytest

from app.api.docs import operations
from devtools import api_reference
from devtools.api_reference import auth_of, group_of, group_title, operation_id, type_of


@pytest.fixture(scope="module")
def built() -> tuple[str, dict[str, object]]:
    page, schema = api_reference.reference()
    return page, json.loads(schema)


def test_every_operation_is_listed(built: tuple[str, dict[str, object]]) -> None:
    page, schema = built
    paths = schema["paths"]
    assert isinstance(paths, dict)
    operations = {
        f"### `{method.upper()} {path}` {{#{operation_id(method, path)}}}"
        for path, ops in paths.items()
        for method in ops
        if method in api_reference.METHODS
    }
    assert len(operations) > 30
    assert {line for line in page.splitlines() if line.startswith("### `")} == operations


def test_every_schema_has_a_section_and_every_link_leads_to_one(
    built: tuple[str, dict[str, object]],
) -> None:
    page, schema = built
    components = schema["components"]
    assert isinstance(components, dict)
    anchors = set(re.findall(r"\{#(schema-[a-z0-9]+)\}", page))
    assert anchors == {f"schema-{name.lower()}" for name in components["schemas"]}
    assert set(re.findall(r"\]\(#(schema-[a-z0-9]+)\)", page)) <= anchors


def test_who_may_call_comes_from_the_handlers(built: tuple[str, dict[str, object]]) -> None:
    page, _ = built
    app = api_reference.build_app()
    functions = operations(app)
    assert auth_of(functions[("post", "/v1/notifications")]) == "API key with the `send` scope"
    assert "`read` or `admin`" in auth_of(functions[("get", "/v1/dlq")])
    # The check is left to a helper of the handler's module.
    assert "`send`" in auth_of(functions[("post", "/v1/campaigns/{campaign_id}/start")])
    assert "`admin`" in auth_of(functions[("get", "/v1/suppressions")])
    assert "recipient token" in auth_of(functions[("get", "/v1/inbox")])
    assert auth_of(functions[("get", "/v1/ops/health/live")]) == "none"
    assert page.count("**Authentication:**") == page.count("### `")


def test_types_read_as_words() -> None:
    ref = {"$ref": "#/components/schemas/Channel"}
    assert type_of(ref) == "[Channel](#schema-channel)"
    assert type_of({"oneOf": [{"type": "string"}, {"type": "null"}]}) == "string or null"
    assert type_of({"type": "array", "items": ref}) == "array of [Channel](#schema-channel)"
    assert type_of({"enum": ["A", "B"], "type": "string"}) == "one of `A`, `B`"
    assert type_of({"type": "string", "format": "date-time"}) == "string (date-time)"
    assert group_of("/v1/recipients/{recipient_id}") == "recipients"
    assert group_of("/metrics") == "metrics"
    assert group_title("status-webhook") == "Status webhook {#status-webhook}"
    assert group_title("dlq") == "Dead letters {#dlq}"


def test_each_operation_has_an_anchor_of_its_method_and_path() -> None:
    assert operation_id("post", "/v1/notifications") == "post-v1-notifications"
    assert operation_id("get", "/v1/recipients/{recipient_id}") == "get-v1-recipients-recipient_id"


def test_the_page_and_the_schema_are_the_same_every_time(
    built: tuple[str, dict[str, object]],
) -> None:
    page, schema = built
    again_page, again_schema = api_reference.reference()
    assert again_page == page
    assert json.loads(again_schema) == schema
    assert "<key>" not in page.replace("`Authorization: Bearer <token>`", "")
