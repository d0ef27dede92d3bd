"""``/schema/swagger``: the interactive API docs (Swagger UI), every file served by Clarion.

Litestar's Swagger plugin loads Swagger UI from a CDN and starts it with an inline script
that embeds the whole schema. Here its files come from the pinned ``swagger-ui-bundle-v2``
package, served under ``/schema/swagger-ui/``, and a first-party script starts it with the
schema at ``/schema/openapi.json``. So the page sends no request beyond this host and its
Content-Security-Policy allows scripts from this site only, none inline.

``schema_document`` and ``operations`` give the schema and the function behind each of its
operations to the docs site's API reference (``devtools.api_reference``).
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable
from importlib import resources
from typing import Any, Final

from litestar import Litestar, Request, Response, Router, get
from litestar.datastructures import ResponseHeader
from litestar.exceptions import NotFoundException
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.params import FromPath
from litestar.routes import HTTPRoute
from litestar.serialization import encode_json
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH: Final = "/swagger"
ASSETS_PATH: Final = "/swagger-ui"
SCHEMA_PATH: Final = "/schema"
_ASSETS_URL: Final = SCHEMA_PATH + ASSETS_PATH
START_SCRIPT: Final = "clarion-docs.js"

# Scripts and styles from this site only (Swagger UI sets inline styles on its elements and
# draws icons from data: URLs), requests to this site only, never framed.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
RESPONSE_HEADERS: Final = [
    ResponseHeader(name="Content-Security-Policy", value=CONTENT_SECURITY_POLICY),
    ResponseHeader(name="X-Content-Type-Options", value="nosniff"),
    ResponseHeader(name="Referrer-Policy", value="no-referrer"),
]

# The files the page needs, by the name it asks for: the package's, and the start script.
_MEDIA_TYPES: Final = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
    START_SCRIPT: "text/javascript",
}


@functools.cache
def asset(name: str) -> bytes:
    """The bytes of one of the page's files, read once (the bundle is about 1.5 MB)."""
    if name == START_SCRIPT:
        return resources.files("app.api").joinpath("static", "api-docs.js").read_bytes()
    return bytes(swagger_ui_path.joinpath(name).read_bytes())


@get(f"{ASSETS_PATH}/{{name:str}}", include_in_schema=False, sync_to_thread=False)
def swagger_asset(name: FromPath[str]) -> Response[bytes]:
    """One of the page's files; any other name is 404 (nothing else of the package is read)."""
    media_type = _MEDIA_TYPES.get(name)
    if media_type is None:
        raise NotFoundException(detail="no such file of the API docs")
    return Response(
        asset(name), media_type=media_type, headers={"Cache-Control": "public, max-age=3600"}
    )


def page(title: str) -> bytes:
    """The docs page: Swagger UI's files, then the script that starts it on the schema."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} API</title>
<link rel="icon" type="image/png" href="{_ASSETS_URL}/favicon-32x32.png">
<link rel="stylesheet" href="{_ASSETS_URL}/swagger-ui.css">
<style>body {{ margin: 0; }}</style>
</head>
<body>
<div id="swagger-ui" data-schema="{SCHEMA_PATH}/openapi.json"></div>
<script src="{_ASSETS_URL}/swagger-ui-bundle.js"></script>
<script src="{_ASSETS_URL}/swagger-ui-standalone-preset.js"></script>
<script src="{_ASSETS_URL}/{START_SCRIPT}"></script>
</body>
</html>
""".encode()


class LocalSwaggerPlugin(SwaggerRenderPlugin):
    """Litestar's Swagger UI plugin with its files served from this host, started without an
    inline script."""

    def __init__(self) -> None:
        super().__init__(
            js_url=f"{_ASSETS_URL}/swagger-ui-bundle.js",
            css_url=f"{_ASSETS_URL}/swagger-ui.css",
            standalone_preset_js_url=f"{_ASSETS_URL}/swagger-ui-standalone-preset.js",
            path=DOCS_PATH,
            favicon=f'<link rel="icon" type="image/png" href="{_ASSETS_URL}/favicon-32x32.png">',
        )

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return page(str(openapi_schema["info"]["title"]))

    def receive_router(self, router: Router) -> None:
        router.register(swagger_asset)


def schema_router() -> Router:
    """The router under ``/schema``: every answer of it carries the page's security headers."""
    return Router(
        SCHEMA_PATH, route_handlers=[], include_in_schema=False, response_headers=RESPONSE_HEADERS
    )


# The seed of the examples Litestar makes up for answers (``ResponseSpec``), for a document
# that is the same at every build.
EXAMPLES_SEED: Final = 40


def schema_document(app: Litestar) -> dict[str, Any]:
    """The OpenAPI schema ``app`` serves at ``/schema/openapi.json``, as JSON types, its
    made-up examples the same every time (call it before anything reads ``app``'s schema)."""
    # Imported here: it is Litestar's own, loaded when a schema is first made.
    from litestar._openapi.schema_generation.examples import ExampleFactory  # noqa: PLC0415

    ExampleFactory.seed_random(EXAMPLES_SEED)
    document: dict[str, Any] = json.loads(encode_json(app.openapi_schema.to_schema()))
    return document


def operations(app: Litestar) -> dict[tuple[str, str], Callable[..., Any]]:
    """The function behind each operation, by method (lower case) and path as the schema
    writes them (``/v1/recipients/{recipient_id}``)."""
    found: dict[tuple[str, str], Callable[..., Any]] = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                for method in handler.http_methods:
                    found[(method.lower(), route.path_format)] = handler.fn
    return found
