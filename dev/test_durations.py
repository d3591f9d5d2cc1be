"""Write tests/durations.json (seconds per test file) from a pytest JUnit XML report, so the
suite can start the longest files first (tests/conftest.py) and the two xdist workers end
together instead of one idling while the other runs the last heavy file.

    .venv/bin/pytest ... --junitxml=/tmp/junit.xml   # e.g. bash dev/run-tests.sh --junitxml=/tmp/junit.xml
    .venv/bin/python dev/test_durations.py /tmp/junit.xml

Only the order depends on it: a file it does not list runs after the listed ones.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "durations.json"


def file_durations(junit: Path) -> dict[str, float]:
    """Seconds per test file: the sum of its tests' times (setup and teardown included)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        # `tests.integration.test_x` or `tests.integration.test_x.TestClass`
        mod = next((i for i, p in enumerate(parts) if p.startswith("test_")), None)
        if mod is None:
            continue
        totals["/".join(parts[: mod + 1]) + ".py"] += float(case.get("time", 0) or 0)
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    durations = file_durations(Path(argv[0]))
    if not durations:
        print(f"error: no test cases in {argv[0]}; pass the report of a whole run", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(durations, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}: {len(durations)} files, {sum(durations.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
