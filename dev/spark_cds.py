"""Class data sharing for the many short Spark JVMs of tests, demos and benchmarks: an archive
of the Spark classes a small stateful query loads (the JVM's AppCDS, `-XX:ArchiveClassesAtExit`),
mapped by every later Spark JVM of the same Spark and Java instead of loading and verifying
those classes again. On this 2-core machine a local session's start and one small query took
4 CPU-seconds with it instead of 7 (see docs/testing.md).

    .venv/bin/python dev/spark_cds.py          # build every installed Spark line's archive (make setup does)
    .venv/bin/python dev/spark_cds.py --opts   # print the JVM options that use the main venv's

`jvm_opts()` is what SPARK_SUBMIT_OPTS gets in tests (tests/conftest.py): SHORT_LIVED_JVM,
INTERPRETED_SQL (the archive is trained with both) and NO_WEB_UI, plus the archive of this
pyspark when it was built for this Java; `with_archive_of()` swaps in another line's
(dev/spark_versions.py's `env()` does for a driver of that line). The JVMs a
cluster starts map it too: `cluster_jvm_opts()` for a standalone worker's executors,
`yarn_container_confs()` for YARN's containers (their class path needs the launcher's first).
A JVM whose class path the archive does not match (a YARN container without the launcher's
class path first) runs as without it: the JVM checks, and its messages about it are off
(they would go to the application's stdout).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dev.stack import JARS, SHORT_LIVED_JVM  # noqa: E402

ARCHIVES = JARS / "spark-cds"
QUIET = "-Xlog:cds=off,cds+dynamic=off"
# Spark SQL's expressions and operators interpreted instead of compiled to Java with Janino,
# as Spark's own test suites run them (`spark.sql.codegen.factoryMode`, an internal conf for
# tests): a test's few hundred rows cost less to interpret than to compile, and each
# query's compilation is most of a short driver's JIT work. What Spark writes (rows, state,
# checkpoints) is the same either way. Two in-place repair tests, run alternately, took about
# a tenth less CPU (docs/testing.md; a whole run's variance between runs hides it); the tests
# of what each Spark line itself does run its defaults (`with_compiled_sql`).
SQL_CODE_GENERATION = {  # conf: (interpreted, Spark's default)
    "spark.sql.codegen.wholeStage": ("false", "true"),
    "spark.sql.codegen.factoryMode": ("NO_CODEGEN", "FALLBACK"),
}
INTERPRETED_SQL = " ".join(f"-D{conf}={interpreted}" for conf, (interpreted, _) in SQL_CODE_GENERATION.items())
# No web UI in the tests' drivers (Spark reads `spark.*` system properties as confs, and
# spark-submit passes them on to a driver in cluster mode): nothing looks at it, and its
# server costs a driver's start about 0.4 of its 4.8 CPU-s (docs/testing.md). The product's
# own state jobs run without it too (engine/state/spark.py); what Spark writes is the same.
NO_WEB_UI = "-Dspark.ui.enabled=false"

# The training run: a session, SQL, a stateful streaming query on RocksDB state with
# changelog checkpointing and on the default store, Spark's state readers, files.
TRAINING = """
import sys, time
from pyspark.sql import SparkSession, functions as F
out = sys.argv[1]
spark = (SparkSession.builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.range(100).groupBy((F.col("id") % 7).alias("k")).count().collect()
for provider, name in (("org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider", "rocks"),
                       ("org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider", "hdfs")):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    ckpt = f"{out}/{name}"
    q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 50).load()
         .withWatermark("timestamp", "1 second").dropDuplicates(["value", "timestamp"])
         .groupBy((F.col("value") % 5).alias("k")).agg(F.count("*").alias("n"), F.sum("value").alias("s"))
         .writeStream.format("noop").outputMode("update").option("checkpointLocation", ckpt)
         .trigger(processingTime="200 milliseconds").start())
    while not q.lastProgress or q.lastProgress["batchId"] < 2:
        time.sleep(0.1)
    q.stop()
    if int(spark.version.split(".")[0]) >= 4:  # Spark's state readers came in 4.0
        _ = spark.streams.active
        spark.read.format("statestore").load(ckpt).collect()
        spark.read.format("state-metadata").load(ckpt).collect()
