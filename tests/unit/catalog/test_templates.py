"""Catalog templates: sandboxed Jinja2 compiled at load, refused with the file, type, locale,
channel, part and line when broken or still in the old ``{code}`` style; the data fields they
require; the fast path that must render exactly as Jinja does; SMS encodings and segments;
WEBHOOK bodies that must be JSON."""

from __future__ import annotations

import functools
import json
from typing import Any

import msgspec
import pytest
from markupsafe import Markup

from app.catalog import Catalog, CatalogError, parse_catalog
from app.catalog import templates as templates_module
from app.catalog.sms import GSM_7
from app.catalog.templates import (
    CompiledTemplate,
    FillError,
    Part,
    Template,
    compile_template,
)
from app.delivery.rendering import RenderError, render
from streams.core.vocabulary import Channel
from tests.unit.adversarial_text import BOUND_S, SHAPES, best_of_three
from tests.unit.delivery_examples import ITEM

CHANNELS = ("SMS", "EMAIL", "PUSH", "WEBHOOK")


def catalog_of(channel: str, max_segments: int = 10, **parts: str) -> Catalog:
    """A catalog whose type ``t`` has one template, for ``channel``, of ``parts``."""
    written = ", ".join(
        f"{name} = {json.dumps(text, ensure_ascii=False)}" for name, text in parts.items()
    )
    channels = "".join(f'[channels.{name}]\nprovider = "sandbox"\n' for name in CHANNELS)
    text = (
        f'[providers.sandbox]\nkind = "sandbox"\n{channels}'
        f'[types.t]\nchannels = ["{channel}"]\npriority = "NORMAL"\nttl_seconds = 60\n'
        f"opt_out = true\n[types.t.templates.en]\n{channel} = {{ {written} }}\n"
    )
    text = text.replace("[channels.SMS]\n", f"[channels.SMS]\nmax_segments = {max_segments}\n")
    return parse_catalog(text, source="x.toml")


def refusal(channel: str, **parts: str) -> str:
    with pytest.raises(CatalogError) as caught:
        catalog_of(channel, **parts)
    return str(caught.value)


def compiled(channel: str, **parts: str) -> CompiledTemplate:
    return catalog_of(channel, **parts).compiled[("t", "en", Channel(channel))]


def filled(catalog: Catalog, channel: str, data: dict[str, Any]) -> Any:
    item = msgspec.structs.replace(ITEM, notification_type="t", channel=Channel(channel))
    return render(catalog, item, data)


# --- refused at load ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "part", "source", "problem"),
    [
        ("PUSH", "body", "one\ntwo\nthree {{ code }", "unexpected '}'"),
        ("PUSH", "title", "one\ntwo\n{% if code %}", "end of template"),
        ("EMAIL", "html", "<p>\n</p>\n{{ code | shout }}", "No filter named 'shout'"),
        ("SMS", "body", "one\ntwo\n{% if code is odd_ish %}x{% endif %}", "No test named"),
    ],
)
def test_a_template_that_does_not_compile_names_file_type_locale_channel_part_and_line(
    channel: str, part: str, source: str, problem: str
) -> None:
    parts = {"body": "ok", part: source}
    message = refusal(channel, **parts)
    assert message.startswith(f"x.toml: types.t.templates.en.{channel}.{part}: line 3: ")
    assert problem in message


def test_a_template_may_not_include_extend_or_import_another() -> None:
    for statement in ("{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as x %}"):
        message = refusal("PUSH", body=f"hi\n{statement}")
        assert message.startswith("x.toml: types.t.templates.en.PUSH.body: line 2: ")


@pytest.mark.parametrize(
    ("part", "source", "placeholder"),
    [
        ("body", "Your code is {code}.", "{code}"),
        ("title", "Order\n{order_id} confirmed", "{order_id}"),
        ("body", "{{ code }} and {amount:>8.2f}", "{amount:>8.2f}"),
        ("body", "{name!r}", "{name!r}"),
    ],
)
def test_an_old_str_format_placeholder_is_refused_saying_what_to_write(
    part: str, source: str, placeholder: str
) -> None:
    message = refusal("EMAIL", **{"body": "ok", part: source})
    assert message.startswith(f"x.toml: types.t.templates.en.EMAIL.{part}: line ")
    name = placeholder[1:].split("!", maxsplit=1)[0].split(":", maxsplit=1)[0].rstrip("}")
    assert f"{placeholder} is a placeholder of the old str.format templates" in message
    assert f"write {{{{ {name} }}}}" in message
    assert f"line {source.count(chr(10), 0, source.index(placeholder)) + 1}:" in message


def test_braces_that_are_no_old_placeholder_are_kept() -> None:
    kept = compiled(
        "EMAIL",
        title='{{ "{code}" }} {"json": 1} { spaced }',
        body="a literal {{ '{name}' }}",
        html="<style>p {color:red} .b{margin:0}</style>{% raw %}{{ x }}{% endraw %}",
    )
    assert kept.fill({}) == (
        '{code} {"json": 1} { spaced }',
        "a literal {name}",
        "<style>p {color:red} .b{margin:0}</style>{{ x }}",
    )
    assert "{name}" in refusal("EMAIL", body="ok", html="<p>{name}</p>")


