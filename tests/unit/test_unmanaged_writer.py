"""A query not started by streamstate (a plain spark-submit) keeps no heartbeat, but its
batches write the checkpoint's offsets and commits: a checkpoint whose newest batch was
written within the window, past its last heartbeat's batch and not by a restore or a swap
of ours, is running under someone else. `stream status` says so and in-place changes refuse
it in one line."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.liveness import (
    Heartbeat,
    assert_not_running,
    now_iso,
    unmanaged_writer,
    write_heartbeat,
)
from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.streams import launcher
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write


@pytest.fixture(autouse=True)
def window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSTATE_UNMANAGED_WINDOW_S", "120")


def checkpoint(tmp_path: Path, batches: int = 3) -> Path:
    root = make_checkpoint(tmp_path / "ckpt", batches=batches)
    for d in store_dirs(root):
        for v in range(1, batches + 1):
            write(d / f"{v}.delta", f"delta {v}")
    return root


def age(root: Path, seconds: float) -> None:
    """Every file of the checkpoint written `seconds` ago."""
    then = time.time() - seconds
    for p in root.rglob("*"):
        os.utime(p, (then, then))


def beat(root: Path, *, batch: int, state: str = "stopped") -> None:
    write_heartbeat(root, Heartbeat(query_id="q", run_id="r", query_name="orders", host=socket.gethostname(),
                                    pid=os.getpid(), state=state, batch_id=batch, input_rows=1,
                                    updated_at=now_iso()))


def test_a_checkpoint_written_just_now_without_a_heartbeat_is_running_under_someone_else(tmp_path) -> None:
    root = checkpoint(tmp_path)
    found = unmanaged_writer(root)
    assert found is not None and "batch 2 was written" in found and "not started by streamstate" in found
    st = launcher.status(str(root))
    assert st.state == "running" and st.writer == found and st.to_json()["unmanaged_writer"] == found
    with pytest.raises(StreamRunningError, match="is being written") as refused:
        assert_not_running(root, "replace its checkpoint")
    line = refused.value.one_line()
    assert "\n" not in line and "STREAMSTATE_UNMANAGED_WINDOW_S=0" in line


@pytest.mark.parametrize(("why", "setup"), [
    ("its heartbeat's query wrote it", lambda root: beat(root, batch=2)),
    ("the next batch of its heartbeat's query", lambda root: beat(root, batch=1)),
    ("written before the window", lambda root: age(root, 600)),
    ("the window closed", lambda root: os.environ.__setitem__("STREAMSTATE_UNMANAGED_WINDOW_S", "0")),
])
def test_a_checkpoint_not_written_by_an_unknown_query_is_not_taken_for_running(tmp_path, why, setup) -> None:
    root = checkpoint(tmp_path)
    setup(root)
    assert unmanaged_writer(root) is None, why
    assert launcher.status(str(root)).state != "running", why


def test_what_a_restore_wrote_is_its_own_and_a_later_batch_is_not(tmp_path) -> None:
    root = checkpoint(tmp_path)
    age(root, 600)
    store = LocalStore(tmp_path / "store", fsync=False)
    snap = create_snapshot(str(root), store, "orders").manifest
    target = tmp_path / "restored"
    restore_snapshot(store, "orders", snap.snapshot_id, target, fsync=False)
    assert unmanaged_writer(target) is None  # fresh files, but the restore's lineage came after them
    time.sleep(0.05)
    write(target / "offsets" / "3", "v1\n{}\n{}")  # a query's next batch, after the restore
    assert unmanaged_writer(target) is not None
