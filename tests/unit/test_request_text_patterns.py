"""Every regular expression applied to what a request carries runs in time linear in it: on
64 KiB of any adversarial shape it takes under a quarter of a second (best of three runs),
where one that backtracks takes seconds. ``mask()``, which logs and error texts pass
through, is tested the same way in test_logging.py.

A new pattern in ``app`` or ``streams`` fails the last test until it is added here, either
to the patterns tested or to those never applied to request text."""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from app import signed_tokens
from app.api import body
from app.feedback import callbacks
from app.inbox import provider as inbox
from app.inbox import tokens as inbox_tokens
from app.ingest import profiles, quiet_hours, requests
from app.ingest.quiet_hours import QuietHoursError
from app.providers import apns, smtp_answers, smtp_message, ssrf, webpush, webpush_message
from app.validation import describe
from streams.core.events import QuietHoursSetting
from tests.conftest import REPO
from tests.unit.adversarial_text import BOUND_S, SHAPES, best_of_three

# The constrained strings of a notification request, checked by msgspec (max_length first).
REQUEST_STRINGS = (
    "RecipientId", "Email", "Phone", "PushToken", "WebhookUrl", "Locale", "ApnsToken",
    "PushEndpoint", "PushKey", "CancellationKey",
)  # fmt: skip


def refused_or_decoded(decoder: msgspec.json.Decoder[Any], raw: bytes) -> None:
    with contextlib.suppress(msgspec.ValidationError):
        decoder.decode(raw)


def quiet_hours_check(start: str = "22:00", end: str = "08:00", timezone: str = "UTC") -> None:
    with contextlib.suppress(QuietHoursError):
        quiet_hours.check(QuietHoursSetting(start=start, end=end, timezone=timezone))


def runs_of(raw: bytes) -> int:
    return sum(1 for _ in body._RUNS.finditer(raw))


def applications(text: str) -> Iterator[tuple[str, Callable[[], object]]]:
    """Each pattern applied to ``text`` the way the code applies it to a request."""
    raw = msgspec.json.encode(text)
    for name in REQUEST_STRINGS:
        decoder = msgspec.json.Decoder(getattr(requests, name))
        yield f"requests.{name}", functools.partial(refused_or_decoded, decoder, raw)
    # A recipient profile's attribute names.
    decoder = msgspec.json.Decoder(profiles.AttributeName)
    yield "profiles.AttributeName", functools.partial(refused_or_decoded, decoder, raw)
    yield "quiet_hours._CLOCK (start)", lambda: quiet_hours_check(start=text)
    yield "quiet_hours._CLOCK (end)", lambda: quiet_hours_check(end=text)
    yield "quiet_hours timezone", lambda: quiet_hours_check(timezone=text)
    # msgspec's messages quote what the request held, e.g. an unknown field's name.
    error = msgspec.ValidationError(f"Object contains unknown field `{text}` - at `$.data`")
    yield "validation._PATH", lambda: describe(error)
    yield "validation._PATH (no path)", lambda: describe(msgspec.ValidationError(text))
    # Addresses and texts an SMTP relay answers with; webhook URLs and their hosts.
    yield "smtp_message._LOCAL_PART", lambda: smtp_message._LOCAL_PART.fullmatch(text)
    yield "smtp_message._DOMAIN", lambda: smtp_message._DOMAIN.fullmatch(text)
    yield "smtp_message._NOT_ATEXT", lambda: smtp_message._NOT_ATEXT.sub("-", text)
    yield "smtp_message._LINE_BREAKS", lambda: smtp_message._LINE_BREAKS.sub(" ", text)
    yield "smtp_message._LEADING_DOT", lambda: smtp_message._LEADING_DOT.sub(b"..", text.encode())
    yield "smtp_answers._ENHANCED", lambda: smtp_answers._ENHANCED.match(text)
    yield "ssrf._URL_CHARACTERS", lambda: ssrf._URL_CHARACTERS.fullmatch(text)
    yield "ssrf._HOST_NAME", lambda: ssrf._HOST_NAME.fullmatch(text)
    yield "ssrf._NUMERIC_LABEL", lambda: ssrf._NUMERIC_LABEL.fullmatch(text)
    # A push template's collapse key and link (filled from request data); a push service's
    # reason code.
    yield "webpush_message._TOPIC", lambda: webpush_message._TOPIC.fullmatch(text)
    # An APNs device token (from the address), a delivery id, APNs's reason code.
    yield "apns._DEVICE_TOKEN", lambda: apns._DEVICE_TOKEN.fullmatch(text)
    yield "apns._UUID", lambda: apns._UUID.fullmatch(text)
    yield "apns._REASON", lambda: apns._REASON.fullmatch(text)
    yield "webpush_message._ABSOLUTE_LINK", lambda: webpush_message._ABSOLUTE_LINK.match(text)
    yield "webpush._REASON_CODE", lambda: webpush._REASON_CODE.fullmatch(text)
    # A signed token: an unsubscribe link's path, a recipient token (its length is checked
    # first: this is a bound).
    yield "signed_tokens._BASE64URL", lambda: signed_tokens._BASE64URL.fullmatch(text)
    yield "inbox_tokens.KEY_ID", lambda: inbox_tokens.KEY_ID.fullmatch(text)
    # A Standard Webhooks callback's webhook-id header; an IN_APP link filled from data.
    yield "callbacks._VISIBLE", lambda: callbacks._VISIBLE.fullmatch(text.encode())
    yield "inbox._UNSAFE_CHARACTER", lambda: inbox._UNSAFE_CHARACTER.search(text)
    yield "inbox._SCHEME", lambda: inbox._SCHEME.fullmatch(text)
    # A body the cut reads starts with a bracket.
    encoded = text.encode()
    yield "body._RUNS", lambda: runs_of(b"[" + encoded)
    yield "body._RUNS (in a string)", lambda: runs_of(b'["' + encoded)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_pattern_takes_linear_time_on_64_kib_of_any_shape(shape: str) -> None:
    slow = {
        pattern: f"{seconds * 1000:.0f} ms"
        for pattern, work in applications(SHAPES[shape])
        if (seconds := best_of_three(work)) >= BOUND_S
    }
    assert not slow


