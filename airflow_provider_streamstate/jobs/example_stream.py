"""The example stateful stream: card transactions from Kafka to alerts on Kafka.

Two query shapes, each its own stream with its own checkpoint:

* `accounts` (default): drop duplicate transactions within a 10-minute event-time
  watermark, then keep per-account `count`, `sum` and `max` of the amount; an account
  whose total passes `--threshold-cents` is written as an alert (update mode). Two
  stateful operators: aggregation (op 0) and deduplication (op 1).
* `windows`: an event-time windowed count per account with a watermark; a window with
  at least `--window-threshold` transactions is written as an alert (append mode).

Run with spark-submit (with the Kafka connector jars) or call `start_query` from Python.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

QUERIES = ("accounts", "windows")


@dataclass(frozen=True)
class StreamArgs:
    bootstrap_servers: str
    checkpoint: str
    source_topic: str = "transactions"
    alerts_topic: str = "alerts"
    query: str = "accounts"
    trigger: str = "processing:2 seconds"  # or "available-now"
    shuffle_partitions: int = 4
    max_offsets_per_trigger: int | None = None
    threshold_cents: int = 1_000_000
    window: str = "1 minute"
    window_threshold: int = 3
    watermark: str = "10 minutes"
    query_name: str | None = None
    partitions: int = 3  # of the topics main() creates when they are missing


def transactions(spark: SparkSession, args: StreamArgs) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("txn_id", StringType()),
            StructField("account", StringType()),
            StructField("amount_cents", LongType()),
            StructField("ts_ms", LongType()),
        ]
    )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.source_topic)
        .option("startingOffsets", "earliest")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    parsed = reader.load().select(F.from_json(F.col("value").cast("string"), schema).alias("t")).select("t.*")
    return parsed.where(F.col("txn_id").isNotNull()).withColumn("event_time", F.timestamp_millis("ts_ms"))


def account_aggregates() -> list[Any]:
    """What the `accounts` query keeps per account (its state's value columns; its alerts
    carry each one, so Spark prunes none)."""
    from pyspark.sql import functions as F

    return [F.count(F.lit(1)).alias("txn_count"), F.sum("amount_cents").alias("total_cents"),
            F.max("amount_cents").alias("max_cents")]


def account_alerts(txns: DataFrame, args: StreamArgs) -> DataFrame:
    from pyspark.sql import functions as F

    per_account = (
        txns.withWatermark("event_time", args.watermark)
        .dropDuplicatesWithinWatermark(["txn_id"])
        .groupBy("account")
        .agg(*account_aggregates())
    )
    alerts = per_account.where(F.col("total_cents") >= args.threshold_cents)
    return alerts.select(
        F.col("account").alias("key"),
        F.to_json(F.struct(F.lit("total_over_threshold").alias("kind"), *per_account.columns)).alias("value"),
    )


def window_alerts(txns: DataFrame, args: StreamArgs) -> DataFrame:
    from pyspark.sql import functions as F

    counts = (
        txns.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window), "account")
        .count()
    )
    return counts.where(F.col("count") >= args.window_threshold).select(
        F.col("account").alias("key"),
        F.to_json(
            F.struct(
                F.lit("busy_window").alias("kind"),
                "account",
                F.col("window.start").alias("window_start"),
                F.col("count").alias("txn_count"),
            )
        ).alias("value"),
    )


def start_query(spark: SparkSession, args: StreamArgs) -> StreamingQuery:
    """Start the stream; it resumes from `args.checkpoint` when that holds committed batches."""
    if args.query not in QUERIES:
        raise ValueError(f"unknown query {args.query!r}; choose one of {', '.join(QUERIES)}")
    txns = transactions(spark, args)
    alerts = account_alerts(txns, args) if args.query == "accounts" else window_alerts(txns, args)
    writer = (
        alerts.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("topic", args.alerts_topic)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("update" if args.query == "accounts" else "append")
        .queryName(args.query_name or f"streamstate-example-{args.query}")
    )
    return with_trigger(writer, args.trigger).start()


def with_trigger(writer: Any, trigger: str) -> Any:
    """`available-now` or `processing:<interval>` on a stream writer (the examples' --trigger)."""
    if trigger == "available-now":
        return writer.trigger(availableNow=True)
    if trigger.startswith("processing:"):
        return writer.trigger(processingTime=trigger.split(":", 1)[1])
    raise ValueError(f"unknown trigger {trigger!r}; use 'available-now' or 'processing:<interval>'")


def parse_args(argv: list[str] | None = None) -> tuple[StreamArgs, str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--checkpoint", required=True, help="checkpoint location (path or URI)")
    p.add_argument("--source-topic", default="transactions")
    p.add_argument("--alerts-topic", default="alerts")
    p.add_argument("--query", choices=QUERIES, default="accounts")
    p.add_argument("--trigger", default="processing:2 seconds", help="'available-now' or 'processing:<interval>'")
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--threshold-cents", type=int, default=1_000_000)
    p.add_argument("--state-store", default="rocksdb-changelog", help="hdfs, rocksdb or rocksdb-changelog")
    p.add_argument("--partitions", type=int, default=3, help="partitions of the topics it creates when missing")
    a = p.parse_args(argv)
    return (
        StreamArgs(
            bootstrap_servers=a.bootstrap_servers,
            checkpoint=a.checkpoint,
            source_topic=a.source_topic,
            alerts_topic=a.alerts_topic,
            query=a.query,
            trigger=a.trigger,
            shuffle_partitions=a.shuffle_partitions,
            max_offsets_per_trigger=a.max_offsets_per_trigger,
            threshold_cents=a.threshold_cents,
            partitions=a.partitions,
        ),
        a.state_store,
    )


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point: runs until the query stops (or, available-now, drains).

    Creates its topics when missing, prints one line per committed batch, keeps a
    heartbeat beside its checkpoint, and on SIGINT or SIGTERM (sent to spark-submit, to
    this Python process, or to both as a terminal's Ctrl-C does) lets the batch in flight
    commit, stops the query and Spark, and exits 0. A second signal exits at once; a
    failed query exits 1 with one line saying why.
    """
    from airflow_provider_streamstate.jobs.runtime import run_example_stream

    args, state_store = parse_args(argv)
    return run_example_stream(
        "streamstate-example", bootstrap_servers=args.bootstrap_servers,
        topics=[args.source_topic, args.alerts_topic], partitions=args.partitions, checkpoint=args.checkpoint,
        state_store=state_store, shuffle_partitions=args.shuffle_partitions, start=lambda spark: start_query(spark, args),
    )


if __name__ == "__main__":
    sys.exit(main())
