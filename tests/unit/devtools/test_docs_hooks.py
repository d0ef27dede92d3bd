"""The docs site built once, as ``make test`` builds it: the generated pages are there, and no
page loads a script, a stylesheet or a font from the network."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config

from app.setting_variables import VARIABLES
from devtools.docs_hooks import local_only
from tests.conftest import REPO

EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//", re.IGNORECASE
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built without strict mode: pages the nav names that are not written yet
    must not hide what this test looks for (``make test`` builds it strictly)."""
    target = tmp_path_factory.mktemp("site")
    config = load_config(str(REPO / "mkdocs.yml"), site_dir=str(target), strict=False)
    started = time.monotonic()
    build(config)
    assert time.monotonic() - started < 20
    return target


def test_no_page_loads_anything_from_the_network(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 3
    loading = {
        str(page.relative_to(site)): EXTERNAL.findall(text)
        for page in pages
        if EXTERNAL.search(text := page.read_text()) or "fonts.googleapis" in text
    }
    assert not loading
    assert not list(site.rglob("*.css")) or not any(
        "fonts.googleapis" in css.read_text() or "@import url(http" in css.read_text()
        for css in site.rglob("*.css")
    )


def test_the_generated_pages_and_the_schema_are_in_the_site(site: Path) -> None:
    configuration = (site / "running" / "configuration.html").read_text()
    assert all(v.name in configuration for v in VARIABLES)
    schema = json.loads((site / "using" / "openapi.json").read_text())
    assert schema["info"]["title"] == "Clarion"
    reference = (site / "using" / "api-reference.html").read_text()
    assert "/v1/notifications" in reference
    assert 'href="openapi.json"' in reference


def test_only_local_scripts_are_kept() -> None:
    urls = ["https://unpkg.com/iframe-worker/shim", "//cdn.example/x.js", "assets/shim.js"]
    assert local_only(urls) == ["assets/shim.js"]
