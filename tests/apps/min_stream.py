"""The example stream's next version, for the deploy gate's migration test: its per-account
aggregation also keeps the smallest amount (one more state column; its alerts carry it,
as they carry every aggregate). Takes the example
stream's arguments. Spark refuses it on the example stream's state (the state's schema
differs) until that state is migrated."""

from __future__ import annotations

import sys

from airflow_provider_streamstate.jobs import example_stream as job

_aggregates = job.account_aggregates


def with_min():  # noqa: ANN201
    from pyspark.sql import functions as F

    return [*_aggregates(), F.min("amount_cents").alias("min_cents")]


job.account_aggregates = with_min

if __name__ == "__main__":
    sys.exit(job.main())
