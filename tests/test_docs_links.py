"""The docs hang together: the README links every page of docs/ (runbooks included), every
relative link in the README and docs/ points at a file that exists, and no page still
calls a shipped feature "not yet built"."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted((REPO / "docs").rglob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_links_every_page_of_the_docs() -> None:
    readme = (REPO / "README.md").read_text()
    linked = {(REPO / m.group(1)).resolve() for m in LINK.finditer(readme) if not m.group(1).startswith("http")}
    missing = [str(p.relative_to(REPO)) for p in PAGES if p.resolve() not in linked]
    assert missing == [], f"README.md links none of {missing}"


def test_every_relative_link_points_at_a_file_that_exists() -> None:
    broken = []
    for page in [REPO / "README.md", *PAGES]:
        for m in LINK.finditer(page.read_text()):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_no_page_says_a_shipped_feature_is_not_built() -> None:
    stale = [str(p.relative_to(REPO)) for p in [REPO / "README.md", *PAGES] if "not yet built" in p.read_text().lower()]
    assert stale == []
