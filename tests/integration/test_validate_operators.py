"""The validate, bisect, report and key check operators in one real DAG run over a real
stream's snapshots: a failing suite fails its task once (no retry) naming the expectation and
what it observed, after recording its outcome and Data Docs (its Snapshot link resolves), a
record-only task succeeds with the failure in XCom, bisect names the first bad snapshot, the
reports are files with counts in XCom, and key checks without Spark pass or fail a gate."""

from __future__ import annotations

import json
import time

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.catalog.validation_records import get_validation
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.links.streams_ui import snapshot_page_url
from airflow_provider_streamstate.spec import StreamSpec
from tests.airflow_harness import ui_link
from tests.streams import use_state_store

pytestmark = pytest.mark.integration

# Batch b of the rate source holds values 20b..20b+19: the per-key max passes 70 at batch 3.
SUITE = {
    "name": "rates-sane",
    "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "max_value": 70}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_k"}},
    ],
}


def test_validate_bisect_and_report_run_as_tasks(run_dag, spark, tmp_path) -> None:
    from pyspark.sql import functions as F

    use_state_store(spark, "hdfs", **{"spark.sql.shuffle.partitions": "2"})
    checkpoint = str(tmp_path / "ckpt")
    rates = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20).load()
    agg = rates.withColumn("k", F.col("value") % 5).groupBy("k").agg(F.max("value").alias("top"))
    query = agg.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint) \
        .trigger(processingTime="200 milliseconds").start()
    try:
        while not query.lastProgress or query.lastProgress["batchId"] < 5:
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    store = LocalStore(tmp_path / "store")
    ids = [create_snapshot(checkpoint, store, "rates", batch_id=b).manifest.snapshot_id
           for b in CheckpointReader(checkpoint).committed_batches()]
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    spec = StreamSpec(name="rates", checkpoint=checkpoint, store=f"file://{store.root}")
    reports = tmp_path / "reports"

    result = run_dag("streamstate_test_validate", {"stream": spec.to_dict(), "suite": str(suite), "first": ids[0],
                                                   "reports": str(reports)})
    assert result.state == "failed"
    assert result.failed_tasks() == ["check_keys_latest", "validate_latest"], result.log[-6000:]
    assert result.tasks["validate_latest"].try_number == 1  # bad data: no retry
    # The failed validation recorded its outcome and Data Docs before failing: its Snapshot
    # link resolves, and the docs' location is in its XCom.
    failed = result.tasks["validate_latest"].xcom
    assert (failed["success"], failed["snapshot_id"]) == (False, ids[-1])
    assert failed["data_docs"] == str(reports / "docs-latest" / "index.html")
    assert ui_link("streamstate_test_validate", "validate_latest") == snapshot_page_url("rates", ids[-1], spec.store)
    assert f"suite rates-sane failed on {ids[-1]}: 1 of 2 expectations: expect_column_values_to_be_between(value_max) observed" in result.log
    recorded = result.tasks["record_latest"].xcom
    assert (recorded["success"], recorded["snapshot_id"]) == (False, ids[-1])
    assert [f["column"] for f in recorded["failed"]] == ["value_max"]
    first = result.tasks["validate_first"].xcom
    assert first["success"] and first["data_docs"] == str(reports / "docs" / "index.html")
    # ... and the record keeps where the Data Docs are, for the snapshot's page.
    assert get_validation(store, "rates", ids[0], "rates-sane").selector["data_docs"] == first["data_docs"]
    assert (reports / "docs" / "index.html").is_file() and f"Data Docs: file://{reports}/docs/index.html" in result.log
    bisect = result.tasks["bisect"].xcom
    assert (bisect["first_bad"], bisect["last_good"], bisect["batch_id"]) == (ids[3], ids[2], 3)
    assert get_validation(store, "rates", ids[3], "rates-sane").success is False
    diff = json.loads((reports / "diff.json").read_text())
    assert diff["kind"] == "diff" and diff["changed"] == 5 and diff["added"] == diff["removed"] == 0
    assert result.tasks["diff_report"].xcom["changed"] == 5
    query_report = json.loads((reports / "query.json").read_text())
    assert query_report["snapshot_id"] == ids[2]  # latest-good: the last snapshot that passed
    assert sorted(r["value_max"] for r in query_report["rows"]) == [55, 56, 57, 58, 59]
    assert result.tasks["query_report"].xcom == {"report": str(reports / "query.json"), "kind": "state",
                                                  "snapshot_id": ids[2], "total_rows": 5, "rows": 5}
    # Key checks without Spark: those that hold pass; the failed gate names the key and
    # what it holds, fails once, and keeps its result (and link).
    assert (result.tasks["check_keys"].xcom["passed"], result.tasks["check_keys"].xcom["snapshot_id"]) == (3, ids[0])
    assert result.tasks["check_live_keys"].xcom["passed"] == 1
    gate = result.tasks["check_keys_latest"]
    assert gate.try_number == 1 and gate.xcom["failed"][0]["key"] == '{"k": 1}'
    assert f'1 of 1 key check(s) failed in snapshot {ids[-1]} of rates: {{"k": 1}}: expected {{"max": 16}}, holds' \
        in result.log
    assert ui_link("streamstate_test_validate", "check_keys_latest") == snapshot_page_url("rates", ids[-1], spec.store)
