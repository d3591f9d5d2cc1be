"""A restored checkpoint is on disk whole before it appears at the target: every file's
bytes and every directory's names are fsynced in staging, then one rename publishes them."""

from __future__ import annotations

import os
from pathlib import Path

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write


def _snapshot(tmp_path: Path) -> tuple[LocalStore, str]:
    root = make_checkpoint(tmp_path / "c", batches=3)
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", "same bytes in every partition")  # dedup: local copies
    store = LocalStore(tmp_path / "store", fsync=False)
    return store, create_snapshot(str(root), store, "s").manifest.snapshot_id


def test_restore_fsyncs_every_file_and_directory_before_the_rename_publishes_them(tmp_path, monkeypatch) -> None:
    store, sid = _snapshot(tmp_path)
    events: list[tuple[str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src: str | Path, dst: str | Path) -> None:
        events.append(("rename", f"{src} -> {dst}"))
        real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    target = tmp_path / "restored"
    restore_snapshot(store, "s", sid, target, new_query_id=True)

    renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert len(renames) == 1 and events[renames[0]][1].endswith(f" -> {target}")
    staging = events[renames[0]][1].split(" -> ")[0]
    before = {path for kind, path in events[: renames[0]] if kind == "fsync"}
    restored = {str(p.relative_to(target)) for p in target.rglob("*")} | {"."}
    assert {os.path.normpath(f"{staging}/{rel}") for rel in restored} <= before
    assert ("fsync", str(tmp_path)) in events[renames[0] + 1 :]  # the rename itself made durable


def test_restore_without_fsync_writes_the_same_checkpoint(tmp_path, monkeypatch) -> None:
    store, sid = _snapshot(tmp_path)
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    restore_snapshot(store, "s", sid, tmp_path / "fast", fsync=False)
    assert calls == []
    monkeypatch.undo()
    restore_snapshot(store, "s", sid, tmp_path / "durable")

    def spark_files(root: Path) -> dict[Path, bytes]:
        # `_streamstate/lineage.json` names each restore (its id and time): not Spark's.
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file() and "_streamstate" not in p.parts}

    fast, durable = spark_files(tmp_path / "fast"), spark_files(tmp_path / "durable")
    assert fast == durable
    assert len(fast) > 10
