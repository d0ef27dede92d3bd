"""The README is the front door: short, its links lead somewhere, and its quick start is the
two commands the Makefile really has."""

from __future__ import annotations

import re

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
