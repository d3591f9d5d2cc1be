"""A small stateful file stream for a Spark line's own Python (tests/integration/test_rescale.py):
counts and sums per key of the JSON lines in ROOT/in, checkpointed at CKPT.

    python repartition_probe.py run CKPT ROOT PROVIDER PARTITIONS   (to the end of its input)
    python repartition_probe.py repartition CKPT N                  (Spark's own API, called directly)
    python repartition_probe.py state CKPT                          (its state, as Spark reads it)

Each prints one JSON line on stdout: the batches run, Spark's error class, or the state."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

PROVIDERS = {"hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
             "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}


def session(conf: dict[str, str]) -> SparkSession:
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str]) -> int:
    mode, ckpt = argv[1], argv[2]
    if mode == "run":
        root, provider, partitions = argv[3], argv[4], argv[5]
        spark = session({"spark.sql.shuffle.partitions": partitions,
                         "spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider]})
        df = spark.readStream.schema("k string, v long").json(f"{root}/in")
        q = df.groupBy("k").agg(F.count("*").alias("c"), F.sum("v").alias("s")).writeStream \
            .foreachBatch(lambda d, b: d.count()).outputMode("update").option("checkpointLocation", ckpt) \
            .trigger(availableNow=True).start()
        q.awaitTermination()
        print(json.dumps({"batch": q.lastProgress["batchId"] if q.lastProgress else None}))
    elif mode == "repartition":
        spark = session({})
        try:
            spark._streamingCheckpointManager.repartition(ckpt, int(argv[3]))
            print(json.dumps({"ok": True}))
        except Exception as exc:  # noqa: BLE001 - the error class is the answer
            line = next((ln for ln in str(exc).splitlines() if "[" in ln and "]" in ln), str(exc))
            print(json.dumps({"ok": False, "error": line.strip()}))
    else:
        spark = session({})
        rows = spark.read.format("statestore").load(ckpt).collect()
        print(json.dumps({r.key.k: list(r.value)[:2] for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
