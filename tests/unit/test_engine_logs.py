"""The engine says what it did through the `streamstate` logger hierarchy, so Airflow task
logs (and the CLI with --verbose) show it: the cut a snapshot planned, a re-plan and why,
what it published and uploaded; what a restore did; what verify checked and found."""

from __future__ import annotations

import logging

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from tests.unit.fake_checkpoint import maintenance_after_first_plan, make_checkpoint, store_dirs, write


def _messages(caplog, logger: str) -> list[str]:  # noqa: ANN001 - pytest's caplog
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_snapshot_restore_and_verify_log_what_they_did(tmp_path, monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="streamstate")
    root = make_checkpoint(tmp_path / "c", batches=4)
    for d in store_dirs(root):
        for v in range(1, 5):
            write(d / f"{v}.delta", f"delta {v} of {d}")
    maintenance_after_first_plan(root, monkeypatch)  # a re-plan, and the reason logged
    store = LocalStore(tmp_path / "store", fsync=False)
    m = create_snapshot(str(root), store, "s").manifest
    said = _messages(caplog, "streamstate.snapshot")
    assert any(x.startswith("stream s: cut at batch 3:") and "(attempt 1)" in x for x in said), said
    assert any("the checkpoint changed while it was read" in x and "planning the cut again" in x for x in said), said
    assert any(x.startswith(f"stream s: published {m.snapshot_id} (batch 3, timeline 1, full manifest of ")
               and "): uploaded" in x for x in said), said

    restore_snapshot(store, "s", m.snapshot_id, str(tmp_path / "copy"), fsync=False)
    assert any(m.snapshot_id in x and "copy" in x for x in _messages(caplog, "streamstate.restore"))

    victim = m.files[-1]
    (store.root / blob_key(victim.sha256)).write_bytes(b"flipped")
    assert not verify_snapshots(store, "s").ok
    said = _messages(caplog, "streamstate.verify")
    assert any(x.startswith("stream s: verifying 1 snapshot(s)") for x in said), said
    assert any(x.startswith(f"blob corrupt: {victim.sha256[:12]}") for x in said), said
    assert any(x.startswith("stream s: verified") and "1 problem(s)" in x for x in said), said
