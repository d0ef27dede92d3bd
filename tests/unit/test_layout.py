"""The code layout a newcomer relies on: who may import whom, units small enough to hold in
one's head, and the tests of each module in a file named after it. Each package's docstring
states its rules; this test keeps them true."""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("app", "streams", "projections", "clarion_client", "devtools")
# Where a package lives when not at the top of the repository: the Python client is a
# distribution of its own, installed without the server.
SOURCE_ROOTS = {"clarion_client": REPO / "client"}
# What the client may import besides itself and the standard library: its dependencies in
# client/pyproject.toml.
CLIENT_DEPENDENCIES = {"httpx", "msgspec"}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# The app modules every part of the app shares: they import no app sub-package.
SHARED_APP = {
    "app", "app.settings", "app.catalog", "app.logging", "app.validation", "app.metrics",
    "app.setting_values", "app.setting_variables", "app.unsubscribe", "app.inbox.tokens",
    "app.signed_tokens", "app.tracing",
}  # fmt: skip
# What each part may import from this repository (itself always; a prefix covers a package).
ALLOWED: dict[str, set[str]] = {
    "streams": {"streams"},
    "projections": {"projections", "streams"},
    "shared app": {*SHARED_APP, "streams"},
    "app.providers": {*SHARED_APP, "app.providers", "app.inbox", "streams"},
    "app.inbox": {*SHARED_APP, "app.inbox", "app.providers", "streams"},
    "app.ingest": {*SHARED_APP, "app.ingest", "streams"},
    "app.delivery": {
        *SHARED_APP, "app.delivery", "app.providers", "app.inbox", "app.recipients", "streams",
    },
    "app.status_webhooks": {
        *SHARED_APP, "app.status_webhooks", "app.providers", "projections", "streams",
    },
    "app.operations": {*SHARED_APP, "app.operations", "app.ingest", "projections", "streams"},
    "app.recipients": {*SHARED_APP, "app.recipients", "app.ingest", "projections", "streams"},
    "app.campaigns": {*SHARED_APP, "app.campaigns", "app.ingest", "projections", "streams"},
    "app.digests": {*SHARED_APP, "app.digests", "app.ingest", "streams"},
    "app.cancellations": {*SHARED_APP, "app.cancellations", "projections", "streams"},
    "app.feedback": {*SHARED_APP, "app.feedback", "app.recipients", "projections", "streams"},
    "app.api": {
        *SHARED_APP, "app.api", "app.campaigns", "app.ingest", "app.operations", "app.recipients",
        "app.feedback", "app.status_webhooks", "app.inbox", "app.cancellations", "projections",
        "streams",
    },
    "app.processes": {
        *SHARED_APP, "app.processes", "app.api", "app.campaigns", "app.delivery", "app.providers",
        "app.digests", "app.feedback", "app.status_webhooks", "projections", "streams",
    },
    "clarion_client": {"clarion_client"},
    "app.cli": {
        *SHARED_APP, "app.cli", "app.api", "app.campaigns", "app.ingest", "app.delivery",
        "app.providers",
        "app.operations", "app.processes", "app.recipients", "app.status_webhooks",
        "projections", "streams",
    },
}  # fmt: skip
# The HTTP edge: ``app.api`` and each feature's own routes (``app.<feature>.api``) may import
# every feature they serve, and each other (a feature's routes use the edge's auth, bodies
# and errors); nothing but the edge, the processes and the CLI imports them
# (``test_only_the_http_layer_imports_http``).
ROUTED_FEATURES = (
    "campaigns", "feedback", "inbox", "ingest", "operations", "recipients", "status_webhooks",
    "cancellations",
)  # fmt: skip
for feature in ROUTED_FEATURES:
    ALLOWED[f"app.{feature}.api"] = ALLOWED["app.api"]
# Development tooling (``make run``, ``make test``), never shipped: it may use the whole app
# and the streams; the product never imports it (``test_the_product_never_imports_devtools``).
DEVTOOLS = "devtools"
ALLOWED[DEVTOOLS] = {
    DEVTOOLS, "streams", *SHARED_APP, *(part for part in ALLOWED if part.startswith("app.")),
}  # fmt: skip
PRODUCT = ("app", "streams", "projections")
# Only the HTTP layer knows HTTP: Litestar, and the standard library's ``http``
# (``HTTPStatus``). The HTTP layer is whatever in ``app`` is named ``api``: the API
# (``app.api``), a feature's own routes (``app.inbox.api``), the process that serves them
# (``app.processes.api``).
HTTP_LIBRARIES = ("litestar", "http")
CLIENT = "clarion_client"


