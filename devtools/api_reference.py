"""The HTTP API's reference for the docs site, from the app's own OpenAPI schema.

``build_app`` builds the app in-process (a Redis client that never connects, no PostgreSQL);
``app.api.docs`` gives the schema it serves at ``/schema/openapi.json`` and the function behind
each operation, whose docstring and ``authorize`` calls say what it does and which scopes it
needs (``auth_of``); ``render`` writes the Markdown page.
"""

from __future__ import annotations

import ast
import html
import inspect
import json
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from app.api.app import create_app
from app.api.docs import operations, schema_document
from app.catalog import load_catalog
from app.settings import Settings

REPO = Path(__file__).resolve().parents[1]
Schema = dict[str, Any]
METHODS = ("get", "post", "put", "patch", "delete")
# Handlers that check a recipient token instead of an API key (``app.inbox.api.routes``).
_TOKEN_CHECKS = {"checked_grant", "grant_of"}
_REF = "#/components/schemas/"


def build_app() -> Any:
    """The API as ``clarion run`` serves it (a Litestar app); nothing connects to Redis or
    PostgreSQL."""
    settings = Settings(digest_secret=b"docs-only-secret-not-used-anywhere")
    return create_app(
        settings,
        redis=Redis.from_url("redis://127.0.0.1:1/0"),
        catalog=load_catalog(REPO / "clarion.toml"),
        environ={},
    )


def auth_of(fn: Callable[..., Any], seen: frozenset[str] = frozenset()) -> str:
    """Who may call: the scopes of its ``authorize`` call, a recipient token, or anyone.
    Functions of its own module that it calls are read too (a handler may leave the check to
    a helper)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    helpers = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        if node.func.id == "authorize":
            scopes = [str(a.value) for a in node.args if isinstance(a, ast.Constant)]
            return "API key with the " + " or ".join(f"`{s}`" for s in scopes) + " scope"
        if node.func.id in _TOKEN_CHECKS:
            return "a recipient token (`Authorization: Bearer <token>`)"
        helper = fn.__globals__.get(node.func.id)
        if inspect.isfunction(helper) and helper.__module__ == fn.__module__:
            helpers.append(helper)
    for helper in helpers:
        if helper.__qualname__ not in seen:
            found = auth_of(helper, seen | {fn.__qualname__, helper.__qualname__})
            if found != "none":
                return found
    return "none"


def _text(value: object) -> str:
    """Schema text made safe for one Markdown table cell or line."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return text.replace("|", "\\|").replace("*", "\\*")


def _anchor(name: str) -> str:
    return "schema-" + name.lower()


