"""Bisect a stream's snapshot history for the first snapshot failing a suite, as a task
(engine/state/bisect.py): stored validation results are reused, new ones stored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.operators.base import StateTask


class BisectSnapshotsOperator(StateTask):
    """Find the first snapshot on the current timeline whose state fails a suite.

    Succeeds once the search is done, whatever it found; the result names the first bad
    and last good snapshots with their batch ids and Kafka offsets. Returns the engine's
    BisectResult.to_json (`first_bad`, `last_good`, `batch_id`, `kafka_offsets`,
    `validations`, `steps`, `assumption_violated`, ...).

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param suite: a GX suite JSON file, or the suite as a dict. (templated)
    :param good: a known-good snapshot; the range starts after it. (templated)
    :param bad: a known-bad snapshot; the range ends with it. (templated)
    :param operator: the stateful operator's id or name (default: the suite's, else 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    :param state_var: a transformWithState operator's state variable, `*` for all, `$timers`. (templated)
    :param parallelism: concurrent blob reads while snapshots are materialised.
    :param spark: where the bisect runs, as one Spark application (`SparkJobOptions`; see
        operators/base.py `StateTask`); default in the task. (templated)
    """

    template_fields: Sequence[str] = ("stream", "suite", "good", "bad", "operator", "store_name", "join_side",
                                      "state_var", "spark")

    def __init__(self, *, suite: str | dict[str, Any], good: str | None = None, bad: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.good = good
        self.bad = bad

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_streamstate.engine.state.validation import load_suite

        with self.cancellable():
            suite = load_suite(self.suite, check=not self.on_cluster)
            result = self.run_job(kind="bisect", suite=suite.definition, good=self.good or None,
                                  bad=self.bad or None)
        self.log.info("%s", result["summary"])
        for step in result["steps"]:
            self.log.info("  %s batch %d: %s (%s)", step["snapshot_id"], step["batch_id"],
                          "good" if step["good"] else "bad", step["source"])
        return {k: v for k, v in result.items() if k not in ("summary", "kind", "job_id")}
