"""Diff benchmark: `diff_states` against the same full outer join written by hand in Spark
SQL, on the same two DataFrames.

    .venv/bin/python benchmarks/diff_bench.py [--keys 1000000] [--runs 3]

Two states shaped like a per-key aggregation's (`key_k`, `value_count`, `value_max`, 4
partitions, cached so both sides read the same bytes from memory), B changing every key's
values. The baseline is the classification alone: a null-safe full outer join on the key
and one `groupBy(status).count()`. `diff_states` adds five samples of each kind found
(from the same aggregate, grouped by hash bucket too); `diff_states_sample_1` asks for one
per kind. Median of `--runs` after one warm-up each. Writes .bench/diff_results.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import write_results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()

    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.state.diff import diff_states
    from airflow_provider_streamstate.engine.state.spark import spark_session

    spark = spark_session("diff-bench", shuffle_partitions=4)

    def state(shift: int) -> object:
        return (spark.range(a.keys).select(F.col("id").alias("key_k"), (F.col("id") % 7 + shift).alias("value_count"),
                                           (F.col("id") * 3 + shift).alias("value_max"))
                .repartition(4).cache())
    da, db = state(1), state(2)
    da.count(), db.count()  # type: ignore[attr-defined]

    def baseline() -> dict[str, int]:
        sa = da.select(F.col("key_k").alias("a_key_k"), F.col("value_count").alias("a_c"),  # type: ignore[attr-defined]
                       F.col("value_max").alias("a_m"), F.lit(True).alias("a_p"))
        sb = db.select(F.col("key_k").alias("b_key_k"), F.col("value_count").alias("b_c"),  # type: ignore[attr-defined]
                       F.col("value_max").alias("b_m"), F.lit(True).alias("b_p"))
        j = sa.join(sb, F.col("a_key_k").eqNullSafe(F.col("b_key_k")), "full_outer")
        status = (F.when(F.col("a_p").isNull(), "added").when(F.col("b_p").isNull(), "removed")
                  .when(F.col("a_c").eqNullSafe(F.col("b_c")) & F.col("a_m").eqNullSafe(F.col("b_m")), "unchanged")
                  .otherwise("changed"))
        return {r[0]: int(r[1]) for r in j.select(status.alias("s")).groupBy("s").count().collect()}

    def ours() -> dict[str, int]:
        return {k: v for k, v in diff_states(da, db).counts.items() if v}  # type: ignore[arg-type]

    def one_pass() -> dict[str, int]:
        return {k: v for k, v in diff_states(da, db, sample=1).counts.items() if v}  # type: ignore[arg-type]

    results: dict[str, object] = {"keys": a.keys, "runs": a.runs}
    try:
        for name, fn in (("baseline", baseline), ("diff_states", ours), ("diff_states_sample_1", one_pass)):
            expected = fn()
            assert expected == {"changed": a.keys}, expected
            times = []
            for _ in range(a.runs):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            results[f"{name}_s"] = round(statistics.median(times), 3)
            print(f"{name}: {results[f'{name}_s']}s", file=sys.stderr)
    finally:
        spark.stop()
    for name in ("diff_states", "diff_states_sample_1"):
        results[f"{name}_over_baseline"] = round(float(results[f"{name}_s"]) / float(results["baseline_s"]), 2)  # type: ignore[arg-type]
    write_results("diff", results)


if __name__ == "__main__":
    main()
