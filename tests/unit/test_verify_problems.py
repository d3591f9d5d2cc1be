"""verify tells a missing blob from a corrupt one, per file and snapshot, keeps its JSON
shape, and its summary line ends with what to do."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.verify import (
    WHAT_TO_DO,
    Problem,
    ProblemKind,
    verify_snapshots,
)
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write


def _snapshot(tmp_path: Path) -> tuple[LocalStore, str, dict[str, str]]:
    """A snapshot of distinct files; returns (store, snapshot id, {path: sha256})."""
    root = make_checkpoint(tmp_path / "ckpt", batches=3)
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v} of {d}" * 10)
    store = LocalStore(tmp_path / "store", fsync=False)
    m = create_snapshot(str(root), store, "s").manifest
    return store, m.snapshot_id, {f.path: f.sha256 for f in m.files}


def test_a_missing_blob_and_a_corrupt_blob_are_reported_apart(tmp_path) -> None:
    store, sid, files = _snapshot(tmp_path)
    deltas = sorted(p for p in files if p.endswith(".delta"))
    gone, flipped, short = deltas[0], deltas[1], deltas[2]
    (store.root / blob_key(files[gone])).unlink()
    blob = store.root / blob_key(files[flipped])
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF
    blob.write_bytes(bytes(data))
    (store.root / blob_key(files[short])).write_bytes(b"")

    result = verify_snapshots(store, "s", sid)
    assert not result.ok
    kinds = {p.path: p.kind for p in result.problems}
    assert kinds == {gone: ProblemKind.BLOB_MISSING, flipped: ProblemKind.BLOB_CORRUPT, short: ProblemKind.BLOB_CORRUPT}
    assert all(isinstance(p, Problem) for p in result.problems)

    problems = {p["path"]: p for p in result.to_json()["problems"]}
    assert set(problems[gone]) == {"snapshot_id", "path", "sha256", "problem"}  # the JSON keys are unchanged
    assert problems[gone]["problem"] == "blob missing"
    assert problems[flipped]["problem"].startswith("blob corrupt (sha256 ")
    assert problems[short]["problem"].startswith("blob corrupt (")
    assert problems[gone]["sha256"] == files[gone] and problems[gone]["snapshot_id"] == sid

    line = result.summary()
    assert "\n" not in line
    assert f"{gone} in {sid}: blob missing" in line
    assert f"{flipped} in {sid}: blob corrupt" in line
    assert line.endswith(WHAT_TO_DO)
    assert "restore another snapshot" in WHAT_TO_DO and "re-replicate" in WHAT_TO_DO


def test_an_unreadable_manifest_is_reported_with_what_to_do(tmp_path) -> None:
    store, sid, _ = _snapshot(tmp_path)
    (store.root / "streams/s/snapshots" / f"{sid}.json").write_text("{not json")
    result = verify_snapshots(store, "s")
    assert [p.kind for p in result.problems] == [ProblemKind.MANIFEST_UNREADABLE]
    assert result.to_json()["problems"][0]["problem"].startswith("manifest unreadable")
    assert result.summary().endswith(WHAT_TO_DO)


def test_an_intact_snapshot_has_no_problems(tmp_path) -> None:
    store, sid, files = _snapshot(tmp_path)
    result = verify_snapshots(store, "s", sid)
    assert result.ok
    assert result.to_json()["problems"] == []
    assert result.blobs_checked == len(set(files.values()))
