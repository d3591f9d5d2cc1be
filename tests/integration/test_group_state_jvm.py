"""Java/Scala arbitrary state (`mapGroupsWithState`, `flatMapGroupsWithState`; without and
with a processing-time timeout) in both state formats: a snapshot of the running JVM stream
restores elsewhere to exactly Spark's state at its batch, every group's state looked up in
the snapshot without Spark is Spark's, and the stream resumes from the copy after the
original checkpoint is gone. The stream is jvm/group-state-job (built by
`make setup` against pyspark's own Spark jars), run with spark-submit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.lookup import SnapshotSource, lookup_key
from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector, checkpoint_state
from airflow_provider_streamstate.engine.state.spark import read_state
from tests.lookup_cases import ours_norm, spark_norm, to_input

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / ".jvm/group-state-job/streamstate-group-state-job.jar"
FORMAT_CONF = "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion"


def run_job(checkpoint: str, api: str, state_format: str, store: str, timeout: str, batches: int) -> None:
    """Run the job until `batches` batches have committed (it gives up after three minutes)."""
    import pyspark

    assert JAR.is_file(), f"{JAR} is missing: run `make setup`"
    env = {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__)}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--class", "io.streamstate.dev.GroupStateJob", str(JAR), checkpoint, api, state_format, store, str(batches),
         timeout],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]


def _rows(df) -> list[tuple]:  # noqa: ANN001
    return sorted(tuple(r) for r in df.collect())


# Format 1 without a timeout: with one, Spark 4.1 cannot restart (or read) its own checkpoint
# of format 1 (VALUE_ROW_FORMAT_VALIDATION_FAILURE on the timeout, checked without streamstate).
@pytest.mark.parametrize(("api", "state_format", "store", "timeout"),
                         [("map", "1", "hdfs", "none"), ("flatMap", "2", "rocksdb", "processing")])
def test_jvm_group_state_snapshot_restores_exactly_elsewhere_and_the_job_resumes(
    spark, tmp_path: Path, make_store, api: str, state_format: str, store: str, timeout: str,
) -> None:
    checkpoint = str(tmp_path / "ckpt")
    run_job(checkpoint, api, state_format, store, timeout, 4)
    snapshots, _, _ = make_store("local")
    m = create_snapshot(checkpoint, snapshots, "groups").manifest
    assert m.batch_id >= 2
    assert [op.name for op in m.operators] == ["flatMapGroupsWithState"]
    assert m.spark_conf[FORMAT_CONF] == state_format
    assert m.state_store == ("hdfs" if store == "hdfs" else "rocksdb")
    original = _rows(checkpoint_state(spark, checkpoint, batch_id=m.batch_id))
    assert len(original) == 13
    # Key lookups without Spark read every group's state from the snapshot as Spark does.
    state = read_state(spark, checkpoint, batchId=m.batch_id)
    key_t, value_t = state.schema["key"].dataType, state.schema["value"].dataType
    source = SnapshotSource(snapshots, "groups", m.snapshot_id)
    for r in state.collect():
        hit = lookup_key(source, key=to_input(r.key, key_t))
        assert hit.found and hit.partition == r.partition_id, r.key
        assert ours_norm(hit.value, hit.value_schema) == spark_norm(r.value, value_t), r.key
    shutil.rmtree(checkpoint)

    target = tmp_path / "restored"
    restore_snapshot(snapshots, "groups", m.snapshot_id, target)
    with StateReader(snapshots, spark=spark) as reader:
        assert _rows(reader.state("groups", m.snapshot_id, StateSelector())) == original
    run_job(str(target), api, state_format, store, timeout, 2)
    assert CheckpointReader(str(target)).committed_batches()[-1] > m.batch_id
