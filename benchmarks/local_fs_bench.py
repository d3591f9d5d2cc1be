"""The tests' forkless local filesystem (jvm/local-fs) against Hadoop's own: the CPU of a
spark-submit driver (with its children) running a small stateful query on a local checkpoint
(HDFS-backed state, 4 partitions, Spark's default checkpoint file manager) for a few batches
and for many, each way alternately, in the same run. The difference between the two lengths,
divided by the batches between them, is one micro-batch's cost.

    .venv/bin/python benchmarks/local_fs_bench.py [--runs 2] [--batches 5,50]

Needs `make setup` (the jar and the class data sharing archive); the drivers get the tests'
JVM options (dev/spark_cds.jvm_opts()).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dev import local_fs, spark_cds, spark_versions  # noqa: E402

OWN, FORKLESS = "Hadoop's own", "forkless"
QUERY = """
import sys, time
from pyspark.sql import SparkSession, functions as F
ckpt, batches = sys.argv[1], int(sys.argv[2])
spark = SparkSession.builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate()
q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 50).load()
     .groupBy((F.col("value") % 5).alias("k")).agg(F.count("*").alias("n"))
     .writeStream.format("noop").outputMode("update").option("checkpointLocation", ckpt)
     .trigger(processingTime="200 milliseconds").start())
while q.lastProgress is None or q.lastProgress["batchId"] < batches:
    time.sleep(0.1)
q.stop()
spark.stop()
"""


def driver_cpu(batches: int, forkless: bool, work: Path) -> float:
    """CPU seconds of one spark-submit driver running the query for `batches` batches."""
    ckpt = work / "ckpt"
    shutil.rmtree(ckpt, ignore_errors=True)
    main = spark_versions.get(spark_versions.MAIN_LINE)
    env = main.env({**local_fs.hadoops_own(os.environ), "SPARK_SUBMIT_OPTS": spark_cds.jvm_opts()})
    if forkless:
        env[local_fs.ENV] = str(local_fs.LOCAL_FS_JAR)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(main.spark_submit), "--master", "local[2]", str(work / "query.py"),
                    str(ckpt), str(batches)], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--batches", default="5,50", help="the short and the long run's batches")
    args = parser.parse_args(argv)
    if not local_fs.LOCAL_FS_JAR.is_file():
        raise SystemExit(f"error: {local_fs.LOCAL_FS_JAR} is not built; run `make setup`")
    short, many = (int(b) for b in args.batches.split(","))
    cpu: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="local-fs-bench-") as tmp:
        work = Path(tmp)
        (work / "query.py").write_text(QUERY)
        for _ in range(args.runs):
            for batches in (short, many):
                for name, forkless in ((OWN, False), (FORKLESS, True)):
                    cpu.setdefault((name, batches), []).append(driver_cpu(batches, forkless, work))
    per_batch: dict[str, float] = {}
    for name in (OWN, FORKLESS):
        s, lg = statistics.median(cpu[name, short]), statistics.median(cpu[name, many])
        per_batch[name] = (lg - s) / (many - short)
        print(f"{name:13} {short} batches {s:5.1f} CPU-s, {many} batches {lg:5.1f} CPU-s, "
              f"a batch {per_batch[name]:.2f} CPU-s (medians of {args.runs})")
    print(f"a batch, {FORKLESS} / {OWN}: {per_batch[FORKLESS] / per_batch[OWN]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
