"""The golden checkpoints the readers' tests read (tests/golden, written by `make golden`:
dev/golden.py) are still what today's Spark writes: a case regenerated with the same query
and confs holds, at every batch recorded with it, the same entries as Spark's own state
reader returns them, and the same file layout (logs, operator metadata and schemas, the
state files each commit writes); what legitimately differs between two runs (store
snapshots the maintenance thread writes when it gets to it, uuids in file names, the times
in processing-time timers) is not compared.

One case per run on the main line (in this session's Spark) and one on another line (in its
own virtualenv), each picked by the day so that every case is checked over a few weeks
(`STREAMSTATE_GOLDEN_CHECK=<case>,...` picks them; `make golden-check` checks every case on
every line)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pytest

from dev import golden as golden_mod
from dev import spark_versions
from dev.golden_cases import CASES
from tests.goldens import GOLDEN, MAIN_LINE

pytestmark = pytest.mark.integration


def _generated(line: str) -> list[str]:
    return sorted(p.parent.name for p in GOLDEN.glob(f"spark-{line}/*/golden.json") if p.parent.name in CASES)


def _todays(choices: list[str], salt: int = 0) -> list[str]:
    """The case(s) named in STREAMSTATE_GOLDEN_CHECK that exist here, else one by the day."""
    asked = [c for c in os.environ.get("STREAMSTATE_GOLDEN_CHECK", "").split(",") if c]
    if asked:
        return [c for c in asked if c in choices]
    return [choices[(dt.date.today().toordinal() + salt) % len(choices)]] if choices else []


MAIN_CASES = _todays(_generated(MAIN_LINE))
OTHER_LINES = [v.line for v in spark_versions.SUPPORTED if not v.main and _generated(v.line)]
OTHER_LINE = OTHER_LINES[dt.date.today().toordinal() % len(OTHER_LINES)] if OTHER_LINES else None
OTHER_CASES = _todays(_generated(OTHER_LINE), salt=7) if OTHER_LINE else []


@pytest.mark.parametrize("case", MAIN_CASES)
@pytest.mark.usefixtures("spark_default_checkpoint_manager", "spark_compiled_sql_in_session")
def test_a_golden_regenerated_by_the_main_lines_spark_holds_the_same_entries_and_layout(spark, tmp_path,
                                                                                         case: str) -> None:
    problems = golden_mod.regenerate(spark, case, GOLDEN / f"spark-{MAIN_LINE}" / case, tmp_path / case)
    assert problems == [], "\n".join([f"golden {case} drifted from what Spark {spark.version} writes "
                                      "(if Spark changed on purpose: `make golden`, then review the diff)",
                                      *problems])


@pytest.mark.spark_lines
@pytest.mark.parametrize("case", OTHER_CASES)
@pytest.mark.usefixtures("spark_as_shipped")
def test_a_golden_regenerated_by_another_lines_spark_holds_the_same_entries_and_layout(case: str) -> None:
    assert OTHER_LINE is not None
    version = spark_versions.get(OTHER_LINE)
    if not version.installed():
        pytest.skip(f"Spark {OTHER_LINE} is not installed here: run `make setup`")
    out = subprocess.run([sys.executable, str(golden_mod.__file__), "--check", "--line", OTHER_LINE, "--case", case],
                         capture_output=True, text=True, timeout=600)
    report = [line for line in out.stdout.splitlines() if line.startswith(f"spark-{OTHER_LINE}") or
              line.startswith("  ")]
    assert out.returncode == 0, "\n".join(report) or out.stderr[-3000:]
    assert report and "as committed" in report[0], out.stdout[-3000:]
