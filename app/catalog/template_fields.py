"""What a catalog template requires of a notification's ``data`` (its ``fields``, which
ingest checks), read from the syntax tree of each part (``app.catalog.templates`` compiles
them).

The names are those ``jinja2.meta.find_undeclared_variables`` reports, less those every use
of which is guarded. A use is guarded inside ``{% if name is defined %}`` (or the ``else`` of
``is not defined``, also combined with ``and``/``or``/``not``, and in ``x if name is defined
else y``), as the operand of that test itself, and as ``name | default(...)``: there a
missing value cannot fail the render. Anything else needs the name, so when in doubt a name
is required: a request is refused with 422 rather than accepted to fail at delivery.
"""

from __future__ import annotations

from typing import Any

from jinja2 import meta, nodes

_DEFINED_TESTS = frozenset({"defined", "undefined"})
_DEFAULT_FILTERS = frozenset({"default", "d"})


def required_fields(tree: nodes.Template) -> set[str]:
    """The names of ``data`` a part parsed as ``tree`` fails to render without."""
    return meta.find_undeclared_variables(tree) & _unguarded(tree, frozenset())


def _unguarded(node: nodes.Node, known: frozenset[str]) -> set[str]:
    """The names ``node`` loads where a missing value fails the render (``known``: those
    a guard around ``node`` has shown to be defined)."""
    if isinstance(node, nodes.Name):
        return {node.name} if node.ctx == "load" and node.name not in known else set()
    if isinstance(node, nodes.If):
        return _if_unguarded(node, known)
    if isinstance(node, nodes.And | nodes.Or | nodes.CondExpr):
        return _short_circuit_unguarded(node, known)
    children = list(node.iter_child_nodes())
    if _asks_for_its_name(node):  # ``name is defined``, ``name | default(...)``
        children = [child for child in children if child is not node.node]  # type: ignore[attr-defined]
    return _each_unguarded(children, known)


def _asks_for_its_name(node: nodes.Node) -> bool:
    """Is ``node`` a test or filter whose operand, a name, may be missing?"""
    if isinstance(node, nodes.Test):
        names = _DEFINED_TESTS
    elif isinstance(node, nodes.Filter):
        names = _DEFAULT_FILTERS
    else:
        return False
    return node.name in names and isinstance(node.node, nodes.Name)


def _short_circuit_unguarded(
    node: nodes.And | nodes.Or | nodes.CondExpr, known: frozenset[str]
) -> set[str]:
    """What is evaluated only when a test came out one way knows what that test showed."""
    if isinstance(node, nodes.CondExpr):
        names = _unguarded(node.test, known)
        names |= _unguarded(node.expr1, known | _defined_when(node.test, True))
        if node.expr2 is not None:
            names |= _unguarded(node.expr2, known | _defined_when(node.test, False))
        return names
    # The right side of an "and" runs when the left was true; of an "or", when it was false.
    after = _defined_when(node.left, isinstance(node, nodes.And))
    return _unguarded(node.left, known) | _unguarded(node.right, known | after)


def _each_unguarded(children: Any, known: frozenset[str]) -> set[str]:
    names: set[str] = set()
    for child in children:
        names |= _unguarded(child, known)
    return names


def _if_unguarded(node: nodes.If, known: frozenset[str]) -> set[str]:
    """An ``if`` with its ``elif`` branches and ``else``: each branch runs only when the
    tests before it were false."""
    names: set[str] = set()
    for branch in (node, *node.elif_):
        names |= _unguarded(branch.test, known)
        names |= _each_unguarded(branch.body, known | _defined_when(branch.test, True))
        known = known | _defined_when(branch.test, False)
    return names | _each_unguarded(node.else_, known)


def _defined_when(test: nodes.Node, outcome: bool) -> frozenset[str]:
    """The names certainly defined when ``test`` comes out as ``outcome``."""
    if (
        isinstance(test, nodes.Test)
        and test.name in _DEFINED_TESTS
        and isinstance(test.node, nodes.Name)
    ):
        defined = outcome == (test.name == "defined")
        return frozenset({test.node.name}) if defined else frozenset()
    if isinstance(test, nodes.Not):
        return _defined_when(test.node, not outcome)
    if isinstance(test, nodes.And | nodes.Or):
        left, right = _defined_when(test.left, outcome), _defined_when(test.right, outcome)
        # Both sides have the outcome when an "and" is true or an "or" false; else only one.
        both = outcome == isinstance(test, nodes.And)
        return left | right if both else left & right
    return frozenset()