def test_the_email_pattern_is_linear_even_past_its_length_limit() -> None:
    # max_length (254) bounds what msgspec hands the pattern, but the pattern itself must not
    # lean on it: 1000 batch items of 254 dots each took 0.7 s with the obvious pattern.
    info = msgspec.inspect.type_info(requests.Email)
    assert isinstance(info, msgspec.inspect.StrType)
    assert info.pattern is not None
    pattern = re.compile(info.pattern)
    for shape in ("an address of dots", "an address of labels", "letters then an at sign"):
        assert best_of_three(functools.partial(pattern.search, SHAPES[shape])) < BOUND_S


# Patterns never applied to request text: settings, the catalog, table and file names.
NOT_REQUEST_TEXT = {
    "app.catalog.Name",
    "app.catalog.channels.Name",
    "app.catalog.ProducerName",
    "app.catalog.quotas.ProducerName",
    "app.catalog.Label",
    # Catalog templates; linear all the same (test_catalog_templates.py).
    "app.catalog.templates._OLD_STYLE",
    "app.catalog.templates._OLD_STYLE_HTML",
    # A digest's key template, from the catalog: one field of the data or not.
    "app.catalog.digests._ONE_FIELD",
    "app.catalog.providers.EnvName",
    "app.catalog.providers.BaseUrl",
    "app.catalog.push.ProjectId",
    "app.catalog.push.EnvName",
    "app.catalog.push.AppleId",
    "app.catalog.push.HttpsUrl",
    # The service account's token_uri, read from a secret at start-up.
    "app.catalog.push._TOKEN_URI",
    "app.settings._PRODUCER",
    "app.setting_values._PREFIX",
    "app.setting_values._URL_CHARACTERS",
    "app.setting_values._ORIGIN",
    "app.catalog.providers.LinkScheme",
    "projections.database._MIGRATION_FILE",
}
TESTED = {
    *(f"app.ingest.requests.{name}" for name in REQUEST_STRINGS),
    "app.ingest.profiles.AttributeName",
    "app.ingest.quiet_hours._CLOCK",
    "app.validation._PATH",
    "app.api.body._RUNS",
    "app.signed_tokens._BASE64URL",
    "app.inbox.tokens.KEY_ID",
    "app.feedback.callbacks._VISIBLE",
    "app.inbox.provider._UNSAFE_CHARACTER",
    "app.inbox.provider._SCHEME",
    # test_logging.py
    "app.logging._EMAIL",
    "app.logging._PHONE",
    "app.logging._BEARER",
    "app.logging._TOKEN",
    *(f"app.providers.smtp_message.{name}" for name in (
        "_LOCAL_PART", "_DOMAIN", "_NOT_ATEXT", "_LINE_BREAKS", "_LEADING_DOT",
    )),
    "app.providers.smtp_answers._ENHANCED",
    *(f"app.providers.ssrf.{name}" for name in ("_URL_CHARACTERS", "_HOST_NAME", "_NUMERIC_LABEL")),
    *(f"app.providers.webpush_message.{name}" for name in ("_TOPIC", "_ABSOLUTE_LINK")),
    "app.providers.webpush._REASON_CODE",
    *(f"app.providers.apns.{name}" for name in ("_DEVICE_TOKEN", "_UUID", "_REASON")),
}  # fmt: skip


def module_patterns() -> Iterator[str]:
    """Every module-level compiled pattern and pattern-constrained string type."""
    for package in ("app", "streams", "projections"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "__main__.py":  # runs the command line when imported
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            module = importlib.import_module(".".join(p for p in parts if p != "__init__"))
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern) or _has_pattern(value):
                    yield f"{module.__name__}.{name}"


def _has_pattern(value: object) -> bool:
    if getattr(value, "__metadata__", None) is None:  # not an Annotated type
        return False
    info = msgspec.inspect.type_info(value)
    return isinstance(info, msgspec.inspect.StrType) and info.pattern is not None


def test_every_pattern_in_the_code_is_known_here() -> None:
    found = set(module_patterns())
    assert found - TESTED - NOT_REQUEST_TEXT == set(), "new: test it here or list it as not"
    assert (TESTED | NOT_REQUEST_TEXT) - found == set(), "gone: remove it here"