def type_of(schema: Schema) -> str:
    """A field's type in words, with links to the named schemas."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(_REF)
        return f"[{name}](#{_anchor(name)})"
    for combined in ("oneOf", "anyOf"):
        if combined in schema:
            kinds = [type_of(s) for s in schema[combined]]
            return " or ".join(dict.fromkeys(kinds))
    if "enum" in schema:
        return "one of " + ", ".join(f"`{_text(v)}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list) or kind == "array":
        return " or ".join(kind) if isinstance(kind, list) else _array(schema)
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        inner = schema["additionalProperties"]
        return "object" if not inner else "object of " + type_of(inner)
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


def _array(schema: Schema) -> str:
    return "array of " + type_of(schema.get("items", {}))


_LIMITS = {
    "minLength": "at least {} characters", "maxLength": "at most {} characters",
    "minimum": "at least {}", "maximum": "at most {}",
    "minItems": "at least {} items", "maxItems": "at most {} items",
    "pattern": "matches `{}`",
}  # fmt: skip


def limits_of(schema: Schema) -> str:
    parts = [text.format(schema[key]) for key, text in _LIMITS.items() if key in schema]
    return "; ".join(parts)


def _field_rows(schema: Schema) -> Iterator[str]:
    required = set(schema.get("required", []))
    for name, field in schema.get("properties", {}).items():
        notes = [n for n in (field.get("description", ""), limits_of(field)) if n]
        yield (
            f"| `{name}` | {type_of(field)} | {'yes' if name in required else 'no'} "
            f"| {_text('; '.join(notes))} |"
        )


def _parameters(operation: Schema) -> list[str]:
    params = operation.get("parameters", [])
    if not params:
        return []
    lines = ["**Parameters**", "", "| name | in | type | required | meaning |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for p in params:
        schema = p.get("schema", {})
        notes = [n for n in (p.get("description", ""), limits_of(schema)) if n]
        lines.append(
            f"| `{p['name']}` | {p['in']} | {type_of(schema)} "
            f"| {'yes' if p.get('required') else 'no'} | {_text('; '.join(notes))} |"
        )
    return [*lines, ""]


def _body(operation: Schema) -> list[str]:
    content = operation.get("requestBody", {}).get("content", {})
    if not content:
        return []
    media, spec = sorted(content.items())[0]
    return [f"**Request body** (`{media}`): {type_of(spec.get('schema', {}))}", ""]


def _answer(response: Schema) -> str:
    content = response.get("content", {})
    if not content:
        return ""
    schema = sorted(content.items())[0][1].get("schema", {})
    if "$ref" not in schema and "detail" in schema.get("properties", {}):
        return "[error](#errors)"
    return type_of(schema)


def _responses(operation: Schema) -> list[str]:
    lines = ["**Responses**", "", "| status | meaning | body |", "| --- | --- | --- |"]
    for status, response in sorted(operation.get("responses", {}).items()):
        meaning = _text(response.get("description", ""))
        lines.append(f"| {status} | {meaning} | {_answer(response)} |")
    return [*lines, ""]


def _operation(
    method: str, path: str, operation: Schema, fn: Callable[..., Any] | None
) -> list[str]:
    doc = operation.get("description") or (inspect.getdoc(fn) if fn else "") or ""
    lines = [f"### `{method.upper()} {path}` {{#{operation_id(method, path)}}}", ""]
    if doc:
        lines += [_text(doc), ""]
    if fn is not None:
        lines += [f"**Authentication:** {auth_of(fn)}.", ""]
    return [*lines, *_parameters(operation), *_body(operation), *_responses(operation)]


def operation_id(method: str, path: str) -> str:
    """An operation's anchor on the page: ``post-v1-notifications``,
    ``get-v1-recipients-recipient_id``."""
    words = re.findall(r"[a-z0-9_]+", f"{method} {path}".lower())
    return "-".join(words)


# Headings of the path groups whose first part is not a word a reader knows.
_GROUP_TITLES = {"dlq": "Dead letters", "ops": "Health and lag", "metrics": "Metrics"}


def group_title(group: str) -> str:
    title = _GROUP_TITLES.get(group) or group.replace("-", " ").capitalize()
    return f"{title} {{#{group}}}"


def group_of(path: str) -> str:
    """The heading an operation is listed under: its path's first part after ``/v1``."""
    parts = [p for p in path.split("/") if p and p != "v1"]
    return parts[0] if parts else "/"


def _component(name: str, schema: Schema) -> list[str]:
    lines = [f"### {name} {{#{_anchor(name)}}}", ""]
    if schema.get("description"):
        lines += [_text(schema["description"]), ""]
    if "properties" in schema:
        lines += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
        lines += [*_field_rows(schema), ""]
    else:
        lines += [f"Type: {type_of(schema)}.", ""]
    return lines


_INTRO = """\
# API reference

Every endpoint of the HTTP API, from the OpenAPI schema the service serves at
`/schema/openapi.json` (and as interactive docs at `/schema/swagger`). Download this
version's schema: [openapi.json](openapi.json). The [HTTP API](api.md) page explains how to
use it.

## Errors

An error answer is JSON: `{"status_code": <status>, "detail": "<what is wrong>", "extra": ...}`
(`extra` is optional: per-field details of a validation error).
"""


def render(schema: Schema, functions: dict[tuple[str, str], Callable[..., Any]]) -> str:
    """The reference page: the operations by path group, then the named schemas."""
    groups: dict[str, list[str]] = {}
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                fn = functions.get((method, path))
                lines = _operation(method, path, item[method], fn)
                groups.setdefault(group_of(path), []).extend(lines)
    out = [_INTRO]
    for group, lines in groups.items():
        out += [f"## {group_title(group)}", "", *lines]
    out += ["## Schemas", ""]
    for name, component in sorted(schema.get("components", {}).get("schemas", {}).items()):
        out += _component(name, component)
    return "\n".join(out).rstrip() + "\n"


def reference() -> tuple[str, str]:
    """The page's Markdown and the schema as JSON, both deterministic."""
    app = build_app()
    schema = schema_document(app)
    return render(schema, operations(app)), json.dumps(schema, indent=2, sort_keys=True) + "\n"