@pytest.mark.parametrize("shape", [*SHAPES, "braces", "brace letter", "brace colon", "brace bang"])
def test_the_old_placeholder_check_takes_linear_time(shape: str) -> None:
    units = {"braces": "{", "brace letter": "{a", "brace colon": "{a:", "brace bang": "{a!r"}
    text = SHAPES.get(shape) or units[shape] * (64 * 1024 // len(units[shape]))
    for pattern in (templates_module._OLD_STYLE, templates_module._OLD_STYLE_HTML):
        assert best_of_three(functools.partial(pattern.search, text)) < BOUND_S


def test_html_is_only_for_email() -> None:
    for channel in ("SMS", "PUSH", "WEBHOOK"):
        message = refusal(channel, body="{}", html="<p>hi</p>")
        assert (
            message == f"x.toml: types.t.templates.en.{channel}.html: "
            f"only EMAIL templates have html, not {channel}"
        )


def test_sms_and_webhook_have_no_title() -> None:
    assert refusal("SMS", title="Hi", body="x").startswith(
        "x.toml: types.t.templates.en.SMS.title:"
    )
    assert "no title" in refusal("WEBHOOK", title="Hi", body="{}")


# --- the data a template requires ---------------------------------------------------------


def test_required_fields_are_those_of_every_part() -> None:
    catalog = catalog_of("EMAIL", title="{{ a }}", body="{{ b }}", html="{{ c }}")
    assert catalog.template_fields[("t", "en", Channel.EMAIL)] == {"a", "b", "c"}


def test_missing_data_is_a_render_error_naming_the_field() -> None:
    catalog = catalog_of("PUSH", title="{{ a }}", body="{% if b %}{% endif %}")
    with pytest.raises(RenderError, match=r"^the template needs data\.a$"):
        filled(catalog, "PUSH", {"b": 1})
    with pytest.raises(RenderError, match=r"^the template needs data\.b$"):
        filled(catalog, "PUSH", {"a": 1})


# --- rendering ----------------------------------------------------------------------------

VALUES: list[Any] = [
    "424242", "", "héllo wörld 🙂", "line\nbreak\r\n\ttab", 0, -17, 2**70, 0.1, 1e16, 1e-7,
    float("inf"), float("nan"), None, True, False, [1, "two", None], {"a": {"b": [1, 2.5]}},
    '<script>alert("x") & \'y\'</script>', "&amp; &lt; already escaped", Markup("<b>safe</b>"),
    {"<k>": "'v'"},
]  # fmt: skip
PLAIN = [
    "Your code is {{ code }}. It expires in 5 minutes.",
    "{{ code }}{{ other }}",
    "{{ code }}",
    "only literal text",
    "",
    "  {{- code -}}  and {{ other }}\n",
    "{# a comment #}<{{ code }}>\n\n",
    "{% raw %}{{ code }}{% endraw %}{{ other }}",
]


def _fast_and_jinja(part: Part, data: dict[str, Any]) -> tuple[str, str]:
    assert part.pieces is not None, "not on the fast path"
    return part.render(data), part.jinja.render(data)


@pytest.mark.parametrize("source", PLAIN)
def test_the_fast_path_renders_exactly_as_jinja(source: str) -> None:
    template = compile_template(Template(body=source, html=source), Channel.EMAIL)
    parts = [template.body]
    if source:  # an empty html is no html: the message is text only
        assert template.html is not None
        parts.append(template.html)
    for value in VALUES:
        for other in ("x", value):
            data = {"code": value, "other": other}
            for part in parts:
                fast, jinja = _fast_and_jinja(part, data)
                assert fast == jinja, (source, value, part.escaped)
                assert type(fast) is type(jinja) is str


def test_html_escapes_data_and_text_parts_do_not() -> None:
    template = compiled("EMAIL", title="{{ v }}", body="{{ v }}", html="<p>{{ v }}</p>")
    value = "<script>alert('x')</script> & \"y\""
    title, body, html = template.fill({"v": value})
    assert title == body == value
    assert html == "<p>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &#34;y&#34;</p>"


@pytest.mark.parametrize(
    "source", ["{{ code | upper }}", "{{ code.x }}", "{% if code %}y{% endif %}", "{{ range }}"]
)
def test_anything_more_than_names_is_left_to_jinja(source: str) -> None:
    assert compiled("PUSH", body=source).body.pieces is None


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__ }}",
        "{{ code.__class__.__mro__[1].__subclasses__() }}",
        "{{ code.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ items.append(1) }}",  # the immutable sandbox: data cannot be changed
    ],
)
def test_the_sandbox_refuses_attribute_escapes_at_render(source: str) -> None:
    catalog = catalog_of("PUSH", body=source)
    with pytest.raises(RenderError, match=r"^the template cannot be filled: "):
        filled(catalog, "PUSH", {"code": "1", "items": []})


