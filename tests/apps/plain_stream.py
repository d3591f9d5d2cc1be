"""A streaming application that knows nothing of streamstate: no heartbeat, no signal
handling, its own SparkSession. Under the supervised wrapper it must still beat and stop
gracefully. Takes the example stream's arguments."""

from __future__ import annotations

from pyspark.sql import SparkSession

from airflow_provider_streamstate.jobs.example_stream import parse_args, start_query

if __name__ == "__main__":
    args, _ = parse_args()
    spark = SparkSession.builder.appName("plain-stream").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    start_query(spark, args).awaitTermination()
