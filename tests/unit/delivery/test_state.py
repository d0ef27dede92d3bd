"""The delivery state machine's owner: statuses, their sets, the state hash's reader, and
that the Lua scripts decide by exactly the same sets."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.vocabulary import ErrorClass
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.state import (
    ENDED_UNSENT,
    PROVIDER_ACCEPTED,
    STATE_FIELDS,
    TERMINAL,
    DeliveryState,
    DeliveryStatus,
)
from tests.unit import delivery_examples

# Lists each of the scripts' status tables by its keys (STATUS: by its values too).
_SETS_OF_SHARED_LUA = """
local function keys_of(set)
  local found = {}
  for name, _ in pairs(set) do found[#found + 1] = name end
  table.sort(found)
  return found
end
local values = {}
for _, value in pairs(STATUS) do values[#values + 1] = value end
table.sort(values)
return { keys_of(STATUS), values, keys_of(TERMINAL), keys_of(PROVIDER_ACCEPTED),
  keys_of(ENDED_UNSENT) }
"""


def _texts(reply: list[bytes]) -> set[str]:
    return {value.decode() for value in reply}


async def test_the_lua_scripts_decide_by_the_same_statuses_and_sets(fake: Redis) -> None:
    source = scripts.PRELUDE + "\n" + _SETS_OF_SHARED_LUA
    names, values, terminal, accepted, unsent = await fake.eval(source, 0)

    statuses = {status.value for status in DeliveryStatus}
    assert _texts(names) == statuses
    assert _texts(values) == statuses  # STATUS.SENT == "SENT", and so on
    assert _texts(terminal) == TERMINAL
    assert _texts(accepted) == PROVIDER_ACCEPTED
    assert _texts(unsent) == ENDED_UNSENT


def test_the_sets_nest_as_the_state_machine_says() -> None:
    assert PROVIDER_ACCEPTED <= TERMINAL
    assert ENDED_UNSENT <= TERMINAL
    assert not PROVIDER_ACCEPTED & ENDED_UNSENT
    # FAILED is terminal, yet neither accepted nor ended unsent: only it may be replayed.
    assert {DeliveryStatus.FAILED} == TERMINAL - PROVIDER_ACCEPTED - ENDED_UNSENT
    assert not TERMINAL & {DeliveryStatus.QUEUED, DeliveryStatus.SCHEDULED}


def test_a_state_hash_is_read_as_its_fields() -> None:
    raw = {
        b"status": b"SCHEDULED",
        b"version": b"4",
        b"attempts": b"2",
        b"lease_owner": b"",
        b"lease_until": b"0",
        b"due_ms": b"1700000000000",
        b"error_class": b"TRANSIENT",
        b"last_error": b"timeout",
    }
    state = DeliveryState.from_hash(raw)
    assert state is not None
    assert state.status is DeliveryStatus.SCHEDULED
    assert (state.version, state.attempts, state.due_ms) == (4, 2, 1_700_000_000_000)
    assert (state.error_class, state.last_error, state.provider) == ("TRANSIENT", "timeout", "")
    assert not state.ended


def test_an_absent_hash_means_as_accepted() -> None:
    assert DeliveryState.from_hash({}) is None


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="READING"):
        DeliveryState.from_hash({b"status": b"READING", b"version": b"1"})


def test_every_field_an_outcome_writes_is_a_field_of_the_state() -> None:
    leased, now = delivery_examples.leased(), 6_000
    outcomes = [
        delivery_outcomes.sent(leased, "sandbox", "m", now),
        delivery_outcomes.expired(leased, now),
        delivery_outcomes.cancelled(leased, now),
        delivery_outcomes.deferred(leased, now + 1_000, now),
        delivery_outcomes.retry_later(leased, ErrorClass.TRANSIENT, "down", now + 1_000, now),
        delivery_outcomes.failed(leased, ErrorClass.PERMANENT, "no", now, attempts=2),
    ]
    for outcome in outcomes:
        assert set(outcome.fields) <= STATE_FIELDS, outcome.fields
        state = DeliveryState.from_hash(
            {name: str(value) for name, value in outcome.fields.items()}
        )
        assert state is not None
        assert state.status == outcome.status
        assert state.version == 2 + len(_events(outcome.events))


def _events(encoded: bytes) -> list[object]:
    return list(codec.decode_events(encoded)) if encoded else []
