"""A key's history across the snapshots of a real stream in an S3 store (moto), without Spark:
at every snapshot the value is what Spark's own state reader shows for that key at that
batch (RocksDB state with changelog checkpointing, so its partition holds a zip, its tables
and the changelogs after it), the S3 requests for state are GETs of the key's partition's
blobs that changed between snapshots, each once (never another partition's, never the whole
snapshot), a second history served from the cache fetches no state at all, and the first
snapshot where a condition on the key holds is found by bisection.

The stream is a golden checkpoint (tests/goldens.py: `count_per_key_rocksdb_changelog`,
written by real Spark, with Spark's reader's answer at every batch), snapshotted batch by
batch as a running stream's would be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import PartitionCache, bisect_key, key_history
from tests.goldens import golden
from tests.lookup_cases import ours_norm
from tests.unit.conftest import moto_bucket


class BlobGets:
    """The S3 GETs of blobs a store's client sends (botocore's own event hook: it watches the
    real requests to moto, it does not replace them)."""

    def __init__(self, store: Any) -> None:
        self.prefix = f"{store.prefix}/blobs/sha256/"
        self.keys: list[str] = []
        self.ranges: list[tuple[str, str | None]] = []  # (blob, Range header): a RocksDB table is read by ranges
        store.client.meta.events.register("before-parameter-build.s3.GetObject", self._seen)

    def _seen(self, params: dict[str, Any], **_: Any) -> None:
        key = params.get("Key", "")
        if key.startswith(self.prefix):
            self.keys.append(key.rsplit("/", 1)[-1])
            self.ranges.append((key.rsplit("/", 1)[-1], params.get("Range")))


def test_a_keys_history_in_s3_matches_spark_at_every_snapshot_reading_each_changed_blob_of_its_partition_once(
        tmp_path: Path, moto_endpoint: str) -> None:
    g = golden("count_per_key_rocksdb_changelog")
    batches = CheckpointReader(g.checkpoint).committed_batches()
    store = S3Store(moto_bucket(moto_endpoint, "history"), "history", f"t/{tmp_path.name}")
    manifests = [create_snapshot(g.checkpoint, store, "agg", batch_id=b).manifest for b in batches]
    # Spark's answer at each snapshot's batch, for two keys of different partitions.
    expected: dict[int, dict[int, Any]] = {
        m.batch_id: {r.key[0]: (r.value, r.partition_id) for r in g.state(batchId=m.batch_id).rows} for m in manifests}

    gets = BlobGets(store)
    cache = PartitionCache()
    for key in (5, 6):
        before = len(gets.keys)
        h = key_history(store, "agg", key=[key], cache=cache)
        requests = gets.ranges[before:]
        fetched = list(dict.fromkeys(blob for blob, _ in requests))
        assert [v.batch_id for v in h.versions] == batches
        for v in h.versions:
            want = expected[v.batch_id].get(key)
            assert v.found == (want is not None), (key, v.batch_id)
            if want is not None:
                assert ours_norm(v.value, h.value_schema) == want[0] and v.partition == want[1], (key, v.batch_id)
        assert [v.batch_id for v in h.changes] == sorted({b for b in batches if expected[b].get(key)
                                                          != expected.get(b - 1, {}).get(key)})
        # Only blobs of the key's partition (and the operator's schema), each fetched once: whole,
        # or (a table) by ranges, never the same range twice.
        assert len(requests) == len(set(requests))
        partition = h.versions[-1].partition
        allowed = {f.sha256 for m in manifests for f in m.files
                   if f.path.startswith(f"state/0/{partition}/") or "/_metadata/" in f.path}
        assert len(fetched) == len(set(fetched)) == h.blobs_read == h.distinct_blobs_read
        assert set(fetched) <= allowed and len(fetched) > 0
        all_blobs = {f.sha256 for m in manifests for f in m.files}
        assert len(fetched) < len(all_blobs) / 2, (len(fetched), len(all_blobs))
        again = len(gets.keys)
        same = key_history(store, "agg", key=[key], cache=cache)
        assert len(gets.keys) == again and [v.value for v in same.versions] == [v.value for v in h.versions]

    # Bisection: the first snapshot whose count for key 5 reached 2 (it holds from then on).
    first_two = next(m for m in manifests if (expected[m.batch_id].get(5) or ((0,), 0))[0][0] >= 2)
    b = bisect_key(store, "agg", key=[5], where="count >= 2")
    assert b.first is not None and b.first.snapshot_id == first_two.snapshot_id
    assert len(b.steps) <= 5 and not b.violations
