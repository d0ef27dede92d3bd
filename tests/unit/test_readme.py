"""The README is the front door: short, its links lead somewhere, and its quick start is the
two commands the Makefile really has."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

import yaml

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
MAX_LINES = 250


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [t for t in targets if not t.startswith(("http://", "https://", "#"))]
    assert local, "the README links to its docs"
    for target in local:
        path = target.partition("#")[0]
        assert (REPO / path).is_file(), f"README links to {target}, which is not there"


def test_the_readme_maps_every_page_of_the_docs_site() -> None:
    """Every page of the site's nav is reachable from the README, linked or (for the generated
    reference pages) named."""
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def pages(entries: list[object]) -> list[str]:
        found: list[str] = []
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                found += pages(value) if isinstance(value, list) else [str(value)]
        return found

    generated = {
        "using/api-reference.md": "API reference",
        "running/configuration.md": "configuration",
    }
    for page in pages(config["nav"]):
        if page == "index.md":
            continue
        if page in generated:
            assert generated[page] in README, f"the README does not name {page}"
        elif page.startswith("running/providers/") and page != "running/providers/index.md":
            continue  # one page per provider, reached from the providers' overview
        else:
            assert f"](docs/{page})" in README, f"the README's docs map misses docs/{page}"


def test_the_quick_start_is_two_make_targets() -> None:
    quick_start = README[README.index("## Quick start") :]
    block = re.search(r"```sh\n(.*?)```", quick_start, re.DOTALL)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make run", "make test"]
    makefile = (REPO / "Makefile").read_text()
    for target in ("run", "test", "docs"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no make {target}"


def test_the_readme_says_where_the_example_catalog_sends_each_channel() -> None:
    """Not "every channel goes to the sandbox": IN_APP goes to the inbox."""
    catalog = tomllib.loads((REPO / "clarion.toml").read_text())
    by_provider: dict[str, list[str]] = {}
    for channel, table in catalog["channels"].items():
        by_provider.setdefault(table["provider"], []).append(channel)
    assert sorted(by_provider) == ["inbox", "sandbox"]
    sandbox = ", ".join(sorted(by_provider["sandbox"], key=["PUSH", "EMAIL", "SMS"].index))
    assert by_provider["inbox"] == ["IN_APP"]
    said = " ".join(README.split())
    assert f"{sandbox.replace(', SMS', ' and SMS')} go to the `sandbox` provider" in said
    assert "IN_APP to the built-in inbox" in said


def make_run(*arguments: str, **environ: str) -> str:
    """What ``make run`` would run (``make -n``), with only ``environ`` set."""
    env = {"PATH": os.environ["PATH"], **environ}
    done = subprocess.run(
        ["make", "-s", "-n", "-C", str(REPO), "run", *arguments],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def test_the_public_url_follows_make_runs_port() -> None:
    """Unsubscribe links lead to the port the API listens on."""
    assert 'CLARION_PUBLIC_URL="${CLARION_PUBLIC_URL:-http://127.0.0.1:8000}"' in make_run()
    moved = make_run("PORT=9000", "WORKERS=4")
    assert 'CLARION_PORT="9000"' in moved
    assert 'CLARION_PUBLIC_URL="${CLARION_PUBLIC_URL:-http://127.0.0.1:9000}"' in moved
    assert moved.rstrip().endswith("clarion run --workers 4")
    assert 'CLARION_PORT="9100"' in make_run(CLARION_PORT="9100")


def test_compose_and_make_run_give_the_same_public_url() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    service = compose["services"]["clarion"]
    assert service["environment"]["CLARION_PUBLIC_URL"].endswith(":-http://127.0.0.1:8000}")
    assert service["ports"] == ["127.0.0.1:8000:8000"]
