"""A stream driver's CPU per batch with the driver runtime's listeners (heartbeat and batch
log, jobs/runtime.py) receiving events as views (jobs/query_events.py) against the same
listeners on PySpark's converted events, each in a fresh Spark process, alternately, in the
same run. The stream: a stateful aggregation of a rate source on `local[1]`, 2 shuffle
partitions, a batch a second; the figure is the driver's Python and JVM CPU over `--batches`
batches after a warm-up.

    .venv/bin/python benchmarks/query_listener_bench.py [--batches 30] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WARM_UP_BATCHES = 5


def _cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    rest = stat[stat.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def driver(mode: str, batches: int) -> None:
    """One driver (run in its own process): prints the CPU seconds of `batches` batches."""
    import io
    import time

    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs import query_events, runtime

    if mode == "pyspark":  # the same listeners, on PySpark's own event conversion
        from pyspark.sql.streaming import StreamingQueryListener

        query_events.light_listener_base = lambda: StreamingQueryListener  # type: ignore[assignment]
    spark = spark_session("listener-bench", master="local[1]", state_store="hdfs", shuffle_partitions=2)
    checkpoint = tempfile.mkdtemp(prefix="listener-bench-")
    log = io.StringIO()
    runtime.attach_batch_log(spark, log)
    runtime.attach_heartbeat(spark, checkpoint, interval_s=1.0)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
             .groupBy((F.col("value") % 50).alias("k")).agg(F.count("*"), F.sum("value"))
             .writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 second").start())
    jvm = SparkContext._gateway.proc.pid  # type: ignore[union-attr]  # noqa: SLF001

    def batch() -> int:  # the batch log's lines: asking the query would convert a progress too
        return log.getvalue().count("\nbatch ") + log.getvalue().startswith("batch ") - 1

    def cpu() -> float:
        own = os.times()
        return own.user + own.system + _cpu_s(jvm)

    while batch() < WARM_UP_BATCHES:
        time.sleep(0.2)
    start_batch, start_cpu = batch(), cpu()
    while batch() < start_batch + batches:
        time.sleep(0.2)
    print(json.dumps({"cpu_s": cpu() - start_cpu, "batches": batch() - start_batch}))
    query.stop()
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--driver", choices=("views", "pyspark"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(args.driver, args.batches)
        return
    per_batch: dict[str, list[float]] = {"pyspark": [], "views": []}
    for _ in range(args.runs):
        for mode in per_batch:
            out = subprocess.run([sys.executable, __file__, "--driver", mode, "--batches", str(args.batches)],
                                 capture_output=True, text=True, check=True, cwd=REPO, timeout=900,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
            result = json.loads(out.stdout.strip().splitlines()[-1])
            per_batch[mode].append(result["cpu_s"] / result["batches"])
    base, views = (statistics.median(per_batch[m]) for m in ("pyspark", "views"))
    print(f"driver CPU per batch, median of {args.runs} ({args.batches} batches each):")
    print(f"  PySpark's converted events: {base * 1000:.0f} ms")
    print(f"  events as views:            {views * 1000:.0f} ms  ({views / base:.2f}x)")


if __name__ == "__main__":
    main()
