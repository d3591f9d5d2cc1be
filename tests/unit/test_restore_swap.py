"""Replacing a checkpoint never leaves the target missing: the swap is one atomic exchange,
and where the filesystem cannot exchange, a swap behind a fence (engine/checkpoint/swap.py)
that a crash leaves fenced and the next restore finishes. Leftovers of an earlier version's
two-rename swap are repaired by the next restore or snapshot. A running stream's checkpoint
is never replaced, and its records stay with it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local import checkpoint as local_fs
from airflow_provider_streamstate.backends.local.checkpoint import recover_leftovers
from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

REPO = Path(__file__).resolve().parents[2]


def _store_with_snapshot(tmp_path: Path) -> tuple[LocalStore, str]:
    root = make_checkpoint(tmp_path / "source", batches=3)
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", f"delta {v}")
    store = LocalStore(tmp_path / "store", fsync=False)
    return store, create_snapshot(str(root), store, "s").manifest.snapshot_id


def _old_checkpoint(path: Path) -> Path:
    write(path / "metadata", '{"id": "old"}')
    write(path / "offsets" / "0", "old offsets")
    return path


def test_replacing_a_checkpoint_is_one_atomic_exchange(tmp_path, monkeypatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    if not local_fs._exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("this filesystem has no RENAME_EXCHANGE")
    store, sid = _store_with_snapshot(tmp_path)
    target = _old_checkpoint(tmp_path / "ckpt")
    renames: list[tuple[str, str]] = []
    real = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (renames.append((str(a), str(b))), real(a, b))[1])
    restore_snapshot(store, "s", sid, target, force=True, fsync=False)
    assert renames == []  # no moment at which `target` is missing
    assert (target / "metadata").read_text() != '{"id": "old"}'
    assert not [p for p in tmp_path.iterdir() if ".streamstate-" in p.name]  # old contents removed


def test_without_an_exchange_a_crash_mid_swap_leaves_a_fenced_checkpoint_the_next_restore_finishes(tmp_path) -> None:
    from airflow_provider_streamstate.engine.checkpoint.swap import FENCE_TOKEN, SWAP_FILE

    store, sid = _store_with_snapshot(tmp_path)
    target = _old_checkpoint(tmp_path / "ckpt")
    # A process with no RENAME_EXCHANGE that dies halfway through moving the staged files in.
    crash = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from airflow_provider_streamstate.backends.local import checkpoint as local
        from airflow_provider_streamstate.engine.lifecycle import restore
        from airflow_provider_streamstate.backends.local.store import LocalStore
        local._exchange = lambda a, b: False
        restore.restore_snapshot(LocalStore({str(tmp_path / "store")!r}, fsync=False), "s", {sid!r},
                                 {str(target)!r}, force=True, fsync=False)
    """)
    env = {**os.environ, "STREAMSTATE_CRASH_AT": "swap.half-placed"}
    assert subprocess.run([sys.executable, "-c", crash], env=env).returncode == -9
    assert (target / "metadata").read_text().startswith(FENCE_TOKEN)  # no Spark starts on it
    assert (target / SWAP_FILE).exists()
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap") as refused:
        create_snapshot(str(target), store, "other")
    assert "streamstate stream recover --checkpoint" in refused.value.one_line()

    restore_snapshot(store, "s", sid, str(target), force=True, fsync=False)
    assert (target / "metadata").read_text() != '{"id": "old"}' and not (target / SWAP_FILE).exists()
    assert not [p for p in tmp_path.iterdir() if ".streamstate-" in p.name]


def test_the_next_restore_repairs_a_crashed_swap_by_itself_then_restores(tmp_path) -> None:
    """restore_snapshot runs the repair first: a user who simply runs the restore again gets
    the snapshot in place and no leftovers, without knowing about recover_leftovers (what an
    earlier version's two-rename swap could leave)."""
    store, sid = _store_with_snapshot(tmp_path)
    target = _old_checkpoint(tmp_path / "ckpt")
    staging = tmp_path / f".ckpt.streamstate-restore-{2**22 + 9}-abcdef12"  # a pid no process has
    staging.mkdir()
    (staging / "half-written").write_text("x")
    aside = tmp_path / f".ckpt.streamstate-old-{2**22 + 9}-abcdef12"
    os.rename(target, aside)  # the crash left no target, the old checkpoint aside

    restore_snapshot(store, "s", sid, str(target), force=True, fsync=False)
    assert (target / "metadata").read_text() != '{"id": "old"}'  # the snapshot is in place
    assert [p.name for p in tmp_path.iterdir() if ".streamstate-" in p.name] == []


