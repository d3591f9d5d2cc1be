"""The golden check's file layout (dev/golden.py) compares what every run of a case writes
the same way, and leaves out what the maintenance thread writes when it gets to it."""

from __future__ import annotations

import shutil
from pathlib import Path

from dev import golden as golden_mod
from tests.goldens import GOLDEN, MAIN_LINE


def test_a_store_snapshot_caught_mid_write_does_not_change_the_layout(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(GOLDEN / f"spark-{MAIN_LINE}" / "small_aggregation_hdfs" / "checkpoint", checkpoint)
    before = golden_mod.layout(checkpoint, 4, changelog=False)
    # What a listing sees while the maintenance thread writes a store snapshot: its temporary
    # file and that file's checksum, before the rename.
    partition = checkpoint / "state" / "0" / "3"
    (partition / ".5.snapshot.0b0c7a2e-1d3f-4e55-9a10-7f6f3c2b9d01.tmp").write_bytes(b"x")
    (partition / "..5.snapshot.0b0c7a2e-1d3f-4e55-9a10-7f6f3c2b9d01.tmp.crc").write_bytes(b"x")
    (partition / "..5.snapshot.crc.0b0c7a2e-1d3f-4e55-9a10-7f6f3c2b9d01.tmp.crc").write_bytes(b"x")
    assert golden_mod.layout(checkpoint, 4, changelog=False) == before
    assert before, "the golden's layout is not empty"


def test_a_missing_delta_changes_the_layout(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(GOLDEN / f"spark-{MAIN_LINE}" / "small_aggregation_hdfs" / "checkpoint", checkpoint)
    before = golden_mod.layout(checkpoint, 4, changelog=False)
    (checkpoint / "state" / "0" / "3" / "2.delta").unlink()
    after = golden_mod.layout(checkpoint, 4, changelog=False)
    assert set(before) - set(after) == {"state/0/3/2.delta"}


def test_every_golden_records_the_query_of_its_own_case() -> None:
    """What `make golden` recorded as the query is today's source of the case it names (the
    drift check compares it on one case a day; this compares every one, without Spark)."""
    import json

    from dev.golden_cases import CASES

    records = sorted(GOLDEN.glob("spark-*/*/golden.json"))
    assert records
    wrong = [str(p.relative_to(GOLDEN)) for p in records
             if json.loads(p.read_text())["query"] != CASES[json.loads(p.read_text())["case"]].source()]
    assert wrong == []
