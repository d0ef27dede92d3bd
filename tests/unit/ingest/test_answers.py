"""The answer to each reply of the ingest script: accepted, or refused with the kind of
error the API answers, with a wait when a later try may be accepted."""

from __future__ import annotations

import pytest
import structlog

from app.ingest.answers import RETRY_S, answer_of, unavailable
from streams.core.errors import ClarionError, Conflict, Invalid, Unavailable
from streams.ingest.writer import IngestReply

BODY = b'{"id":"n-1","deliveries":[]}'


def test_an_accepted_notification_is_answered_with_its_body() -> None:
    answer = answer_of(BODY, IngestReply("OK"))
    assert (answer.accepted, answer.response, answer.replayed) == (True, BODY, False)


@pytest.mark.parametrize(
    ("reply", "kind", "wait"),
    [
        (IngestReply("DUP"), Conflict, RETRY_S),  # the first one expired meanwhile
        (IngestReply("BUSY"), Conflict, RETRY_S),
        (IngestReply("BROKEN", error="OOM command not allowed"), Unavailable, RETRY_S),
        (IngestReply("CONFLICT"), Invalid, None),  # the same request fails again
    ],
)
def test_a_refusal_has_its_kind_and_a_wait_when_trying_again_may_help(
    reply: IngestReply, kind: type[ClarionError], wait: int | None
) -> None:
    answer = answer_of(BODY, reply)
    assert not answer.accepted
    assert type(answer.error) is kind
    assert answer.error.retry_after_s == wait
    assert answer.response == b""


def test_a_key_of_the_wrong_type_is_logged_for_an_operator() -> None:
    with structlog.testing.capture_logs() as logs:
        answer = answer_of(BODY, IngestReply("BROKEN", error="WRONGTYPE Operation"))
    assert isinstance(answer.error, Unavailable)
    assert [line["event"] for line in logs] == ["ingest.key_broken"]


def test_redis_out_of_reach_is_unavailable_for_a_moment() -> None:
    error = unavailable().error
    assert isinstance(error, Unavailable)
    assert error.retry_after_s == RETRY_S
