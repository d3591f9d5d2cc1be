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
from airflow_provider_streamstate.operators.validate import StateTask


class StateReportOperator(StateTask):
    """Write a JSON report of a snapshot's state, or of its diff with another snapshot.

    With `compare_to`, the report is the diff (counts of keys added, removed, changed and
    unchanged, with samples); without, the state's metadata, row count and up to `limit`
    rows matching `where`. The file is written whole or not at all (temp file, rename).
    Returns `{"report", "snapshot_id", "kind": "diff"|"state", ...counts}`.

    :param stream: the stream, a `StreamSpec` or its `to_dict()`. (templated)
    :param snapshot: a snapshot id, `latest` or `latest-good:<suite>`. (templated)
    :param report_path: the report file to write. (templated)
    :param compare_to: another snapshot to diff against (`snapshot` is A, this is B). (templated)
    :param compare_stream: the stream `compare_to` belongs to (a clone); default the same. (templated)
    :param where: a Spark SQL filter on the state's columns (state reports). (templated)
    :param limit: most rows in a state report, or samples per kind in a diff.
    :param operator: the stateful operator's id or name (default 0). (templated)
    :param store_name: one named state store of the operator. (templated)
    :param join_side: `left` or `right` of a stream-stream join. (templated)
    """

    template_fields: Sequence[str] = ("stream", "snapshot", "report_path", "compare_to", "compare_stream", "where",
                                      "operator", "store_name", "join_side")

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
        from airflow_provider_streamstate.engine.core.errors import UsageError
        from airflow_provider_streamstate.engine.state.diff import diff_snapshots

        spec = self.spec
        with self.cancellable(), self.reader() as reader:
            m = reader.manifest(spec.name, self.snapshot)
            if self.compare_to:
                d = diff_snapshots(reader, spec.name, m.snapshot_id, self.compare_to, self.selector(),
                                   b_stream=self.compare_stream or None, sample=self.limit)
                report: dict[str, Any] = {"kind": "diff", "stream": spec.name, **d.to_json()}
                summary = {k: report[k] for k in ("added", "removed", "changed", "unchanged", "identical", "b")}
                self.log.info("%s", d.summary())
            else:
                df = reader.state(spec.name, m.snapshot_id, self.selector())
                if self.where:
                    try:
                        df = df.where(self.where)
                        df.schema  # noqa: B018 - analysis: a bad filter fails here
                    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException
                        first = " ".join(str(exc).split(" SQLSTATE")[0].split())[:300]
                        raise UsageError(f"where {self.where!r} is not a valid filter on the state: {first}",
                                         hint=f"columns: {', '.join(df.columns)}") from None
                rows = [json.loads(json.dumps(r.asDict(), default=str)) for r in df.limit(self.limit).collect()]
                total = df.count()
                report = {"kind": "state", "stream": spec.name, "snapshot_id": m.snapshot_id, "batch_id": m.batch_id,
                          "selector": self.selector().to_json(), "where": self.where, "columns": df.columns,
                          "total_rows": total, "rows": rows,
                          "metadata": reader.metadata(spec.name, m.snapshot_id).to_json()}
                summary = {"total_rows": total, "rows": len(rows)}
                self.log.info("%d rows of %s match %s", total, m.snapshot_id, self.where or "(no filter)")
        out = Path(self.report_path).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(out, json.dumps(report, indent=1).encode(), fsync=False)
        self.log.info("report: %s", out)
        return {"report": str(out), "kind": report["kind"], "snapshot_id": m.snapshot_id, **summary}
