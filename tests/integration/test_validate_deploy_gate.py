"""The deploy gate on a real stream: production's known-good snapshot is cloned, the
candidate job runs on the clone (spark-submit, over the same Kafka input, to the current
end offsets), its state is validated and diffed against production's. A correct candidate
passes; one with a planted bug (every amount counted twice) is blocked, and the failure
names the expectation; a candidate keeping one more state column passes on the clone's
state migrated to its schema. The clone is torn down every time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import airflow_provider_streamstate.jobs.example_stream as job
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.state.reader import StateReader
from airflow_provider_streamstate.engine.state.validation import load_suite, validate_snapshot
from airflow_provider_streamstate.engine.stores import open_store
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce, transactions
from tests.streams import example_stream_spec, run_to_end, use_state_store

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

SUITE = {
    "name": "accounts-sane",
    "meta": {"streamstate": {"operator": "stateStoreSave"}},
    "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "min_value": 1,
                                                                  "max_value": 100000}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_account"}},
    ],
}


def production(stack: Any, spark: Any, topic: str, tmp_path: Path, first: GeneratorSpec, more: int
               ) -> tuple[Any, Any, Path, Any]:
    """The production stream (RocksDB with changelog): a known-good snapshot of `first`, then
    `more` records and its newest snapshot; (spec, store, suite file, the good manifest)."""
    use_state_store(spark, "rocksdb-changelog")
    spec = example_stream_spec(stack, topic, tmp_path, name="orders", state_store="rocksdb-changelog")
    store = open_store(spec.store)
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps(SUITE))
    produce(stack.kafka_bootstrap, topic, first)
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)
    good = create_snapshot(spec.checkpoint, store, "orders").manifest
    with StateReader(store, spark=spark) as reader:
        assert validate_snapshot(reader, "orders", good.snapshot_id, load_suite(suite_file)).success
    produce(stack.kafka_bootstrap, topic, first.next_round(more))
    run_to_end(spark, stack.kafka_bootstrap, topic, spec.checkpoint)
    create_snapshot(spec.checkpoint, store, "orders")
    return spec, store, suite_file, good


def test_a_correct_candidate_passes_and_a_planted_bug_is_blocked(stack, spark, topic, tmp_path, run_dag,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    # Production: a known-good snapshot, then more input and its newest snapshot.
    first = GeneratorSpec(seed=91, accounts=10, events=120)
    spec, store, suite_file, good = production(stack, spark, topic, tmp_path, first, first.events)

    args = [("available-now" if a.startswith("processing:") else a) for a in spec.application_args]
    conf = {"stream": spec.to_dict(), "candidate_args": args, "suite": str(suite_file),
            "snapshot": "latest-good:accounts-sane", "compare_snapshot": "latest", "clone_root": str(tmp_path / "gate")}

    passed = run_dag("streamstate_deploy_gate", {**conf, "candidate_application": job.__file__,
                                                 "reports": str(tmp_path / "reports-ok")})
    assert passed.state == "success", passed.log[-4000:]
    verdict = passed.tasks["gate"].xcom
    assert verdict["deploy"] is True and verdict["changed_keys"] == 0
    assert Path(verdict["data_docs"]).is_file()
    assert passed.tasks["clone"].xcom["snapshot_id"] == good.snapshot_id  # latest known-good, not latest
    assert passed.tasks["tear_down"].xcom["clones_expired"] == 1

    blocked = run_dag("streamstate_deploy_gate", {**conf, "candidate_application": str(REPO / "tests/apps/doubled_stream.py"),
                                                  "reports": str(tmp_path / "reports-bug")})
    assert blocked.state == "failed"
    assert blocked.failed_tasks() == ["check_diff", "validate"], blocked.log[-4000:]
    assert "failed on" in blocked.log and "expect_column_values_to_be_between(value_max) observed" in blocked.log
    assert "the candidate's state differs from production's on" in blocked.log
    assert blocked.tasks["tear_down"].state == "success" and blocked.tasks["gate"].state == "upstream_failed"
    for run in (passed, blocked):
        plan = run.tasks["plan"].xcom
        assert not Path(plan["checkpoint"]).exists()
        assert store.list_snapshot_ids(plan["name"]) == []


def test_a_candidate_keeping_one_more_state_column_is_tested_on_productions_migrated_state(
        stack, spark, topic, tmp_path, run_dag, monkeypatch) -> None:
    """The candidate also keeps each account's smallest amount (tests/apps/min_stream.py), so
    Spark would refuse it on production's state. Given a checkpoint the candidate wrote
    (`migrate_to`), the gate migrates the clone's state to its schema first; the candidate
    then runs on production's state, and its state matches production's on every column
    they share (the new one only in the candidate's)."""
    import os
    import subprocess

    from airflow_provider_streamstate.utils.spark_submit import spark_submit_command

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    first = GeneratorSpec(seed=93, accounts=8, events=80)
    spec, store, suite_file, good = production(stack, spark, topic, tmp_path, first, 40)

    # The candidate's schema: it runs once on a record of its own, into a scratch checkpoint.
    candidate = str(REPO / "tests/apps/min_stream.py")
    args = [("available-now" if a.startswith("processing:") else a) for a in spec.application_args]
    scratch_topic = f"{topic}-v2"
    produce(stack.kafka_bootstrap, scratch_topic, GeneratorSpec(seed=5, accounts=1, events=1))
    scratch = spec.derive(name="orders-v2-schema", checkpoint=str(tmp_path / "v2-schema"), application=candidate,
                          application_args=[scratch_topic if a == topic else a for a in args],
                          sinks={"alerts": f"{scratch_topic}-alerts"})
    command, env = spark_submit_command(candidate, conn_id=scratch.spark_conn_id, name=scratch.name,
                                        application_args=scratch.resolved_args(), conf=scratch.conf, jars=scratch.jars)
    ran = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]

    gated = run_dag("streamstate_deploy_gate", {
        "stream": spec.to_dict(), "candidate_application": candidate, "candidate_args": args,
        "suite": str(suite_file), "snapshot": good.snapshot_id, "compare_snapshot": "latest",
        "clone_root": str(tmp_path / "gate"), "reports": str(tmp_path / "reports"), "migrate_to": scratch.checkpoint})
    assert gated.state == "success", gated.log[-5000:]
    migrated = gated.tasks["migrate_clone"].xcom
    assert migrated["migrated"] and migrated["preview"]["changed"] == len({t.account for t in transactions(first)})
    assert migrated["spark"]["keys_checked"] == migrated["preview"]["changed"]
    verdict = gated.tasks["gate"].xcom
    assert verdict["deploy"] is True and verdict["changed_keys"] == 0
    diff = json.loads((tmp_path / "reports" / "diff.json").read_text())
    assert diff["only_in_b"] == ["value_min"] and diff["changed"] == 0
    assert gated.tasks["tear_down"].xcom["clones_expired"] == 1
    assert store.list_snapshot_ids(gated.tasks["plan"].xcom["name"]) == []  # the migration's pin went too
