"""A recipient's message log on real PostgreSQL: every producer's deliveries to one recipient,
newest change first, paged by keyset, filtered, error texts bounded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import msgspec

from projections.recipient_log import (
    MAX_ERROR_TEXT,
    LoggedDelivery,
    RecipientFilter,
    _query,
    recipient_deliveries,
)
from streams.core.events import DeliveryCancelled, DeliveryDeferred, ProviderFeedbackReceived
from streams.core.ids import new_id
from streams.core.vocabulary import Channel, DeliveryStatus
from tests.integration.projection_support import accepted, delivered, project

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def sent_to(
    pool: asyncpg.Pool, recipient: str, producer: str, status: str, minute: int, **more: str
) -> str:
    """One notification of ``producer`` to ``recipient``, its delivery in ``status``, at
    ``minute`` past T0; the delivery id."""
    notification_id, delivery_id = new_id(0), new_id(0)
    at = T0 + timedelta(minutes=minute)
    notification = msgspec.structs.replace(
        accepted(notification_id, [delivery_id], at=at, producer=producer, **more),
        recipient_id=recipient,
    )
    await project(pool, [notification, *delivered(notification_id, delivery_id, status, at=at)])
    return delivery_id


async def page(pool: asyncpg.Pool, **selection: object) -> tuple[list[LoggedDelivery], bool]:
    return await recipient_deliveries(pool, RecipientFilter(recipient_id="anna", **selection))  # type: ignore[arg-type]


async def test_every_producers_deliveries_newest_first_paged_by_keyset(
    pool: asyncpg.Pool,
) -> None:
    first = await sent_to(pool, "anna", "shop", "SENT", 1)
    second = await sent_to(pool, "anna", "auth", "FAILED", 2, notification_type="login")
    third = await sent_to(pool, "anna", "shop", "SUPPRESSED", 3)
    await sent_to(pool, "bert", "shop", "SENT", 4)

    rows, more = await page(pool)
    assert [row.id for row in rows] == [third, second, first]
    assert not more
    assert [(row.producer, row.notification_type) for row in rows] == [
        ("shop", "otp"), ("auth", "login"), ("shop", "otp")
    ]  # fmt: skip
    failed = rows[1]
    assert (failed.status, failed.error_class, failed.last_error) == (
        DeliveryStatus.FAILED, "PERMANENT", "refused: PERMANENT"
    )  # fmt: skip
    assert rows[2].provider_message_id == "m"
    assert rows[0].reason == "opted_out"
    assert failed.created_at == T0 + timedelta(minutes=2)

    head, more = await page(pool, limit=2)
    assert [row.id for row in head] == [third, second]
    assert more
    tail, more = await page(pool, limit=2, after=(head[-1].updated_at, head[-1].id))
    assert [row.id for row in tail] == [first]
    assert not more


async def test_filters_narrow_the_log(pool: asyncpg.Pool) -> None:
    sms = await sent_to(pool, "anna", "shop", "SENT", 1)
    login = await sent_to(pool, "anna", "auth", "FAILED", 2, notification_type="login")

    async def ids(**selection: object) -> list[str]:
        return [row.id for row in (await page(pool, **selection))[0]]

    assert await ids(status=DeliveryStatus.FAILED) == [login]
    assert await ids(notification_type="otp") == [sms]
    assert await ids(channel=Channel.SMS) == [login, sms]
    assert await ids(channel=Channel.EMAIL) == []
    assert await ids(since=T0 + timedelta(minutes=2)) == [login]
    assert await ids(until=T0 + timedelta(minutes=2)) == [sms]
    assert await recipient_deliveries(pool, RecipientFilter(recipient_id="nobody")) == ([], False)


async def test_a_long_error_text_is_cut(pool: asyncpg.Pool) -> None:
    delivery_id = await sent_to(pool, "anna", "shop", "SENT", 1)
    [row], _ = await page(pool)
    bounce = ProviderFeedbackReceived(
        at=T0 + timedelta(minutes=2), notification_id=row.notification_id,
        delivery_id=delivery_id, version=3, feedback="bounced", provider="sandbox",
        status="FAILED", detail="x" * 2000,
    )  # fmt: skip
    await project(pool, [bounce])
    [row], _ = await page(pool)
    assert row.status == DeliveryStatus.FAILED
    assert row.reason == "bounced"
    assert row.last_error is not None
    assert len(row.last_error) == MAX_ERROR_TEXT
    assert row.last_error.startswith("bounced: xxx")


async def test_why_a_delivery_did_not_go_is_its_reason(pool: asyncpg.Pool) -> None:
    """A throttled delivery's deferral, a cancelled campaign's canceller, a suppression."""
    notification_id, throttled, cancelled = new_id(0), new_id(0), new_id(0)
    at = T0 + timedelta(minutes=1)
    ids = {"at": at, "notification_id": notification_id}
    await project(pool, [
        msgspec.structs.replace(accepted(notification_id, [throttled, cancelled], at=at),
                                recipient_id="anna"),
        DeliveryDeferred(**ids, delivery_id=throttled, version=1, channel="SMS",
                         reason="rate_limited", until=at + timedelta(seconds=5)),
        DeliveryCancelled(**ids, delivery_id=cancelled, version=1, channel="EMAIL",
                          campaign_id="c-9", cancelled_by="shop"),
    ])  # fmt: skip
    rows, _ = await page(pool)
    assert {(row.id, row.status, row.reason) for row in rows} == {
        (throttled, DeliveryStatus.SCHEDULED, "rate_limited"),
        (cancelled, DeliveryStatus.CANCELLED, "campaign c-9 cancelled by shop"),
    }


def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` and every node under it in an EXPLAIN plan."""
    found = [node]
    for child in node.get("Plans", []):
        found += walk(child)
    return found


async def test_a_page_reads_only_the_recipients_rows_through_its_index(
    pool: asyncpg.Pool,
) -> None:
    """20,000 deliveries to 400 recipients: a page of one reads its rows by index, not the
    table, and stops once the page is full."""
    await pool.execute(
        "INSERT INTO delivery (id, notification_id, producer, notification_type, channel,"
        " status, updated_at, version, recipient_id)"
        " SELECT gen_random_uuid(), gen_random_uuid(), 'shop', 'otp', 'SMS', 'SENT',"
        " now() - n * interval '1 second', 2, 'r-' || (n % 400)"
        " FROM generate_series(1, 20000) AS n"
    )
    await pool.execute("ANALYZE delivery")
    sql, args = _query(RecipientFilter(recipient_id="r-7", limit=10))
    plan = json.loads(await pool.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args))
    scans = [n for n in walk(plan[0]["Plan"]) if n.get("Relation Name", "").startswith("delivery")]
    reading = [n for n in scans if n["Actual Rows"]]
    assert reading, scans
    assert all(n["Node Type"] in {"Index Scan", "Index Only Scan"} for n in reading), reading
    assert all("recipient_id" in n["Index Cond"] for n in reading), reading
    # A page and the row that says more follow, and at most one more from each partition the
    # merge looked into: not the recipient's 50 rows, nor anyone else's.
    assert sum(int(n["Actual Rows"]) for n in scans) <= 11 + len(scans) < 50
    rows, more = await recipient_deliveries(pool, RecipientFilter(recipient_id="r-7", limit=10))
    assert len(rows) == 10
    assert more
