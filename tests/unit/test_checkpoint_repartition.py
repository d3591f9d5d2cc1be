"""A checkpoint whose state Spark's offline repartition (4.2+) spread over another number of
partitions: the number a batch's offsets pinned is the number of partitions a cut of that
batch plans (the operator metadata of batch 0 keeps the old one; the old directories above
a smaller number stay on disk, read by no later version), the repartition batch is told
from an ordinary one, and one Spark wrote but did not commit is reported as unfinished.
Synthetic checkpoints with Spark's layout (the real ones: tests/integration/test_rescale.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader, state_partitions
from airflow_provider_streamstate.engine.checkpoint.repartition import (
    Repartition,
    repartition_at,
    unfinished_repartition,
)
from airflow_provider_streamstate.engine.core.errors import CheckpointChanged
from tests.unit.fake_checkpoint import make_checkpoint, write

SHUFFLE = "spark.sql.shuffle.partitions"


def _repartition(root: Path, batch: int, partitions: int, *, commit: bool = True) -> None:
    """What Spark writes: batch `batch` with the previous batch's sources and timestamp, the
    new number pinned, version batch+1 in every new partition."""
    lines = (root / f"offsets/{batch - 1}").read_text().splitlines()
    meta = json.loads(lines[1])
    meta["conf"] = {**meta["conf"], SHUFFLE: str(partitions)}
    write(root / f"offsets/{batch}", "\n".join([lines[0], json.dumps(meta), *lines[2:]]))
    if commit:
        write(root / f"commits/{batch}", "v1\n" + json.dumps({"nextBatchWatermarkMs": meta["batchWatermarkMs"]}))
    for p in range(partitions):
        write(root / f"state/0/{p}/{batch + 1}.snapshot", f"repartitioned {p}")


def _checkpoint(tmp_path: Path, partitions: int = 4) -> Path:
    root = make_checkpoint(tmp_path / "ckpt", batches=3, partitions=partitions, conf={SHUFFLE: str(partitions)})
    for p in range(partitions):
        for v in (1, 2, 3):
            write(root / f"state/0/{p}/{v}.delta", f"delta {v} of {p}")
    return root


def _partitions_planned(root: Path, batch: int) -> set[str]:
    plan = CheckpointReader(str(root)).plan(batch)
    assert plan.operators[0]["partitions"] == len({f.path.split("/")[2] for f in plan.files
                                                   if f.path.startswith("state/0/") and "_metadata" not in f.path})
    return {f.path.split("/")[2] for f in plan.files if f.path.startswith("state/0/") and "_metadata" not in f.path}


def test_a_cut_plans_the_partitions_its_batch_pinned_before_and_after_growing(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path)
    _repartition(root, 3, 12)
    assert _partitions_planned(root, 3) == {str(p) for p in range(12)}
    assert _partitions_planned(root, 2) == {str(p) for p in range(4)}  # 4..11 hold nothing of batch 2
    assert repartition_at(CheckpointReader(str(root)), 3) == Repartition(3, 4, 12, committed=True)


def test_after_shrinking_the_old_partitions_above_the_new_number_are_not_planned(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path, partitions=12)
    _repartition(root, 3, 3)
    assert _partitions_planned(root, 3) == {"0", "1", "2"}
    assert _partitions_planned(root, 2) == {str(p) for p in range(12)}


def test_a_missing_partition_directory_of_the_pinned_number_is_a_changed_checkpoint(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path)
    _repartition(root, 3, 6)
    for f in (root / "state/0/5").iterdir():
        f.unlink()
    (root / "state/0/5").rmdir()
    with pytest.raises(CheckpointChanged, match="no directory for partition 5 of the 6 its batch 3 pinned"):
        CheckpointReader(str(root)).plan(3)


def test_an_uncommitted_repartition_is_unfinished_and_an_ordinary_batch_in_flight_is_not(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path)
    reader = CheckpointReader(str(root))
    assert unfinished_repartition(reader) is None and repartition_at(reader, 2) is None
    # A batch in flight: new input and a new timestamp, the same partitions.
    lines = (root / "offsets/2").read_text().splitlines()
    meta = {**json.loads(lines[1]), "batchTimestampMs": 9999}
    write(root / "offsets/3", "\n".join([lines[0], json.dumps(meta), '{"tx": {"0": 40, "1": 80}}']))
    assert unfinished_repartition(reader) is None
    (root / "offsets/3").unlink()
    _repartition(root, 3, 8, commit=False)
    found = unfinished_repartition(CheckpointReader(str(root)))
    assert found == Repartition(3, 4, 8, committed=False)
    assert "not committed: Spark will not start the query on it" in found.describe()
    assert CheckpointReader(str(root)).committed_batches()[-1] == 2  # a snapshot cuts at batch 2


@pytest.mark.parametrize(("conf", "expected"), [
    ({SHUFFLE: "200"}, 200),
    ({SHUFFLE: "8", "spark.sql.streaming.internal.stateStore.partitions": "24"}, 24),
    ({}, None),
    ({SHUFFLE: "x"}, None),
])
def test_the_state_partitions_come_from_the_pinned_confs(conf: dict[str, str], expected: int | None) -> None:
    assert state_partitions(conf) == expected
