"""Chaos runs print their summary tables at the end of the session, passed or failed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

REPORTS = pytest.StashKey[list[str]]()


@pytest.fixture
def chaos_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Keep a run's summary table for the end of the session."""

    def keep(table: str) -> None:
        request.config.stash.setdefault(REPORTS, []).append(table)

    return keep


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    for table in config.stash.get(REPORTS, []):
        terminalreporter.write_sep("=", "chaos run")
        terminalreporter.write_line(table)
