"""The shared words in their three homes agree: the Python enums (``streams.core.vocabulary``), the
tables the Lua scripts decide by, as Redis runs them, and the read model's CHECK constraints,
as PostgreSQL's catalog holds them. Whichever drifts, this fails."""

from __future__ import annotations

import re
from enum import StrEnum

import asyncpg
from redis.asyncio import Redis

from streams.core import scripts
from streams.core.vocabulary import (
    ENDED_UNSENT,
    PROVIDER_ACCEPTED,
    TERMINAL,
    Channel,
    DeliveryStatus,
    Priority,
)
from tests.conftest import REPO

# (table, column) -> the enum whose values its CHECK constraint lists.
CHECKED: dict[tuple[str, str], type[StrEnum]] = {
    ("notification", "priority"): Priority,
    ("delivery", "status"): DeliveryStatus,
    ("delivery", "channel"): Channel,
    ("delivery", "priority"): Priority,
}
# How PostgreSQL shows ``column IN ('A', 'B')``: ``CHECK ((column = ANY (ARRAY['A'::text,
# 'B'::text])))``.
_LISTED = re.compile(r"^CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)$")
_VALUE = re.compile(r"'([^']*)'::text")

# Each of the scripts' tables: its keys, and for STATUS its values too, sorted.
_READ_TABLES = """
local function sorted(set, values)
  local found = {}
  for name, value in pairs(set) do found[#found + 1] = values and value or name end
  table.sort(found)
  return found
end
return { sorted(STATUS), sorted(STATUS, true), sorted(TERMINAL), sorted(PROVIDER_ACCEPTED),
  sorted(ENDED_UNSENT), WORK_STREAM_NAMES }
"""
# A status spelled out in a script, as a Lua string. Only a lease's verdicts and a dead
# letter's kind share words with the statuses (``CANCELLED``, ``FAILED``).
_QUOTED_STATUS = re.compile('"(' + "|".join(DeliveryStatus) + ')"')
_NOT_A_STATUS = re.compile(r"\b(verdict|kind)\b")


async def _checks(pool: asyncpg.Pool) -> dict[tuple[str, str], set[str]]:
    """The values each CHECK constraint on the partitioned tables lists, by its column."""
    async with pool.acquire() as connection:
        rows = await connection.fetch(
            "SELECT conrelid::regclass::text AS table_name, pg_get_constraintdef(oid) AS check "
            "FROM pg_constraint WHERE contype = 'c' "
            "AND conrelid IN ('notification'::regclass, 'delivery'::regclass)"
        )
    found: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        listed = _LISTED.match(row["check"])
        if listed is not None:
            found[(row["table_name"], listed.group(1))] = set(_VALUE.findall(listed.group(2)))
    return found


async def test_the_read_models_checks_list_the_enums_values(pool: asyncpg.Pool) -> None:
    """``pool``'s database is migrated as the projector's is."""
    expected = {where: {member.value for member in enum} for where, enum in CHECKED.items()}
    assert await _checks(pool) == expected


async def test_the_scripts_decide_by_the_enums_sets(real_redis: Redis) -> None:
    reply = await real_redis.eval(scripts.PRELUDE + "\n" + _READ_TABLES, 0)
    names, values, terminal, accepted, unsent = (
        {value.decode() for value in table} for table in reply[:5]
    )
    statuses = {member.value for member in DeliveryStatus}
    assert (names, values) == (statuses, statuses)
    assert (terminal, accepted, unsent) == (TERMINAL, PROVIDER_ACCEPTED, ENDED_UNSENT)
    # In the order the work streams are declared as keys.
    assert [name.decode() for name in reply[5]] == [p.stream_name for p in Priority]


def test_no_script_spells_out_a_status() -> None:
    spelled = []
    for entry in sorted((REPO / "streams").rglob("*.lua")):
        for number, line in enumerate(entry.read_text().splitlines(), 1):
            code = line.split("--", 1)[0]
            if _QUOTED_STATUS.search(code) and not _NOT_A_STATUS.search(code):
                spelled.append(f"{entry.relative_to(REPO)}:{number}: {line.strip()}")
    assert not spelled, f"use STATUS, TERMINAL, ... (streams.core.vocabulary): {spelled}"
