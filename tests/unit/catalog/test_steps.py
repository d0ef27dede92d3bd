"""Escalation steps and channel fallbacks in the catalog: a valid chain read into each
channel's plan, and every refused value named by its type, step (or fallback) and key, with
the words that say why."""

from __future__ import annotations

import pytest

from app.catalog import load_catalog, parse_catalog
from app.catalog.steps import CONDITIONS, MAX_AFTER_MS, PlannedStep, Step
from streams.core.vocabulary import Channel
from tests.conftest import REPO
from tests.unit.catalog.examples import VALID, catalog_error

# VALID configures SMS and EMAIL only: the inbox and PUSH are added for the chains here.
COMMENT = """
[providers.inbox]
kind = "inbox"

[channels.PUSH]
provider = "sandbox"

[channels.IN_APP]
provider = "inbox"

[types.comment]
channels = ["IN_APP", "PUSH", "EMAIL"]
priority = "NORMAL"
ttl_seconds = 7200
opt_out = true
{extra}

[types.comment.templates.en]
IN_APP = {{ title = "New comment", body = "{{{{ text }}}}" }}
PUSH = {{ title = "New comment", body = "{{{{ text }}}}" }}
EMAIL = {{ title = "New comment", body = "{{{{ text }}}}" }}
SMS = {{ body = "New comment: {{{{ text }}}}" }}

[types.comment.templates.de]
SMS = {{ body = "Neuer Kommentar: {{{{ text }}}}" }}
"""

CHAIN = (
    'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "15m", unless = "read" },'
    ' { channel = "EMAIL", after = "1h", unless = ["read", "delivered"] }]'
)


def with_comment(extra: str) -> str:
    return VALID + COMMENT.format(extra=extra)


def test_a_chain_is_read_into_each_channels_plan() -> None:
    catalog = parse_catalog(with_comment(CHAIN + '\nfallback = { PUSH = "SMS" }'))
    assert catalog.steps == {
        "comment": {
            Channel.IN_APP: PlannedStep(1, 0, ()),
            Channel.PUSH: PlannedStep(2, 15 * 60_000, ("read",)),
            Channel.EMAIL: PlannedStep(3, 3_600_000, ("read", "delivered")),
        }
    }
    config = catalog.types["comment"]
    assert config.fallback == {Channel.PUSH: Channel.SMS}
    assert config.steps is not None
    assert config.steps[1] == Step(Channel.PUSH, "15m", "read")
    # A type without steps has no plan: its channels go at once.
    assert "otp" not in catalog.steps
    assert catalog.types["otp"].steps is None
    assert catalog.types["otp"].fallback == {}


def test_a_chain_may_list_some_channels_and_delay_without_conditions() -> None:
    catalog = parse_catalog(
        with_comment('steps = [{ channel = "EMAIL", after = "30s" }, { channel = "PUSH" }]')
    )
    # Unlisted IN_APP goes at once; a step without unless may go before an earlier one.
    assert catalog.steps["comment"] == {
        Channel.EMAIL: PlannedStep(1, 30_000, ()),
        Channel.PUSH: PlannedStep(2, 0, ()),
    }


def test_conditions_are_kept_once_in_the_order_written() -> None:
    assert Step(Channel.EMAIL, "1h", ["delivered", "read", "delivered"]).conditions() == (
        "delivered",
        "read",
    )
    assert Step(Channel.EMAIL, "1h", "read").conditions() == ("read",)
    assert Step(Channel.EMAIL).conditions() == ()
    assert sorted(CONDITIONS) == ["delivered", "read"]


def test_a_step_may_wait_a_day_when_the_ttl_is_longer() -> None:
    extra = 'steps = [{ channel = "IN_APP" }, { channel = "EMAIL", after = "1d" }]'
    text = with_comment(extra).replace("ttl_seconds = 7200", "ttl_seconds = 172800")
    assert parse_catalog(text).steps["comment"][Channel.EMAIL].after_ms == MAX_AFTER_MS


