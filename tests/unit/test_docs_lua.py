"""The developer page on the Lua scripts names every script: a new ``.lua`` file under
``streams/`` comes with its contract on ``docs/developing/lua-scripts.md``."""

from __future__ import annotations

from tests.conftest import REPO

PAGE = REPO / "docs" / "developing" / "lua-scripts.md"


def test_every_lua_script_is_on_the_lua_page() -> None:
    text = PAGE.read_text()
    scripts = sorted(path.relative_to(REPO).as_posix() for path in REPO.glob("streams/**/*.lua"))
    assert scripts, "no Lua script found under streams/"
    missing = [script for script in scripts if f"`{script}`" not in text]
    assert not missing, f"not named on {PAGE.relative_to(REPO)}: {missing}"
