"""docs/testing.md's map of the real components stays true: its table names every component
marker (tests/components.py, pyproject's markers) and, in that marker's row, every test file
the collected suite marks with it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.components import COLLECTED_MARKERS, COMPONENT_MARKERS

REPO = Path(__file__).resolve().parent.parent
MARKERS = sorted({*COMPONENT_MARKERS.values(), "spark_lines", "browser"})

# Collects the whole suite in another process and prints {marker: [test files]}.
COLLECT = """
import json, sys, pytest
markers = sys.argv[1].split(",")
class Report:
    def pytest_collection_finish(self, session):
        out = {m: sorted({item.nodeid.split("::")[0] for item in session.items if item.get_closest_marker(m)})
               for m in markers}
        print("MARKED " + json.dumps(out))
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"], plugins=[Report()]))
"""


def _rows() -> dict[str, str]:
    """The component table's rows by the marker they name."""
    rows = {}
    for line in (REPO / "docs" / "testing.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and re.fullmatch(r"`\w+`", cells[3]):
            rows[cells[3].strip("`")] = line
    return rows


def _marked_files(config: pytest.Config) -> dict[str, list[str]]:
    """{marker: the test files marked with it} of the whole suite: from this session's own
    collection when it collected every test file (a whole run: each xdist worker collects
    the whole suite), else from a collection of `tests` in another process."""
    collected = config.stash.get(COLLECTED_MARKERS, {})
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py")}
    if on_disk and on_disk <= collected.keys() and Path(str(config.rootpath)) == REPO:
        return {m: sorted(f for f, names in collected.items() if m in names) for m in MARKERS}
    proc = subprocess.run([sys.executable, "-c", COLLECT, ",".join(MARKERS)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    marked_line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("MARKED ")), None)
    assert marked_line is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(marked_line.removeprefix("MARKED "))


def test_the_component_map_names_every_marked_test_file_under_its_marker(request: pytest.FixtureRequest) -> None:
    marked = _marked_files(request.config)
    rows = _rows()
    assert sorted(m for m in MARKERS if m in rows) == MARKERS, f"docs/testing.md has no row for {set(MARKERS) - set(rows)}"
    missing = [f"{path} ({marker})" for marker, paths in marked.items() for path in paths
               if Path(path).name not in rows[marker]]
    assert marked["yarn"] and marked["hdfs"] and missing == [], f"docs/testing.md does not name {missing}"