# Who may import the HTTP layer without being part of it: what runs it and what reads its
# schema or its answers.
MOUNT_THE_EDGE = ("app.processes", "app.cli", DEVTOOLS)


def knows_http(module: str) -> bool:
    top, *rest = module.split(".")
    return top == "app" and "api" in rest[:2]


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        root = SOURCE_ROOTS.get(package, REPO)
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def part_of(module: str) -> str:
    if module in SHARED_APP or module.startswith("app.catalog."):
        return "shared app"
    for part in sorted(ALLOWED, key=len, reverse=True):
        if module == part or module.startswith(part + "."):
            return part
    raise AssertionError(f"{module} belongs to no part of the layout: add it to ALLOWED")


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports, with its line (imports inside functions too)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # "from app import settings" imports app.settings
                yield node.lineno, f"{node.module}.{alias.name}"


def allowed(target: str, rules: set[str]) -> bool:
    """A rule names a package (everything in it is allowed) or, for the shared app modules,
    exactly one module (``app`` itself is not the whole app; the catalog is a package)."""
    return any(
        target == rule
        or ((rule not in SHARED_APP or rule == "app.catalog") and target.startswith(rule + "."))
        for rule in rules
    )


def local(target: str) -> bool:
    return target.split(".", maxsplit=1)[0] in PACKAGES


@pytest.mark.parametrize(("module", "path"), [pytest.param(*m, id=m[0]) for m in modules()])
def test_imports_flow_one_way(module: str, path: Path) -> None:
    rules = ALLOWED[part_of(module)]
    wrong = [
        f"line {line}: {target}"
        for line, target in imports(path)
        if local(target) and not allowed(target, rules) and not _is_name_of(target, rules)
    ]
    assert not wrong, f"{module} ({part_of(module)}) may import only {sorted(rules)}: {wrong}"


MODULES = {module for module, _ in modules()}


def _is_name_of(target: str, rules: set[str]) -> bool:
    """``from app.x import name`` also yields ``app.x.name``: a name, unless it is a module."""
    return target not in MODULES and allowed(target.rpartition(".")[0], rules)


@pytest.mark.parametrize(
    ("module", "path"), [pytest.param(*m, id=m[0]) for m in modules() if m[0].startswith(CLIENT)]
)
def test_the_client_imports_only_its_dependencies(module: str, path: Path) -> None:
    outside = {
        target
        for _, target in imports(path)
        if (top := target.split(".")[0]) not in {CLIENT, *CLIENT_DEPENDENCIES}
        and top not in sys.stdlib_module_names
    }
    assert not outside, f"{module} imports {outside}: add them to client/pyproject.toml first"


@pytest.mark.parametrize(("module", "path"), [pytest.param(*m, id=m[0]) for m in modules()])
def test_only_the_http_layer_imports_http(module: str, path: Path) -> None:
    if knows_http(module):
        return
    http = [
        target
        for _, target in imports(path)
        if target.split(".")[0] in HTTP_LIBRARIES
        or (knows_http(target) and not module.startswith(MOUNT_THE_EDGE))
    ]
    assert not http, f"{module} imports {http}: domain code must not know HTTP"


# Below the HTTP layer the domain raises the kinds of ``streams.core.errors``, and only
# ``app.api.errors`` gives them status codes. These modules speak HTTP with a peer, and
# read or write its status codes as the protocol's own: the providers' and the producers'
# endpoints' answers (``app.providers``, ``app.status_webhooks``), the server's edge that
# answers before the app sees a request (``app.processes.http_edge``), and the CLI, a client
# of the API.
PEER_HTTP = ("app.providers", "app.status_webhooks", "app.processes.http_edge", "app.cli")
ERROR_STATUSES = range(400, 600)
# Names an error must not carry: what the answer's status is, is the HTTP layer's to say.
STATUS_NAMES = {"status", "status_code", "http_status", "http_status_code"}


