"""The interactive API docs at ``/schema/swagger`` of a running ``clarion api``: every file
the page needs comes from the service itself, and in headless Chromium the page lists the
API's operations under its Content-Security-Policy without a request leaving 127.0.0.1."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from app.api.docs import CONTENT_SECURITY_POLICY
from tests.e2e.api.test_dashboard import Browser, browser_paths, chromium_browser
from tests.e2e.api_service import running_api

pytestmark = pytest.mark.timeout(120)

DOCS = "/schema/swagger"
EXPECTED_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
# Operations every Clarion API has, as Swagger UI shows them ("POST /v1/notifications").
OPERATIONS = ("/v1/notifications", "/v1/deliveries", "/v1/dlq")


def referenced(page: str) -> list[str]:
    """Every URL in a ``src`` or ``href`` attribute of ``page``."""
    return re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page)


def test_the_docs_page_and_every_file_it_names_are_served_by_clarion() -> None:
    with running_api() as base_url, httpx.Client(base_url=base_url, timeout=30) as client:
        answer = client.get(DOCS)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/html")
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        page = answer.text
        # No URL with a scheme or host at all: everything is a path on this service.
        assert not re.search(r"(?:https?:)?//", page), page
        assert "<script>" not in page  # no inline script, which the CSP would block
        urls = referenced(page)
        assert len(urls) == 5, urls  # favicon, stylesheet, bundle, preset, start script
        for url in urls:
            assert url.startswith("/schema/"), url
            asset = client.get(url)
            assert asset.status_code == 200, url
            suffix = url[url.rindex(".") :]
            assert asset.headers["content-type"].startswith(EXPECTED_TYPES[suffix]), url
            assert len(asset.content) > 100, url
        # The schema the start script names, and nothing else of the package.
        schema = re.search(r'data-schema="([^"]+)"', page)
        assert schema is not None
        assert client.get(schema.group(1)).json()["info"]["title"] == "Clarion"
        others = ("index.html", "swagger-ui.js.map", "..%2Fpyproject.toml", "oauth2-redirect.html")
        for other in others:
            assert client.get(f"/schema/swagger-ui/{other}").status_code == 404


def requests_sent(browser: Browser, base_url: str) -> list[str]:
    """Every URL requested so far for a document of ``base_url`` (not for Chromium's own new
    tab page), from the DevTools events in the performance log."""
    urls = []
    for entry in browser.log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] != "Network.requestWillBeSent":
            continue
        if message["params"].get("documentURL", "").startswith(base_url):
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for_operations(browser: Browser, within: float = 30) -> list[str]:
    """The paths of the operations Swagger UI lists, once it lists any."""
    deadline = time.monotonic() + within
    while True:
        paths = browser.script(
            "return [...document.querySelectorAll('.opblock-summary-path')]"
            ".map(e => e.getAttribute('data-path'))"
        )
        if paths or time.monotonic() > deadline:
            return list(paths)
        time.sleep(0.2)


def test_the_docs_page_renders_the_operations_in_chromium_from_this_host_only(
    tmp_path: Path,
) -> None:
    browser_paths()  # fail before starting the service when Chromium is missing
    with running_api() as base_url, chromium_browser(logs=("performance", "browser")) as browser:
        browser.open(urljoin(base_url, DOCS))
        paths = wait_for_operations(browser)
        for operation in OPERATIONS:
            assert operation in paths, paths
        assert "Clarion" in browser.text_of(".info .title")
        shot = browser.screenshot(tmp_path / "api-docs.png")
        assert shot.stat().st_size > 10_000, "the docs page looks empty"

        sent = requests_sent(browser, base_url)
        assert any(url.endswith("/schema/openapi.json") for url in sent), sent
        assert any(url.endswith("/swagger-ui-bundle.js") for url in sent), sent
        # Swagger UI draws its icons from data: URLs, which no request carries.
        away = [u for u in sent if urlsplit(u).scheme != "data" and not u.startswith(base_url)]
        assert not away, away
        assert urlsplit(base_url).hostname == "127.0.0.1"
        # Nothing was refused by the page's CSP and nothing failed to load.
        console = [entry["message"] for entry in browser.log("browser")]
        assert not [m for m in console if "Content Security Policy" in m], console
        assert not [m for m in console if entry_failed(m)], console


def entry_failed(message: str) -> bool:
    return "Failed to load resource" in message or "net::ERR" in message
