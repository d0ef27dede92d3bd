"""The error hierarchy: every kind is a ``ClarionError`` of its own, an error is of at most
one kind, and a domain error named after what went wrong is of the kind it means."""

from __future__ import annotations

import pytest

from app.feedback.requests import too_large
from app.ingest.fanout import FanoutError, NotAllowed
from app.signed_tokens import TokenRefused
from streams.core import errors
from streams.core.errors import KINDS, ClarionError, kind_of
from streams.inbox.revocation import TokensRevoked
from streams.inbox.store import InboxBusy


def test_each_kind_is_a_clarion_error_and_none_is_another() -> None:
    assert all(issubclass(kind, ClarionError) for kind in KINDS)
    assert len(set(KINDS)) == len(KINDS)
    for kind in KINDS:
        assert [other for other in KINDS if issubclass(kind, other)] == [kind]


def test_an_error_says_what_is_wrong_and_how_long_to_wait() -> None:
    error = errors.RateLimited("producer 'orders' is over its quota", retry_after_s=3)
    assert (str(error), error.detail, error.retry_after_s) == (
        "producer 'orders' is over its quota", "producer 'orders' is over its quota", 3,
    )  # fmt: skip
    assert errors.Conflict("x").retry_after_s is None


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (FanoutError("type: unknown"), errors.Invalid),
        (NotAllowed("type: not yours"), errors.Forbidden),
        (TokenRefused("expired", "recipient token"), errors.Unauthenticated),
        (TokensRevoked(), errors.Unauthenticated),
        (InboxBusy("message: changing"), errors.Conflict),
        (too_large(10), errors.TooLarge),
    ],
)
def test_a_domain_error_is_of_the_kind_it_means(error: ClarionError, kind: type) -> None:
    assert kind_of(error) is kind


def test_an_error_of_no_kind_is_a_fault_of_the_server() -> None:
    assert kind_of(ClarionError("the pool is closed")) is None