def status_literals(tree: ast.AST) -> Iterator[int]:
    """The lines where an error status (400-599) is given as an answer: a call's argument
    (alone or in a literal tuple, list or set), a comparison's operand, or returned."""

    def literals(node: ast.expr) -> list[ast.Constant]:
        found = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return [
            e for e in found
            if isinstance(e, ast.Constant) and type(e.value) is int and e.value in ERROR_STATUSES
        ]  # fmt: skip

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            operands = [*node.args, *(keyword.value for keyword in node.keywords)]
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Return) and node.value is not None:
            operands = [node.value]
        else:
            continue
        yield from (literal.lineno for operand in operands for literal in literals(operand))


@pytest.mark.parametrize(("module", "path"), [pytest.param(*m, id=m[0]) for m in modules()])
def test_no_status_code_is_answered_below_the_http_layer(module: str, path: Path) -> None:
    if knows_http(module) or module.startswith((*PEER_HTTP, CLIENT)):
        return
    lines = sorted(set(status_literals(ast.parse(path.read_text()))))
    assert not lines, (
        f"{module} lines {lines}: an HTTP status below the HTTP layer; raise a kind of "
        "streams.core.errors instead (app.api.errors gives it its status)"
    )


def error_classes() -> Iterator[tuple[str, ast.ClassDef]]:
    """Every class below the HTTP layer that derives from ``ClarionError``, found by the
    names of its bases (the HTTP layer's own exceptions carry their status by design)."""
    classes = [
        (module, node)
        for module, path in modules()
        if not module.startswith(CLIENT) and not knows_http(module)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]
    errors, grew = {"ClarionError"}, True
    while grew:
        before = len(errors)
        errors |= {node.name for _, node in classes if _base_names(node) & errors}
        grew = len(errors) > before
    yield from ((module, node) for module, node in classes if node.name in errors)


def _base_names(node: ast.ClassDef) -> set[str]:
    return {
        base.id if isinstance(base, ast.Name) else base.attr
        for base in node.bases
        if isinstance(base, ast.Name | ast.Attribute)
    }


def test_no_error_of_the_domain_carries_a_status() -> None:
    carrying = set()
    for module, node in error_classes():
        for inner in ast.walk(node):
            names: set[str] = set()
            if isinstance(inner, ast.AnnAssign | ast.Assign):
                targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                names = {
                    t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in targets
                }
            elif isinstance(inner, ast.arg):
                names = {inner.arg}
            if names & STATUS_NAMES:
                carrying.add(f"{module}.{node.name}")
    assert not carrying, f"errors with a status (app.api.errors gives it): {sorted(carrying)}"


@pytest.mark.parametrize(
    ("module", "path"),
    [pytest.param(*m, id=m[0]) for m in modules() if m[0].split(".")[0] in PRODUCT],
)
def test_the_product_never_imports_devtools(module: str, path: Path) -> None:
    wrong = [
        f"line {line}: {target}"
        for line, target in imports(path)
        if target.split(".")[0] == DEVTOOLS
    ]
    assert not wrong, f"{module} imports development tooling, which is not shipped: {wrong}"


