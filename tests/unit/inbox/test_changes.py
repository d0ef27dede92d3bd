"""Inbox changes as published, and the cursors a realtime client resumes from."""

from __future__ import annotations

from streams.inbox.changes import Change, entry_order, format_cursor, parse_cursor, parse_published


def test_a_cursor_reads_back_and_anything_else_is_none() -> None:
    cursor = {0: "1700000000000-0", 1: "0-0", 2: "1700000000001-3"}
    text = format_cursor(cursor)
    assert text == "0:1700000000000-0,2:1700000000001-3"
    assert parse_cursor(text, 3) == cursor
    assert parse_cursor("", 2) == {0: "0-0", 1: "0-0"}
    for bad in (
        "5:1-0",
        "0:1",
        "x:1-0",
        "0:1-0,",
        "0:-1-0",
        "0:1-0" * 100,
        "0:1-18446744073709551616",
        "\xb2:1-0",  # "²": a digit to str.isdigit, not to int
        "0:\xb9-0",
        "0:1-\xb3",
    ):
        assert parse_cursor(bad, 3) is None, bad
    assert entry_order("1700-2") > entry_order("1700-1") > entry_order("0-0")


def test_a_payload_that_is_no_change_is_ignored() -> None:
    assert parse_published(b"no separators") is None
    payload = "\x1f".join(["u-1", "p:{s3}:inbox:u-1:feed", "5-0", "read", "m", "1", "2", "0 0 0 4"])
    assert parse_published(payload.encode()) == (
        "u-1", Change(3, "5-0", "read", "m", 1, 2, b"0 0 0 4"),
    )  # fmt: skip
    no_shard = payload.replace("{s3}", "{x}")
    assert parse_published(no_shard.encode()) is None
