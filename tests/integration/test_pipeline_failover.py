"""A pipeline fails over to the DR region as one (engine/pipeline/failover.py): from a
pipeline snapshot replicated to the DR store, its upstream resumes on the mirrored source
topic at offsets translated through its anchors, and its downstream on the DR link topic
right where the cut's channel was appended; run to the end of the same input there, the
downstream's totals count every transaction once. A failover that fails half way leaves no
member checkpoint behind and can be run again.

The run's region pair of the default policy (a primary Kafka of its own, DR Kafka fed by
MirrorMaker 2; tests/integration/conftest.py); the source topic is written in transactions,
so its DR offsets are not the primary's."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.core.errors import TransientError
from airflow_provider_streamstate.engine.dr.failover import TopicMap
from airflow_provider_streamstate.engine.pipeline import failover as failover_mod
from airflow_provider_streamstate.engine.pipeline.replicate import replicate_pipeline
from airflow_provider_streamstate.engine.pipeline.snapshots import create_pipeline_snapshot
from airflow_provider_streamstate.engine.pipeline.spec import Link, PipelineSpec
from airflow_provider_streamstate.jobs.example_pipeline import PipelineArgs, start_member
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    messages,
)
from tests.dr_regions import end_offsets, produce_transactionally, wait_mirrored
from tests.integration.test_pipeline_cut import totals
from tests.integration.test_state_history import SUITE
from tests.streams import use_state_store

pytestmark = [pytest.mark.integration, pytest.mark.dr_regions]


def run(spark: Any, bootstrap: str, member: str, checkpoint: str, src: str, link: str, tag: str) -> None:
    """One member with available-now, in batches of at most 150 records: to its input's end."""
    q = start_member(spark, PipelineArgs(bootstrap, checkpoint, member, source_topic=src, link_topic=link,
                                         totals_topic=f"{link}-totals", trigger="available-now",
                                         max_offsets_per_trigger=150, query_name=f"{member}-{tag}"))
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()


