"""Key lookup benchmark: one key of a ~1M-key state, without Spark (engine/lookup), cold and
warm, against Spark's state reader filtered to the same key.

    .venv/bin/python benchmarks/lookup_bench.py [--keys 1000000] [--partitions 8] \
        [--store rocksdb-changelog|rocksdb|hdfs] [--lookups 200]

Builds (once per setting, kept in .bench/lookup-<store>-<keys>-<partitions>) an aggregation
checkpoint with `--keys` distinct keys over `--partitions` state partitions, then times:

* the lookup, cold: a fresh process-level cache (plan the cut of one partition, read and
  decode its files, find the key);
* the lookup, warm: another key of the same partition (its tables already opened: a data
  block per table consulted, or nothing when the changelogs decide it), the median of
  `--lookups` such lookups, given the checkpoint's path (each call plans the cut of the
  partition again: the newest batch may have changed); then the same keys again given one
  `CheckpointSource` (served from the cache);
* the same key through Spark's state data source (`format("statestore")` with a filter on
  the key; the SparkSession already started and warm: its start is not counted).

Writes .bench/lookup_results-<store>.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from bench_common import WORK


def build(path: str, keys: int, partitions: int, store: str) -> Any:
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.state.spark import spark_session, state_store_confs

    spark = spark_session("lookup-bench", shuffle_partitions=partitions, state_store=store)
    for k, v in state_store_confs(store).items():
        spark.conf.set(k, v)
    _ = spark.streams.active
    from pathlib import Path

    if not (Path(path) / "commits" / "2").exists():
        per_batch = keys // 2
        df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", per_batch).load()
              .groupBy(F.concat(F.lit("account-"), (F.col("value") % keys).cast("string")).alias("account"))
              .agg(F.count("*").alias("n"), F.sum("value").alias("total")))
        q = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", path) \
            .trigger(processingTime="1 second").start()
        while not q.lastProgress or q.lastProgress["batchId"] < 2:
            assert q.exception() is None, q.exception()
            time.sleep(1)
        q.stop()
    return spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--store", default="rocksdb-changelog")
    ap.add_argument("--lookups", type=int, default=200)
    args = ap.parse_args()

    from airflow_provider_streamstate.engine.lookup import CheckpointSource, PartitionCache, lookup_key
    from airflow_provider_streamstate.engine.state.spark import read_state

    WORK.mkdir(exist_ok=True)
    path = str(WORK / f"lookup-{args.store}-{args.keys}-{args.partitions}")
    spark = build(path, args.keys, args.partitions, args.store)
    rnd = random.Random(5)
    key = f"account-{rnd.randrange(args.keys)}"

    cache = PartitionCache()
    t0 = time.perf_counter()
    cold = lookup_key(path, key=[key], cache=cache)
    cold_ms = (time.perf_counter() - t0) * 1000
    assert cold.found, key
    same_partition = []
    while len(same_partition) < args.lookups:
        k = f"account-{rnd.randrange(args.keys)}"
        if lookup_key(path, key=[k], cache=cache).partition == cold.partition:
            same_partition.append(k)
    warm, warm_bytes = [], []
    for k in same_partition:
        t0 = time.perf_counter()
        hit = lookup_key(path, key=[k], cache=cache)
        warm.append((time.perf_counter() - t0) * 1000)
        warm_bytes.append(hit.bytes_read)
        assert hit.found
    source = CheckpointSource(path)  # one source reused: its plans are kept, no re-planning per call
    lookup_key(source, key=[same_partition[0]], cache=cache)
    reused = []
    for k in same_partition:
        t0 = time.perf_counter()
        hit = lookup_key(source, key=[k], cache=cache)
        reused.append((time.perf_counter() - t0) * 1000)
        assert hit.found and hit.cached
    spark_runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        rows = read_state(spark, path).where(f"key._groupingexpression = '{key}'").collect()
        spark_runs.append((time.perf_counter() - t0) * 1000)
    assert len(rows) == 1 and tuple(rows[0].value) == tuple(cold.value.values()), (rows, cold.value)
    result = {
        "keys": args.keys, "partitions": args.partitions, "store": args.store, "key": key,
        "partition": cold.partition, "cold_ms": round(cold_ms, 2), "cold_bytes_read": cold.bytes_read,
        "cold_files_read": len(cold.files_read), "cold_requests": cold.requests,
        "warm_bytes_read_median": int(statistics.median(warm_bytes)),
        "warm_ms_median": round(statistics.median(warm), 3), "warm_ms_p95": round(sorted(warm)[int(0.95 * len(warm))], 3),
        "warm_reused_source_ms_median": round(statistics.median(reused), 3),
        "spark_filter_ms": [round(x, 1) for x in spark_runs],
    }
    print(json.dumps(result, indent=1))
    (WORK / f"lookup_results-{args.store}.json").write_text(json.dumps(result, indent=1) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
