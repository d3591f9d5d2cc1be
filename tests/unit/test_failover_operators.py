"""The DR failover operators refuse what retrying cannot fix in one line, and the report
computes RTO from the run's own timestamps."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.engine.dr.report import RPO_UNKNOWN, failover_report
from airflow_provider_streamstate.operators.failover import FailoverStreamOperator, FencePrimaryStreamOperator
from airflow_provider_streamstate.spec import StreamSpec


def spec(tmp_path: Path, **kw: object) -> StreamSpec:
    return StreamSpec(name="orders", application="/app.py", checkpoint=str(tmp_path / "ckpt"),
                      store=f"file://{tmp_path / 'store'}", **kw)


def test_an_unknown_primary_is_refused_unless_forced() -> None:
    with pytest.raises(AirflowFailException, match="whether it still runs is unknown"):
        FencePrimaryStreamOperator(task_id="fence", stream={}).execute({})
    out = FencePrimaryStreamOperator(task_id="fence", stream={}, force="true").execute({})
    assert out == {"stream": None, "fenced": False, "outcome": "unknown", "detail": "no primary stream given"}


def test_a_primary_that_does_not_run_is_fenced(tmp_path) -> None:
    (tmp_path / "ckpt").mkdir()
    out = FencePrimaryStreamOperator(task_id="fence", stream=spec(tmp_path).to_dict()).execute({})
    assert out["fenced"] is True and out["outcome"] == "not-running"


def test_failover_without_a_dr_kafka_connection_fails_in_one_line(tmp_path) -> None:
    op = FailoverStreamOperator(task_id="failover", stream=spec(tmp_path).to_dict())
    with pytest.raises(AirflowFailException, match="names no Kafka connection") as caught:
        op.execute({})
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "ckpt").exists()


def test_a_topic_map_as_a_dict_or_pairs_reads_the_same(tmp_path) -> None:
    as_dict = FailoverStreamOperator(task_id="a", stream=spec(tmp_path).to_dict(), topic_map={"pay": "dr.pay"})
    as_list = FailoverStreamOperator(task_id="b", stream=spec(tmp_path).to_dict(), topic_map=["pay=dr.pay"],
                                     replication_policy="identity")
    assert as_dict._topic_map().dr_topic("pay") == as_list._topic_map().dr_topic("pay") == "dr.pay"
    assert as_dict._topic_map().dr_topic("other") == "primary.other"
    assert as_list._topic_map().dr_topic("other") == "other"


def test_the_report_times_the_first_dr_batch_from_the_trigger(tmp_path) -> None:
    start = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    commits = tmp_path / "ckpt" / "commits"
    commits.mkdir(parents=True)
    (commits / "8").write_text("v1\n{}")
    first = start + timedelta(seconds=42)
    os.utime(commits / "8", (first.timestamp(), first.timestamp()))
    restored = {"stream": "orders", "snapshot_id": "s7", "batch_id": 7, "events_behind": 120,
                "seconds_choose": 0.5, "seconds_restore": 1.5, "seconds_rewrite": 0.01}
    launched = {"started_at": (start + timedelta(seconds=10)).isoformat()}
    out = failover_report(start, {"checkpoint": str(tmp_path / "ckpt")}, {"outcome": "not-running"}, restored,
                          launched, {"total_lag": 0}, now=start + timedelta(seconds=50))
    assert out["rto_first_batch_s"] == 42.0 and out["rto_caught_up_s"] == 50.0
    assert out["rto_parts"]["launched_at_s"] == 10.0 and out["rto_parts"]["spark_start_to_first_batch_s"] == 32.0
    assert out["rpo_events"] is None and out["rpo_note"] == RPO_UNKNOWN
    assert out["replayed_from_mirror"] == 120 and len(out["lines"]) == 4


def test_a_failback_with_nothing_to_catch_up_reports_rpo_zero_and_no_first_batch(tmp_path) -> None:
    start = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
    (tmp_path / "ckpt" / "commits").mkdir(parents=True)
    restored = {"stream": "orders", "snapshot_id": "s9", "batch_id": 9, "events_behind": 0,
                "seconds_choose": 0.2, "seconds_restore": 0.4, "seconds_rewrite": 0.01}
    out = failover_report(start, {"checkpoint": str(tmp_path / "ckpt")}, {"outcome": "stopped"}, restored,
                          {"started_at": (start + timedelta(seconds=8)).isoformat()}, {"total_lag": 0},
                          now=start + timedelta(seconds=30), kind="failback")
    assert out["rto_first_batch_s"] is None and out["rto_caught_up_s"] == 30.0
    assert out["rpo_events"] == 0
    assert out["lines"][0].startswith("failback of orders") and "DR: stopped" in out["lines"][0]
    assert "nothing to catch up" in out["lines"][1]
