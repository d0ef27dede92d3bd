"""64 KiB strings shaped to make a backtracking pattern slow, and a clock that says whether
working on each stays linear: what the tests of patterns applied to untrusted text share."""

from __future__ import annotations

import time
from collections.abc import Callable

SIZE = 64 * 1024
# A linear pattern reads 64 KiB in about a millisecond, and a loop over its matches (tens of
# thousands of them for some shapes) in tens of milliseconds on a busy machine; a quadratic
# one takes seconds. The bound sits between the two, far from both.
BOUND_S = 0.25


def _repeat(unit: str, head: str = "", tail: str = "") -> str:
    return head + unit * ((SIZE - len(head) - len(tail)) // len(unit)) + tail


# Each a long run of what a pattern reads in a loop, without the delimiter it waits for, or
# the delimiter many times over, or two of them alternating.
SHAPES: dict[str, str] = {
    "letters": _repeat("a"),
    "letters then a space": _repeat("a", tail=" "),
    "at signs": _repeat("@"),
    "letter at sign": _repeat("a@"),
    "dots": _repeat("."),
    "letter dot": _repeat("a."),
    "an address of dots": _repeat(".", head="a@", tail="@"),
    "an address of labels": _repeat("a.", head="a@", tail=" "),
    "an address with a long local part": _repeat("a.", tail="@b"),
    "letters then an at sign": _repeat("a", tail="@"),
    "digits": _repeat("9"),
    "a plus then digits": _repeat("9", head="+1"),
    "plus digit": _repeat("+1"),
    "spaces": _repeat(" "),
    "tabs and newlines": _repeat("\t\n"),
    "letter space": _repeat("a "),
    "bearer and spaces": _repeat(" ", head="Bearer"),
    "bearers": _repeat("bearer "),
    "token characters": _repeat("A1_:-"),
    "token characters split by a space every 63": _repeat("a" * 63 + " "),
    "quotes": _repeat('"'),
    "quote letter": _repeat('"a'),
    "escaped quotes": _repeat('\\"'),
    "backslashes": _repeat("\\"),
    "backticks": _repeat("`"),
    "msgspec paths": _repeat(" - at `$"),
    "a path never closed": _repeat("x", head=" - at `$", tail="`x"),
    "clock-like": _repeat("12:"),
    "locale-like": _repeat("ab-"),
    "opening brackets": _repeat("["),
    "braces and colons": _repeat('{"a":'),
    "empty arrays": _repeat("[],"),
    "nested strings": _repeat('["a",'),
    "angle brackets": _repeat("<a@b.c>"),
    "non-ascii": _repeat("é@ü."),
}


def best_of_three(work: Callable[[], object]) -> float:
    """The shortest of three runs of ``work``, in seconds (the others may be preempted)."""
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        work()
        runs.append(time.perf_counter() - started)
    return min(runs)
