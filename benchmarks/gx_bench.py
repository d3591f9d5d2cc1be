"""GX validation benchmark: where a Great Expectations suite spends its time on Spark, and
what it costs against the same rules written as one Spark SQL aggregate.

    .venv/bin/python benchmarks/gx_bench.py [--rows 1000000] [--runs 5]

A cached DataFrame shaped like a per-key aggregation's state (`key_k`, `value_count`,
`value_max`), `--rows` rows, local[2]; the suite of `state_bench.py` (4 expectations: not
null, two betweens, a row count). For each way of running it, the median of `--runs` warm
runs (after one warm-up) and the Spark jobs one run starts (counted by job group):

* `sql`: the baseline, one `df.agg(...)` computing all four rules;
* `run_suite`: what `validate` does (engine/state/validation.py);
* `gx_summary`: GX with its default result format (SUMMARY), a fresh ephemeral context per run;
* `gx_basic`: the same with result format BASIC (no unexpected-value counts: one Spark job
  fewer per column expectation);
* `gx_context_only`: creating the ephemeral context, datasource, suite and validation
  definition without running it (GX's fixed cost per run);
* on a DataFrame that is not cached and costs a shuffle to compute (as the state reader's
  is not cached and costs a read of the state): `sql_uncached`, `gx_uncached` (GX counting
  only, on it as it is) and `run_suite_uncached` (which caches it for the run).

Writes .bench/gx_results.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import state_rules_sql, write_results  # noqa: E402

SUITE = {"name": "bench", "expectations": [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_k"}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_count", "min_value": 1}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "min_value": 0}},
    {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()

    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.state import validation
    from airflow_provider_streamstate.engine.state.spark import spark_session

    spark = spark_session("gx-bench", shuffle_partitions=4)
    sc = spark.sparkContext
    df = (spark.range(a.rows).select(F.col("id").alias("key_k"), (F.col("id") % 7 + 1).alias("value_count"),
                                     (F.col("id") * 3).alias("value_max")).repartition(4).cache())
    df.count()
    suite = validation.load_suite(SUITE)
    gx = validation._gx()  # noqa: SLF001 - the benchmark drives GX the way the engine does

    def sql() -> bool:
        return state_rules_sql(df)

    def gx_run(result_format: str | None, run: bool = True) -> bool:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        bd = ctx.data_sources.add_spark("s").add_dataframe_asset("state").add_batch_definition_whole_dataframe("w")
        gsuite = ctx.suites.add(validation._gx_suite(suite.definition))  # noqa: SLF001
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name="run", data=bd, suite=gsuite))
        if not run:
            return True
        kwargs: dict[str, Any] = {"batch_parameters": {"dataframe": df}}
        if result_format is not None:
            kwargs["result_format"] = result_format
        return bool(vd.run(**kwargs).success)

    # The state as the state reader gives it is not cached: each pass of GX reads it again.
    # A per-key aggregation over the rows stands in for that read (a shuffle every pass).
    raw = (spark.range(a.rows * 2).select((F.col("id") % a.rows).alias("key_k"), F.col("id").alias("v"))
           .groupBy("key_k").agg(F.count("*").alias("value_count"), F.max("v").alias("value_max")))

    def sql_uncached() -> bool:
        return state_rules_sql(raw)

    def gx_uncached() -> bool:  # what GX does on the state when nothing caches it
        ctx_df = raw
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        bd = ctx.data_sources.add_spark("s").add_dataframe_asset("state").add_batch_definition_whole_dataframe("w")
        gsuite = ctx.suites.add(validation._gx_suite(suite.definition))  # noqa: SLF001
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name="run", data=bd, suite=gsuite))
        return bool(vd.run(batch_parameters={"dataframe": ctx_df}, result_format=validation.COUNTS_ONLY).success)

    ways: dict[str, Callable[[], bool]] = {
        "sql_uncached": sql_uncached,
        "gx_uncached": gx_uncached,
        "run_suite_uncached": lambda: validation.run_suite(raw, suite).success,
        "sql": sql,
        "run_suite": lambda: validation.run_suite(df, suite).success,
        "gx_summary": lambda: gx_run(None),
        "gx_basic": lambda: gx_run("BASIC"),
        "gx_context_only": lambda: gx_run(None, run=False),
    }
    results: dict[str, Any] = {"rows": a.rows, "runs": a.runs}
    try:
        for name, fn in ways.items():
            assert fn(), name  # warm-up, and every way must pass
            times, jobs = [], []
            for i in range(a.runs):
                group = f"{name}-{i}"
                sc.setJobGroup(group, group)
                t0 = time.perf_counter()
                assert fn(), name
                times.append(time.perf_counter() - t0)
                jobs.append(len(sc.statusTracker().getJobIdsForGroup(group)))
            results[f"{name}_s"] = round(statistics.median(times), 3)
            results[f"{name}_jobs"] = max(jobs)
            print(f"{name}: {results[f'{name}_s']}s, {results[f'{name}_jobs']} Spark jobs", file=sys.stderr)
    finally:
        spark.stop()
    for name in ("run_suite", "gx_summary", "gx_basic"):
        results[f"{name}_over_sql"] = round(results[f"{name}_s"] / results["sql_s"], 2)
    for name in ("gx_uncached", "run_suite_uncached"):
        results[f"{name}_over_sql"] = round(results[f"{name}_s"] / results["sql_uncached_s"], 2)
    write_results("gx", results)


if __name__ == "__main__":
    main()
