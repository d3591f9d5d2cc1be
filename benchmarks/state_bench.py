"""State benchmark: what reading, validating, diffing and bisecting snapshot state costs.

    .venv/bin/python benchmarks/state_bench.py [--keys 1000000] [--snapshots 64]

In one local Spark session (local[2], 4 shuffle partitions, RocksDB with changelog
checkpointing), from the `rate-micro-batch` source:

* a per-key aggregation (`count`, `max`) over `keys` keys in one batch (snapshot A), then
  a second batch that updates every key (snapshot B);
* materialising A (restore without fsync into a temp dir) and counting its rows;
* the same rules checked by a GX suite (4 expectations) and by one plain Spark SQL query on
  the same DataFrame, each run twice (the first GX run pays its import and warm-up);
* diff A -> B (full outer join on the key in Spark);
* a small aggregation snapshotted at each of `snapshots` batches whose per-key max passes a
  threshold at a known batch, bisected with a suite: validations run, total time, time per
  validation after the first, and a second bisect (stored results only).

Prints a Markdown table and writes .bench/state_results.json.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import (  # this folder is on sys.path; it puts the repo there too
    WORK,
    rate_rows,
    state_rules_sql,
)


def run_batches(spark: Any, df: Any, checkpoint: str, batches: int) -> None:
    q = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint) \
        .trigger(processingTime="100 milliseconds").start()
    try:
        while not q.lastProgress or q.lastProgress["batchId"] < batches - 1:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            time.sleep(0.1)
    finally:
        q.stop()


def timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--snapshots", type=int, default=64)
    a = p.parse_args()

    from pyspark.sql import functions as F

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.bisect import bisect_snapshots
    from airflow_provider_streamstate.engine.state.diff import diff_states
    from airflow_provider_streamstate.engine.state.reader import StateReader
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.engine.state.validation import load_suite, run_suite

    WORK.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="state-bench-", dir=WORK))
    spark = spark_session("state-bench", shuffle_partitions=4,
                          conf={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1000"})
    results: dict[str, Any] = {"keys": a.keys, "snapshots": a.snapshots}
    try:
        store = LocalStore(root / "store")
        # 1. A large state: `keys` keys in batch 0, a tenth of them updated in batch 1.
        big = str(root / "big")
        t0 = time.perf_counter()
        rows = rate_rows(spark, a.keys)
        agg = rows.withColumn("k", F.col("value") % a.keys).groupBy("k").agg(F.count("*").alias("c"),
                                                                            F.max("value").alias("m"))
        run_batches(spark, agg, big, 1)
        a_id = create_snapshot(big, store, "big").manifest.snapshot_id
        results["build_state_s"] = time.perf_counter() - t0
        run_batches(spark, agg, big, 2)  # batch 1 updates every key once more
        b_id = create_snapshot(big, store, "big").manifest.snapshot_id
        with StateReader(store, spark=spark, workdir=root / "work") as reader:
            results["materialise_s"], df = timed(lambda: reader.state("big", a_id))
            results["count_s"], n = timed(df.count)
            results["rows"] = n
            suite = load_suite({"name": "bench", "expectations": [
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_k"}},
                {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_count", "min_value": 1}},
                {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "min_value": 0}},
                {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
            ]})
            # On the state as the reader gives it (not cached): the plain aggregate reads it
            # once; GX reads it once per metric level unless run_suite caches it for the run.
            from airflow_provider_streamstate.engine.state import validation

            results["sql_on_state_s"], _ = timed(lambda: state_rules_sql(reader.state("big", a_id)))
            results["gx_on_state_uncached_s"], _ = timed(
                lambda: validation._run_suite(reader.state("big", a_id), suite, None))  # noqa: SLF001
            results["run_suite_on_state_s"], _ = timed(lambda: run_suite(reader.state("big", a_id), suite))
            df = df.cache()
            df.count()

            def sql_checks() -> bool:
                return state_rules_sql(df)

            results["gx_first_s"], first = timed(lambda: run_suite(df, suite))
            results["gx_s"], second = timed(lambda: run_suite(df, suite))
            results["sql_first_s"], ok1 = timed(sql_checks)
            results["sql_s"], ok2 = timed(sql_checks)
            assert first.success and second.success and ok1 and ok2
            df.unpersist()
            results["diff_s"], d = timed(lambda: diff_states(reader.state("big", a_id), reader.state("big", b_id)))
            results["diff_counts"] = d.counts

        # 2. Bisect over `snapshots` snapshots of a small state.
        hist = str(root / "hist")
        per = 50
        agg = rate_rows(spark, per).withColumn("k", F.col("value") % 10).groupBy("k").agg(F.max("value").alias("m"))
        run_batches(spark, agg, hist, a.snapshots)
        batches = CheckpointReader(hist).committed_batches()[: a.snapshots]
        ids = [create_snapshot(hist, store, "hist", batch_id=b).manifest.snapshot_id for b in batches]
        bad_from = (len(ids) * 2) // 3  # max passes the threshold in this batch
        threshold = per * bad_from - 1
        suite = load_suite({"name": "hist-sane", "expectations": [
            {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "max_value": threshold}}]})
        with StateReader(store, spark=spark, workdir=root / "work2") as reader:
            results["bisect_s"], r = timed(lambda: bisect_snapshots(reader, "hist", suite))
            assert r.first_bad is not None and r.first_bad.snapshot_id == ids[bad_from], (r.to_json(), bad_from)
            results["bisect_validations"] = r.validations
            results["bisect_bound"] = math.ceil(math.log2(len(ids))) + 1
            steps = [s.seconds for s in r.steps if s.source == "validated"]
            results["bisect_step_first_s"] = steps[0]
            results["bisect_step_after_first_s"] = sum(steps[1:]) / max(1, len(steps) - 1)
            results["bisect_again_s"], again = timed(lambda: bisect_snapshots(reader, "hist", suite))
            results["bisect_again_validations"] = again.validations
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    results = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in results.items() if v is not None}
    (WORK / "state_results.json").write_text(json.dumps(results, indent=1))
    print(f"| measure ({a.keys:,} keys; bisect over {a.snapshots} snapshots) | value |\n| --- | ---: |")
    for k, v in results.items():
        print(f"| {k} | {v} |")
    print(f"| GX / SQL (warm) | {results['gx_s'] / results['sql_s']:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
