"""Manifests whose size follows the change (format v3): a snapshot after a batch stores only
what the batch changed and names, by hash, the manifests it builds on; every reader still
gets the whole file list. A chain never grows past MAX_CHAIN, v2 manifests keep reading,
a chain broken in the middle is a one-line error naming the missing manifest (nothing is
restored, GC refuses to guess), and no manifest a kept delta needs is ever lost: retention
keeps it, and one moved aside anyway stays readable as a tombstone that GC keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog import gc as gc_mod
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.catalog.head import head_key
from airflow_provider_streamstate.engine.catalog.retention import (
    RetentionPolicy,
    apply_retention,
    delete_snapshots,
)
from airflow_provider_streamstate.engine.catalog.snapshots import get_snapshot, resolve_snapshot
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core import manifest as manifest_mod
from airflow_provider_streamstate.engine.core.errors import BrokenChainError, UnsafeManifestError
from airflow_provider_streamstate.engine.core.manifest import FORMAT, FORMAT_V2, Manifest
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import manifest_key
from tests.unit.fake_checkpoint import make_checkpoint
from tests.unit.test_timelines import grow


@pytest.fixture(autouse=True)
def _forget_resolved_lists():  # noqa: ANN202 - each test reads its chains from its store
    manifest_mod._RESOLVED.clear()
    yield
    manifest_mod._RESOLVED.clear()


def chain_of(tmp_path: Path, batches: list[int], *, partitions: int = 2) -> tuple[Path, LocalStore, list[str]]:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=1, partitions=partitions)
    store = LocalStore(tmp_path / "store", fsync=False)
    ids = []
    for b in batches:
        grow(ckpt, b)
        ids.append(create_snapshot(str(ckpt), store, "s").manifest.snapshot_id)
    return ckpt, store, ids


def restored(store: LocalStore, sid: str, target: Path) -> dict[str, bytes]:
    restore_snapshot(store, "s", sid, target, fsync=False)
    return {p.relative_to(target).as_posix(): p.read_bytes() for p in target.rglob("*")
            if p.is_file() and "_streamstate" not in p.parts}


def test_a_chain_of_deltas_reads_as_whole_file_lists_and_restores_byte_for_byte(tmp_path) -> None:
    ckpt, store, ids = chain_of(tmp_path, [2, 3, 4, 5])
    first, *deltas = (get_snapshot(store, "s", sid) for sid in ids)
    assert first.delta is None and [m.chain_ids for m in deltas] == [ids[:1], ids[:2], ids[:3]]
    header = json.loads(store.get_manifest("s", ids[-1]).split(b"\n", 1)[0])
    assert header["format"] == FORMAT and [link[0] for link in header["delta"]["chain"]] == ids[:3]
    manifest_mod._RESOLVED.clear()
    newest = get_snapshot(store, "s", ids[-1])  # read from the store alone: the chain is fetched
    cut = {f.path: f.size for f in CheckpointReader(str(ckpt)).plan(5).files}
    assert {e.path: e.size for e in newest.files} == cut and newest.totals.files == len(cut)
    got = restored(store, ids[-1], tmp_path / "r")
    assert got == {p: (ckpt / p).read_bytes() for p in cut}
    # Each delta stores what its batch changed, not the state.
    assert all(len(m.delta.changed) + len(m.delta.removed) < len(m.files) for m in deltas if m.delta)


def test_manifest_bytes_follow_the_change_not_the_state(tmp_path) -> None:
    sizes = {}
    for history in (20, 200):  # HDFS-state deltas, never compacted: the cut grows with the history
        ckpt, store, ids = chain_of(tmp_path / str(history), [history])
        grow(ckpt, history + 1)  # one batch: an offsets and a commit file, one delta per partition
        taken = create_snapshot(str(ckpt), store, "s")
        assert taken.manifest.delta is not None and len(taken.manifest.delta.changed) == 4
        sizes[history] = (taken.manifest_bytes, len(store.get_manifest("s", ids[0])), taken.manifest.totals.files)
    (delta20, full20, files20), (delta200, full200, files200) = sizes[20], sizes[200]
    assert files200 > 5 * files20 and full200 > 5 * full20  # a full manifest grows with the state...
    assert abs(delta200 - delta20) < 100  # ...a delta after one batch does not


def test_a_chain_never_grows_past_max_chain(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(manifest_mod, "MAX_CHAIN", 2)
    _, store, ids = chain_of(tmp_path, [2, 3, 4, 5, 6])
    kinds = [len(get_snapshot(store, "s", sid).chain_ids) for sid in ids]
    assert kinds == [0, 1, 2, 0, 1]


def test_an_unchanged_snapshot_reads_only_the_commit_log_and_stores_a_delta_of_no_change(tmp_path, monkeypatch) -> None:
    ckpt, store, ids = chain_of(tmp_path, [2, 3])
    collect_garbage(store)  # its census: the parent's blobs are relied on without a request each

    def no_plan(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("an unchanged snapshot planned a cut")
    monkeypatch.setattr(CheckpointReader, "plan", no_plan)
    again = create_snapshot(str(ckpt), store, "s", always=True)
    m = again.manifest
    assert again.unchanged and (again.files_hashed, again.blobs_uploaded, again.blobs_checked) == (0, 0, 0)
    assert m.delta is not None and not m.delta.changed and not m.delta.removed and m.chain_ids == ids
    assert list(get_snapshot(store, "s", m.snapshot_id).files) == list(get_snapshot(store, "s", ids[-1]).files)
    monkeypatch.undo()
    assert restored(store, m.snapshot_id, tmp_path / "r") == restored(store, ids[-1], tmp_path / "r2")


def test_v2_manifests_are_still_read_and_the_next_snapshot_starts_a_chain(tmp_path) -> None:
    ckpt, store, ids = chain_of(tmp_path, [2])
    m = get_snapshot(store, "s", ids[0])
    v2 = {**m.to_dict(), "format": FORMAT_V2}
    (store.root / manifest_key("s", ids[0])).write_bytes(json.dumps(v2, indent=1).encode())  # as older engines wrote it
    store.delete_record(head_key("s"))  # ... and they wrote no catalog head
    old = get_snapshot(store, "s", ids[0])
    assert old.format == FORMAT_V2 and list(old.files) == list(m.files)
    grow(ckpt, 3)
    after = create_snapshot(str(ckpt), store, "s").manifest
    assert after.parent == ids[0] and after.delta is None  # a chain links v3 headers only: full
    grow(ckpt, 4)
    assert create_snapshot(str(ckpt), store, "s").manifest.chain_ids == [after.snapshot_id]
    assert restored(store, ids[0], tmp_path / "r")["commits/2"] == (ckpt / "commits/2").read_bytes()


def test_a_chain_broken_in_the_middle_is_one_line_naming_the_missing_manifest_and_nothing_is_restored(tmp_path) -> None:
    _, store, ids = chain_of(tmp_path, [2, 3, 4, 5])
    (store.root / manifest_key("s", ids[1])).unlink()  # deleted by hand: no tombstone either
    manifest_mod._RESOLVED.clear()
    target = tmp_path / "target"
    with pytest.raises(BrokenChainError) as err:
        restore_snapshot(store, "s", ids[-1], target, fsync=False)
    line = err.value.one_line()
    assert "\n" not in line and ids[1] in line and ids[-1] in line and "replicate" in line
    assert not target.exists()
    assert resolve_snapshot(store, "s", "latest").snapshot_id == ids[-1]  # its header still reads
    problems = verify_snapshots(store, "s").problems
    assert {p.snapshot_id for p in problems} == {ids[2], ids[3]} and all(ids[1] in p.detail for p in problems)
    with pytest.raises(UnsafeManifestError, match=f"builds on manifest {ids[1]}"):
        collect_garbage(store)  # it cannot tell what the broken deltas reference: it deletes nothing


def test_a_manifest_whose_chain_names_other_bytes_is_refused(tmp_path) -> None:
    _, store, ids = chain_of(tmp_path, [2, 3])
    path = store.root / manifest_key("s", ids[0])
    head, _, body = path.read_bytes().partition(b"\n")
    forged = json.loads(head)
    forged["labels"] = {"x": "y"}  # another header than the one the delta links to
    path.write_bytes(json.dumps(forged, separators=(",", ":")).encode() + b"\n" + body)
    manifest_mod._RESOLVED.clear()
    with pytest.raises(UnsafeManifestError, match="the store holds another one"):
        list(get_snapshot(store, "s", ids[1]).files)


def test_retention_keeps_every_manifest_a_kept_delta_builds_on(tmp_path) -> None:
    _, store, ids = chain_of(tmp_path, [2, 3, 4, 5, 6])
    result = apply_retention(store, "s", RetentionPolicy(keep_last=1))
    kept = {v.snapshot_id: v.reasons for v in result.kept}
    assert set(kept) == set(ids)  # the newest is a delta of all four before it
    assert all(any(r.startswith("a kept delta builds on it") for r in kept[sid]) for sid in ids[:-1])
    # A full manifest later, the old chain is no longer needed and goes.
    grow_more = tmp_path / "ckpt"
    manifest_mod.MAX_CHAIN, saved = 0, manifest_mod.MAX_CHAIN
    try:
        grow(grow_more, 7)
        full = create_snapshot(str(grow_more), store, "s").manifest
    finally:
        manifest_mod.MAX_CHAIN = saved
    assert full.delta is None
    again = apply_retention(store, "s", RetentionPolicy(keep_last=1))
    assert [v.snapshot_id for v in again.kept] == [full.snapshot_id] and len(again.deleted) == len(ids)


def test_a_manifest_a_live_delta_needs_survives_being_moved_aside_and_gc_past_its_grace(tmp_path, monkeypatch) -> None:
    """A retention run that did not see the delta yet (a race with the snapshot) moves its
    parent aside: readers read it from its tombstone, and GC never expires that tombstone
    (nor collects its blobs) while a live manifest builds on it."""
    monkeypatch.setattr(gc_mod, "MAX_SNAPSHOT_SECONDS", 1)
    _, store, ids = chain_of(tmp_path, [2, 3, 4])
    before = restored(store, ids[-1], tmp_path / "before")
    delete_snapshots(store, "s", [ids[0], ids[1]])  # what the delta builds on, moved aside
    assert store.list_snapshot_ids("s") == [ids[2]]
    manifest_mod._RESOLVED.clear()
    later = __import__("time").time() + 10
    result = collect_garbage(store, grace_seconds=2, now=later)
    assert (result.tombstones_needed, result.tombstones_deleted, result.blobs_deleted) == (2, 0, 0)
    assert store.list_tombstones("s") == [ids[0], ids[1]]
    assert restored(store, ids[-1], tmp_path / "after") == before
    # Once nothing builds on them, they expire like any tombstone, and their blobs go.
    delete_snapshots(store, "s", [ids[2]])
    gone = collect_garbage(store, grace_seconds=2, now=later + 10)
    assert gone.tombstones_needed == 0 and gone.tombstones_deleted == 3 and gone.blobs_deleted > 0


def test_a_delta_parsed_without_its_store_says_how_to_read_it(tmp_path) -> None:
    _, store, ids = chain_of(tmp_path, [2, 3])
    m = Manifest.from_json(store.get_manifest("s", ids[1]))
    assert m.totals.files > 0  # the header alone is enough for this
    with pytest.raises(UnsafeManifestError, match="is a delta: read it through its store"):
        list(m.files)
