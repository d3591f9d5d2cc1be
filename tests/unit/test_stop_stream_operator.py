"""StopStreamOperator when finishing the stream's planned batch fails after the stop: the
task fails, and its XCom still holds what the stop did, so that a rollback (the repair
DAG's) knows whether the stream ran before and starts it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.operators.stream import StopStreamOperator
from airflow_provider_streamstate.spec import StreamSpec


class RecordingTI:
    """What the operator uses of the task instance: xcom_push."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_a_stop_whose_planned_batch_cannot_be_run_fails_with_the_stop_recorded(tmp_path: Path) -> None:
    checkpoint = tmp_path / "orders"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0}\n{"t":{"0":5}}\n')
    # Batch 0 planned, never committed; the stream cannot be launched to run it (no such connection).
    spec = StreamSpec(name="orders", checkpoint=str(checkpoint), store=f"file://{tmp_path / 'store'}",
                      application=str(tmp_path / "orders.py"), spark_conn_id="spark_nowhere")
    ti = RecordingTI()
    stop = StopStreamOperator(task_id="stop", stream=spec.to_dict(), timeout=5, finish_planned_batch=True)
    with pytest.raises(Exception, match="spark_nowhere"):
        stop.execute({"ti": ti})
    recorded = ti.pushed["return_value"]
    assert (recorded["stream"], recorded["outcome"], recorded["finished_planned_batch"]) == ("orders", "not-running",
                                                                                             None)
