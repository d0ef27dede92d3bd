"""The configuration reference for the docs site, from the declarations of
``app.setting_variables`` (and the development variables below): each variable with its
value's form and bounds, its default (from ``app.settings.Settings``) and its meaning.
"""

from __future__ import annotations

from app.setting_variables import VARIABLES, Variable
from app.settings import Settings

# What the tests and ``make`` read, never the service.
DEVELOPMENT: tuple[Variable, ...] = (
    Variable(
        "CLARION_TEST_REDIS_URL",
        "The Redis the tests use (a Redis Cluster as `redis+cluster://host:port,...` runs the "
        "suites on a cluster). `make test` starts a private one when none answers.",
        form="URL", default="redis://127.0.0.1:6379/0",
    ),
    Variable(
        "CLARION_TEST_DATABASE_URL",
        "The PostgreSQL the tests use; they create and drop databases of their own in it. "
        "`make test` starts a private one when none answers.",
        form="URL", default="postgresql://postgres@127.0.0.1:5432/postgres",
    ),
)  # fmt: skip

_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"))
_SIZES = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def _plain(number: int, variable: Variable) -> str:
    """A number as written, with its size or duration in words when that is clearer."""
    if variable.field.endswith("_bytes"):
        for size, unit in _SIZES:
            if number >= size and number % size == 0:
                return f"{number} ({number // size} {unit})"
    if variable.field.endswith("_seconds"):
        for length, unit in _UNITS:
            if number >= length and number % length == 0:
                count = number // length
                return f"{number} ({count} {unit}{'s' if count > 1 else ''})"
    return str(number)


def default_of(variable: Variable) -> str:
    """The default as the reference shows it; "(none)" for an empty one."""
    if not variable.field:
        default = variable.default
        return default if default.startswith("(") else f"`{default}`"
    value = getattr(Settings(), variable.field)
    if isinstance(value, int):
        number, _, words = _plain(value, variable).partition(" ")
        return f"`{number}` {words}".rstrip()
    return f"`{value}`" if value else "(none)"


def value_of(variable: Variable) -> str:
    """The form of the value, with the bounds of a whole number."""
    if variable.low is not None and variable.high is not None:
        return f"integer, {_plain(variable.low, variable)} to {_plain(variable.high, variable)}"
    return variable.form


def meaning_of(variable: Variable) -> str:
    secret = " **Secret:** never printed or logged." if variable.secret else ""
    return variable.description.replace("|", "\\|") + secret


def table(variables: tuple[Variable, ...]) -> list[str]:
    lines = ["| variable | value | default | meaning |", "| --- | --- | --- | --- |"]
    for v in variables:
        lines.append(f"| `{v.name}` | {value_of(v)} | {default_of(v)} | {meaning_of(v)} |")
    return [*lines, ""]


_INTRO = """\
# Configuration

Clarion reads its settings from environment variables; an unset one keeps its default. A bad
value stops start-up with a message naming the variable. The catalog of providers, channels
and types is a file of its own (`CLARION_CONFIG`, see [the catalog](catalog.md)).

These tables are generated from the declarations in `app/setting_variables.py`.
"""

_DEVELOPMENT = """\
## Development

Only the tests and the `Makefile` read these; the service never does.
"""


def render(
    variables: tuple[Variable, ...] = VARIABLES, development: tuple[Variable, ...] = DEVELOPMENT
) -> str:
    """The configuration page: a table per section, then the development variables."""
    out = [_INTRO]
    sections: dict[str, list[Variable]] = {}
    for variable in variables:
        sections.setdefault(variable.section, []).append(variable)
    for title, members in sections.items():
        out += [f"## {title}", "", *table(tuple(members))]
    out += [_DEVELOPMENT, *table(development)]
    return "\n".join(out).rstrip() + "\n"
