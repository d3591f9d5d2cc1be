"""A report on a snapshot's state, as a task: rows of one operator's state (optionally
filtered), or the diff of two snapshots, written as one JSON file (engine/state/reader.py,
engine/state/diff.py). XCom gets the report's path and its counts, never the rows."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import Context

from airflow_provider_streamstate.engine.core.durability import write_atomically
from airflow_provider_streamstate.operators.base import StateTask


class StateReportOperator(StateTask):
    """Write a JSON report of a snapshot's state, or of its diff with another snapshot.

    With `compare_to`, the report is the diff (counts of keys added, removed, changed and
    unchanged, with samples); without, the state's metadata, row count and up to `limit`
    rows matching `where`. The file is written whole or not at all (temp file, rename).
    Returns `{"report", "snapshot_id", "kind": "diff"|"state", ...counts}`.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param snapshot: a snapshot id, `latest` or `latest-good:<suite>`. (templated)
    :param report_path: the report file to write: a path on the worker, or an `s3://` URL
        (written with the stream's storage connection). (templated)
    :param compare_to: another snapshot to diff against (`snapshot` is A, this is B). (templated)
    :param compare_stream: the stream `compare_to` belongs to (a clone); default the same. (templated)
    :param where: a Spark SQL filter on the state's columns (state reports). (templated)
    :param limit: most rows in a state report, or samples per kind in a diff.
    :param operator: the stateful operator's id or name (default 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    :param state_var: a transformWithState operator's state variable, `*` for all, `$timers`. (templated)
    :param spark: where the report's Spark application runs (`SparkJobOptions`; see
        operators/base.py `StateTask`); default in the task. (templated)
    """

    template_fields: Sequence[str] = ("stream", "snapshot", "report_path", "compare_to", "compare_stream", "where",
                                      "operator", "store_name", "join_side", "state_var", "spark")

    def __init__(
        self, *, report_path: str, snapshot: str = "latest", compare_to: str | None = None,
        compare_stream: str | None = None, where: str | None = None, limit: int = 100, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.report_path = report_path
        self.snapshot = snapshot
        self.compare_to = compare_to
        self.compare_stream = compare_stream
        self.where = where
        self.limit = limit

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.spec
        with self.cancellable():
            if self.compare_to:
                d = self.run_job(kind="diff", snapshot=self.snapshot, other_snapshot=self.compare_to,
                                 other_stream=self.compare_stream or None, sample=self.limit)
                report: dict[str, Any] = {"kind": "diff", "stream": spec.name,
                                          **{k: v for k, v in d.items() if k not in ("kind", "job_id", "summary",
                                                                                    "ran_on")}}
                summary = {k: report[k] for k in ("added", "removed", "changed", "unchanged", "identical", "b")}
                snapshot_id = d["a"]
                self.log.info("%s", d["summary"])
            else:
                r = self.run_job(kind="show", snapshot=self.snapshot, where=self.where or None, limit=self.limit)
                report = {"kind": "state", **{k: v for k, v in r.items() if k not in ("kind", "job_id", "ran_on")}}
                summary = {"total_rows": r["total_rows"], "rows": len(r["rows"])}
                snapshot_id = r["snapshot_id"]
                self.log.info("%d rows of %s match %s", r["total_rows"], snapshot_id, self.where or "(no filter)")
            where = self._write(json.dumps(report, indent=1).encode())
        self.log.info("report: %s", where)
        return {"report": where, "kind": report["kind"], "snapshot_id": snapshot_id, **summary}

    def _write(self, data: bytes) -> str:
        """The report, whole or not at all: a temp file renamed into place, or one S3 PUT."""
        if self.report_path.startswith(("s3://", "s3a://")):
            from airflow.providers.amazon.aws.hooks.s3 import S3Hook

            url = "s3://" + self.report_path.split("://", 1)[1]
            bucket, key = S3Hook.parse_s3_url(url)
            S3Hook(aws_conn_id=self.spec.storage_conn_id).load_bytes(data, key, bucket, replace=True)
            return url
        out = Path(self.report_path).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(out, data, fsync=False)
        return str(out)