spark.range(10).write.mode("overwrite").parquet(f"{out}/p")
spark.read.parquet(f"{out}/p").count()
spark.read.json(spark.sparkContext.parallelize(['{"a": 1}'])).collect()
spark.stop()
"""


@functools.cache
def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"  # no Java here: no Spark JVM will start either
    found = re.search(r'version "([^"]+)"', out)
    return found.group(1) if found else "unknown"


def archive_path(spark_home: Path | None = None, java: str | None = None) -> Path:
    """Where the archive of this Spark (its spark-core jar's version) for this Java lives."""
    if spark_home is None:
        import pyspark

        spark_home = Path(pyspark.__file__).resolve().parent
    core = next(iter(sorted((spark_home / "jars").glob("spark-core_*.jar"))), None)
    spark = core.stem.split("-", 2)[-1] if core else "unknown"
    return ARCHIVES / f"spark-{spark}-java-{java or _java_version()}.jsa"


def jvm_opts(spark_home: Path | None = None) -> str:
    """SHORT_LIVED_JVM, INTERPRETED_SQL and NO_WEB_UI, with the archive of this Spark
    (default: this pyspark) and Java when it exists."""
    return _with_archive(f"{SHORT_LIVED_JVM} {INTERPRETED_SQL} {NO_WEB_UI}", spark_home)


def _with_archive(base: str, spark_home: Path | None) -> str:
    """JVM options `base` with this Spark's archive when it was built."""
    archive = archive_path(spark_home)
    return f"{base} -XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else base


def with_compiled_sql(opts: str) -> str:
    """JVM options `opts` without INTERPRETED_SQL: Spark's default code generation."""
    dropped = set(INTERPRETED_SQL.split())
    return " ".join(o for o in opts.split() if o not in dropped)


def with_archive_of(opts: str, spark_home: Path) -> str:
    """JVM options `opts` with the archive they name replaced by that Spark's (dropped when it
    was not built): what a JVM of another Spark line gets from an environment made for this
    one. Options that name no archive stay as they are."""
    if "-XX:SharedArchiveFile=" not in opts:
        return opts
    kept = [o for o in opts.split() if not o.startswith("-XX:SharedArchiveFile=") and o != QUIET]
    archive = archive_path(spark_home)
    return " ".join([*kept, f"-XX:SharedArchiveFile={archive}", QUIET] if archive.is_file() else kept)


def cluster_jvm_opts(spark_home: Path | None = None) -> str:
    """JVM options for the JVMs a cluster starts for an application of this Spark (a
    standalone worker's executors, YARN's containers): SHORT_LIVED_JVM with the archive when
    it was built. Spark's SQL code generation stays as shipped there. A standalone executor's
    class path is the launcher's own, so the archive maps as it is (an application's two
    executors used 0.6 of their CPU, benchmarks/cluster_cds_bench.py); a YARN container
    needs `yarn_container_confs`."""
    return _with_archive(SHORT_LIVED_JVM, spark_home)


_LAUNCHER_CLASS_PATHS: dict[Path, str] = {}


def launcher_class_path(spark_home: Path) -> str | None:
    """The class path Spark's own launcher gives a JVM of this Spark, up to its jars: what
    the archive was dumped with (it differs by line: 4.1 puts slf4j-api's jar before the
    rest, 4.0 a hive-jackson directory first). Asked of the launcher once (an answer is
    kept); None, said on stderr, when it cannot say."""
    if spark_home in _LAUNCHER_CLASS_PATHS:
        return _LAUNCHER_CLASS_PATHS[spark_home]
    found = _ask_launcher(spark_home)
    if found is None:
        print(f"dev/spark_cds.py: Spark's launcher in {spark_home} gave no class path; "
              "its cluster JVMs run without the archive", file=sys.stderr)
    else:
        _LAUNCHER_CLASS_PATHS[spark_home] = found
    return found


def _ask_launcher(spark_home: Path) -> str | None:
    core = next(iter(sorted((spark_home / "jars").glob("spark-core_*.jar"))), None)
    if core is None:
        return None
    scala = core.name.split("_", 1)[1].split("-", 1)[0]
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")}
    env |= {"SPARK_HOME": str(spark_home), "SPARK_SCALA_VERSION": scala}
    try:
        out = subprocess.run(["java", "-Xmx128m", *SHORT_LIVED_JVM.split(), "-cp", f"{spark_home}/jars/*",
                              "org.apache.spark.launcher.Main", "org.apache.spark.deploy.SparkSubmit", "app.py"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=spark_home)
    except (OSError, subprocess.TimeoutExpired):
        return None
    command = out.stdout.split("\0")
    if out.returncode != 0 or "-cp" not in command:
        return None
    jars = f"{spark_home}/jars/*"
    entries = command[command.index("-cp") + 1].split(":")
    return ":".join(entries[: entries.index(jars) + 1]) if jars in entries else None


def yarn_container_confs(spark_home: Path | None = None) -> dict[str, str]:
    """Spark confs that let YARN's containers for an application of this Spark (its
    application master, its executors) map the archive: `cluster_jvm_opts` and, first on
    their class path, the launcher's own (a container's starts with its working directory,
    where the archive's has Spark's jars; the JVM checks the entries it loaded classes from).
    The application master's class path is `spark.driver.extraClassPath` in either deploy
    mode (there is no `spark.yarn.am.extraClassPath`). A small application's containers
    used 0.6 of their CPU (benchmarks/cluster_cds_bench.py). Spark's jars come before the
    container's `__spark_conf__` then: none of them carries a log4j or Hadoop site file.
    Without the archive: SHORT_LIVED_JVM alone."""
    if spark_home is None:
        import pyspark

        spark_home = Path(pyspark.__file__).resolve().parent
    sides = ("driver", "executor", "yarn.am")
    class_path = launcher_class_path(spark_home) if archive_path(spark_home).is_file() else None
    if class_path is None:
        return {f"spark.{side}.extraJavaOptions": SHORT_LIVED_JVM for side in sides}
    opts = cluster_jvm_opts(spark_home)
    return {**{f"spark.{side}.extraJavaOptions": opts for side in sides},
            **{f"spark.{side}.extraClassPath": class_path for side in ("driver", "executor")}}


ATTEMPTS = 3
ATTEMPT_TIMEOUT_S = 300  # a training run takes 30-60 s on this 2-core machine, two side by side


def build(python: str, spark_home: Path) -> Path:
    """Run the training query under that Python's spark-submit with `-XX:ArchiveClassesAtExit`
    (the archive is written when its JVM exits); the archive's path. A JVM that has not
    exited in ATTEMPT_TIMEOUT_S is killed with its process group and the run tried again: once
    in many setups Spark 3.5's JVM hung in its exit (its state store maintenance and RocksDB
    threads waiting) after its archive was written, and setup waited for it."""
    archive = archive_path(spark_home)
    archive.parent.mkdir(parents=True, exist_ok=True)
    spark_submit = spark_home / "bin" / "spark-submit"
    partial = archive.with_suffix(".partial")
    env = {**os.environ, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
           "SPARK_SUBMIT_OPTS": f"{SHORT_LIVED_JVM} {INTERPRETED_SQL} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("SPARK_DIST_CLASSPATH", None)  # Spark's jars alone: a JVM with entries after them still maps it
    failure = ""
    for attempt in range(1, ATTEMPTS + 1):
        partial.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="spark-cds-") as tmp:
            app = Path(tmp) / "training.py"
            app.write_text(TRAINING)
            proc = subprocess.Popen([str(spark_submit), "--master", "local[1]", "--conf", "spark.driver.host=127.0.0.1",
                                     "--conf", "spark.driver.bindAddress=127.0.0.1", str(app), tmp],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            try:
                _, stderr = proc.communicate(timeout=ATTEMPT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                failure = f"its JVM had not exited after {ATTEMPT_TIMEOUT_S} s (attempt {attempt} of {ATTEMPTS})"
                print(f"building {archive.name}: {failure}; trying again", file=sys.stderr)
                continue
        if proc.returncode == 0 and partial.is_file():
            partial.rename(archive)
            return archive
        failure = stderr[-3000:]
        break
    partial.unlink(missing_ok=True)
    raise SystemExit(f"building {archive.name} failed: {failure}")


def main(argv: list[str] | None = None) -> int:
    from dev import spark_versions

    parser = argparse.ArgumentParser(prog="dev/spark_cds.py", description=__doc__.split("\n")[0])
    parser.add_argument("--opts", action="store_true", help="print the JVM options that use the main venv's archive")
    args = parser.parse_args(argv)
    if args.opts:
        print(jvm_opts())
        return 0
    missing = []
    for version in spark_versions.SUPPORTED:
        if not version.installed():
            continue
        archive = archive_path(version.spark_home)
        if archive.is_file():
            print(f"{archive.relative_to(REPO)} is there")
        else:
            missing.append(version)
    # One training JVM per core: each is a single-threaded local[1] query, mostly class loading.
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for built in pool.map(lambda v: build(str(v.python), v.spark_home), missing):
            print(f"wrote {built.relative_to(REPO)} ({built.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
