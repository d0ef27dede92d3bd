"""The data fields a catalog template requires, read from its syntax tree: a name is
required unless every use of it is guarded by ``is defined`` or ``default``."""

from __future__ import annotations

import pytest

from app.catalog.templates import Template, compile_template
from streams.core.vocabulary import Channel


@pytest.mark.parametrize(
    ("source", "required"),
    [
        ("Hi {{ name }}, {{ code }}", {"name", "code"}),
        ("{% if name is defined %}Hi {{ name }}. {% endif %}{{ code }}", {"code"}),
        ("{% if name is not defined %}Hi.{% else %}Hi {{ name }}.{% endif %}", set()),
        ("{% if name is defined and name | length > 2 %}{{ name }}{% endif %}", set()),
        ("{{ name if name is defined else 'you' }}", set()),
        ("{{ name | default('you') }}", set()),
        ("{% if not (name is undefined) %}{{ name }}{% endif %}", set()),
        # Not guarded: an "or" proves neither; an elif runs when the guard was false.
        ("{% if name is defined or nick is defined %}{{ name }}{% endif %}", {"name"}),
        ("{% if name is defined %}{% elif code %}{{ name }}{% endif %}", {"name", "code"}),
        ("{% if name %}{{ name }}{% endif %}", {"name"}),  # undefined in a test fails too
        ("{{ user.name | default('x') }}", {"user"}),  # only user.name may be missing
        ("{% if user.name is defined %}{{ user.name }}{% endif %}", {"user"}),
        # Names the template defines itself, and Jinja's globals, are no data.
        ("{% for item in items %}{{ loop.index }} {{ item }}{% endfor %}", {"items"}),
        ("{% set greeting = 'Hi' %}{{ greeting }} {{ range(2) | list }}", set()),
    ],
)
def test_required_fields_come_from_the_syntax_tree(source: str, required: set[str]) -> None:
    template = compile_template(Template(body=source), Channel.PUSH)
    assert template.fields == required
    data = {"code": 1, "items": [1], "user": {}}
    template.fill({name: data.get(name, "x") for name in required})  # renders without the rest
