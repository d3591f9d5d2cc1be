"""On a local store a manifest never reaches the disk before what it names: every blob's
directory entry (one another process wrote included) and every directory created on the
way to it and to the manifest are fsynced before the manifest's link publishes it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write


def _record(monkeypatch) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(src: str | Path, dst: str | Path) -> None:
        events.append(("link", str(dst)))
        real_link(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    return events


def test_blobs_stored_by_another_process_and_new_directories_are_durable_before_the_manifest(tmp_path, monkeypatch) -> None:
    ckpt = make_checkpoint(tmp_path / "ckpt", batches=2)
    for d in store_dirs(ckpt):
        for v in (1, 2):
            write(d / f"{v}.delta", f"delta {v}")
    store_root = tmp_path / "store"
    # Another process stored one of the checkpoint's files and died before any fsync.
    content = (store_dirs(ckpt)[0] / "1.delta").read_bytes()
    theirs = store_root / blob_key(hashlib.sha256(content).hexdigest())
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(content)

    events = _record(monkeypatch)
    m = create_snapshot(str(ckpt), LocalStore(store_root), "s").manifest
    publish = next(i for i, (kind, path) in enumerate(events)  # the manifest (its journal hint is only a pointer)
                   if kind == "link" and "/snapshots/" in path and path.endswith(".json"))
    synced_before = {path for kind, path in events[:publish] if kind == "fsync"}

    blob_dirs = {str((store_root / blob_key(f.sha256)).parent) for f in m.files}
    assert str(theirs.parent) in blob_dirs
    assert blob_dirs <= synced_before  # theirs included
    # Directories created on the way: their parents' entries too.
    assert {str(store_root / "blobs" / "sha256"), str(store_root / "streams" / "s"), str(store_root)} <= synced_before
