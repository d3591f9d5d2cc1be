"""The example stream's next version, for the deploy gate's migration test: its per-account
aggregation also keeps the smallest amount (one more state column), and its alerts carry
it. Takes the example stream's arguments. Spark refuses it on the example stream's state
(the state's schema differs) until that state is migrated."""

from __future__ import annotations

import sys

from airflow_provider_streamstate.jobs import example_stream as job


def account_alerts_with_min(txns, args):  # noqa: ANN001, ANN201
    from pyspark.sql import functions as F

    per_account = (
        txns.withWatermark("event_time", args.watermark)
        .dropDuplicatesWithinWatermark(["txn_id"])
        .groupBy("account")
        .agg(
            F.count(F.lit(1)).alias("txn_count"),
            F.sum("amount_cents").alias("total_cents"),
            F.max("amount_cents").alias("max_cents"),
            F.min("amount_cents").alias("min_cents"),
        )
    )
    alerts = per_account.where(F.col("total_cents") >= args.threshold_cents)
    return alerts.select(
        F.col("account").alias("key"),
        F.to_json(F.struct(F.lit("total_over_threshold").alias("kind"), "account", "txn_count", "total_cents",
                           "max_cents", "min_cents")).alias("value"),
    )


job.account_alerts = account_alerts_with_min

if __name__ == "__main__":
    sys.exit(job.main())
