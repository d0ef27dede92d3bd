"""The ``OPTIONS`` answer of a path that several handlers of one controller serve.

Litestar's automatic answer is made when the path's first handler is registered, so it
lists only that handler's method. Such a controller writes its own ``OPTIONS`` handler,
named to sort first (a controller registers its handlers in the alphabetical order of their
names, so no automatic one exists), and answers with ``allowed``: the methods of the route
once every handler of it is registered.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response


def allowed(request: Request[Any, Any, Any]) -> Response[None]:
    """204 with ``Allow`` naming every method of the request's route."""
    [found] = [r for r in request.app.routes if r.path_format == request.scope["path_template"]]
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(found.methods))})
