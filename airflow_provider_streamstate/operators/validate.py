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

from airflow_provider_streamstate.assets.streams import VALIDATIONS, emit, validations_asset, with_outlet
from airflow_provider_streamstate.links.streams_ui import SnapshotLink
from airflow_provider_streamstate.operators.base import StateTask


class ValidateSnapshotOperator(StateTask):
    """Run a Great Expectations suite on a snapshot's state and record the result.

    Fails the task (no retry) when the suite fails, with every failed expectation and its
    observed value in the message, after recording its result as the task's XCom (so the
    Snapshot link and the Data Docs location reach the UI); with `fail_on_failure=False` it
    only records the result and succeeds. Returns `{"snapshot_id", "stream", "store", "batch_id", "suite", "success",
    "evaluated", "failed": [{"type", "column", "observed", "exception"}], "reused",
    "data_docs", ...}` (engine ValidationResult.to_json, plus the store).

    A recorded result emits an event on the stream's validations asset in its store
    (assets/streams.py; outlet: the `streamstate-validations` alias) with `{"stream", "store",
    "snapshot_id", "batch_id", "suite", "success", "evaluated", "failed"}` (failed: a count)
    as its extra; links to the snapshot's page in the Streams UI; reports OpenLineage with
    the suite's results as a data quality facet (utils/openlineage.py).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param suite: a GX suite JSON file, or the suite as a dict. (templated)
    :param snapshot: a snapshot id, `latest` or `latest-good:<suite>`. (templated)
    :param snapshot_stream: the stream the snapshot belongs to in the same store, when it is
        not `stream` itself (a clone's name); `stream` still gives the store, connections and
        Spark settings. (templated)
    :param operator: the stateful operator's id or name (default: the suite's, else 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    :param state_var: a transformWithState operator's state variable, `*` for all, `$timers`. (templated)
    :param data_docs: a directory for GX Data Docs HTML; its index is logged. (templated)
    :param fail_on_failure: fail the task when the suite fails (False: only record).
    :param spark: where the validation's Spark application runs (`SparkJobOptions`; see
        operators/base.py `StateTask`); default in the task. (templated)
    :param parallelism: concurrent blob reads while the snapshot is laid out.
    """

    template_fields: Sequence[str] = ("stream", "suite", "snapshot", "snapshot_stream", "operator", "store_name",
                                      "join_side", "state_var", "data_docs", "spark")
    operator_extra_links = (SnapshotLink(),)

    def __init__(
        self, *, suite: str | dict[str, Any], snapshot: str = "latest", snapshot_stream: str | None = None,
        data_docs: str | None = None, fail_on_failure: bool = True, **kwargs: Any,
    ) -> None:
        super().__init__(**with_outlet(kwargs, VALIDATIONS))
        self.suite = suite
        self.snapshot = snapshot
        self.snapshot_stream = snapshot_stream
        self.data_docs = data_docs
        self.fail_on_failure = fail_on_failure
        self._result: dict[str, Any] | None = None  # for lineage, once executed
        self._expectations: list[dict[str, Any]] = []

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.state.validation import load_suite

        spec = self.spec
        with self.cancellable():
            suite = load_suite(self.suite, check=not self.on_cluster)  # the cluster's job checks it with GX
            name = self.snapshot_stream or spec.name
            self.log.info("validating %s of %s with suite %s", self.snapshot, name, suite.name)
            result = self.run_job(kind="validate", snapshot=self.snapshot, suite=suite.definition,
                                  data_docs=self.data_docs or None, stream=name)
        if result.get("data_docs"):
            docs = result["data_docs"]
            self.log.info("Data Docs: %s", docs if "://" in docs else f"file://{docs}")
        self.log.info("%s%s", result["summary"], " (stored result)" if result["reused"] else "")
        self._expectations = list(suite.definition.get("expectations") or [])
        self._result = {**result, "store": spec.store}
        out = {**{k: v for k, v in result.items() if k not in ("summary", "failures", "kind", "job_id")},
               "store": spec.store}
        if not result["success"] and self.fail_on_failure:
            # The outcome and the Data Docs location, recorded before the task fails: the
            # Snapshot link and the snapshot's page need them most when the suite failed.
            context["ti"].xcom_push(key="return_value", value=out)
            raise AirflowFailException(result["summary"])
        if result.get("recorded", True):
            emit(context, self.outlets, VALIDATIONS, validations_asset(name, spec.store), {
                "stream": name, "store": spec.store, "failed": len(result["failed"]),
                **{k: result[k] for k in ("snapshot_id", "batch_id", "suite", "success", "evaluated")},
            })
        return out

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the validated snapshot (its version) with the suite's results as a data
        quality facet; output: the stream's validation results."""
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed suite is lineage too: its results say which expectations failed."""
        return self._lineage()

    def _lineage(self) -> Any:
        from airflow_provider_streamstate.utils.openlineage import empty_lineage, validation_lineage

        if self._result is None:
            return empty_lineage()
        return validation_lineage(store=self._result["store"], result=self._result, expectations=self._expectations)
