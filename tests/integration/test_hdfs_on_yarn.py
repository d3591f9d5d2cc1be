"""HDFS and YARN together: a PySpark application in cluster deploy mode on the stack's YARN
(its driver in a container) keeps its stream's checkpoint on the stack's HDFS. Full
hdfs://127.0.0.1:<port>/ URLs are enough: HADOOP_CONF_DIR holds only the YARN cluster's
configuration (fs.defaultFS stays file:///), no hdfs-site.xml is shipped. Runs in the worker
that has the YARN cluster (tests/conftest.py, SHARED_WORKER)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from fsspec.implementations.webhdfs import WebHDFS

from airflow_provider_streamstate.engine.streams.submission import resolve_spark_submit
from dev import stack as stack_mod

pytestmark = pytest.mark.integration
APP = Path(__file__).resolve().parent.parent / "apps" / "hdfs_checkpoint_stream.py"


def test_a_stream_in_cluster_mode_on_yarn_checkpoints_to_hdfs_and_continues_from_its_checkpoint(
    hdfs: stack_mod.HdfsCluster, yarn: stack_mod.YarnCluster, tmp_path: Path
) -> None:
    fs = WebHDFS("127.0.0.1", port=hdfs.http_port, user="streamstate", skip_instance_cache=True)
    root = f"/yarn/{uuid.uuid4().hex[:10]}"
    for path, keys in ((f"{root}/in/1.json", "aab"), (f"{root}/stage/2.json", "ac")):
        with fs.open(path, "wb") as f:
            f.write("".join(json.dumps({"k": k}) + "\n" for k in keys).encode())
    conf = yarn.pyspark_conf(tmp_path / "staging")
    command = ["spark-submit", "--master", "yarn", "--deploy-mode", "cluster",
               *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")), str(APP), hdfs.url(root)]
    command, env = resolve_spark_submit(command, {**os.environ, **yarn.env()})
    assert env["HADOOP_CONF_DIR"] == yarn.conf_dir and not (Path(yarn.conf_dir) / "hdfs-site.xml").exists()
    started = time.monotonic()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "final status: SUCCEEDED" in proc.stderr
    parts = [p for p in fs.ls(f"{root}/out") if p.rsplit("/", 1)[1].startswith("part-")]
    result = json.loads(b"".join(fs.cat_file(p) for p in parts).decode())
    assert result["master"] == "yarn" and result["default_fs"] == "file:///", result
    assert result["emitted"] == [{"batch": 0, "rows": [["a", 2], ["b", 1]]},
                                 {"batch": 1, "rows": [["a", 3], ["c", 1]]}]
    files = set(fs.find(f"{root}/ckpt"))
    assert {f"{root}/ckpt/commits/0", f"{root}/ckpt/commits/1", f"{root}/ckpt/metadata"} <= files, files
    assert any(f.startswith(f"{root}/ckpt/state/0/") for f in files), files
    print(f"\nYARN cluster mode, checkpoint on HDFS: spark-submit to SUCCEEDED in {took:.0f}s")
