"""The docs a newcomer reads point at files that exist, and the project stands on its own.

Every relative link in the README and in ``docs/`` must resolve to a file or directory of the repository
(files move: a link left behind is found here, not by a reader). And no tracked text refers to the
shared directory beside the checkout, which a fresh clone does not have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "k8s").glob("**/*.md")])

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
"""An inline Markdown link ``[text](target "title")``; images are not checked."""

EXTERNAL = ("http://", "https://", "mailto:")


def relative_links(markdown: str) -> list[str]:
    """The link targets of ``markdown`` that name a place in the repository, without their #fragment."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)  # a link in a code block is an example
    targets = (match.group(1) for match in LINK.finditer(text))
    return [t.split("#", 1)[0] for t in targets if not t.startswith(EXTERNAL) and not t.startswith("#")]


def test_relative_links_are_found_and_external_ones_skipped() -> None:
    text = (
        "See [the design](docs/architecture.md#layers), [SimKube](https://github.com/acrlabs/simkube), "
        '[top](#kubetape), [stack](stack.md "the stack") and ![a picture](img.png).\n'
        "```\n[not a link](nowhere.md)\n```\n"
    )

    assert relative_links(text) == ["docs/architecture.md", "stack.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = [
        target for target in relative_links(doc.read_text()) if not (doc.parent / target).resolve().exists()
    ]

    assert not broken, f"{doc.relative_to(REPO)} links to missing files: {broken}; fix the link or the file"


TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".txt", ".json", ".c", ""}
SOURCE_DIRS = ("pipeline", "services", "tests", "scripts", "bench", "k8s", "docs", "examples", ".ci")
SHARED = ("/".join(["..", "shared"]), "/".join(["", "work", "shared"]))  # spelled apart: not a match here


def test_nothing_refers_to_the_shared_directory_beside_the_checkout() -> None:
    roots = [REPO / name for name in SOURCE_DIRS]
    files = [REPO / name for name in ("README.md", "pyproject.toml", "Dockerfile", "docker-compose.yml")]
    files += [p for root in roots if root.is_dir() for p in root.rglob("*") if p.is_file()]
    referring = [
        str(p.relative_to(REPO))
        for p in files
        if p.suffix in TEXT_SUFFIXES
        and "__pycache__" not in p.parts
        and any(s in p.read_text(errors="replace") for s in SHARED)
    ]

    assert not referring, f"these files refer to the shared directory, which a fresh clone lacks: {referring}"
