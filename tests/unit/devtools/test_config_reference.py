"""The configuration reference lists every declared variable with its form, default and
meaning, secrets marked."""

from __future__ import annotations

import re

from app.setting_variables import BY_FIELD, VARIABLES, Variable
from devtools.config_reference import DEVELOPMENT, default_of, render, value_of


def rows(page: str) -> dict[str, str]:
    return dict(re.findall(r"^\| `([A-Z0-9_]+)` \|(.*)$", page, flags=re.MULTILINE))


def test_the_page_lists_every_declared_variable_once() -> None:
    page = render()
    listed = re.findall(r"^\| `([A-Z0-9_]+)` \|", page, flags=re.MULTILINE)
    assert sorted(listed) == sorted(v.name for v in (*VARIABLES, *DEVELOPMENT))
    assert "## Development" in page
    assert page.index("CLARION_TEST_REDIS_URL") > page.index("## Development")


def test_a_row_gives_the_bounds_the_default_and_the_meaning() -> None:
    row = rows(render())["CLARION_IDEMPOTENCY_TTL"]
    assert "integer, 60 (1 minute) to 2592000 (30 days)" in row
    assert "`86400` (1 day)" in row
    assert BY_FIELD["idempotency_ttl_seconds"].description in row


def test_secrets_are_marked_and_have_no_default_shown() -> None:
    page = rows(render())
    for name in ("CLARION_API_KEYS", "CLARION_DIGEST_SECRET", "CLARION_INBOX_TOKEN_KEYS"):
        assert "never printed" in page[name]
        assert "| (none) |" in page[name]
    assert "never printed" not in page["CLARION_REDIS_URL"]


def test_defaults_of_variables_outside_the_settings_are_their_text() -> None:
    outside = Variable("OTEL_X", "X.", form="text", default="otlp")
    assert default_of(outside) == "`otlp`"
    assert default_of(Variable("OTEL_Y", "Y.", form="URL", default="(none)")) == "(none)"
    assert value_of(BY_FIELD["shards"]) == "integer, 1 to 1024"
    assert default_of(BY_FIELD["public_url"]) == "(none)"


def test_the_page_is_the_same_every_time() -> None:
    assert render() == render()
