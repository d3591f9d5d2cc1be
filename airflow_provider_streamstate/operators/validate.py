"""Validate a snapshot's state with a Great Expectations suite, as a task. Thin over
engine/state/validation.py: the result is stored write-once beside the snapshot, the task fails
with the failed expectations in one readable line (or only records, when told), and XCom
gets a small summary. great_expectations and pyspark are imported when the task runs,
never when the DAG is parsed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.assets import VALIDATIONS, emit, validations_asset, with_outlet
from airflow_provider_streamstate.links import SnapshotLink
from airflow_provider_streamstate.operators.snapshot import _StreamTask


class StateTask(_StreamTask):
    """What the state operators share: the stream, its store (from the snapshot operators'
    base), which state to read, and where the job runs.

    Without `spark_conn_id` the job runs in the task, on a local Spark session, with the
    snapshot copied to the worker's disk (the embedded default, fine for small state). With
    it, the job is a Spark application submitted through SparkSubmitHook to that connection's
    master (YARN, standalone, local; client or cluster deploy mode): the snapshot is copied
    server-side into the store's scratch area and read by the executors, and the task only
    waits for the small result (engine/state/submit.py).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`.
    :param operator: the stateful operator's id or name (default 0).
    :param store_name: one named state store of the operator.
    :param join_side: `left` or `right` of a stream-stream join.
    :param state_var: a transformWithState operator's state variable, `*` for all of them, `$timers`.
    :param parallelism: concurrent blob copies while a snapshot is materialised.
    :param spark_conn_id: a Spark connection: run the job as a Spark application there.
    :param deploy_mode: `client` or `cluster` (default: the connection's).
    :param spark_conf: Spark confs of the job's application (executors, memory, S3A...).
    :param spark_jars: jars the job needs (the S3A connector for an S3 store).
    :param spark_env: environment of spark-submit and the job's driver (HADOOP_CONF_DIR...).
    :param job_timeout: seconds the application may run before it is killed (None: no limit).
    """

    def __init__(
        self, *, operator: int | str | None = None, store_name: str | None = None, join_side: str | None = None,
        state_var: str | None = None, spark_conn_id: str | None = None, deploy_mode: str | None = None, spark_conf: dict[str, str] | None = None,
        spark_jars: list[str] | str | None = None, spark_env: dict[str, str] | None = None,
        job_timeout: float | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.operator = operator
        self.store_name = store_name
        self.join_side = join_side
        self.state_var = state_var
        self.spark_conn_id = spark_conn_id
        self.deploy_mode = deploy_mode
        self.spark_conf = spark_conf
        self.spark_jars = spark_jars
        self.spark_env = spark_env
        self.job_timeout = job_timeout

    def selector(self) -> Any:
        from airflow_provider_streamstate.engine.state.reader import StateSelector

        return StateSelector(self.operator if self.operator not in ("", None) else None,
                             self.store_name or None, self.join_side or None, self.state_var or None)

    def reader(self) -> Any:
        from airflow_provider_streamstate.engine.state.reader import StateReader

        return StateReader(self.hook.store, parallelism=self.parallelism)

    @property
    def on_cluster(self) -> bool:
        return bool(self.spark_conn_id)

    def run_job(self, **fields: Any) -> dict[str, Any]:
        """Answer one state job (engine/state/jobs.py) here or on the cluster; its result."""
        from airflow_provider_streamstate.engine.state.jobs import StateJobRequest, run_state_job

        spec = self.spec
        request = StateJobRequest(store=self.hook.store.url, stream=spec.name, selector=self.selector().to_json(),
                                  **fields)
        if not self.on_cluster:
            with self.reader() as reader:
                return run_state_job(request, reader)
        assert self.spark_conn_id is not None
        return run_on_cluster(self, request, self.hook.store, aws_conn_id=spec.aws_conn_id,
                              spark_conn_id=self.spark_conn_id)


def run_on_cluster(task: Any, request: Any, store: Any, *, aws_conn_id: str | None,
                   spark_conn_id: str) -> dict[str, Any]:
    """`request` as a Spark application through `spark_conn_id`, with the task's Spark options
    (`spark_conf`, `spark_jars`, `spark_env`, `deploy_mode`, `job_timeout`); logs where it ran."""
    from airflow_provider_streamstate.state_jobs import run_state_job_on_cluster

    result = run_state_job_on_cluster(
        request, store, aws_conn_id=aws_conn_id, spark_conn_id=spark_conn_id, conf=task.spark_conf,
        jars=task.spark_jars, env=task.spark_env, deploy_mode=task.deploy_mode or None, timeout_s=task.job_timeout,
        log=task.log)
    ran_on = result.get("ran_on") or {}
    task.log.info("state job ran on %s (%s mode, application %s)", ran_on.get("master"), ran_on.get("deploy_mode"),
                  ran_on.get("app_id"))
    return result  # type: ignore[no-any-return]


class ValidateSnapshotOperator(StateTask):
    """Run a Great Expectations suite on a snapshot's state and record the result.

    Fails the task (no retry) when the suite fails, with every failed expectation and its
    observed value in the message; with `fail_on_failure=False` it only records the result
    and succeeds. Returns `{"snapshot_id", "stream", "store", "batch_id", "suite", "success",
    "evaluated", "failed": [{"type", "column", "observed", "exception"}], "reused",
    "data_docs", ...}` (engine ValidationResult.to_json, plus the store).

    A recorded result emits an event on the stream's validations asset in its store
    (assets.py; outlet: the `streamstate-validations` alias) with `{"stream", "store",
    "snapshot_id", "batch_id", "suite", "success", "evaluated", "failed"}` (failed: a count)
    as its extra; links to the snapshot's page in the Streams UI; reports OpenLineage with
    the suite's results as a data quality facet (lineage.py).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param suite: a GX suite JSON file, or the suite as a dict. (templated)
    :param snapshot: a snapshot id, `latest` or `latest-good:<suite>`. (templated)
    :param operator: the stateful operator's id or name (default: the suite's, else 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    :param state_var: a transformWithState operator's state variable, `*` for all, `$timers`. (templated)
    :param data_docs: a directory for GX Data Docs HTML; its index is logged. (templated)
    :param fail_on_failure: fail the task when the suite fails (False: only record).
    :param parallelism: concurrent blob reads while the snapshot is materialised.
    :param spark_conn_id: run the validation as a Spark application there (see `StateTask`). (templated)
    :param deploy_mode: `client` or `cluster` (default: the connection's). (templated)
    :param spark_conf: Spark confs of the job's application. (templated)
    :param spark_jars: jars the application needs (the S3A connector for an S3 store). (templated)
    :param spark_env: environment of spark-submit and the application's driver. (templated)
    :param job_timeout: seconds the application may run before it is killed.
    """

    template_fields: Sequence[str] = ("stream", "suite", "snapshot", "operator", "store_name", "join_side", "state_var", "data_docs",
                                      "spark_conn_id", "deploy_mode",
                                      "spark_conf", "spark_jars", "spark_env")
    operator_extra_links = (SnapshotLink(),)

    def __init__(
        self, *, suite: str | dict[str, Any], snapshot: str = "latest", data_docs: str | None = None,
        fail_on_failure: bool = True, **kwargs: Any,
    ) -> None:
        super().__init__(**with_outlet(kwargs, VALIDATIONS))
        self.suite = suite
        self.snapshot = snapshot
        self.data_docs = data_docs
        self.fail_on_failure = fail_on_failure
        self._result: dict[str, Any] | None = None  # for lineage, once executed
        self._expectations: list[dict[str, Any]] = []

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.state.validation import load_suite

        spec = self.spec
        with self.cancellable():
            suite = load_suite(self.suite, check=not self.on_cluster)  # the cluster's job checks it with GX
            self.log.info("validating %s of %s with suite %s", self.snapshot, spec.name, suite.name)
            result = self.run_job(kind="validate", snapshot=self.snapshot, suite=suite.definition,
                                  data_docs=self.data_docs or None)
        if result.get("data_docs"):
            docs = result["data_docs"]
            self.log.info("Data Docs: %s", docs if "://" in docs else f"file://{docs}")
        self.log.info("%s%s", result["summary"], " (stored result)" if result["reused"] else "")
        self._expectations = list(suite.definition.get("expectations") or [])
        self._result = {**result, "store": spec.store}
        if not result["success"] and self.fail_on_failure:
            raise AirflowFailException(result["summary"])
        if result.get("recorded", True):
            emit(context, self.outlets, VALIDATIONS, validations_asset(spec.name, spec.store), {
                "stream": spec.name, "store": spec.store, "failed": len(result["failed"]),
                **{k: result[k] for k in ("snapshot_id", "batch_id", "suite", "success", "evaluated")},
            })
        out = {k: v for k, v in result.items() if k not in ("summary", "failures", "kind", "job_id")}
        return {**out, "store": spec.store}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the validated snapshot (its version) with the suite's results as a data
        quality facet; output: the stream's validation results."""
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed suite is lineage too: its results say which expectations failed."""
        return self._lineage()

    def _lineage(self) -> Any:
        from airflow_provider_streamstate.lineage import empty_lineage, validation_lineage

        if self._result is None:
            return empty_lineage()
        return validation_lineage(store=self._result["store"], result=self._result, expectations=self._expectations)
