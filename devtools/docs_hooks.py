"""The docs site's build hooks (``hooks:`` in mkdocs.yml): the pages generated from the code,
and a site that loads nothing from the network.

``on_files`` adds, at every build, the configuration reference (``devtools.config_reference``)
and the HTTP API's reference with its OpenAPI schema (``devtools.api_reference``). They are
never committed: a file of the same name in docs/ is a mistake, reported as a warning (which
fails the strict build). ``on_config`` drops the scripts Material's offline plugin would load
from a CDN (the iframe-worker shim that lets search run from ``file://``): the site is read
where nothing outside it may be fetched, and search works whenever it is served over HTTP.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

# MkDocs loads this file by its path: the checkout's packages must be importable from it.
_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from devtools import api_reference, config_reference  # noqa: E402

log = logging.getLogger("mkdocs.hooks.clarion")

CONFIGURATION = "running/configuration.md"
API_REFERENCE = "using/api-reference.md"
OPENAPI = "using/openapi.json"


def generated() -> dict[str, str]:
    """Each generated file's path in docs/ and its content."""
    page, schema = api_reference.reference()
    return {CONFIGURATION: config_reference.render(), API_REFERENCE: page, OPENAPI: schema}


def local_only(urls: list[str]) -> list[str]:
    """The scripts of ``urls`` the site itself holds (no ``http:``, ``https:`` or ``//``)."""
    return [url for url in urls if not url.startswith(("http:", "https:", "//"))]


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.extra["polyfills"] = local_only(config.extra.get("polyfills", []))
    return config


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    for path, content in generated().items():
        committed = files.get_file_from_path(path)
        if committed is not None:
            log.warning("docs/%s is generated at build time: delete the committed file", path)
            files.remove(committed)
        files.append(File.generated(config, path, content=content))
    return files