def test_devtools_is_not_shipped() -> None:
    """The distribution's packages and the image's files leave the development tools out."""
    build = tomllib.loads((REPO / "pyproject.toml").read_text())
    included = build["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [pattern for pattern in included if fnmatch.fnmatch(DEVTOOLS, pattern)]
    image = (REPO / "Dockerfile").read_text()
    assert DEVTOOLS not in image
    assert "COPY . " not in image


def _package_dir(path: Path) -> Path:
    """The folder of the package a data file belongs to: its nearest with an ``__init__``."""
    folder = path.parent
    while not (folder / "__init__.py").exists():
        folder = folder.parent
    return folder


def test_every_file_a_package_reads_is_shipped() -> None:
    """Each Lua script, template, static file or migration is named by its package's entry in
    the distribution's package data, so the installed service (and the image) has it too."""
    build = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = build["tool"]["setuptools"]["package-data"]
    missing = []
    for top in PRODUCT:
        for path in (REPO / top).rglob("*"):
            if path.suffix not in {".lua", ".html", ".js", ".sql"}:
                continue
            package = _package_dir(path)
            name = ".".join(package.relative_to(REPO).parts)
            inside = path.relative_to(package).as_posix()
            if not any(fnmatch.fnmatch(inside, pattern) for pattern in shipped.get(name, [])):
                missing.append(str(path.relative_to(REPO)))
    assert not missing, f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"


def test_no_module_is_too_long() -> None:
    long = {
        module: lines
        for module, path in modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these along their seams (over {MAX_MODULE_LINES} lines): {long}"


def test_no_function_is_too_long() -> None:
    long = {}
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{module}.{node.name}"] = lines
    assert not long, f"split these (over {MAX_FUNCTION_LINES} lines): {long}"


def test_every_package_says_what_it_owns() -> None:
    for module, path in modules():
        if path.name == "__init__.py":
            docstring = ast.get_docstring(ast.parse(path.read_text()))
            assert docstring, f"{module} has no docstring saying what it owns"


def test_every_package_lists_its_parts() -> None:
    """A package's docstring is its map: it names (``name``) each of its sub-packages; in
    the write and read models (``streams``, ``projections``), each of its modules too."""
    unnamed = {}
    for module, path in modules():
        if path.name != "__init__.py":
            continue
        here = path.parent
        parts = {p.parent.name for p in here.glob("*/__init__.py")}
        if module.startswith(("streams", "projections")):
            parts |= {p.stem for p in here.glob("*.py") if p.stem != "__init__"}
        named = set(re.findall(r"``(\w+)``", ast.get_docstring(ast.parse(path.read_text())) or ""))
        if missing := parts - named:
            unnamed[module] = sorted(missing)
    assert not unnamed, f"name these in their package's docstring: {unnamed}"


# Tests mirror modules: a module with logic has a test file named after it (``mirror_of``)
# in tests/unit, tests/integration or tests/e2e, or in several. Package ``__init__`` files
# need none, and neither do these modules, which only declare things:
DECLARATIONS_ONLY = {
    "app.api.schemas",  # the API's request and answer types
    "app.catalog.kinds",  # each provider kind: its catalog entry and its channels
    "app.cli.__main__",  # ``python -m app.cli`` calls the command group
    "app.processes.clients",  # the arguments of one Redis client
    "app.providers.base",  # the provider contract: a message, an error, a protocol
    "streams.core.records",  # the notification record kept in Redis
    "streams.core.campaign_events",  # campaigns' events (tested with every event)
    "streams.core.event_base",  # the events' base and the words of their reasons
}
TIERS = ("unit", "integration", "e2e")
# The client's and the development tools' tests sit in a folder of their own, so that
# ``client/test_errors.py`` is never taken for the tests of an app's ``errors``.
TEST_PREFIX = {CLIENT: "client", DEVTOOLS: "devtools"}


def mirror_of(module: str) -> str:
    """The test file of ``module`` in a tier, by feature: its package path without the top
    package as folders, ``test_`` and its name (``app.inbox.tokens`` →
    ``inbox/test_tokens.py``, ``streams.inbox.store`` → ``inbox/test_store.py``,
    ``app.settings`` → ``test_settings.py``), the client's in ``client/``
    (``clarion_client.retry`` → ``client/test_retry.py``). The app's and the write model's
    parts of a feature share its folder."""
    top, *rest = module.split(".")
    words = [TEST_PREFIX[top], *rest] if top in TEST_PREFIX else rest
    return "/".join([*words[:-1], f"test_{words[-1]}.py"])


def test_no_two_modules_share_a_test_file() -> None:
    """Two modules of one name in one feature (``app.x.store``, ``streams.x.store``) would
    share a test file, and one of them could go untested unnoticed: name them apart."""
    owners: dict[str, list[str]] = {}
    for module, path in modules():
        if path.name != "__init__.py":
            owners.setdefault(mirror_of(module), []).append(module)
    shared = {test: names for test, names in owners.items() if len(names) > 1}
    assert not shared, f"these would share a test file: {shared}"


def test_every_module_with_logic_has_a_test_file_named_after_it() -> None:
    assert DECLARATIONS_ONLY <= MODULES, f"no such modules: {DECLARATIONS_ONLY - MODULES}"
    test_files = {
        path.relative_to(REPO / "tests" / tier).as_posix()
        for tier in TIERS
        for path in (REPO / "tests" / tier).rglob("test_*.py")
    }
    untested = {
        module: mirror_of(module)
        for module, path in modules()
        if path.name != "__init__.py"
        and module not in DECLARATIONS_ONLY
        and mirror_of(module) not in test_files
    }
    assert not untested, f"add a test file named after each (in {'/'.join(TIERS)}): {untested}"
