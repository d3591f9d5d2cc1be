"""A stateful file stream whose input, checkpoint and output are all on HDFS (full hdfs://
URLs; `ROOT` is one): counts per key of the JSON files in <ROOT>/in, checkpointed at
<ROOT>/ckpt, run to the end of its input twice from the same checkpoint (the file in
<ROOT>/stage moved into <ROOT>/in between the runs, through Hadoop's FileSystem), then what
each batch emitted, the driver's fs.defaultFS and master written to <ROOT>/out as one JSON line.

    spark-submit ... hdfs_checkpoint_stream.py ROOT
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyspark.sql import SparkSession

if __name__ == "__main__":
    root = sys.argv[1]
    spark = SparkSession.builder.appName("hdfs-checkpoint-stream").config("spark.sql.shuffle.partitions", "2") \
        .getOrCreate()
    emitted: list[dict[str, Any]] = []

    def run() -> None:
        query = (spark.readStream.schema("k string").json(f"{root}/in").groupBy("k").count()
                 .writeStream.outputMode("update").option("checkpointLocation", f"{root}/ckpt")
                 .foreachBatch(lambda df, batch: emitted.append(
                     {"batch": batch, "rows": sorted([r.k, r["count"]] for r in df.collect())}))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # noqa: SLF001
    fs = path(root).getFileSystem(hadoop)
    if not fs.rename(path(f"{root}/stage/2.json"), path(f"{root}/in/2.json")):
        raise SystemExit("could not move the second input file in")
    run()
    result = {"emitted": emitted, "default_fs": hadoop.get("fs.defaultFS"), "master": spark.sparkContext.master}
    spark.createDataFrame([(json.dumps(result),)], "value string").coalesce(1).write.text(f"{root}/out")
    spark.stop()
