"""The cut planner takes exactly the files that rebuild state version N+1, and refuses what
it does not understand instead of half-copying it."""

from __future__ import annotations

import shutil

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.reader import ROCKSDB_PROVIDER as ROCKSDB
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    NotFoundError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.fake_checkpoint import (
    maintenance_after_first_plan,
    make_checkpoint,
    rocksdb_zip,
    store_dirs,
    write,
)


def paths(plan, prefix: str = "state/0/0/") -> list[str]:
    return sorted(f.path[len(prefix):] for f in plan.files if f.path.startswith(prefix) and "/" not in f.path[len(prefix):])


def test_hdfs_cut_uses_newest_snapshot_at_or_below_the_version_plus_later_deltas(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=6)
    for d in store_dirs(root):
        for v in range(1, 8):  # version 7 belongs to an uncommitted batch 6
            write(d / f"{v}.delta", f"d{v}")
            write(d / f".{v}.delta.crc", "c")
        write(d / "3.snapshot", "s3")
        write(d / "7.snapshot", "s7")  # above the cut
        write(d / ".4.delta.1234.tmp", "partial")
    plan = CheckpointReader(str(root)).plan()
    assert plan.batch_id == 5 and plan.state_store == "hdfs"
    assert paths(plan) == [".4.delta.crc", ".5.delta.crc", ".6.delta.crc", "3.snapshot", "4.delta", "5.delta", "6.delta"]
    assert plan.kafka_offsets == {"tx": {"0": 60, "1": 120}}
    assert plan.watermark_ms == 5000 and plan.next_watermark_ms == 6000
    assert {"metadata", ".metadata.crc", "offsets/5", "commits/5", "sources/0/0"} <= {f.path for f in plan.files}
    essential = {f.path for f in plan.files if f.essential}
    assert "offsets/5" in essential and "offsets/4" in essential and "offsets/3" not in essential


def test_an_older_batch_cut_leaves_out_everything_above_it(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=6)
    for d in store_dirs(root):
        for v in range(1, 7):
            write(d / f"{v}.delta", f"d{v}")
    plan = CheckpointReader(str(root)).plan(batch_id=2)
    names = {f.path for f in plan.files}
    assert {"offsets/2", "commits/2"} <= names and not {"offsets/3", "commits/3"} & names
    assert paths(plan) == ["1.delta", "2.delta", "3.delta"]


def test_rocksdb_cut_takes_the_zip_its_ssts_and_the_changelogs_after_it(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=5, provider=ROCKSDB)
    for d in store_dirs(root):
        rocksdb_zip(d, 3, ["000007-aaa.sst", "000008-bbb.sst"])
        rocksdb_zip(d, 6, ["000009-ccc.sst"])  # a newer zip, above the cut
        for v in range(1, 7):
            write(d / f"{v}.changelog", f"c{v}")
        write(d / "SSTs" / "000001-old.sst", "unreferenced")
    plan = CheckpointReader(str(root)).plan()
    assert plan.state_store == "rocksdb-changelog"
    assert paths(plan) == ["3.zip", "4.changelog", "5.changelog"]
    assert paths(plan, "state/0/0/SSTs/") == ["000007-aaa.sst", "000008-bbb.sst"]


def test_rocksdb_without_changelog_needs_the_zip_of_the_version(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=3, provider=ROCKSDB)
    for d in store_dirs(root):
        rocksdb_zip(d, 2, ["000001-a.sst"])
        rocksdb_zip(d, 3, ["000001-a.sst", "000002-b.sst"])
    plan = CheckpointReader(str(root)).plan()
    assert plan.state_store == "rocksdb"
    assert paths(plan) == ["3.zip"]
    assert paths(plan, "state/0/0/SSTs/") == ["000001-a.sst", "000002-b.sst"]


def test_named_stores_of_a_join_are_each_planned(tmp_path) -> None:
    stores = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
    root = make_checkpoint(tmp_path / "c", batches=2, stores=stores)
    for d in store_dirs(root, stores):
        write(d / "_metadata" / "schema", "schema of the store")
        for v in (1, 2):
            write(d / f"{v}.delta", "x")
    plan = CheckpointReader(str(root)).plan()
    assert plan.operators[0]["stores"] == list(stores)
    for s in stores:
        assert {f"state/0/1/{s}/1.delta", f"state/0/1/{s}/2.delta", f"state/0/1/{s}/_metadata/schema"} <= {
            f.path for f in plan.files
        }


def test_store_names_come_from_the_layout_when_an_old_checkpoint_has_no_operator_metadata(tmp_path) -> None:
    stores = ("left-keyToNumValues", "right-keyToNumValues")
    root = make_checkpoint(tmp_path / "c", batches=2, stores=stores)
    shutil.rmtree(root / "state/0/_metadata")
    for d in store_dirs(root, stores):
        for v in (1, 2):
            write(d / f"{v}.delta", "x")
    plan = CheckpointReader(str(root)).plan()
    assert plan.operators[0]["stores"] == list(stores)
    assert sum(f.path.endswith("/2.delta") for f in plan.files) == 2 * len(stores)  # every partition, every store


