"""The repository's own documents: what they link exists in the repository, and nothing points outside it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_FILES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("notebooks/*.ipynb"),
                     *ROOT.glob("params/*.yaml"), *ROOT.glob("benchlib/**/*.py")])
MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(path):
    text = path.read_text(encoding="utf-8")
    assert "../shared" not in text
    assert "MEASUREMENT.md" not in text, "the measurement notes are docs/measurement.md"


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))], ids=lambda p: p.name)
def test_relative_links_of_the_documents_resolve(path):
    for target in MARKDOWN_LINK.findall(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (path.parent / target).exists(), f"{path.name} links {target}, which is not in the repository"


def test_notebooks_link_the_measurement_notes_of_the_repository():
    text = (ROOT / "notebooks" / "benchmark.ipynb").read_text(encoding="utf-8")
    assert "../docs/measurement.md" in text and (ROOT / "docs" / "measurement.md").exists()
