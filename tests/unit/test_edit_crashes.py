"""An in-place edit killed (SIGKILL, engine/core/crash_points.py) before its swap leaves the
checkpoint as it was, and the next edit replaces the work copy it left; killed in the middle
of its swap, it leaves a fenced checkpoint that `recover_swap` (what `streamstate stream
recover` runs) finishes from the work copy into exactly the edited state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.swap import recover_swap, swap_in_progress
from airflow_provider_streamstate.engine.edit.changes import EditSpec
from airflow_provider_streamstate.engine.edit.repair import edit_stream, work_location
from airflow_provider_streamstate.engine.lookup import lookup_key
from tests.edits import repair_of, work_copy
from tests.goldens import golden

SCRIPT = """
import json, sys
from airflow_provider_streamstate.engine.edit.changes import EditSpec
from airflow_provider_streamstate.engine.edit.repair import edit_stream
from airflow_provider_streamstate.backends.local.store import LocalStore
store, ckpt, edit = sys.argv[1:4]
edit_stream(LocalStore(store, fsync=False), "orders", ckpt, EditSpec.from_json(json.loads(edit)), apply=True)
"""


def killed_at(point: str, store: Path, ckpt: str, edit: dict[str, object]) -> None:
    env = {**os.environ, "STREAMSTATE_CRASH_AT": point}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(store), ckpt, json.dumps(edit)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-2000:]


def test_an_edit_killed_before_its_swap_changes_nothing_and_the_next_edit_replaces_its_work_copy(
        tmp_path: Path) -> None:
    g = golden("small_aggregation_hdfs")
    ckpt = work_copy(g, tmp_path)
    edit, gone, _ = repair_of(g)
    n = CheckpointReader(ckpt).resolve_batch(None)
    killed_at("edit.verified", tmp_path / "snapshots", ckpt, edit)
    assert CheckpointReader(ckpt).resolve_batch(None) == n and lookup_key(ckpt, key=gone[0].key_input).found
    assert Path(work_location(ckpt)).exists() and not swap_in_progress(open_checkpoint_fs(ckpt))
    result = edit_stream(LocalStore(tmp_path / "snapshots", fsync=False), "orders", ckpt, EditSpec.from_json(edit),
                         apply=True)
    assert result.edit_batch == n + 1 and not lookup_key(ckpt, key=gone[0].key_input).found


@pytest.mark.parametrize("point", ["swap.fenced", "swap.half-placed", "swap.placed"])
def test_an_edit_killed_mid_swap_is_finished_by_recovery_into_the_edited_state(point: str, tmp_path: Path) -> None:
    g = golden("small_aggregation_rocksdb_changelog")
    ckpt = work_copy(g, tmp_path)
    edit, gone, changed = repair_of(g)
    n = CheckpointReader(ckpt).resolve_batch(None)
    first = lookup_key(ckpt, key=g.state().rows[0].key_input).value
    killed_at(point, tmp_path / "snapshots", ckpt, edit)
    fs = open_checkpoint_fs(ckpt)
    assert swap_in_progress(fs)
    assert recover_swap(fs) and not swap_in_progress(open_checkpoint_fs(ckpt))
    assert CheckpointReader(ckpt).resolve_batch(None) == n + 1
    assert not lookup_key(ckpt, key=gone[0].key_input).found
    assert lookup_key(ckpt, key=changed[0].key_input).value == first