STEP_ERRORS = [
    (
        'steps = [{ channel = "IN_APP" }, { channel = "SMS", after = "1m" }]',
        "types.comment.steps[1].channel: SMS is not one of the type's channels",
    ),
    (
        'steps = [{ channel = "FAX" }]',
        "types.comment.steps[0].channel: Invalid enum value 'FAX'",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "IN_APP", after = "1m" }]',
        "types.comment.steps[1].channel: IN_APP has a step already",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "15 m" }]',
        "types.comment.steps[1].after: '15 m' is no duration: write digits and a unit "
        "(s, m, h or d), e.g. '10m'",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "1w" }]',
        "types.comment.steps[1].after: '1w' is no duration: write digits and a unit "
        "(s, m, h or d), e.g. '10m'",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "0s" }]',
        "types.comment.steps[1].after: '0s' is outside 1s to 30d",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "1234567890123s" }]',
        "types.comment.steps[1].after: Expected `str` of length <= 12",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "2h" }]',
        "types.comment.steps[1].after: '2h' is not shorter than the type's ttl_seconds (7200):"
        " the step would always expire",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "25h" }]',
        "types.comment.steps[1].after: '25h' is longer than a day: the earlier steps' states "
        "it looks at are kept a day after they end",
    ),
    (
        'steps = [{ channel = "IN_APP", after = "1m", unless = "delivered" }]',
        "types.comment.steps[0].unless: the first step has no earlier step to look at",
    ),
    (
        'steps = [{ channel = "PUSH" }, { channel = "EMAIL", after = "1h", unless = "read" }]',
        "types.comment.steps[1].unless: 'read' needs an earlier IN_APP step: only inbox "
        "messages are read",
    ),
    (
        'steps = [{ channel = "PUSH" }, { channel = "IN_APP", after = "1m", unless = "read" }]',
        "types.comment.steps[1].unless: 'read' needs an earlier IN_APP step: only inbox "
        "messages are read",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "1m", unless = "opened" }]',
        "types.comment.steps[1].unless: Invalid enum value 'opened'",
    ),
    (
        'steps = [{ channel = "IN_APP" },'
        ' { channel = "PUSH", after = "1m", unless = ["read", "opened"] }]',
        "types.comment.steps[1].unless[1]: Invalid enum value 'opened'",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", unless = "read" }]',
        "types.comment.steps[1].after: it goes at once, not later than steps[0] (at once): "
        "a step with unless must go later than every earlier step, or its conditions could "
        "never hold",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "EMAIL", after = "1h" },'
        ' { channel = "PUSH", after = "15m", unless = "read" }]',
        "types.comment.steps[2].after: it goes after '15m', not later than steps[1] "
        "(after '1h'): a step with unless must go later than every earlier step, or its "
        "conditions could never hold",
    ),
    (
        'steps = [{ channel = "IN_APP" }, { channel = "PUSH", after = "1m", until = "read" }]',
        "types.comment.steps[1]: Object contains unknown field `until`",
    ),
    ("steps = []", "types.comment.steps: Expected `array` of length >= 1"),
]


@pytest.mark.parametrize(("extra", "message"), STEP_ERRORS)
def test_a_bad_step_names_its_type_step_and_key(extra: str, message: str) -> None:
    assert catalog_error(with_comment(extra)) == f"x.toml: {message}"


FALLBACK_ERRORS = [
    (
        'fallback = { SMS = "EMAIL" }',
        "types.comment.fallback.SMS: SMS is not one of the type's channels",
    ),
    (
        'fallback = { PUSH = "EMAIL" }',
        "types.comment.fallback.PUSH: EMAIL is one of the type's channels already",
    ),
    (
        'fallback = { PUSH = "PUSH" }',
        "types.comment.fallback.PUSH: PUSH cannot fall back to itself",
    ),
    # A fallback is no chain: SMS, once a fallback, is not the type's channel to fall back from.
    (
        'fallback = { PUSH = "SMS", SMS = "EMAIL" }',
        "types.comment.fallback.SMS: SMS is not one of the type's channels",
    ),
    ('fallback = { PUSH = "FAX" }', "types.comment.fallback[...]: Invalid enum value 'FAX'"),
]


@pytest.mark.parametrize(("extra", "message"), FALLBACK_ERRORS)
def test_a_bad_fallback_names_its_type_and_channel(extra: str, message: str) -> None:
    assert catalog_error(with_comment(extra)) == f"x.toml: {message}"


def test_a_fallback_needs_a_template_in_the_default_locale() -> None:
    # SMS then has a template in "de" only.
    text = with_comment('fallback = { PUSH = "SMS" }')
    text = text.replace('SMS = { body = "New comment: {{ text }}" }\n', "")
    assert catalog_error(text) == (
        "x.toml: types.comment.fallback.PUSH: SMS needs a template in the default locale"
    )


def test_a_fallback_to_an_unconfigured_channel_is_refused_at_its_template() -> None:
    text = with_comment('fallback = { PUSH = "WEBHOOK" }').replace(
        "[types.comment.templates.de]", "WEBHOOK = { body = '{}' }\n\n[types.comment.templates.de]"
    )
    assert catalog_error(text) == (
        "x.toml: types.comment.templates.en.WEBHOOK: channel WEBHOOK is not configured"
    )


def test_the_shipped_catalog_enables_no_steps_or_fallbacks() -> None:
    catalog = load_catalog(REPO / "clarion.toml")
    assert catalog.steps == {}
    assert all(config.fallback == {} for config in catalog.types.values())
