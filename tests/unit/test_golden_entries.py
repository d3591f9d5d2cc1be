"""The golden check's entries (dev/golden.py `compare`) hold a TTL state's expiration time as
present, not its value: it is the processing time the case ran at plus the TTL, so the same
case regenerated another day agrees, while any other change of the state still shows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dev import golden as golden_mod
from tests.goldens import GOLDEN

CASE = "transform_with_state_rocksdb_changelog"  # its count is kept with a TTL
TTL_READER = {"stateVarName": "cnt"}


def regenerated(tmp_path: Path, line: str, change: Any) -> Path:
    """The golden of `line` as if regenerated, with `change(row)` made to its TTL reader's rows."""
    fresh = tmp_path / "fresh"
    shutil.copytree(GOLDEN / f"spark-{line}" / CASE, fresh)
    record = json.loads((fresh / "golden.json").read_text())
    readers = [r for r in record["readers"] if {k: v for k, v in r["options"].items() if k != "batchId"} == TTL_READER]
    assert readers, "the case has a reader of its TTL state"
    for r in readers:
        r["rows"] = [change(row) for row in r["rows"]]
    (fresh / "golden.json").write_text(json.dumps(record))
    return fresh


def later(row: list[Any]) -> list[Any]:
    """The row as a run a day later writes it: the same count, its expiration a day later."""
    value, expires = row[1]["$tuple"]
    assert isinstance(expires, int), row
    return [row[0], {"$tuple": [value, expires + 86_400_000]}, *row[2:]]


@pytest.mark.parametrize("line", ["4.0", "4.1", "4.3"])
def test_a_ttl_states_expiration_from_another_day_agrees(tmp_path: Path, line: str) -> None:
    assert golden_mod.compare(GOLDEN / f"spark-{line}" / CASE, regenerated(tmp_path, line, later)) == []


def test_a_ttl_states_changed_count_is_a_drift(tmp_path: Path) -> None:
    def one_more(row: list[Any]) -> list[Any]:
        value, expires = later(row)[1]["$tuple"]
        return [row[0], {"$tuple": [{"$tuple": [value["$tuple"][0] + 1]}, expires]}, *row[2:]]

    problems = golden_mod.compare(GOLDEN / "spark-4.1" / CASE, regenerated(tmp_path, "4.1", one_more))
    assert len(problems) == 1 and problems[0].startswith('entries differ for {"batchId": 5, "stateVarName": "cnt"}')


def test_a_missing_expiration_is_a_drift(tmp_path: Path) -> None:
    def no_ttl(row: list[Any]) -> list[Any]:
        value, _ = row[1]["$tuple"]
        return [row[0], {"$tuple": [value, None]}, *row[2:]]

    problems = golden_mod.compare(GOLDEN / "spark-4.1" / CASE, regenerated(tmp_path, "4.1", no_ttl))
    assert len(problems) == 1 and "stateVarName" in problems[0]
