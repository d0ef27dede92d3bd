"""How optional query parameters are documented in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from litestar.openapi.spec import OpenAPIType


def query_schema(kind: OpenAPIType = OpenAPIType.STRING, **extra: Any) -> dict[str, Any]:
    """The documented schema of an optional query parameter: plain ``kind``, not "string or
    null" (an absent parameter is absent). Values are checked by the handler, to answer 422
    naming the parameter, so no constraint here is enforced by Litestar."""
    return {"one_of": None, "type": kind, **extra}
