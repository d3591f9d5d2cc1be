"""A stopped RocksDB stream with a keyed state of a chosen size, written the cheapest real way:
a streaming aggregation (count, sum and max per account) over a few large batches, for a
Spark line's own Python (tests of the rescale's verification, benchmarks/rescale_bench.py).

    python keyed_state.py CKPT ROOT KEYS PARTITIONS [BATCHES] [--dedup] [--touch N]

ROOT/in gets BATCHES parquet files (default 4) of KEYS/BATCHES new accounts each
(`acct-<9 digits>`, one row per account), read one file a batch (`maxFilesPerTrigger`,
AvailableNow) into PARTITIONS state partitions: RocksDB with changelog checkpointing, a
snapshot (zip) every 2 versions when the maintenance task gets to it (every 2 s), so the
newest batch is tables with changelogs on top. `--touch N`: one more batch updating N
existing accounts (changelog entries over the tables). `--dedup`: a deduplication with a
watermark before the aggregation (a second operator, whose changelogs hold deletions as
the watermark passes). Prints one JSON line: the last batch and the seconds it took.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    dedup = "--dedup" in argv
    touch = int(argv[argv.index("--touch") + 1]) if "--touch" in argv else 0
    if touch:
        args.remove(str(touch))
    ckpt, root, keys, partitions = args[0], args[1], int(args[2]), int(args[3])
    batches = int(args[4]) if len(args) > 4 else 4
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    for k, v in {"spark.sql.shuffle.partitions": str(partitions),
                 "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
                 "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
                 "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
                 "spark.sql.streaming.stateStore.maintenanceInterval": "2s"}.items():
        spark.conf.set(k, v)
    started = time.monotonic()
    step = keys // batches
    for b in range(batches):
        lo, hi = b * step, keys if b == batches - 1 else (b + 1) * step
        (spark.range(lo, hi, numPartitions=1)
         .selectExpr("format_string('acct-%09d', id) AS account", "id % 100000 AS amount",
                     "timestamp_seconds(1700000000 + id DIV 1000) AS ts", "concat('t', id) AS txn")
         .write.mode("overwrite").parquet(f"{root}/in/{b:04d}"))
    if touch:
        (spark.range(0, touch, numPartitions=1)
         .selectExpr(f"format_string('acct-%09d', id * {max(1, keys // touch)}) AS account", "7 AS amount",
                     f"timestamp_seconds(1700000000 + {keys} DIV 1000 + id DIV 1000) AS ts",
                     "concat('u', id) AS txn")
         .write.mode("overwrite").parquet(f"{root}/in/{batches:04d}"))
    schema = "account string, amount long, ts timestamp, txn string"
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{root}/in/*")
    if dedup:
        df = df.withWatermark("ts", "10 minutes").dropDuplicates(["txn", "ts"])
    agg = df.groupBy("account").agg(F.count("*").alias("count"), F.sum("amount").alias("sum"),
                                    F.max("amount").alias("max"))
    q = (agg.writeStream.foreachBatch(lambda d, _b: d.write.format("noop").mode("overwrite").save()).outputMode("update").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    print(json.dumps({"batch": q.lastProgress["batchId"] if q.lastProgress else None,
                      "seconds": round(time.monotonic() - started, 1)}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
