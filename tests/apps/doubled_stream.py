"""The example stream with a planted bug, for the deploy gate's test: every amount is
counted twice (a unit conversion applied one time too many). Takes the example stream's
arguments; its state goes wrong only on records it processes itself."""

from __future__ import annotations

import sys

from airflow_provider_streamstate.jobs import example_stream as job

_transactions = job.transactions


def doubled(spark, args):  # noqa: ANN001, ANN201
    from pyspark.sql import functions as F

    return _transactions(spark, args).withColumn("amount_cents", F.col("amount_cents") * 2)


job.transactions = doubled

if __name__ == "__main__":
    sys.exit(job.main())
