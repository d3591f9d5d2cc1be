"""One key across snapshots without Spark (engine/lookup/history.py), on an HDFS-backed
checkpoint whose state files are written byte by byte as Spark writes them: the value in
every snapshot with the batches where it changed, each blob of the key's partition fetched
from the store once (a snapshot whose partition is unchanged reads nothing), ranges by
batch or snapshot id, and the first snapshot where a condition became true. A live
checkpoint looked up again after its next commit reads only the new delta (and its first
lookup only the newest delta that decides the key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.core.errors import NotFoundError, UsageError
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import (
    PartitionCache,
    bisect_key,
    key_history,
    lookup_key,
)
from tests.unit.state_files import Aggregation

# Batch by batch: (changes, whether a snapshot is taken after it). Key "a" changes at
# batches 0, 2 and 5 and is removed at 6; batches 3 and 4 touch another partition only.
KEY = "a"


def build(tmp_path: Path) -> tuple[Aggregation, LocalStore, list[str]]:
    agg = Aggregation(tmp_path / "ckpt", partitions=3)
    other = next(k for k in ("b", "c", "d", "e", "f", "g") if agg.partition(k) != agg.partition(KEY))
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = []
    for changes in ({KEY: 1, other: 1}, {other: 2}, {KEY: 3}, {other: 3}, {other: 4}, {KEY: 7}, {KEY: None}):
        agg.commit(changes)
        ids.append(create_snapshot(str(agg.root), store, "s").manifest.snapshot_id)
    return agg, store, ids


def test_the_history_of_a_key_has_its_value_at_every_snapshot_and_the_batches_where_it_changed(tmp_path) -> None:
    agg, store, ids = build(tmp_path)
    h = key_history(store, "s", key=KEY)
    assert [v.snapshot_id for v in h.versions] == ids
    assert [(v.batch_id, v.found, v.value) for v in h.versions] == [
        (0, True, {"n": 1}), (1, True, {"n": 1}), (2, True, {"n": 3}), (3, True, {"n": 3}), (4, True, {"n": 3}),
        (5, True, {"n": 7}), (6, False, None)]
    assert [(v.previous_batch_id, v.batch_id) for v in h.changes] == [(None, 0), (1, 2), (4, 5), (5, 6)]
    assert h.key == {"k": KEY} and h.kind == "value" and h.operator_name == "stateStoreSave"
    doc = h.to_json()
    assert doc["changes"] == 4 and doc["versions"][2]["value"] == {"n": 3}


def test_a_history_fetches_each_blob_of_the_keys_partition_once_and_nothing_for_an_unchanged_one(tmp_path) -> None:
    agg, store, ids = build(tmp_path)
    h = key_history(store, "s", key=KEY)
    p = agg.partition(KEY)
    from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot

    files = [f for i in ids for f in get_snapshot(store, "s", i).files]  # deltas read with their chain
    deltas = {f.sha256 for f in files if f.path.startswith(f"state/0/{p}/") and f.path.endswith(".delta")}
    schema = {f.sha256 for f in files if f.path == "state/0/0/_metadata/schema"}
    # Seven deltas in the key's partition, three of them empty (the same bytes: one blob),
    # and the schema file: each fetched once, nothing else.
    assert len(deltas) == 5
    assert h.blobs_read == h.distinct_blobs_read == len(deltas | schema) == 6
    assert h.manifests_read == 7
    # Batches 3 and 4 added only empty deltas to the partition: fetched at batch 1 already,
    # applied to batch 2's decoded state.
    assert [v.blobs_read for v in h.versions] == [2, 1, 1, 0, 0, 1, 1]
    assert [v.reused for v in h.versions] == [False] * 7
    again = key_history(store, "s", key=KEY, cache=PartitionCache())
    assert [v.value for v in again.versions] == [v.value for v in h.versions]


def test_a_snapshot_with_the_same_partition_files_is_answered_without_reading(tmp_path) -> None:
    agg = Aggregation(tmp_path / "ckpt", partitions=3)
    store = LocalStore(tmp_path / "store", fsync=False)
    agg.commit({KEY: 1})
    create_snapshot(str(agg.root), store, "s")
    create_snapshot(str(agg.root), store, "s", always=True)  # the same batch again: the same files
    h = key_history(store, "s", key=KEY)
    assert [(v.reused, v.blobs_read, v.changed) for v in h.versions] == [(False, 2, True), (True, 0, False)]


def test_a_range_by_batch_or_snapshot_id_and_a_limit(tmp_path) -> None:
    _, store, ids = build(tmp_path)
    assert [v.batch_id for v in key_history(store, "s", key=KEY, start=2, end="4").versions] == [2, 3, 4]
    assert [v.batch_id for v in key_history(store, "s", key=KEY, start=ids[5], end="latest").versions] == [5, 6]
    assert [v.batch_id for v in key_history(store, "s", key=KEY, limit=2).versions] == [5, 6]
    with pytest.raises(UsageError, match="after its end"):
        key_history(store, "s", key=KEY, start=5, end=2)
    with pytest.raises(NotFoundError, match="no snapshot on timeline 1 in batches 50..-"):
        key_history(store, "s", key=KEY, start=50)
    with pytest.raises(NotFoundError, match="stream nope has no snapshots"):
        key_history(store, "nope", key=KEY)


def test_bisect_finds_the_first_snapshot_where_a_condition_on_the_key_holds(tmp_path) -> None:
    _, store, ids = build(tmp_path)
    b = bisect_key(store, "s", key=KEY, where="n >= 3", end=5)  # the key is gone at batch 6
    assert b.first is not None and b.last_before is not None
    assert (b.first.snapshot_id, b.last_before.batch_id) == (ids[2], 1)
    assert len(b.steps) <= 4 and not b.violations  # ceil(log2 6) + 1
    assert "became true in batches 2..2" in b.summary()
    gone = bisect_key(store, "s", key=KEY, where="absent")
    assert gone.first is not None and gone.first.batch_id == 6
    callable_check = bisect_key(store, "s", key=KEY, where=lambda hit: hit.found and hit.value["n"] > 5)
    assert callable_check.first is None  # the newest snapshot does not hold the key: nothing to search
    never = bisect_key(store, "s", key=KEY, where="n > 100", end=5)
    assert never.first is None and len(never.steps) == 1 and "holds in none of the 6" in never.summary()
    with pytest.raises(UsageError, match="no field 'total'"):
        bisect_key(store, "s", key=KEY, where="total > 1", end=5)


def test_a_live_checkpoint_looked_up_after_its_next_commit_reads_only_the_new_delta(tmp_path) -> None:
    agg = Aggregation(tmp_path / "ckpt", partitions=3)
    for n in range(1, 5):
        agg.commit({KEY: n})
    cache = PartitionCache()
    first = lookup_key(str(agg.root), key=KEY, cache=cache)
    # The newest delta holding the key decides it: the older ones are not read.
    assert first.value == {"n": 4}
    assert [f for f in first.files_read if f.endswith(".delta")] == [f"state/0/{agg.partition(KEY)}/4.delta"]
    agg.commit({KEY: 5})
    second = lookup_key(str(agg.root), key=KEY, cache=cache)
    assert second.value == {"n": 5} and second.batch_id == 4
    assert [f for f in second.files_read if f.endswith(".delta")] == [f"state/0/{agg.partition(KEY)}/5.delta"]
    assert lookup_key(str(agg.root), key=KEY, batch_id=2, cache=cache).value == {"n": 3}
