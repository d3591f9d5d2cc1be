"""Seconds per test file from a pytest JUnit XML report: written to tests/durations.json, so
the suite can start the longest files first (tests/conftest.py) and the two xdist workers end
together instead of one idling while the other runs the last heavy file; or printed as the
run's cost (the total work and the heaviest files), which dev/run-tests.sh does after every run.

    .venv/bin/pytest ... --junitxml=/tmp/junit.xml   # e.g. bash dev/run-tests.sh --junitxml=/tmp/junit.xml
    .venv/bin/python dev/test_durations.py /tmp/junit.xml                    # write tests/durations.json
    .venv/bin/python dev/test_durations.py --summary /tmp/junit.xml [--wall S] [--top N]

Only the order depends on tests/durations.json: a file it does not list runs after the listed ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "durations.json"


def _test_file(classname: str) -> str | None:
    """`tests/integration/test_x.py` for `tests.integration.test_x` or `tests.integration.test_x.TestClass`."""
    parts = classname.split(".")
    mod = next((i for i, p in enumerate(parts) if p.startswith("test_")), None)
    return None if mod is None else "/".join(parts[: mod + 1]) + ".py"


def file_durations(junit: Path) -> dict[str, float]:
    """Seconds per test file: the sum of its tests' times (setup and teardown included)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = _test_file(case.get("classname", ""))
        if path is not None:
            totals[path] += float(case.get("time", 0) or 0)
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def summary(junit: Path, *, wall_s: float | None = None, top: int = 20) -> str:
    """The run's cost: tests, total work (the sum of every test's seconds, set-up included),
    how busy the workers were on average, and the `top` heaviest files with their share."""
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    per_file = file_durations(junit)
    work = sum(float(c.get("time", 0) or 0) for c in cases)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    lines = [f"test work: {len(cases)} tests ({skipped} skipped), {work:.0f} s of work"
             + (f" in {wall_s:.0f} s ({work / wall_s:.2f} tests running on average)" if wall_s else "")]
    lines.append(f"the {min(top, len(per_file))} heaviest files (seconds of work, share):")
    for path, seconds in list(per_file.items())[:top]:
        lines.append(f"  {seconds:8.1f}  {100 * seconds / work if work else 0:5.1f}%  {path}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dev/test_durations.py", description=__doc__.split("\n")[0])
    parser.add_argument("junit", type=Path, help="a pytest JUnit XML report")
    parser.add_argument("--summary", action="store_true", help="print the run's cost instead of writing the record")
    parser.add_argument("--wall", type=float, default=None, help="--summary: the run's wall-clock seconds")
    parser.add_argument("--top", type=int, default=20, help="--summary: how many files to list")
    args = parser.parse_args(argv)
    if not args.junit.is_file():
        print(f"error: no report at {args.junit}", file=sys.stderr)
        return 1
    if args.summary:
        print(summary(args.junit, wall_s=args.wall, top=args.top))
        return 0
    durations = file_durations(args.junit)
    if not durations:
        print(f"error: no test cases in {args.junit}; pass the report of a whole run", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(durations, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}: {len(durations)} files, {sum(durations.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
