"""The tests' Spark JVMs write local checkpoints through Hadoop's local filesystem without a
process per chmod or readlink (jvm/local-fs on SPARK_DIST_CLASSPATH: dev/local_fs.py,
tests/conftest.py): the same files with the same permissions and the same state as through
Hadoop's own local filesystem, which starts those processes, and the class data sharing
archive still maps.

`chmod` and `readlink` wrappers first on the drivers' PATH record each call on the
checkpoint: Hadoop's own filesystem makes them (so the wrappers see what it does), the
forkless one none. The cases the forkless one hands back to Hadoop or treats apart (a
directory's setgid bit, a sticky bit, a symbolic link) answer as Hadoop's own does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dev import local_fs, spark_cds, spark_versions

pytestmark = [pytest.mark.integration]

# A stateful query on a local checkpoint through Spark's default checkpoint file manager
# (FileContext's rename: the `readlink` calls) and HDFS-backed state, three batches of a
# file source; then through both of Hadoop's local filesystems: a directory made in a setgid
# one, a sticky bit set, a symbolic link's status; as JSON.
APP = """
import json, os, sys
from pyspark.sql import SparkSession, functions as F
ckpt, source, extra = sys.argv[1:4]
spark = (SparkSession.builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .getOrCreate())
q = (spark.readStream.schema("k STRING, v LONG").option("maxFilesPerTrigger", 1).json(source)
     .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
     .writeStream.format("noop").outputMode("update").option("checkpointLocation", ckpt)
     .trigger(availableNow=True).start())
q.awaitTermination()
state = spark.read.format("statestore").load(ckpt).selectExpr("key.k", "value").collect()

jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
hadoop = jvm.org.apache.hadoop.fs
uri = jvm.java.net.URI("file:///")
fs, fc = hadoop.FileSystem.get(uri, conf), hadoop.FileContext.getFileContext(uri, conf)
act = hadoop.permission.FsAction
os.makedirs(f"{extra}/setgid")
os.chmod(f"{extra}/setgid", 0o2775)
fs.mkdirs(hadoop.Path(f"file://{extra}/setgid/child"), hadoop.permission.FsPermission(act.ALL, act.READ_EXECUTE, act.READ_EXECUTE))
os.makedirs(f"{extra}/sticky")
fs.setPermission(hadoop.Path(f"file://{extra}/sticky"), hadoop.permission.FsPermission(act.ALL, act.ALL, act.ALL, True))
open(f"{extra}/target", "w").write("x")
os.symlink(f"{extra}/target", f"{extra}/link")
link = fc.getFileLinkStatus(hadoop.Path(f"file://{extra}/link"))
print(json.dumps({
    "filesystem": fs.getClass().getName(),
    "file_context": fc.getDefaultFileSystem().getClass().getName(),
    "state": sorted([r.k, *r.value] for r in state),
    "setgid_child": oct(os.stat(f"{extra}/setgid/child").st_mode & 0o7777),
    "sticky": oct(os.stat(f"{extra}/sticky").st_mode & 0o7777),
    "link": [link.isSymlink(), link.isFile(), link.getLen()],
}))
spark.stop()
"""

WRAPPER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
exec {real} "$@"
"""


def run_app(tmp_path: Path, name: str, *, forkless: bool) -> tuple[dict[str, Any], list[str], Path]:
    """The app in a spark-submit of the main venv with the tests' JVM options and the class
    data sharing archive required (-Xshare:on refuses to start a JVM that cannot map it),
    with or without the forkless filesystem's jar; its answer, the wrapped calls on its
    checkpoint, the checkpoint."""
    wrappers, log, ckpt = tmp_path / "bin", tmp_path / f"{name}.calls", tmp_path / name / "ckpt"
    wrappers.mkdir(exist_ok=True)
    for tool in ("chmod", "readlink"):
        real = shutil.which(tool)
        assert real is not None, f"no {tool} on PATH"
        (wrappers / tool).write_text(WRAPPER.format(log=log, real=real))
        (wrappers / tool).chmod(0o755)
    app = tmp_path / "app.py"
    app.write_text(APP)
    source = tmp_path / "in"
    source.mkdir(exist_ok=True)
    for i in range(3):
        (source / f"{i}.json").write_text("".join(json.dumps({"k": f"k{(i + j) % 4}", "v": i * 10 + j}) + "\n"
                                                  for j in range(5)))
    main = spark_versions.get(spark_versions.MAIN_LINE)
    env = main.env({**local_fs.hadoops_own(os.environ), "SPARK_SUBMIT_OPTS": f"{spark_cds.jvm_opts()} -Xshare:on"})
    env["PATH"] = os.pathsep.join([str(wrappers), env["PATH"]])
    if forkless:
        env[local_fs.ENV] = str(local_fs.LOCAL_FS_JAR)
    out = subprocess.run([str(main.spark_submit), "--master", "local[2]", str(app),
                          str(ckpt), str(source), str(tmp_path / name / "extra")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    answer = next((json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")), None)
    assert answer is not None, out.stdout[-3000:] + out.stderr[-3000:]
    calls = [ln for ln in (log.read_text().splitlines() if log.exists() else []) if str(ckpt) in ln]
    return answer, calls, ckpt


def layout(ckpt: Path) -> dict[str, tuple[str, str]]:
    """Each path below the checkpoint: its permission bits and kind (a data file's bytes
    differ between runs in the query's ids and times, which are not this test's question)."""
    return {p.relative_to(ckpt).as_posix(): (oct(p.stat().st_mode & 0o7777), "dir" if p.is_dir() else "file")
            for p in sorted(ckpt.rglob("*"))}


def test_a_local_checkpoint_is_written_as_hadoops_own_filesystem_writes_it_without_a_chmod_or_readlink_process(
        tmp_path: Path) -> None:
    for needed in (local_fs.LOCAL_FS_JAR, spark_cds.archive_path()):
        if not needed.is_file():
            pytest.skip(f"{needed} is not built: run `make setup`")
    # The suite's own Spark JVMs get the jar (tests/conftest.py).
    assert str(local_fs.LOCAL_FS_JAR) in os.environ[local_fs.ENV].split(os.pathsep)
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
    # chmod with Hadoop's four-digit mode keeps a directory's setgid bit; a sticky bit is set;
    # FileContext, given a file: path, reads the link's target as Hadoop's readlink call does.
    assert (own["setgid_child"], own["sticky"]) == ("0o2755", "0o1777")
    assert {k: forkless[k] for k in ("setgid_child", "sticky", "link")} == \
        {k: own[k] for k in ("setgid_child", "sticky", "link")}
