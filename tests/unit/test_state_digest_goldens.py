"""The digest of a checkpoint's whole state (engine/lookup/digest.py), without Spark, on
golden checkpoints real Spark wrote (tests/goldens.py) on every Spark line they were
generated for: each store holds as many entries as Spark's state reader returns at that
batch, every key sits in the partition Spark hashes it to, an earlier batch has another
digest, and a copy with two partitions swapped holds the same entries, misplaced."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.lookup.digest import state_digest
from tests.goldens import Golden, goldens

WINDOWED = ("windowed_aggregation_hdfs", "windowed_aggregation_rocksdb", "windowed_aggregation_rocksdb_changelog",
            "windowed_aggregation_rocksdb_changelog_format_2")
SINGLE_STORE = ("typed_dedup_hdfs", "typed_dedup_rocksdb_changelog", "dedup_with_watermark_hdfs",
                "apply_in_pandas_with_state_hdfs", "apply_in_pandas_with_state_rocksdb_changelog")


def params(*cases: str) -> list[object]:
    return [pytest.param(g, id=f"spark-{g.line}-{g.case}") for case in cases for g in goldens(case)]


@pytest.mark.parametrize("g", params(*SINGLE_STORE))
def test_a_digest_counts_the_entries_spark_reads_and_finds_every_key_where_spark_put_it(g: Golden) -> None:
    digest = state_digest(g.checkpoint)
    assert digest.batch_id == g.last_batch and digest.partitions == {0: 4}
    (store,) = digest.stores
    assert (store.operator_id, store.store) == (0, "default")
    assert store.entries == len(g.state().rows) > 0
    assert store.placement_checked and digest.misplaced == ()


@pytest.mark.parametrize("g", params(*WINDOWED))
def test_a_digest_of_a_windowed_aggregation_counts_the_entries_spark_reads(g: Golden) -> None:
    digest = state_digest(g.checkpoint)
    assert digest.batch_id == g.last_batch and digest.partitions == {0: 4}
    (store,) = digest.stores
    assert store.entries == len(g.state().rows) > 0 and store.placement_checked


@pytest.mark.parametrize("g", params(*WINDOWED))
def test_keys_with_a_repeated_column_name_are_found_where_spark_put_them(g: Golden) -> None:
    """This key (a window, then two grouping expressions Spark names `_groupingexpression`
    both) repeats a column name: placement reads the key's slots by position, not by name."""
    digest = state_digest(g.checkpoint)
    assert digest.misplaced == () and digest.misplaced_keys == 0 and digest.placed == digest.stores[0].entries > 0


@pytest.mark.parametrize("g", params("windowed_aggregation_hdfs", "windowed_aggregation_rocksdb_changelog"))
def test_an_earlier_batch_has_its_own_digest(g: Golden) -> None:
    early, last = state_digest(g.checkpoint, 2), state_digest(g.checkpoint)
    assert early.stores[0].entries == len(g.state(batchId=2).rows)
    assert early.same_entries(last) and early.stores[0].fingerprint != last.stores[0].fingerprint


@pytest.mark.parametrize("g", params("typed_dedup_hdfs"))
def test_two_partitions_swapped_hold_the_same_entries_in_the_wrong_places(g: Golden, tmp_path: Path) -> None:
    swapped = tmp_path / "swapped"
    shutil.copytree(g.checkpoint, swapped)
    a, b = swapped / "state" / "0" / "0", swapped / "state" / "0" / "1"
    a.rename(swapped / "tmp")
    b.rename(a)
    (swapped / "tmp").rename(b)
    (b / "_metadata").rename(a / "_metadata")  # the schema stays where Spark keeps it: partition 0
    digest = state_digest(str(swapped))
    assert digest.same_entries(state_digest(g.checkpoint)) == []
    assert digest.misplaced and "Spark looks for it in" in digest.misplaced[0]


@pytest.mark.parametrize("g", params("transform_with_state_rocksdb_changelog"))
def test_a_transform_with_state_digest_has_a_store_per_state_variable_with_sparks_entries(g: Golden) -> None:
    digest = state_digest(g.checkpoint)
    entries = {s.store: s.entries for s in digest.stores}
    assert entries["default/cnt"] == len(g.state(stateVarName="cnt").rows) == 120
    assert entries["default/items"] == len({r.key for r in g.state(stateVarName="items").rows})  # a list per key
    assert entries["default/bymod"] == len(g.state(stateVarName="bymod").rows)