def pipeline_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "pipeline", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("regions", ["default"], indirect=True)
def test_a_pipeline_fails_over_as_one_and_its_totals_count_every_transaction_once(
    regions, spark, tmp_path, monkeypatch, run_dag
) -> None:
    primary, dr = regions
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    src, link = f"txns-{uuid.uuid4().hex[:8]}", f"link-{uuid.uuid4().hex[:8]}"
    for topic in (src, link, f"{link}-totals"):
        ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    ensure_topic(dr.bootstrap, f"{link}-totals", partitions=3)
    ck = {m: str(tmp_path / f"primary-{m}") for m in ("enrich", "totals")}
    spec = PipelineSpec("orders", dict(ck), (Link("enrich", link, "totals"),))
    rounds = [GeneratorSpec(seed=91, accounts=15, events=300, duplicate_rate=0.05)]
    rounds.append(rounds[0].next_round(250))
    rounds.append(rounds[1].next_round(200))

    # Both members read round 1; the upstream goes on through round 2 and the downstream
    # does not: the cut's channel holds round 2's link records.
    sent = produce_transactionally(primary.kafka_bootstrap, src, rounds[0])
    for member in ("enrich", "totals"):
        run(spark, primary.kafka_bootstrap, member, ck[member], src, link, "primary-1")
    sent += produce_transactionally(primary.kafka_bootstrap, src, rounds[1])
    run(spark, primary.kafka_bootstrap, "enrich", ck["enrich"], src, link, "primary-2")
    store = LocalStore(tmp_path / "store", fsync=False)
    snap = create_pipeline_snapshot(spec, store, primary.kafka_bootstrap, wait_s=60).snapshot
    (channel,) = snap.channels
    assert channel.records == rounds[1].events  # round 2's transactions, duplicates dropped by enrich
    assert sum(end_offsets(primary.kafka_bootstrap, src, 3).values()) > sent  # commit markers take offsets

    # The primary goes on after the cut (its upstream writes round 3 to the primary's link
    # topic), then is lost; the mirror has the source, the DR store the pipeline snapshot.
    sent += produce_transactionally(primary.kafka_bootstrap, src, rounds[2])
    run(spark, primary.kafka_bootstrap, "enrich", ck["enrich"], src, link, "primary-3")
    wait_mirrored(dr, src, sent)
    dr_store = LocalStore(tmp_path / "dr-store", fsync=False)
    assert replicate_pipeline(store, dr_store, "orders").published == [snap.snapshot_id]

    # A failover that fails after the first member was restored removes what it wrote.
    half = {m: str(tmp_path / f"half-{m}") for m in ck}
    real_restore = failover_mod.restore_snapshot
    calls: list[str] = []

    def failing_restore(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        if len(calls) == 2:
            raise TransientError("the DR store stopped answering (injected)")
        return real_restore(*args, **kwargs)

    monkeypatch.setattr(failover_mod, "restore_snapshot", failing_restore)
    with pytest.raises(TransientError, match="injected"):
        failover_mod.failover_pipeline(dr_store, "orders", half, dr.bootstrap,
                                       topic_map=TopicMap(policy="default", source_alias=dr.source_alias))
    monkeypatch.undo()
    assert calls == ["enrich", "totals"] and not any(Path(p).exists() for p in half.values())

    # Only a known-good pipeline snapshot may be failed over to: none is validated yet.
    target = {m: str(tmp_path / f"dr-{m}") for m in ck}
    args = ["failover", "--store", str(tmp_path / "dr-store"), "--pipeline", "orders", "--kafka-bootstrap",
            dr.bootstrap, "--replication-policy", "default", "--source-alias", dr.source_alias, "--good-only",
            *(a for m in ck for a in ("--target", f"{m}={target[m]}"))]
    unvalidated = pipeline_cli(*args)
    assert unvalidated.returncode == 1 and "not every member passed its validations" in unvalidated.stderr

    # Validated in the DR region as a unit: both members' suites in one Spark application (a
    # batch of state jobs, spark-submit on a local master here; yarn or spark:// the same way).
    suites = {"enrich": ("dedupeWithinWatermark",
                         [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_txn_id"}}]),
              "totals": ("stateStoreSave", SUITE["expectations"])}
    suite_args = []
    for member, (operator, expectations) in suites.items():
        path = tmp_path / f"{member}-suite.json"
        path.write_text(json.dumps({"name": f"{member}-sane", "meta": {"streamstate": {"operator": operator}},
                                    "expectations": expectations}))
        suite_args += ["--suite", f"{member}={path}"]
    validated = pipeline_cli("validate", "--store", str(tmp_path / "dr-store"), "--pipeline", "orders", "latest",
                             *suite_args, "--master", "local[2]", "--json")
    assert validated.returncode == 0, validated.stderr
    assert {m: v["success"] for m, v in json.loads(validated.stdout)["members"].items()} == {
        "enrich": True, "totals": True}

    # The failover, through FailoverPipelineOperator in a DAG run (good_only): the newest
    # known-good pipeline snapshot that translates.
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DR", json.dumps({"conn_type": "kafka",
                                                            "extra": {"bootstrap.servers": dr.bootstrap}}))
    dag_run = run_dag("streamstate_test_pipeline_failover", {
        "pipeline": {**PipelineSpec("orders", dict(target), spec.links).to_json(), "store": str(tmp_path / "dr-store"),
                     "kafka_conn_id": "kafka_dr"},
        "source_alias": dr.source_alias})
    assert dag_run.state == "success", dag_run.log[-4000:]
    result = dag_run.tasks["failover"].xcom
    assert result["snapshot_id"] == snap.snapshot_id and result["skipped_snapshots"] == []
    assert result["channel_records"] == {link: channel.records}
    enrich, down = result["members"]["enrich"], result["members"]["totals"]
    assert {p["dr_topic"] for p in enrich["translated"]} == {dr.dr_topic(src)} and enrich["links"] == {}
    assert any(p["dr_offset"] != p["primary_offset"] for p in enrich["translated"])  # translated, not copied
    assert enrich["events_behind"] == sum(1 for _ in messages(rounds[2]))  # what the primary read after the cut
    assert down["translated"] == [] and set(down["links"]) == {link}
    # The DR link topic holds the half-failed run's channel, then this run's: it resumes at the second.
    per_partition = Counter(r.partition for r in snap.channel_records(dr_store, channel))
    assert down["links"][link] == {str(p): end - per_partition[p] for p, end in end_offsets(dr.bootstrap, link, 3).items()}

    # The same again is refused in one line before anything is written: the targets are not empty.
    again = pipeline_cli(*args)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "not empty" in again.stderr, again.stderr
    assert sum(end_offsets(dr.bootstrap, link, 3).values()) == 2 * channel.records

    # The DR pipeline, run to the end of the mirrored input: every transaction counted once.
    run(spark, dr.bootstrap, "enrich", target["enrich"], dr.dr_topic(src), link, "dr")
    run(spark, dr.bootstrap, "totals", target["totals"], dr.dr_topic(src), link, "dr")
    assert totals(spark, target["totals"]) == expected_aggregates(rounds)
