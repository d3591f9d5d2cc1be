"""StateBootstrapOperator run by Airflow (`dag.test()`, every argument templated from the
run's conf): the table of a golden checkpoint's state, kept in object storage or in HDFS
and reached through the stream's Airflow connection alone, bootstraps a new checkpoint whose
batch 0 holds exactly that state, shaped as the golden (engine/edit/bootstrap.py; the Spark
check of a bootstrap runs in tests/integration/test_state_bootstrap.py)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lookup.digest import state_digest
from airflow_provider_streamstate.spec import StreamSpec
from dev import stack as stack_mod
from tests.goldens import goldens
from tests.integration.test_hdfs_connection import SERVICE
from tests.s3 import s3_client
from tests.unit.test_edit_bootstrap import table_of

pytestmark = [pytest.mark.integration, pytest.mark.hdfs]


@pytest.fixture(scope="module")
def golden() -> Any:
    return next(g for g in goldens("small_aggregation_hdfs") if g.line == "4.1")


def table_on_s3(stack: stack_mod.Stack, monkeypatch: pytest.MonkeyPatch, data: bytes) -> tuple[str, str]:
    """The table in the stack's primary S3 region; the connection that reaches it."""
    for key, value in stack.airflow_conn_env("primary", "tables_s3").items():
        monkeypatch.setenv(key, value)
    bucket, key = stack.s3["primary"]["bucket"], f"tables/{uuid.uuid4().hex[:10]}/state.jsonl"
    s3_client(stack).put_object(Bucket=bucket, Key=key, Body=data)
    return f"s3://{bucket}/{key}", "tables_s3"


def table_on_hdfs(hdfs: stack_mod.HdfsCluster, monkeypatch: pytest.MonkeyPatch, data: bytes) -> tuple[str, str]:
    """The table in the stack's HDFS under a logical service name only the connection resolves."""
    from airflow_provider_streamstate.backends.hdfs.hook import StreamstateHdfsHook

    for key in ("HADOOP_CONF_DIR", "HADOOP_HOME", "HADOOP_USER_NAME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_TABLES_HDFS", json.dumps(
        {"conn_type": "streamstate_hdfs", "host": "127.0.0.1", "port": hdfs.http_port, "login": "streamstate"}))
    path = f"/tables/{uuid.uuid4().hex[:10]}/state.jsonl"
    StreamstateHdfsHook("tables_hdfs").get_conn().create(path, data)
    return f"hdfs://{SERVICE}{path}", "tables_hdfs"


@pytest.mark.parametrize("where", ["s3", "hdfs"])
def test_a_table_in_remote_storage_bootstraps_a_checkpoint_through_the_streams_connection(
        where: str, golden: Any, stack: stack_mod.Stack, request: pytest.FixtureRequest, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, run_dag: Any) -> None:
    rows = table_of(golden.checkpoint)
    data = "".join(json.dumps({k: v for k, v in r.items() if k != "partition_id"}) + "\n" for r in rows).encode()
    if where == "s3":
        table, conn_id = table_on_s3(stack, monkeypatch, data)
    else:
        table, conn_id = table_on_hdfs(request.getfixturevalue("hdfs"), monkeypatch, data)
    target = tmp_path / "moved"
    spec = StreamSpec(name="moved", application="moved.py", checkpoint=str(target), store=f"file://{tmp_path}/store",
                      storage_conn_id=conn_id)

    result = run_dag("streamstate_test_bootstrap", {"stream": spec.to_dict(), "skeleton": golden.checkpoint,
                                                    "table": table, "offsets": None})
    assert result.state == "success", result.log[-4000:]
    done = result.tasks["bootstrap"].xcom
    assert done["keys"] == len(rows) == len(golden.state().rows) and done["checkpoint"] == str(target)
    assert done["spark"] is None  # not asked for here
    assert state_digest(str(target), 0).same_entries(state_digest(golden.checkpoint)) == []
    assert CheckpointReader(str(target)).committed_batches() == [0]