def test_a_title_is_one_line() -> None:
    title, _, _ = compiled("PUSH", title="Hi {{ name }}", body="x").fill({"name": "a\r\nb\x7f"})
    assert title == "Hi a  b "


def test_a_webhook_body_renders_to_json_with_tojson() -> None:
    catalog = catalog_of("WEBHOOK", body='{"text": {{ message | tojson }}, "n": {{ n }}}')
    hostile = '"}, "admin": true, {"x": "</script>\\'
    rendered = filled(catalog, "WEBHOOK", {"message": hostile, "n": 3})
    assert json.loads(rendered.body) == {"text": hostile, "n": 3}
    assert (rendered.title, rendered.html) == ("", "")


def test_a_webhook_body_that_is_not_json_fails_the_delivery() -> None:
    catalog = catalog_of("WEBHOOK", body='{"text": "{{ message }}"}')
    assert json.loads(filled(catalog, "WEBHOOK", {"message": "fine"}).body) == {"text": "fine"}
    with pytest.raises(RenderError, match=r"^the WEBHOOK body is not JSON: "):
        filled(catalog, "WEBHOOK", {"message": 'say "hi"'})


def test_fill_errors_are_fill_errors() -> None:
    with pytest.raises(FillError):
        compile_template(Template(body="{{ 1 // n }}"), Channel.PUSH).fill({"n": 0})


def test_an_sms_over_max_segments_fails_naming_count_and_limit() -> None:
    catalog = catalog_of("SMS", max_segments=2, body="{{ text }}")
    sent = filled(catalog, "SMS", {"text": "€" * 152})
    assert (sent.sms_encoding, sent.sms_segments) == (GSM_7, 2)
    with pytest.raises(RenderError, match=r"^the SMS takes 3 segments \(UCS-2\), over the "):
        filled(catalog, "SMS", {"text": "🙂" * 68})
    with pytest.raises(RenderError, match=r"max_segments of 2$"):
        filled(catalog, "SMS", {"text": "a" * 307})


# --- PUSH parts ---------------------------------------------------------------------------

PUSH_TEMPLATE = """\
[providers.sandbox]
kind = "sandbox"
[channels.PUSH]
provider = "sandbox"
[types.t]
channels = ["PUSH"]
priority = "NORMAL"
ttl_seconds = 60
opt_out = true
[types.t.templates.en.PUSH]
title = "Order {{ order_id }}"
body = "It ships {{ when }}"
badge = "{{ unread }}"
sound = "default"
link = "shop://orders/{{ order_id }}"
collapse_key = "order-{{ order_id }}"
data = { order_id = "{{ order_id }}", kind = "shipping" }
"""


def test_a_push_template_fills_its_push_parts() -> None:
    catalog = parse_catalog(PUSH_TEMPLATE, source="x.toml")
    template = catalog.compiled[("t", "en", Channel.PUSH)]
    assert template.fields == {"order_id", "when", "unread"}
    sent = filled(catalog, "PUSH", {"order_id": "A-7", "when": "today", "unread": 3})
    assert (sent.title, sent.body) == ("Order A-7", "It ships today")
    push = sent.push
    assert push.data == {"order_id": "A-7", "kind": "shipping"}
    assert (push.badge, push.sound, push.link, push.collapse_key) == (
        3, "default", "shop://orders/A-7", "order-A-7",
    )  # fmt: skip


@pytest.mark.parametrize("unread", ["three", "-1", "2.5", "٣"])
def test_a_badge_that_is_no_whole_number_fails_the_delivery(unread: str) -> None:
    catalog = parse_catalog(PUSH_TEMPLATE, source="x.toml")
    with pytest.raises(RenderError, match="the badge is not a whole number"):
        filled(catalog, "PUSH", {"order_id": "A-7", "when": "today", "unread": unread})


def test_a_push_template_without_push_parts_sends_none() -> None:
    push = filled(catalog_of("PUSH", title="Hi", body="there"), "PUSH", {}).push
    assert (push.data, push.badge, push.sound, push.link, push.collapse_key) == (
        {}, None, "", "", "",
    )  # fmt: skip


@pytest.mark.parametrize("part", ["badge", "sound", "link", "collapse_key"])
def test_only_push_templates_have_push_parts(part: str) -> None:
    message = refusal("EMAIL", title="t", body="b", **{part: "x"})
    assert f"templates.en.EMAIL.{part}: only PUSH templates have {part}, not EMAIL" in message


def test_a_push_part_that_does_not_compile_names_itself() -> None:
    text = PUSH_TEMPLATE.replace('kind = "shipping"', 'kind = "{{ oops }"')
    with pytest.raises(CatalogError, match=r"templates\.en\.PUSH\.data\.kind: line 1"):
        parse_catalog(text, source="x.toml")
