"""Compare the example stream's per-account state with the generator's expected aggregates.

    python -m airflow_provider_streamstate.jobs.check_state --checkpoint /tmp/ckpt --expected /tmp/expected.json

Reads operator 0 (per-account count/sum/max) of the `accounts` query with Spark's state
data source, at the newest committed batch (or `--batch N`), and exits 0 when it equals
the expected aggregates, 1 with the first differences otherwise. Works on a live
checkpoint, a restored snapshot or a clone.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--expected", required=True, help="the generator's --expected JSON")
    p.add_argument("--batch", type=int, default=None)
    a = p.parse_args(argv)
    with open(a.expected) as f:
        expected: dict[str, dict[str, int]] = json.load(f)

    from airflow_provider_streamstate.engine.state.spark import read_state, spark_session

    spark = spark_session("streamstate-check-state", master="local[1]")
    try:
        rows = read_state(spark, a.checkpoint, operatorId=0, batchId=a.batch).collect()
        actual = {r.key.account: {k: int(v) for k, v in r.value.asDict().items()} for r in rows}
    finally:
        spark.stop()
    if actual == expected:
        print(f"state equals the expected aggregates: {len(actual)} accounts")
        return 0
    differ = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
    print(f"state differs from the expected aggregates in {len(differ)} of {len(expected)} accounts", file=sys.stderr)
    for k in differ[:5]:
        print(f"  {k}: expected {expected.get(k)}, state {actual.get(k)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
