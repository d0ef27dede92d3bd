"""The server-rendered pages' own formatting."""

from __future__ import annotations

from app.api.html_pages import duration


def test_durations_read_briefly() -> None:
    assert [duration(s) for s in (0, 45, 192, 7500, 277_200)] == [
        "0 s", "45 s", "3 min 12 s", "2 h 5 min", "3 d 5 h",
    ]  # fmt: skip
