"""The tests' Spark JVMs write local checkpoints through Hadoop's local filesystem without a
process per chmod or readlink (jvm/local-fs on SPARK_DIST_CLASSPATH, tests/conftest.py):
the same files with the same permissions and the same state as Hadoop's own local
filesystem, which starts those processes, and the class data sharing archive still maps.

`chmod` and `readlink` wrappers first on the drivers' PATH record each call on the
checkpoint: Hadoop's own filesystem makes them (so the wrappers see what it does), the
forkless one none."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dev import spark_cds

pytestmark = [pytest.mark.integration]

# A stateful query on a local checkpoint through Spark's default checkpoint file manager
# (FileContext's rename: the `readlink` calls) and HDFS-backed state, three batches of a
# file source, then the filesystems Hadoop resolves for file: and the state, as JSON.
APP = """
import json, sys
from pyspark.sql import SparkSession, functions as F
ckpt, source = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .getOrCreate())
q = (spark.readStream.schema("k STRING, v LONG").option("maxFilesPerTrigger", 1).json(source)
     .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
     .writeStream.format("noop").outputMode("update").option("checkpointLocation", ckpt)
     .trigger(availableNow=True).start())
q.awaitTermination()
jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
uri = jvm.java.net.URI("file:///")
state = spark.read.format("statestore").load(ckpt).selectExpr("key.k", "value").collect()
print(json.dumps({
    "filesystem": jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName(),
    "file_context": jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf).getDefaultFileSystem()
        .getClass().getName(),
    "state": sorted([r.k, *r.value] for r in state),
}))
spark.stop()
"""

WRAPPER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
exec {real} "$@"
"""


def run_app(tmp_path: Path, name: str, *, forkless: bool) -> tuple[dict[str, Any], list[str], Path]:
    """The app in a spark-submit of the main venv with the tests' JVM options (the archive
    required: -Xshare:on refuses to start without it), with or without the forkless
    filesystem's jar; its answer, the wrapped calls on its checkpoint, the checkpoint."""
    wrappers, log, ckpt = tmp_path / "bin", tmp_path / f"{name}.calls", tmp_path / name / "ckpt"
    wrappers.mkdir(exist_ok=True)
    for tool in ("chmod", "readlink"):
        real = next(Path(d) / tool for d in ("/usr/bin", "/bin") if (Path(d) / tool).exists())
        (wrappers / tool).write_text(WRAPPER.format(log=log, real=real))
        (wrappers / tool).chmod(0o755)
    app = tmp_path / "app.py"
    app.write_text(APP)
    source = tmp_path / "in"
    source.mkdir(exist_ok=True)
    for i in range(3):
        (source / f"{i}.json").write_text("".join(json.dumps({"k": f"k{(i + j) % 4}", "v": i * 10 + j}) + "\n"
                                                  for j in range(5)))
    env = {k: v for k, v in os.environ.items() if k != "SPARK_DIST_CLASSPATH"}
    env["PATH"] = os.pathsep.join([str(wrappers), str(Path(os.sys.executable).parent), env.get("PATH", "")])
    opts = spark_cds.jvm_opts()
    env["SPARK_SUBMIT_OPTS"] = f"{opts} -Xshare:on" if "-XX:SharedArchiveFile=" in opts else opts
    if forkless:
        env["SPARK_DIST_CLASSPATH"] = str(spark_cds.LOCAL_FS_JAR)
    out = subprocess.run([str(Path(os.sys.executable).parent / "spark-submit"), "--master", "local[2]", str(app),
                          str(ckpt), str(source)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    answer = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("{")))
    calls = [ln for ln in (log.read_text().splitlines() if log.exists() else []) if str(ckpt) in ln]
    return answer, calls, ckpt


def layout(ckpt: Path) -> dict[str, tuple[str, str]]:
    """Each path below the checkpoint: its permission bits and kind (a data file's bytes
    differ between runs only in the query's ids and times, which are not this test's
    question)."""
    return {p.relative_to(ckpt).as_posix(): (oct(p.stat().st_mode & 0o7777), "dir" if p.is_dir() else "file")
            for p in sorted(ckpt.rglob("*"))}


def test_a_local_checkpoint_is_written_as_hadoops_own_filesystem_writes_it_without_a_chmod_or_readlink_process(
        tmp_path: Path) -> None:
    if not spark_cds.LOCAL_FS_JAR.is_file():
        pytest.skip(f"{spark_cds.LOCAL_FS_JAR} is not built: run `make setup`")
    own, own_calls, own_ckpt = run_app(tmp_path, "hadoops-own", forkless=False)
    forkless, forkless_calls, forkless_ckpt = run_app(tmp_path, "forkless", forkless=True)

    # FileSystem's file: is Hadoop's LocalFileSystem, or the proxy of it Hive's jars register (Spark 4.1's).
    assert own["filesystem"] in ("org.apache.hadoop.fs.LocalFileSystem", "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem")
    assert own["file_context"] == "org.apache.hadoop.fs.local.LocalFs"
    assert forkless["filesystem"] == "io.streamstate.dev.ForklessLocalFileSystem"
    assert forkless["file_context"] == "io.streamstate.dev.ForklessLocalFs"
    # Hadoop's own started a chmod per file it created and a readlink per path FileContext renamed.
    assert {c.split()[0] for c in own_calls} == {"chmod", "readlink"}, own_calls
    assert forkless_calls == []
    assert forkless["state"] == own["state"] and len(own["state"]) == 4
    assert layout(forkless_ckpt) == layout(own_ckpt) and len(layout(own_ckpt)) > 20
