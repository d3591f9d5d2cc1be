"""A repair edit end to end without Spark (engine/edit/repair.py) on copies of golden
checkpoints: a dry run writes nothing and says what would change; applied in place, the
stopped stream's checkpoint gains the verified edit batch, the source snapshot is pinned and
the result snapshotted as `edited-from` it; as a clone the stream is untouched; an in-place
edit from a snapshot the checkpoint has moved past, or one that changes nothing, is refused
with nothing changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.manifests import get_snapshot
from airflow_provider_streamstate.engine.catalog.retention import pinned_ids
from airflow_provider_streamstate.engine.catalog.snapshots import list_snapshots
from airflow_provider_streamstate.engine.checkpoint.liveness import ENV_UNMANAGED_WINDOW
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    NotFoundError,
    StreamRunningError,
    UsageError,
)
from airflow_provider_streamstate.engine.edit.changes import EditSpec
from airflow_provider_streamstate.engine.edit.repair import edit_stream, work_location
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import lookup_key
from tests.edits import repair_of, work_copy
from tests.goldens import golden

CASES = ("small_aggregation_hdfs", "windowed_aggregation_rocksdb_changelog_format_2")


def _files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", CASES)
def test_a_dry_run_says_what_would_change_and_writes_nothing(case: str, tmp_path: Path) -> None:
    g = golden(case)
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    edit, gone, changed = repair_of(g)
    before = _files(ckpt)
    result = edit_stream(store, "orders", ckpt, EditSpec.from_json(edit))
    assert result.dry_run and result.edited_snapshot is None and result.source_snapshot is None
    counts = result.preview.partitions
    assert sum(p.removed for p in counts) == len(gone) and sum(p.replaced for p in counts) == len(changed)
    assert _files(ckpt) == before
    with pytest.raises(NotFoundError, match="has no snapshots"):
        list_snapshots(store, "orders")


@pytest.mark.parametrize("case", CASES)
def test_an_applied_edit_in_place_adds_the_verified_batch_pins_the_source_and_snapshots_the_result(
        case: str, tmp_path: Path) -> None:
    g = golden(case)
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    edit, gone, changed = repair_of(g)
    n = CheckpointReader(ckpt).resolve_batch(None)
    result = edit_stream(store, "orders", ckpt, EditSpec.from_json(edit, "bad input of 2026-11-28"), apply=True,
                         requested_by="oncall")
    assert not result.dry_run and result.in_place and result.edit_batch == n + 1
    assert CheckpointReader(ckpt).resolve_batch(None) == n + 1
    assert result.pinned == result.source_snapshot and result.source_snapshot in pinned_ids(store, "orders")
    m = get_snapshot(store, "orders", result.edited_snapshot)
    assert m.batch_id == n + 1
    assert m.labels == {"edited-from": result.source_snapshot, "edit": "bad input of 2026-11-28",
                        "edited-by": "oncall"}
    for row in gone:
        assert not lookup_key(ckpt, key=row.key_input).found
    for row in changed:
        assert lookup_key(ckpt, key=row.key_input).value == lookup_key(ckpt, key=g.state().rows[0].key_input,
                                                                      batch_id=n).value
    assert not Path(work_location(ckpt)).exists()
    assert result.verified["by"] == "changes" and result.stores == []
    assert result.verified["records"] == len(gone) + len(changed) and result.verified["keys_read_back"] == \
        len(gone) + len(changed)
    assert [(s["deleted"], s["replaced"], s["entries_change"]) for s in result.verified["stores"]] == \
        [(len(gone), len(changed), -len(gone))]


def test_an_edit_asked_to_be_proved_by_the_state_digests_it_whole_and_a_made_up_way_is_refused(
        tmp_path: Path) -> None:
    g = golden("small_aggregation_hdfs")
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    edit, gone, _ = repair_of(g)
    with pytest.raises(UsageError, match="verify='entries' is not a way to verify an edit"):
        edit_stream(store, "orders", ckpt, EditSpec.from_json(edit), apply=True, verify="entries")
    assert not list_snapshots_or_none(store)
    result = edit_stream(store, "orders", ckpt, EditSpec.from_json(edit), apply=True, verify="state")
    assert result.verified == {"by": "state"}
    assert [s["entries"] for s in result.stores] == [len(g.state().rows) - len(gone)]
    assert "entries verified" in result.verified_text()


def list_snapshots_or_none(store: LocalStore) -> list[object]:
    try:
        return list(list_snapshots(store, "orders"))
    except NotFoundError:
        return []


def test_an_edit_as_a_clone_leaves_the_stream_as_it_was(tmp_path: Path) -> None:
    g = golden("small_aggregation_rocksdb_changelog")
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    edit, gone, _ = repair_of(g)
    before = _files(ckpt)
    target = str(tmp_path / "clone")
    result = edit_stream(store, "orders", ckpt, EditSpec.from_json(edit), apply=True, target=target)
    assert not result.in_place and result.checkpoint == target and result.pinned is None
    assert {k: v for k, v in _files(ckpt).items() if not k.startswith("_streamstate/")} == before
    assert get_snapshot(store, "orders-edited", result.edited_snapshot).labels["source-stream"] == "orders"
    assert not lookup_key(target, key=gone[0].key_input).found and lookup_key(ckpt, key=gone[0].key_input).found


def test_an_in_place_edit_from_a_snapshot_the_checkpoint_moved_past_is_refused_with_nothing_changed(
        tmp_path: Path) -> None:
    g = golden("small_aggregation_hdfs")
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    old = create_snapshot(ckpt, store, "orders", batch_id=g.last_batch - 1).manifest.snapshot_id
    edit, _, _ = repair_of(g)
    before = _files(ckpt)
    with pytest.raises(CheckpointChanged, match="would rewind it"):
        edit_stream(store, "orders", ckpt, EditSpec.from_json(edit), apply=True, snapshot=old)
    assert _files(ckpt) == before


def test_an_edit_that_changes_nothing_is_refused_and_leaves_no_work_copy(tmp_path: Path) -> None:
    g = golden("small_aggregation_hdfs")
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    n = CheckpointReader(ckpt).resolve_batch(None)
    with pytest.raises(UsageError, match="changes nothing"):
        edit_stream(store, "orders", ckpt, EditSpec.from_json({"delete": [987654]}), apply=True)
    assert CheckpointReader(ckpt).resolve_batch(None) == n and not Path(work_location(ckpt)).exists()


def test_an_in_place_edit_of_a_checkpoint_a_query_is_writing_is_refused_with_nothing_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_UNMANAGED_WINDOW, "120")  # the suite turns the detection off (tests/conftest.py)
    g = golden("small_aggregation_hdfs")
    ckpt = work_copy(g, tmp_path)
    n = CheckpointReader(ckpt).resolve_batch(None)
    for rel in (f"offsets/{n}", f"commits/{n}"):
        os.utime(Path(ckpt) / rel)  # its newest batch written just now, and no streamstate heartbeat beside it
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    edit, _, _ = repair_of(g)
    before = _files(ckpt)
    with pytest.raises(StreamRunningError, match="stop it before editing it in place"):
        edit_stream(store, "orders", ckpt, EditSpec.from_json(edit), apply=True)
    assert _files(ckpt) == before


def test_a_dry_run_of_a_snapshot_reads_its_blobs_and_names_it(tmp_path: Path) -> None:
    g = golden("small_aggregation_rocksdb_changelog")
    ckpt = work_copy(g, tmp_path)
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    sid = create_snapshot(ckpt, store, "orders").manifest.snapshot_id
    rows = g.state().rows
    (value_field,) = g.state().types["value"].names
    top = max(r.value[0] for r in rows)
    edit = EditSpec.from_json({"operator": "stateStoreSave", "delete": [rows[0].key_input],
                               "delete_where": f"{value_field} >= {top}"})
    result = edit_stream(store, "orders", ckpt, edit, snapshot="latest")
    assert result.dry_run and result.source_snapshot == sid and result.preview.source.startswith(f"snapshot {sid}")
    wanted = {tuple(rows[0].key)} | {tuple(r.key) for r in rows if r.value[0] >= top}
    assert result.preview.changed == len(wanted) and "delete where" in result.description


@pytest.mark.parametrize("case", CASES)
def test_an_edit_of_a_checkpoint_in_s3_is_proved_by_its_changes_and_put_in_place(
        case: str, tmp_path: Path, moto_endpoint: str) -> None:
    """On S3 the proof's listing compares ETags: the restored objects unchanged, the batch's
    the only new ones; the edited checkpoint reads as asked through the same client."""
    from tests.unit.conftest import moto_bucket

    g = golden(case)
    client = moto_bucket(moto_endpoint, "edits")
    local = Path(work_copy(g, tmp_path))
    prefix = f"{tmp_path.name}/ckpt"
    for p in sorted(local.rglob("*")):
        if p.is_file():
            client.put_object(Bucket="edits", Key=f"{prefix}/{p.relative_to(local).as_posix()}", Body=p.read_bytes())
    ckpt = f"s3a://edits/{prefix}"
    store = LocalStore(tmp_path / "snapshots", fsync=False)
    edit, gone, changed = repair_of(g)
    n = CheckpointReader(ckpt, connection=client).resolve_batch(None)

    result = edit_stream(store, "orders", ckpt, EditSpec.from_json(edit), apply=True, connection=client)

    assert result.edit_batch == n + 1 and result.verified["by"] == "changes"
    assert result.verified["files_unchanged"] > 0 and result.verified["records"] == len(gone) + len(changed)
    assert CheckpointReader(ckpt, connection=client).resolve_batch(None) == n + 1
    from airflow_provider_streamstate.engine.lookup.reading.sources import CheckpointSource

    edited = CheckpointSource(ckpt, reader=CheckpointReader(ckpt, connection=client))
    source = CheckpointSource(ckpt, n, reader=CheckpointReader(ckpt, connection=client))
    for row in gone:
        assert not lookup_key(edited, key=row.key_input).found
    for row in changed:  # set to the first row's value
        assert lookup_key(edited, key=row.key_input).value == lookup_key(source, key=g.state().rows[0].key_input).value