def test_a_snapshot_of_a_checkpoint_a_crashed_restore_left_missing_finds_it_again(tmp_path) -> None:
    store, _ = _store_with_snapshot(tmp_path)
    target = make_checkpoint(tmp_path / "ckpt", batches=2)
    for d in store_dirs(target):
        for v in range(1, 3):
            write(d / f"{v}.delta", f"delta {v}")
    aside = tmp_path / f".ckpt.streamstate-old-{2**22 + 7}-abcdef12"  # a pid no process has
    os.rename(target, aside)
    result = create_snapshot(str(target), store, "other")
    assert result.manifest.batch_id == 1 and target.is_dir() and not aside.exists()


def test_leftovers_of_a_restore_still_running_are_left_alone(tmp_path) -> None:
    target = _old_checkpoint(tmp_path / "ckpt")
    ours = tmp_path / f".ckpt.streamstate-restore-{os.getppid()}-0123abcd"  # a live process
    ours.mkdir()
    assert recover_leftovers(target) == [] and ours.is_dir()


def _beat(target: Path, *, pid: int, age_s: float = 0.0, state: str = "running") -> None:
    import socket
    from datetime import UTC, datetime, timedelta

    from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, write_heartbeat

    when = (datetime.now(UTC) - timedelta(seconds=age_s)).isoformat().replace("+00:00", "Z")
    write_heartbeat(target, Heartbeat(
        query_id="q", run_id="r", query_name="orders", host=socket.gethostname(), pid=pid, state=state,
        batch_id=7, input_rows=10, updated_at=when, interval_s=5.0,
    ))


def test_the_checkpoint_of_a_running_stream_is_never_replaced(tmp_path) -> None:
    from airflow_provider_streamstate.engine.core.errors import StreamRunningError

    store, sid = _store_with_snapshot(tmp_path)
    target = _old_checkpoint(tmp_path / "ckpt")
    _beat(target, pid=os.getpid())  # a live driver that beat just now
    with pytest.raises(StreamRunningError, match="query orders is running") as refused:
        restore_snapshot(store, "s", sid, target, force=True, fsync=False)
    assert "stop the stream first" in refused.value.one_line()
    assert (target / "metadata").read_text() == '{"id": "old"}'
    assert not [p for p in tmp_path.iterdir() if ".streamstate-" in p.name]  # nothing was staged


@pytest.mark.parametrize(
    "beat",
    [
        {"pid": os.getpid(), "age_s": 3600.0},  # stopped beating an hour ago
        {"pid": 2**22 + 11},  # beat just now, but from a process that is gone on this host
        {"pid": os.getpid(), "state": "stopped"},  # stopped cleanly
    ],
    ids=["stale", "dead-pid", "stopped"],
)
def test_a_stream_that_is_not_running_any_more_does_not_block_a_restore(tmp_path, beat) -> None:
    store, sid = _store_with_snapshot(tmp_path)
    target = _old_checkpoint(tmp_path / "ckpt")
    _beat(target, **beat)
    restore_snapshot(store, "s", sid, target, force=True, fsync=False)
    assert (target / "metadata").read_text() != '{"id": "old"}'


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "swap"])
def test_a_restore_over_a_checkpoint_keeps_its_records_and_its_launch_generations_counting_up(
    tmp_path, monkeypatch, exchange
) -> None:
    """The launch records are the drivers' fence: a restore must not reset generation N to 1,
    or a driver of an old generation would no longer see that it was superseded. The driver's
    record and heartbeat stay too (what the stream did before the restore)."""
    from airflow_provider_streamstate.engine.checkpoint.sidecar import LAUNCHES_DIR, SIDECAR_DIR

    if not exchange:
        monkeypatch.setattr(local_fs, "_exchange", lambda a, b: False)
    store, sid = _store_with_snapshot(tmp_path)
    target = _old_checkpoint(tmp_path / "ckpt")
    for generation in (1, 2):
        write(target / LAUNCHES_DIR / f"{generation:08d}.json", f"launch {generation}")
    write(target / SIDECAR_DIR / "driver.json", "the driver's record")
    restore_snapshot(store, "s", sid, target, force=True, fsync=False)
    assert sorted(p.name for p in (target / LAUNCHES_DIR).iterdir()) == ["00000001.json", "00000002.json"]
    assert (target / SIDECAR_DIR / "driver.json").read_text() == "the driver's record"
    assert not [p for p in tmp_path.iterdir() if ".streamstate-" in p.name]
    assert (target / "offsets" / "0").read_text() != "old offsets"
