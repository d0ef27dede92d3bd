"""The declarations of the environment variables: every ``CLARION_*`` variable the code names
is declared, with a meaning, and every setting is set by exactly one variable."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from app.setting_variables import BY_FIELD, VARIABLES
from app.settings import Settings
from devtools.config_reference import DEVELOPMENT
from tests.conftest import REPO

# The code that runs: the service, the Python client and the development tools.
SOURCES = ("app", "streams", "projections", "client", "devtools")
NAME = re.compile(r"\bCLARION_[A-Z0-9_]*[A-Z0-9]")


def named_in(path: Path) -> set[str]:
    """The ``CLARION_*`` names in the string literals of ``path`` (messages and docstrings
    included: a name a message gives a user must be one the reference explains)."""
    return {
        name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for name in NAME.findall(node.value)
    }


def test_every_variable_the_code_names_is_declared() -> None:
    declared = {v.name for v in (*VARIABLES, *DEVELOPMENT)}
    undeclared = {
        f"{name} ({path.relative_to(REPO)})"
        for top in SOURCES
        for path in sorted((REPO / top).rglob("*.py"))
        for name in named_in(path) - declared
    }
    assert not undeclared, f"declare these in app/setting_variables.py: {sorted(undeclared)}"


def test_the_scan_finds_names_in_messages_and_f_strings(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('x = f"CLARION_ONE must be {1}"\ny = "see CLARION_TWO/PORT, not CLARION_*"\n')
    assert named_in(source) == {"CLARION_ONE", "CLARION_TWO"}


def test_every_declaration_says_what_it_means() -> None:
    vague = [
        v.name
        for v in (*VARIABLES, *DEVELOPMENT)
        if not v.description.strip() or not v.description.endswith(".") or not v.form
    ]
    assert not vague, f"give these a description (one or two sentences) and a form: {vague}"
    assert all(v.section for v in VARIABLES)


def test_each_variable_is_declared_once() -> None:
    names = [v.name for v in (*VARIABLES, *DEVELOPMENT)]
    assert len(names) == len(set(names))
    fields = [v.field for v in VARIABLES if v.field]
    assert len(fields) == len(set(fields))


def test_every_setting_is_set_by_a_declared_variable() -> None:
    assert set(BY_FIELD) == {f.name for f in dataclasses.fields(Settings)}
    assert all(not v.default for v in BY_FIELD.values()), "a setting's default is Settings'"
    assert all(v.default for v in VARIABLES if not v.field), "give its default as text"


def test_whole_numbers_have_bounds_around_their_default() -> None:
    defaults = Settings()
    for variable in BY_FIELD.values():
        value = getattr(defaults, variable.field)
        if isinstance(value, int):
            assert variable.low is not None, variable.name
            assert variable.high is not None, variable.name
            assert variable.low <= value <= variable.high, variable.name
        else:
            assert variable.low is None, variable.name
            assert variable.high is None, variable.name
