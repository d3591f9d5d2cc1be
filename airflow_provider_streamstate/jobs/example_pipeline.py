"""The example pipeline: two stateful queries linked by a Kafka topic.

* `enrich` reads card transactions, drops duplicates within a 10-minute event-time
  watermark (state) and writes each transaction, with its amount band, to the link topic
  (keyed by account).
* `totals` reads the link topic (or several, comma-separated: enrich queries fanning in)
  and keeps per-account `txn_count`, `total_cents` and `max_cents` (state), written to the
  totals topic in update mode. It does not deduplicate:
  a link record read twice is counted twice, which is what a pipeline cut must prevent.

Its totals are exactly checkable: they equal `generator.expected_aggregates` of the input.
Run each member with spark-submit (`--member enrich|totals`) or call `start_member`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_streamstate.jobs.example_stream import StreamArgs, transactions, with_trigger

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

MEMBERS = ("enrich", "totals")


@dataclass(frozen=True)
class PipelineArgs:
    bootstrap_servers: str
    checkpoint: str
    member: str
    source_topic: str = "transactions"
    link_topic: str = "transactions_enriched"  # totals may read several, comma-separated
    totals_topic: str = "account_totals"
    trigger: str = "processing:2 seconds"  # or "available-now"
    max_offsets_per_trigger: int | None = None
    query_name: str | None = None


def start_member(spark: SparkSession, args: PipelineArgs) -> StreamingQuery:
    """Start one member; it resumes from `args.checkpoint` when that holds committed batches."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if args.member == "enrich":
        txns = transactions(spark, StreamArgs(args.bootstrap_servers, args.checkpoint, source_topic=args.source_topic,
                                              max_offsets_per_trigger=args.max_offsets_per_trigger))
        band = F.when(F.col("amount_cents") >= 50_000, "high").otherwise("low")
        out = (txns.withWatermark("event_time", "10 minutes").dropDuplicatesWithinWatermark(["txn_id"])
               .select(F.col("account").alias("key"),
                       F.to_json(F.struct("txn_id", "account", "amount_cents", "ts_ms", band.alias("band"))).alias("value")))
        topic, mode = args.link_topic, "append"
    elif args.member == "totals":
        schema = StructType([StructField("txn_id", StringType()), StructField("account", StringType()),
                             StructField("amount_cents", LongType()), StructField("ts_ms", LongType()),
                             StructField("band", StringType())])
        reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap_servers)
                  .option("subscribe", args.link_topic).option("startingOffsets", "earliest"))
        if args.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        enriched = reader.load().select(F.from_json(F.col("value").cast("string"), schema).alias("t")).select("t.*")
        totals = enriched.groupBy("account").agg(F.count(F.lit(1)).alias("txn_count"),
                                                 F.sum("amount_cents").alias("total_cents"),
                                                 F.max("amount_cents").alias("max_cents"))
        out = totals.select(F.col("account").alias("key"),
                            F.to_json(F.struct("account", "txn_count", "total_cents", "max_cents")).alias("value"))
        topic, mode = args.totals_topic, "update"
    else:
        raise ValueError(f"unknown member {args.member!r}; choose one of {', '.join(MEMBERS)}")
    writer = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("topic", topic).option("checkpointLocation", args.checkpoint).outputMode(mode)
              .queryName(args.query_name or f"streamstate-pipeline-{args.member}"))
    return with_trigger(writer, args.trigger).start()


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point for one member: runs until stopped (or, available-now, drained)."""
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs.generator import ensure_topic
    from airflow_provider_streamstate.jobs.runtime import StopSignals, attach_batch_log, run_until_stopped

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--member", choices=MEMBERS, required=True)
    p.add_argument("--source-topic", default="transactions")
    p.add_argument("--link-topic", default="transactions_enriched",
                   help="enrich writes it; totals reads it (or several, comma-separated)")
    p.add_argument("--totals-topic", default="account_totals")
    p.add_argument("--trigger", default="processing:2 seconds")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--state-store", default="rocksdb-changelog")
    p.add_argument("--partitions", type=int, default=3)
    a = p.parse_args(argv)
    args = PipelineArgs(a.bootstrap_servers, a.checkpoint, a.member, a.source_topic, a.link_topic, a.totals_topic,
                        a.trigger, a.max_offsets_per_trigger)
    for topic in (a.source_topic, *a.link_topic.split(","), a.totals_topic):
        ensure_topic(a.bootstrap_servers, topic, a.partitions)
    stop = StopSignals().install()
    spark = spark_session(f"streamstate-pipeline-{a.member}", master=None, state_store=a.state_store)
    stop.install_spark(spark)
    attach_batch_log(spark)
    return run_until_stopped(spark, start_member(spark, args), stop)


if __name__ == "__main__":
    raise SystemExit(main())
