"""Test DAG: validate, bisect, report on and check keys of a stream's snapshots; the stream, suite and
snapshots come in the run's conf (`{"stream": StreamSpec.to_dict(), "suite": "/abs/suite.json",
"first": "<snapshot id>", "reports": "/abs/dir"}`)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.bisect import BisectSnapshotsOperator
from airflow_provider_streamstate.operators.lookup import StateKeyCheckOperator
from airflow_provider_streamstate.operators.state import StateReportOperator
from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator

with DAG(
    dag_id="streamstate_test_validate",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={"stream": Param({}, type="object"), "suite": Param("", type="string"),
            "first": Param("", type="string"), "reports": Param("", type="string")},
    default_args={"retries": 2},  # a failed suite must fail at once all the same
    tags=["streamstate-tests"],
) as dag:
    first = ValidateSnapshotOperator(
        task_id="validate_first", stream="{{ params.stream }}", suite="{{ params.suite }}",
        snapshot="{{ params.first }}", data_docs="{{ params.reports }}/docs",
    )
    latest = ValidateSnapshotOperator(
        task_id="validate_latest", stream="{{ params.stream }}", suite="{{ params.suite }}", snapshot="latest",
        data_docs="{{ params.reports }}/docs-latest",
    )
    record_only = ValidateSnapshotOperator(
        task_id="record_latest", stream="{{ params.stream }}", suite="{{ params.suite }}", snapshot="latest",
        fail_on_failure=False,
    )
    bisect = BisectSnapshotsOperator(task_id="bisect", stream="{{ params.stream }}", suite="{{ params.suite }}")
    diff = StateReportOperator(
        task_id="diff_report", stream="{{ params.stream }}", snapshot="{{ params.first }}", compare_to="latest",
        report_path="{{ params.reports }}/diff.json",
    )
    query = StateReportOperator(
        task_id="query_report", stream="{{ params.stream }}", snapshot="latest-good:rates-sane",
        where="value_max > 50", report_path="{{ params.reports }}/query.json",
    )
    first >> bisect >> query
    # Key checks without Spark: on the first snapshot (they hold), on the live checkpoint
    # (they hold), and a gate on the newest snapshot that fails (the key has grown).
    keys_first = StateKeyCheckOperator(
        task_id="check_keys", stream="{{ params.stream }}", snapshot="{{ params.first }}",
        checks=[{"key": "k=1", "value": {"max": 16}}, {"key": {"k": 9}, "absent": True}, {"key": [2], "where": "max >= 17"}],
    )
    keys_live = StateKeyCheckOperator(task_id="check_live_keys", stream="{{ params.stream }}", checkpoint=True,
                                      checks=[{"key": "k=0", "where": "max > 70"}])
    keys_gate = StateKeyCheckOperator(task_id="check_keys_latest", stream="{{ params.stream }}",
                                      checks=[{"key": "k=1", "value": {"max": 16}}])
