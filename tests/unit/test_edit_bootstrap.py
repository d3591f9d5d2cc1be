"""A new checkpoint bootstrapped from a table (engine/edit/bootstrap.py), shaped as golden
checkpoints real Spark wrote: the table of a golden's own entries gives a checkpoint whose
batch 0 holds exactly the golden's state (the same entries, byte for byte, each in its
partition), with the given Kafka offsets; what cannot be bootstrapped is refused in one line
with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError, UsageError
from airflow_provider_streamstate.engine.edit.bootstrap import bootstrap_checkpoint
from airflow_provider_streamstate.engine.edit.changes import matching_entries, store_schema
from airflow_provider_streamstate.engine.lookup.digest import state_digest
from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource
from tests.goldens import Golden, goldens

CASES = [pytest.param(g, id=f"spark-{g.line}-{g.case}")
         for case in ("small_aggregation_hdfs", "small_aggregation_rocksdb_changelog", "typed_dedup_rocksdb_changelog",
                      "typed_dedup_hdfs")
         for g in goldens(case) if g.line in ("4.1", "4.3")]


def table_of(checkpoint: str) -> list[dict[str, Any]]:
    """The state of operator 0 as a table, named as the state reader names columns."""
    src = CheckpointSource(checkpoint)
    _, schema = store_schema(src, 0, "default")
    return [{**{f"key_{n}": v for n, v in zip(schema.key.names, k, strict=True)},
             **{f"value_{n}": v for n, v in zip(schema.value.names, v, strict=True)}, "partition_id": -1}
            for k, v in matching_entries(src, 0, "default", None)]


@pytest.mark.parametrize("g", CASES)
def test_a_table_of_a_states_entries_bootstraps_exactly_that_state(g: Golden, tmp_path: Path) -> None:
    target = str(tmp_path / "new")
    rows = table_of(g.checkpoint)
    done = bootstrap_checkpoint(g.checkpoint, target, rows)
    assert done.keys == len(rows) == len(g.state().rows)
    new, old = state_digest(target, 0), state_digest(g.checkpoint)
    assert new.same_entries(old) == [] and not new.misplaced_keys
    reader = CheckpointReader(target)
    assert reader.committed_batches() == [0] and reader.offsets(0)[1] == CheckpointReader(g.checkpoint).offsets(
        CheckpointReader(g.checkpoint).resolve_batch(None))[1]
    assert json.loads((tmp_path / "new" / "metadata").read_text())["id"] == done.query_id


def test_given_offsets_must_be_kafkas_for_a_kafka_source_only(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    with pytest.raises(UsageError, match="is not a Kafka source"):
        bootstrap_checkpoint(g.checkpoint, str(tmp_path / "new"), table_of(g.checkpoint),
                             source_offsets=[{"orders": {"0": 10}}])
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(("case", "rows", "error", "words"), [
    ("small_aggregation_rocksdb_changelog", [{"key__groupingexpression": 1}], UsageError, "has no column 'value_sum'"),
    ("small_aggregation_rocksdb_changelog", [], UsageError, "the table has no rows"),
    ("windowed_aggregation_rocksdb_changelog_format_2", None, UnsupportedCheckpointError, "checkpoint format 2"),
    ("windowed_aggregation_rocksdb", None, UnsupportedCheckpointError, "without changelog checkpointing"),
    ("windowed_aggregation_hdfs", [{}], UnsupportedCheckpointError, "two columns of the state share a name"),
])
def test_what_cannot_be_bootstrapped_is_refused_with_nothing_written(
        case: str, rows: list | None, error: type, words: str, tmp_path: Path) -> None:
    (g,) = [g for g in goldens(case) if g.line == "4.1"]
    with pytest.raises(error, match=words):
        bootstrap_checkpoint(g.checkpoint, str(tmp_path / "new"), rows if rows is not None else [])
    assert not (tmp_path / "new").exists()


def test_a_target_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "offsets").mkdir()
    (tmp_path / "new" / "offsets" / "0").write_text("v1\n{}")
    with pytest.raises(UsageError, match="is not empty"):
        bootstrap_checkpoint(g.checkpoint, str(tmp_path / "new"), table_of(g.checkpoint))


def test_spark_is_asked_about_a_bounded_sample_of_the_changed_keys_spread_over_them() -> None:
    from airflow_provider_streamstate.engine.edit.spark_check import SPARK_KEYS, sample

    changes = list(range(10_000))
    picked = sample(changes)  # type: ignore[arg-type]
    assert len(picked) == SPARK_KEYS and picked[0] == 0 and picked[-1] > 9_800
    assert len(set(p // 1_000 for p in picked)) == 10  # every tenth of the edit is asked about
    assert sample(changes[:5]) == changes[:5]  # type: ignore[arg-type]


def test_a_bootstrap_that_fails_after_writing_leaves_its_target_empty(tmp_path: Path) -> None:
    from airflow_provider_streamstate.engine.edit.spark_check import EditCheckFailed

    (g,) = [g for g in goldens("small_aggregation_hdfs") if g.line == "4.1"]

    def no_spark(args: Any) -> tuple[list[str], dict[str, str]]:
        return ["false"], {}  # a check job that dies without an answer

    with pytest.raises(EditCheckFailed):
        bootstrap_checkpoint(g.checkpoint, str(tmp_path / "new"), table_of(g.checkpoint), command=no_spark)
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").rglob("*"))
