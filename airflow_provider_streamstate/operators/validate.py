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

from airflow_provider_streamstate.operators.snapshot import _StreamTask


class StateTask(_StreamTask):
    """What the state operators share: the stream, its store (from the snapshot operators'
    base), and which state to read.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`.
    :param operator: the stateful operator's id or name (default 0).
    :param store_name: one named state store of the operator.
    :param join_side: `left` or `right` of a stream-stream join.
    :param parallelism: concurrent blob reads while the snapshot is materialised.
    """

    def __init__(
        self, *, operator: int | str | None = None, store_name: str | None = None, join_side: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.operator = operator
        self.store_name = store_name
        self.join_side = join_side

    def selector(self) -> Any:
        from airflow_provider_streamstate.engine.state.reader import StateSelector

        return StateSelector(self.operator if self.operator not in ("", None) else None,
                             self.store_name or None, self.join_side or None)

    def reader(self) -> Any:
        from airflow_provider_streamstate.engine.state.reader import StateReader

        return StateReader(self.hook.store, parallelism=self.parallelism)


class ValidateSnapshotOperator(StateTask):
    """Run a Great Expectations suite on a snapshot's state and record the result.

    Fails the task (no retry) when the suite fails, with every failed expectation and its
    observed value in the message; with `fail_on_failure=False` it only records the result
    and succeeds. Returns `{"snapshot_id", "stream", "batch_id", "suite", "success",
    "evaluated", "failed": [{"type", "column", "observed", "exception"}], "reused",
    "data_docs", ...}` (engine ValidationResult.to_json).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param suite: a GX suite JSON file, or the suite as a dict. (templated)
    :param snapshot: a snapshot id, `latest` or `latest-good:<suite>`. (templated)
    :param operator: the stateful operator's id or name (default: the suite's, else 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    :param data_docs: a directory for GX Data Docs HTML; its index is logged. (templated)
    :param fail_on_failure: fail the task when the suite fails (False: only record).
    :param parallelism: concurrent blob reads while the snapshot is materialised.
    """

    template_fields: Sequence[str] = ("stream", "suite", "snapshot", "operator", "store_name", "join_side", "data_docs")

    def __init__(
        self, *, suite: str | dict[str, Any], snapshot: str = "latest", data_docs: str | None = None,
        fail_on_failure: bool = True, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.snapshot = snapshot
        self.data_docs = data_docs
        self.fail_on_failure = fail_on_failure

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.state.validation import load_suite, validate_snapshot

        spec = self.spec
        with self.cancellable():
            suite = load_suite(self.suite)
            self.log.info("validating %s of %s with suite %s", self.snapshot, spec.name, suite.name)
            with self.reader() as reader:
                result = validate_snapshot(reader, spec.name, self.snapshot, suite, selector=self.selector(),
                                           data_docs=self.data_docs or None)
        if result.data_docs:
            self.log.info("Data Docs: file://%s", result.data_docs)
        self.log.info("%s%s", result.summary(), " (stored result)" if result.reused else "")
        if not result.success and self.fail_on_failure:
            raise AirflowFailException(result.summary())
        return result.to_json()
