"""The catalog's templates: sandboxed Jinja2, compiled once when the catalog is loaded.

A template is the strings of one type, locale and channel in ``clarion.toml`` (there is no
template file to load, include or extend). Title and body are text; an EMAIL may add ``html``,
the only part with autoescape on. Every part runs in Jinja's immutable sandbox with
``StrictUndefined``, so a template reaches no Python internals and a missing value is an error,
never an empty string.

What ingest requires of ``data`` (``fields``) comes from each part's syntax tree
(``app.catalog.template_fields``): every name whose use is not guarded by ``is defined`` or
``default``.

Most templates are literal text and plain ``{{ name }}`` outputs; those render without
Jinja, with its semantics (``str`` of the value, ``markupsafe.escape`` in HTML): a text part
through a ``str.format`` string of ``{name!s}`` fields, an html part by joining its pieces.
That costs ~0.3 µs where Jinja takes ~10 µs. Anything else (filters, attributes, control
flow, a name that is also a Jinja global) is rendered by Jinja.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import msgspec
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import escape

from app.catalog.template_fields import required_fields
from streams.core.errors import ClarionError
from streams.core.vocabulary import Channel


class Template(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[types.<type>.templates.<locale>]``: one channel's template, as written."""

    # EMAIL: the text body; SMS, PUSH, IN_APP: the text; WEBHOOK: the JSON body.
    body: str
    # EMAIL subject, PUSH or IN_APP title; SMS and WEBHOOK have none.
    title: str = ""
    # EMAIL only: the HTML body, autoescaped.
    html: str = ""
    # PUSH only, each optional and a template like the others: key-value pairs for the app,
    # the badge count (it must render to a whole number), the sound, where a tap leads,
    # and the key under which notifications replace each other on the device. IN_APP
    # templates may have ``data`` and ``link`` too (the inbox message's action URL).
    data: dict[str, str] = {}
    badge: str = ""
    sound: str = ""
    link: str = ""
    collapse_key: str = ""

    def push_parts(self) -> dict[str, str]:
        """The push parts given, by name (``data.<key>`` for each data entry)."""
        parts = {f"data.{key}": value for key, value in self.data.items()}
        named = {"badge": self.badge, "sound": self.sound, "link": self.link}
        parts |= {name: value for name, value in named.items() if value}
        if self.collapse_key:
            parts["collapse_key"] = self.collapse_key
        return parts


class TemplateProblem(ClarionError, ValueError):
    """A template cannot be used; ``part`` is title, body or html."""

    def __init__(self, part: str, problem: str) -> None:
        super().__init__(problem)
        self.part = part


class FillError(ClarionError):
    """A template cannot be filled from one delivery's data."""


_TEXT = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
_HTML = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=True)
_UNTITLED = frozenset({Channel.SMS, Channel.WEBHOOK})
_WEBHOOK = Channel.WEBHOOK  # bound once: compared on every fill


def _in_app_part(name: str) -> bool:
    """The push parts an IN_APP template may have too: the action's link and app data."""
    return name == "link" or name.startswith("data.")


# A title is one line (an email's Subject header, a push title): a line break from the data
# would start a header of its own, so every control character becomes a space.
_ONE_LINE = dict.fromkeys((*range(32), 127), " ")
# A placeholder of the str.format templates before Jinja, in literal text, with its
# conversion and format spec. The html part is new (so it has none) and may hold CSS
# (``p {color:red}``): only a plain name counts there. Linear: a run after a "{" ends at the
# next brace, so runs never overlap and each character is read a bounded number of times.
_OLD_STYLE = re.compile(r"\{([A-Za-z_]\w*)(?:![rsa])?(?::[^{}]*)?\}")
_OLD_STYLE_HTML = re.compile(r"\{([A-Za-z_]\w*)\}")
_NO_FILES = (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)

# A fast-path piece: literal text (name None) or the data name whose value goes there.
Piece = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Part:
    """One compiled title, body or html."""

    jinja: jinja2.Template
    # The literal text and plain names the part is made of; None: Jinja renders it.
    pieces: tuple[Piece, ...] | None
    escaped: bool
    # A text part's pieces as a str.format string, each name as ``{name!s}``: str() of the
    # value, as Jinja, at the cost of one C call (joining the pieces costs twice as much).
    formatted: str | None = None

    @classmethod
    def of(cls, jinja: jinja2.Template, pieces: tuple[Piece, ...] | None, escaped: bool) -> Part:
        """The part, with its format string where it can have one."""
        if pieces is None or escaped or not all(n.isidentifier() for _, n in pieces if n):
            return cls(jinja, pieces, escaped)
        formatted = "".join(
            text.replace("{", "{{").replace("}", "}}") if name is None else f"{{{name}!s}}"
            for text, name in pieces
        )
        return cls(jinja, pieces, escaped, formatted)

    def render(self, data: Mapping[str, Any]) -> str:
        """The part filled from ``data`` (which has every name it needs)."""
        if self.formatted is not None:
            return self.formatted.format_map(data)
        pieces = self.pieces
        if pieces is None:
            return self.jinja.render(data)
        return "".join([text if name is None else escape(data[name]) for text, name in pieces])


@dataclass(frozen=True, slots=True)
class FilledPush:
    """A PUSH template's push parts, filled (``app.providers.base.PushContent`` is made of
    them)."""

    data: dict[str, str]
    badge: int | None
    sound: str
    link: str
    collapse_key: str