def test_missing_state_files_are_reported_as_a_changing_checkpoint(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=3)
    for d in store_dirs(root):
        write(d / "1.delta", "x")  # 2.delta and 3.delta missing
    with pytest.raises(CheckpointChanged, match="delta files for versions"):
        CheckpointReader(str(root)).plan()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"conf": {"spark.sql.streaming.stateStore.checkpointFormatVersion": "3"}}, "format 3"),
        ({"commit_extra": {"stateUniqueIds": {"0": [["a"]]}}, "provider": ROCKSDB}, "unexpected state file ids"),
        ({"commit_extra": {"stateUniqueIds": {"0": [["0f1e2d3c-aaaa"]]}}}, "HDFS-backed state store"),
        ({"provider": "com.example.CustomProvider"}, "not supported"),
    ],
)
def test_unsupported_layouts_are_refused(tmp_path, kwargs, words) -> None:
    root = make_checkpoint(tmp_path / "c", **kwargs)
    with pytest.raises(UnsupportedCheckpointError, match=words):
        CheckpointReader(str(root)).plan()


def test_schema_files_without_their_metadata_and_mixed_format_file_names_are_refused(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", provider=ROCKSDB)
    write(root / "state/0/_stateSchema/default/0_abc", "schema")
    with pytest.raises(UnsupportedCheckpointError, match="state schema files but no operator metadata v2"):
        CheckpointReader(str(root)).plan()
    root2 = make_checkpoint(tmp_path / "d", provider=ROCKSDB)
    write(root2 / "state/0/0/3_0f1e2d3c-aaaa-bbbb-cccc-111122223333.zip", "z")
    with pytest.raises(UnsupportedCheckpointError, match="format v2"):
        CheckpointReader(str(root2)).plan()


def test_not_a_checkpoint_and_no_commit_are_clear_errors(tmp_path) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        CheckpointReader(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="not a Spark streaming checkpoint"):
        CheckpointReader(str(tmp_path / "empty"))
    root = make_checkpoint(tmp_path / "c", batches=1)
    (root / "commits/0").unlink()  # batch 0 planned, never committed
    with pytest.raises(NotFoundError, match="no committed batch"):
        CheckpointReader(str(root)).plan()
    with pytest.raises(UnsupportedCheckpointError, match="gs:// scheme is not supported"):
        CheckpointReader("gs://bucket/ckpt")


def test_snapshot_replans_when_maintenance_replaces_files_mid_snapshot(tmp_path, monkeypatch) -> None:
    """Spark's maintenance writes a snapshot and deletes the deltas it covers while we read."""
    root = make_checkpoint(tmp_path / "c", batches=4)
    for d in store_dirs(root):
        for v in range(1, 5):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    calls = maintenance_after_first_plan(root, monkeypatch)
    result = create_snapshot(str(root), LocalStore(tmp_path / "store"), "s")
    assert result.attempts == 2
    assert paths(calls[-1]) == ["3.snapshot", "4.delta"]
    assert {f.path for f in result.manifest.files} == {f.path for f in calls[-1].files}


def test_a_file_deleted_between_hash_and_upload_replans(tmp_path) -> None:
    """A store that hashes first and uploads later (S3) can lose the file in between."""
    root = make_checkpoint(tmp_path / "c", batches=3)
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    deleted: list[str] = []

    class UploadLater(LocalStore):
        hashes_while_storing = False  # hash first, upload later, as the S3 store does

        def put_blob(self, digest, source, size):  # noqa: ANN001, ANN201
            if not deleted:  # maintenance strikes once, mid-upload
                for d in store_dirs(root):
                    write(d / "3.snapshot", f"snapshot 3 of {d}")
                    for v in (1, 2, 3):
                        (d / f"{v}.delta").unlink()
                deleted.append("yes")
            return super().put_blob(digest, source, size)

    result = create_snapshot(str(root), UploadLater(tmp_path / "store"), "s", parallelism=1)
    assert result.attempts == 2
    assert {"state/0/0/3.snapshot"} <= {f.path for f in result.manifest.files}
    assert not any(f.path.endswith(("1.delta", "2.delta")) for f in result.manifest.files)


def test_changelog_mode_is_named_even_when_the_cut_starts_at_a_fresh_zip(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=3, provider=ROCKSDB)
    for d in store_dirs(root):
        for v in (1, 2, 3):
            write(d / f"{v}.changelog", f"c{v}")
        rocksdb_zip(d, 3, ["000001-a.sst"])  # maintenance just snapshotted version N+1
    plan = CheckpointReader(str(root)).plan()
    assert paths(plan) == ["3.zip"]
    assert plan.state_store == "rocksdb-changelog"


def test_local_file_uris_as_spark_prints_them_resolve_to_the_same_checkpoint(tmp_path, monkeypatch) -> None:
    from airflow_provider_streamstate.backends.local.checkpoint import local_checkpoint_path

    root = make_checkpoint(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)  # a relative resolution would land under here
    for uri in (f"file:{root}", f"file://{root}", f"file://localhost{root}", str(root)):
        assert CheckpointReader(uri).root == root
    for uri, words in (("file:ckpt", "relative"), ("file://otherhost/x", "host name")):
        with pytest.raises(UsageError, match=words):
            local_checkpoint_path(uri)
    with pytest.raises(UnsupportedCheckpointError, match="not on a local"):
        local_checkpoint_path("s3a://bucket/ckpt")


def _format_v2(root, batches: int, partitions: int = 2) -> dict[tuple[int, int], str]:
    """Commits naming one unique id per state version and partition (format v2); the ids."""
    import json

    ids = {}
    for b in range(batches):
        per_part = []
        for p in range(partitions):
            ids[(b + 1, p)] = f"{b + 1:08x}-{p:04x}-4000-8000-000000000000"
            per_part.append([ids[(b + 1, p)]])
        write(root / f"commits/{b}", "v2\n" + json.dumps({"nextBatchWatermarkMs": 0, "stateUniqueIds": {"0": per_part}}))
    return ids


def test_a_format_v2_cut_walks_the_committed_lineage_back_to_a_zip_and_skips_other_attempts(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=5, provider=ROCKSDB)
    ids = _format_v2(root, 5)
    for p, d in enumerate(store_dirs(root)):
        for v in range(1, 6):
            write(d / f"{v}_{ids[(v, p)]}.changelog", f"c{v}")
            write(d / f"{v}_{ids[(v, p)]}.changelog.crc", "crc")
        write(d / f"4_{'f' * 8}-dead-4000-8000-000000000000.changelog", "a failed attempt at version 4")
        write(d / f"6_{'e' * 8}-0000-4000-8000-000000000000.changelog", "batch 5, not committed")
        rocksdb_zip(d, f"2_{ids[(2, p)]}", [f"00{p}-a.sst"])
        rocksdb_zip(d, f"2_{'a' * 8}-0000-4000-8000-000000000000", ["999-other.sst"])  # another attempt's zip
    plan = CheckpointReader(str(root)).plan()
    assert plan.checkpoint_format == 2 and plan.state_store == "rocksdb-changelog" and plan.batch_id == 4
    for p in (0, 1):
        assert paths(plan, f"state/0/{p}/") == sorted(
            [f"2_{ids[(2, p)]}.zip"] + [f"{v}_{ids[(v, p)]}.changelog" for v in (3, 4, 5)]
            + [f"{v}_{ids[(v, p)]}.changelog.crc" for v in (3, 4, 5)])
        assert f"state/0/{p}/SSTs/00{p}-a.sst" in {f.path for f in plan.files}
    assert not any("999-other" in f.path or "dead" in f.path for f in plan.files)
    # An older cut takes its own version's ids.
    assert paths(CheckpointReader(str(root)).plan(batch_id=0), "state/0/0/") == [
        f"1_{ids[(1, 0)]}.changelog", f"1_{ids[(1, 0)]}.changelog.crc"]


def test_a_format_v2_cut_missing_a_lineage_file_is_planned_again_and_a_join_is_refused(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=3, provider=ROCKSDB)
    ids = _format_v2(root, 3)
    for p, d in enumerate(store_dirs(root)):
        for v in (1, 3):  # version 2's changelog was replaced by maintenance meanwhile
            write(d / f"{v}_{ids[(v, p)]}.changelog", "c")
    with pytest.raises(CheckpointChanged, match=f"lacks 2_{ids[(2, 0)]}.changelog"):
        CheckpointReader(str(root)).plan()
    join = make_checkpoint(tmp_path / "j", batches=1, provider=ROCKSDB, stores=("left-keyToNumValues", "right-x"))
    _format_v2(join, 1)
    with pytest.raises(UnsupportedCheckpointError, match="keeps 2 state stores in checkpoint format v2"):
        CheckpointReader(str(join)).plan()


def test_a_format_v2_version_whose_commit_spark_removed_is_its_one_attempt_or_refused(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=3, provider=ROCKSDB)
    ids = _format_v2(root, 3)
    for p, d in enumerate(store_dirs(root)):
        for v in (1, 2, 3):
            write(d / f"{v}_{ids[(v, p)]}.changelog", "c")
    (root / "commits/0").unlink()  # older than minBatchesToRetain: Spark removed it
    plan = CheckpointReader(str(root)).plan()
    assert f"state/0/0/1_{ids[(1, 0)]}.changelog" in {f.path for f in plan.files}
    write(store_dirs(root)[0] / f"1_{'b' * 8}-0000-4000-8000-000000000000.changelog", "another attempt")
    with pytest.raises(UnsupportedCheckpointError, match="whose commit is gone, and holds 2 attempts"):
        CheckpointReader(str(root)).plan()


def test_a_stateless_query_in_format_v2_is_recorded_as_format_2(tmp_path) -> None:
    root = make_checkpoint(tmp_path / "c", batches=2, commit_extra={"stateUniqueIds": {}})
    shutil.rmtree(root / "state")
    plan = CheckpointReader(str(root)).plan()
    assert plan.state_store == "none" and plan.checkpoint_format == 2
