"""The sandbox provider's directives, on fakeredis: failures, latency and malformed input."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis.asyncio import Redis

from app.providers.base import Message, ProviderError
from app.providers.sandbox import Directives, SandboxProvider, parse_directives
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel, ErrorClass

ADDRESS = "+15550100"


def message(
    channel: Channel = "SMS",
    attempt: int = 1,
    directives: Any = None,
    *,
    key: str = "idem-1",
    data: dict[str, Any] | None = None,
) -> Message:
    if data is None:
        data = {} if directives is None else {"sandbox": {channel: directives}}
    return Message(
        delivery_id=f"dlv-{key}",
        idempotency_key=key,
        channel=channel,
        address=ADDRESS,
        title="t",
        body="b",
        attempt=attempt,
        data=data,
    )


@pytest.fixture
def keys(key_prefix: str) -> KeySpace:
    return KeySpace(key_prefix)


@pytest.fixture
def sandbox(fake: Redis, keys: KeySpace) -> SandboxProvider:
    return SandboxProvider(fake, keys)


async def recorded(redis: Redis, keys: KeySpace) -> list[dict[str, str]]:
    entries = await redis.xrange(keys.sandbox_sent)
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


async def failure(sandbox: SandboxProvider, msg: Message) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await sandbox.send(msg)
    assert ADDRESS not in str(caught.value)  # privacy: the address is never in an error
    return caught.value


def test_no_directives_is_a_plain_send() -> None:
    assert parse_directives(message()) == Directives()
    assert parse_directives(message(data={"sandbox": {"EMAIL": {"raise_bug": True}}})) == (
        Directives()
    )


async def test_a_plain_send_is_recorded(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    assert sandbox.name == "sandbox"
    message_id = await sandbox.send(message())
    assert message_id.startswith("sandbox-")
    assert await recorded(fake, keys) == [
        {
            "delivery_id": "dlv-idem-1",
            "idempotency_key": "idem-1",
            "channel": "SMS",
            "address": ADDRESS,
            "attempt": "1",
            "outcome": "sent",
            "duplicate": "0",
            "message_id": message_id,
        }
    ]


async def test_fail_transient_fails_the_first_attempts_then_sends(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    for attempt in (1, 2):
        error = await failure(sandbox, message(attempt=attempt, directives={"fail_transient": 2}))
        assert error.error_class is ErrorClass.TRANSIENT
        assert error.message.startswith("sandbox: transient failure")
        assert error.retry_after is None
    message_id = await sandbox.send(message(attempt=3, directives={"fail_transient": 2}))
    assert message_id.startswith("sandbox-")
    entries = await recorded(fake, keys)
    assert [(e["attempt"], e["outcome"], e["duplicate"]) for e in entries] == [
        ("1", "transient", "0"),
        ("2", "transient", "0"),
        ("3", "sent", "0"),
    ]
    assert "message_id" not in entries[0]


async def test_rate_limited_carries_retry_after(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    error = await failure(sandbox, message("PUSH", directives={"rate_limited": 1}))
    assert error.error_class is ErrorClass.TRANSIENT
    assert error.message == "sandbox: 429 too many requests"
    assert error.retry_after == 1.0
    assert await sandbox.send(message("PUSH", attempt=2, directives={"rate_limited": 1}))
    assert [e["outcome"] for e in await recorded(fake, keys)] == ["rate_limited", "sent"]


async def test_fail_permanent_fails_every_attempt_with_its_reason(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    directives = {"fail_permanent": "mailbox does not exist"}
    for attempt in (1, 5):
        error = await failure(sandbox, message("EMAIL", attempt, directives))
        assert error.error_class is ErrorClass.PERMANENT
        assert error.message == "mailbox does not exist"
        assert not error.invalid_address
    assert [e["outcome"] for e in await recorded(fake, keys)] == ["permanent", "permanent"]


async def test_invalid_token_marks_the_address_invalid(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    error = await failure(sandbox, message("PUSH", 3, {"invalid_token": True}))
    assert error.error_class is ErrorClass.PERMANENT
    assert error.message == "sandbox: push token is invalid"
    assert error.invalid_address
    assert [e["outcome"] for e in await recorded(fake, keys)] == ["permanent"]


async def test_raise_bug_raises_an_unexpected_exception_after_recording_it(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    with pytest.raises(Exception, match="simulated bug") as caught:
        await sandbox.send(message("IN_APP", directives={"raise_bug": True}))
    assert not isinstance(caught.value, ProviderError)
    assert [e["outcome"] for e in await recorded(fake, keys)] == ["bug"]


async def test_false_flags_and_zero_counts_send(sandbox: SandboxProvider) -> None:
    directives = {"raise_bug": False, "invalid_token": False, "fail_transient": 0}
    assert await sandbox.send(message(directives=directives))


async def test_the_checks_run_in_the_documented_order(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace
) -> None:
    everything: dict[str, Any] = {
        "raise_bug": True,
        "fail_permanent": "gone",
        "invalid_token": True,
        "rate_limited": 1,
        "fail_transient": 1,
    }
    with pytest.raises(RuntimeError):
        await sandbox.send(message(directives=everything))
    del everything["raise_bug"]
    assert (await failure(sandbox, message(directives=everything))).message == "gone"
    del everything["fail_permanent"]
    assert (await failure(sandbox, message(directives=everything))).invalid_address
    del everything["invalid_token"]
    assert (await failure(sandbox, message(directives=everything))).retry_after == 1.0
    del everything["rate_limited"]
    error = await failure(sandbox, message(directives=everything))
    assert error.message.startswith("sandbox: transient failure")
    outcomes = [e["outcome"] for e in await recorded(fake, keys)]
    assert outcomes == ["bug", "permanent", "permanent", "rate_limited", "transient"]


async def test_latency_delays_the_answer(sandbox: SandboxProvider) -> None:
    started = time.monotonic()
    await sandbox.send(message(directives={"latency_ms": 60}))
    assert time.monotonic() - started >= 0.060
    started = time.monotonic()
    with pytest.raises(ProviderError):
        await sandbox.send(message(directives={"latency_ms": 60, "fail_permanent": "no"}))
    assert time.monotonic() - started >= 0.060


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"sandbox": {"SMS": {"fail_transient": "2"}}}, "fail_transient must be a whole number"),
        ({"sandbox": {"SMS": {"fail_transient": -1}}}, "fail_transient must be a whole number"),
        ({"sandbox": {"SMS": {"fail_transient": 1.5}}}, "fail_transient must be a whole number"),
        ({"sandbox": {"SMS": {"rate_limited": True}}}, "rate_limited must be a whole number"),
        ({"sandbox": {"SMS": {"latency_ms": "fast"}}}, "latency_ms must be a number"),
        ({"sandbox": {"SMS": {"latency_ms": -5}}}, "latency_ms must be a number"),
        ({"sandbox": {"SMS": {"latency_ms": float("nan")}}}, "latency_ms must be a number"),
        ({"sandbox": {"SMS": {"fail_permanent": 3}}}, "fail_permanent must be a non-empty"),
        ({"sandbox": {"SMS": {"fail_permanent": ""}}}, "fail_permanent must be a non-empty"),
        ({"sandbox": {"SMS": {"invalid_token": "yes"}}}, "invalid_token must be true or false"),
        ({"sandbox": {"SMS": {"raise_bug": 1}}}, "raise_bug must be true or false"),
        ({"sandbox": {"SMS": {"fail_transiant": 2}}}, "unknown sandbox directive 'fail_transiant'"),
        ({"sandbox": {"SMS": [1, 2]}}, "sandbox directives for SMS must be a mapping"),
        ({"sandbox": "fail"}, "sandbox directives must be a mapping"),
    ],
)
async def test_a_malformed_directive_fails_permanently_naming_it(
    sandbox: SandboxProvider, fake: Redis, keys: KeySpace, data: dict[str, Any], named: str
) -> None:
    error = await failure(sandbox, message(data=data))
    assert error.error_class is ErrorClass.PERMANENT
    assert named in error.message
    [entry] = await recorded(fake, keys)
    assert entry["outcome"] == "permanent"


def test_a_whole_float_count_is_accepted() -> None:
    assert parse_directives(message(directives={"fail_transient": 2.0})).fail_transient == 2