@dataclass(frozen=True, slots=True)
class CompiledTemplate:
    """The template of one type, locale and channel, ready to fill."""

    channel: Channel
    title: Part | None
    body: Part
    html: Part | None
    # The names the template needs from ``data``.
    fields: frozenset[str]
    # PUSH: the push parts by name (``Template.push_parts``), compiled.
    push: tuple[tuple[str, Part], ...] = ()

    def fill_push(self, data: Mapping[str, Any]) -> FilledPush:
        """The push parts filled from ``data`` (which ``fill`` has checked); ``FillError``
        says why not (a badge that is no whole number)."""
        try:
            filled = {name: part.render(data) for name, part in self.push}
        except Exception as error:  # as in ``fill``
            raise FillError(f"the template cannot be filled: {error}") from None
        badge_text = filled.pop("badge", "").strip()
        if badge_text and not (badge_text.isascii() and badge_text.isdigit()):
            raise FillError(f"the badge is not a whole number: {badge_text[:20]!r}")
        return FilledPush(
            data={name[5:]: value for name, value in filled.items() if name[:5] == "data."},
            badge=int(badge_text) if badge_text else None,
            sound=filled.get("sound", ""),
            link=filled.get("link", ""),
            collapse_key=filled.get("collapse_key", ""),
        )

    def fill(self, data: Mapping[str, Any]) -> tuple[str, str, str]:
        """(title, body, html) filled from ``data``; ``FillError`` says why not."""
        if not data.keys() >= self.fields:
            missing = sorted(self.fields - data.keys())[0]
            raise FillError(f"the template needs data.{missing}")
        try:
            title = self.title.render(data) if self.title is not None else ""
            body = self.body.render(data)
            html = self.html.render(data) if self.html is not None else ""
        except Exception as error:  # whatever the data does to the template fails it alone
            raise FillError(f"the template cannot be filled: {error}") from None
        if self.channel == _WEBHOOK:
            try:
                msgspec.json.decode(body)
            except msgspec.DecodeError as error:
                raise FillError(f"the WEBHOOK body is not JSON: {error}") from None
        return (title if title.isprintable() else title.translate(_ONE_LINE)), body, html


def compile_template(template: Template, channel: Channel) -> CompiledTemplate:
    """Compile every part of ``template``; ``TemplateProblem`` names the part and line."""
    if template.html and channel != Channel.EMAIL:
        raise TemplateProblem("html", f"only EMAIL templates have html, not {channel}")
    if template.title and channel in _UNTITLED:
        raise TemplateProblem("title", f"{channel} templates have no title")
    push_parts = template.push_parts()
    allowed = _in_app_part if channel == Channel.IN_APP else (lambda _: channel == Channel.PUSH)
    for name in push_parts:
        if not allowed(name):
            raise TemplateProblem(name, f"only PUSH templates have {name}, not {channel}")
    fields: set[str] = set()
    title = _compile_part("title", template.title, _TEXT, fields) if template.title else None
    body = _compile_part("body", template.body, _TEXT, fields)
    html = _compile_part("html", template.html, _HTML, fields) if template.html else None
    push = tuple(
        (name, _compile_part(name, source, _TEXT, fields)) for name, source in push_parts.items()
    )
    return CompiledTemplate(channel, title, body, html, frozenset(fields), push)


def _compile_part(part: str, source: str, env: jinja2.Environment, fields: set[str]) -> Part:
    """Compile one part and add the names it needs to ``fields``."""
    try:
        tree = env.parse(source)
        compiled = env.from_string(tree)
    except jinja2.TemplateSyntaxError as error:  # unknown filters and tests too
        raise TemplateProblem(part, f"line {error.lineno}: {error.message}") from None
    # Jinja leaves an unknown filter or test inside an ``if`` test to fail at render time.
    for used in tree.find_all((nodes.Filter, nodes.Test)):
        kind, known = (
            ("filter", env.filters) if isinstance(used, nodes.Filter) else ("test", env.tests)
        )
        if used.name not in known:
            raise TemplateProblem(part, f"line {used.lineno}: No {kind} named {used.name!r}.")
    for statement in tree.find_all(_NO_FILES):
        raise TemplateProblem(
            part, f"line {statement.lineno}: a template cannot extend, include or import another"
        )
    _refuse_old_style(part, tree, _OLD_STYLE_HTML if env.autoescape else _OLD_STYLE)
    fields |= required_fields(tree)
    return Part.of(compiled, _pieces(tree, env), escaped=bool(env.autoescape))


def _refuse_old_style(part: str, tree: nodes.Template, pattern: re.Pattern[str]) -> None:
    """An upgraded catalog's ``{code}`` would be sent as it is: refuse it, saying what to
    write instead (a literal ``{code}`` can be written ``{{ "{code}" }}``)."""
    for data in tree.find_all(nodes.TemplateData):
        found = pattern.search(data.data)
        if found:
            line = data.lineno + data.data.count("\n", 0, found.start())
            raise TemplateProblem(
                part,
                f"line {line}: {found.group()} is a placeholder of the old str.format "
                f"templates: write {{{{ {found.group(1)} }}}}",
            )


def _pieces(tree: nodes.Template, env: jinja2.Environment) -> tuple[Piece, ...] | None:
    """The literal texts and plain names ``tree`` consists of, or None if it has more.

    A name that is also a global of the environment (``range``) is left to Jinja, which
    falls back to the global when the data lacks it."""
    pieces: list[Piece] = []
    for statement in tree.body:
        if not isinstance(statement, nodes.Output):
            return None
        for node in statement.nodes:
            if isinstance(node, nodes.TemplateData):
                pieces.append((node.data, None))
            elif (
                isinstance(node, nodes.Name) and node.ctx == "load" and node.name not in env.globals
            ):
                pieces.append(("", node.name))
            else:
                return None
    return tuple(pieces)
