"""Rescales that cannot work are refused before Spark is called (engine/state/rescale.py
decides them from the checkpoint's pinned confs, its operator metadata, the snapshot's
manifest and the stream's liveness record): one line, the checkpoint and the store as they
were, no spark-submit. The checkpoints are Spark 4.3's own (golden checkpoints,
tests/goldens.py); the refusal Spark itself makes (a Spark without offline repartition) is
the integration test's (tests/integration/test_rescale.py)."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.liveness import Heartbeat, now_iso, write_heartbeat
from airflow_provider_streamstate.engine.core.errors import StreamstateError
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.rescale import rescale_stream
from tests.goldens import golden

LINE = "4.3"  # the first Spark line here with offline state repartition


def no_spark(args: Sequence[str]) -> Any:
    raise AssertionError(f"Spark was called for a rescale that must be refused before it: {list(args)}")


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_rescales_that_cannot_work_are_refused_in_one_line_before_spark_with_nothing_changed(tmp_path: Path) -> None:
    rocks = Path(golden("small_aggregation_rocksdb_changelog", LINE).copy_to(tmp_path / "rocks"))
    hdfs = Path(golden("small_aggregation_hdfs", LINE).copy_to(tmp_path / "hdfs"))
    bare = Path(golden("small_aggregation_rocksdb_changelog", LINE).copy_to(tmp_path / "bare"))
    shutil.rmtree(bare / "state" / "0" / "_metadata")  # as Spark 3.5 wrote it: no operator metadata
    running = Path(golden("small_aggregation_rocksdb_changelog", LINE).copy_to(tmp_path / "running"))
    write_heartbeat(str(running), Heartbeat(query_id="q", run_id="r", query_name="probe", host="elsewhere", pid=4242,
                                            state="running", batch_id=0, input_rows=0, updated_at=now_iso(),
                                            interval_s=60.0))
    store = LocalStore(tmp_path / "store", fsync=False)
    old = create_snapshot(str(rocks), store, "probe", spark_version="4.1.3").manifest

    def refused(checkpoint: Path, partitions: int, **kw: Any) -> str:
        tree, ids = _tree(checkpoint), store.list_snapshot_ids("probe")
        with pytest.raises(StreamstateError) as err:
            rescale_stream(store, "probe", str(checkpoint), partitions=partitions, command=no_spark, **kw)
        assert "\n" not in err.value.one_line()
        assert _tree(checkpoint) == tree and store.list_snapshot_ids("probe") == ids
        assert not any(p.name.startswith(("rocks.streamstate-rescale", "clone")) for p in tmp_path.iterdir())
        return err.value.one_line()

    assert "cannot rescale to 0 partitions" in refused(rocks, 0)
    assert "has 4 state partitions already" in refused(rocks, 4)
    assert "HDFS-backed state" in refused(hdfs, 8)
    assert "begun before Spark 4.0" in refused(bare, 8)
    assert "runs Spark 4.1.3" in refused(rocks, 8, snapshot=old.snapshot_id, target=str(tmp_path / "clone"))
    assert "stop it before rescaling it in place" in refused(running, 8)
