"""A pipeline of two stateful queries linked by a Kafka topic (jobs/example_pipeline.py),
snapshotted as one while both run and a producer writes: every cut restores in place, and
clones onto new link topics, to exactly the totals the uninterrupted pipeline reaches (no
link record lost or counted twice); the same two queries snapshotted independently at the
same moments and restored do not."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.catalog.retention import RetentionPolicy, apply_retention, pinned_ids
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.kafka.offsets import admin_client, list_offsets
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.pipeline.replicate import replicate_pipeline
from airflow_provider_streamstate.engine.pipeline.restore import PipelineClone, restore_pipeline
from airflow_provider_streamstate.engine.pipeline.retention import apply_pipeline_retention
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    create_pipeline_snapshot,
    get_pipeline_snapshot,
    list_pipeline_snapshots,
)
from airflow_provider_streamstate.engine.pipeline.spec import Link, PipelineSpec
from airflow_provider_streamstate.engine.state.spark import read_state
from airflow_provider_streamstate.engine.streams.clones import list_clones
from airflow_provider_streamstate.jobs.example_pipeline import PipelineArgs, start_member
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    produce,
)
from tests.integration.test_state_history import SUITE
from tests.streams import consume_until, use_state_store, wait_for

pytestmark = pytest.mark.integration


def totals(spark: Any, checkpoint: str, batch_id: int | None = None) -> dict[str, dict[str, int]]:
    """The `totals` member's state: per account count, sum and max."""
    rows = read_state(spark, checkpoint, operatorId=0, batchId=batch_id).collect()
    return {r.key.account: r.value.asDict() for r in rows}


def drain(spark: Any, bootstrap: str, src: str, link: str, checkpoints: dict[str, str], tag: str) -> None:
    """Run `enrich` then `totals` with available-now: each reads its input to the end."""
    for member in ("enrich", "totals"):
        q = start_member(spark, PipelineArgs(bootstrap, checkpoints[member], member, source_topic=src, link_topic=link,
                                             totals_topic=f"{link}-totals", trigger="available-now",
                                             query_name=f"{member}-{tag}"))
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()


def start_pipeline(spark: Any, bootstrap: str, src: str, link: str, checkpoints: dict[str, str], *, trigger_ms: int,
                   max_offsets: int) -> list[Any]:
    """Both members running with a processing-time trigger, as in production."""
    return [start_member(spark, PipelineArgs(bootstrap, checkpoints[m], m, source_topic=src, link_topic=link,
                                             totals_topic=f"{link}-totals", trigger=f"processing:{trigger_ms} milliseconds",
                                             max_offsets_per_trigger=max_offsets, query_name=f"{m}-{link}"))
            for m in ("enrich", "totals")]


def test_cuts_of_a_running_pipeline_restore_and_clone_without_loss_or_double_count(
    stack, spark, topic, tmp_path, make_store, capsys, run_dag, monkeypatch
) -> None:
    bootstrap = stack.kafka_bootstrap
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_STACK", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}))
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    link = f"link-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, link, partitions=3)
    store, store_url, _ = make_store("local")
    independent_store, _, _ = make_store("local")
    ck = {"enrich": str(tmp_path / "enrich"), "totals": str(tmp_path / "totals")}
    spec = PipelineSpec("orders", dict(ck), (Link("enrich", link, "totals"),))
    spec_file = tmp_path / "pipeline.json"
    spec_file.write_text(json.dumps(spec.to_json()))
    rounds = [GeneratorSpec(seed=23, accounts=40, events=200, duplicate_rate=0.05)]
    produce(bootstrap, topic, rounds[0])
    queries = start_pipeline(spark, bootstrap, topic, link, ck, trigger_ms=400, max_offsets=60)
    seed = random.randrange(10**6)
    rnd = random.Random(seed)
    cuts, independent = [], []
    wait_for(lambda: all(q.lastProgress for q in queries), 120, "both members' first batches")
    writing = threading.Event()
    writing.set()

    def producer() -> None:  # 40 transactions a second until the cuts are taken
        while writing.is_set():
            rounds.append(rounds[-1].next_round(40))
            produce(bootstrap, topic, rounds[-1], rate=40)

    def link_ends() -> dict[str, int]:
        return list_offsets(admin_client(bootstrap), {link: [0, 1, 2]})[link]

    def totals_reads() -> dict[str, int]:
        """Where totals' newest committed batch ends in the link topic."""
        reader = CheckpointReader(ck["totals"])
        return reader.kafka_offsets(reader.committed_batches()[-1]).get(link, {})

    feeder = threading.Thread(target=producer)
    feeder.start()
    deadline = time.monotonic() + 120
    while len(cuts) < 2 and time.monotonic() < deadline:
        time.sleep(rnd.uniform(0.2, 2.0))  # a random moment
        if not cuts:  # the first through the CLI
            assert main(["snapshot", "create", "--pipeline", str(spec_file), "--store", store_url,
                         "--kafka-bootstrap", bootstrap, "--wait", "60", "--json"]) == 0
            taken = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
            cuts.append(get_pipeline_snapshot(store, "orders", taken["snapshot_id"]))
            assert taken["members"]["totals"]["batch_id"] == cuts[0].members["totals"].batch_id
        else:
            cuts.append(create_pipeline_snapshot(spec, store, bootstrap, wait_s=60).snapshot)
        # The same two members on their own, as two independent schedules take them: the
        # upstream, then the downstream a moment later, once it has read a link record the
        # upstream produced after its snapshot (past the link's end offsets read after it:
        # a fixed number of batches is not enough when the downstream lags, as on a loaded machine).
        upstream = create_snapshot(ck["enrich"], independent_store, "enrich").manifest
        produced_then = link_ends()
        wait_for(lambda: any(o > produced_then[p] for p, o in totals_reads().items()), 60,  # noqa: B023
                 "totals to read what enrich produced after its snapshot")
        independent.append((upstream, create_snapshot(ck["totals"], independent_store, "totals").manifest))
    writing.clear()
    feeder.join()
    assert len(cuts) == 2, f"seed {seed}"
    expected = expected_aggregates(rounds)
    wait_for(lambda: totals(spark, ck["totals"]) == expected, 180, "the pipeline to reach the expected totals")
    for q in queries:
        q.stop()
    assert list_pipeline_snapshots(store, "orders") == sorted(c.snapshot_id for c in cuts)

    def ahead(upstream_reads: dict[str, dict[str, int]], downstream_reads: dict[str, int]) -> int:
        """Link records the downstream had counted whose transaction the upstream had not read yet."""
        read_up = {t["txn_id"] for t in consume_until(bootstrap, upstream_reads)}
        return sum(t["txn_id"] not in read_up for t in consume_until(bootstrap, {link: downstream_reads}))

    snaps = [get_pipeline_snapshot(store, "orders", c.snapshot_id) for c in cuts]
    for snap in snaps:
        (channel,) = snap.channels
        reads = snap.members["totals"].reads[link]
        produced = snap.members["enrich"].produced[link]
        # The cut: the downstream read no further than the upstream had produced, and the
        # channel is exactly the records in between, kept in the store.
        assert all(reads[p] <= produced[p] for p in produced), (seed, reads, produced)
        assert channel.range.start == reads and channel.range.end == produced
        assert channel.records == sum(produced[p] - reads[p] for p in produced)
        kept = snap.channel_records(store, channel)
        assert [(r.partition, r.offset) for r in kept] == [
            (int(p), o) for p in sorted(produced, key=int) for o in range(reads[p], produced[p])]
        # The downstream's state at its batch is exactly the link records below its offsets,
        # none of them from a transaction the upstream's cut had not read.
        at_cut: dict[str, dict[str, int]] = {}
        for t in consume_until(bootstrap, {link: reads}):
            agg = at_cut.setdefault(t["account"], {"count": 0, "sum": 0, "max": 0})
            agg["count"] += 1
            agg["sum"] += t["amount_cents"]
            agg["max"] = max(agg["max"], t["amount_cents"])
        assert totals(spark, ck["totals"], snap.members["totals"].batch_id) == at_cut
        assert ahead({topic: snap.members["enrich"].reads[topic]}, reads) == 0, seed
    # Independent snapshots: the downstream has counted records its upstream's snapshot has
    # not produced yet (after a restore they would be produced, and counted, again).
    independent_ahead = [ahead({topic: up.kafka_offsets[topic]}, down.kafka_offsets[link]) for up, down in independent]
    assert any(n > 0 for n in independent_ahead), (seed, independent_ahead)

    # Validated as a unit (each member with its own suite, through the CLI): a pipeline
    # snapshot is good only when every member passed, and `latest-good` is the newest such.
    suite_files = {}
    for name, operator, expectations in (
        ("enrich-sane", "dedupeWithinWatermark",
         [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_txn_id"}}]),
        ("totals-sane", "stateStoreSave", SUITE["expectations"]),
        ("totals-tiny", "stateStoreSave",
         [{"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_max", "max_value": 10}}]),
    ):
        suite_files[name] = tmp_path / f"{name}.json"
        suite_files[name].write_text(json.dumps({"name": name, "meta": {"streamstate": {"operator": operator}},
                                                 "expectations": expectations}))
    validate = ["pipeline", "validate", "--pipeline", "orders", "--store", store_url, "--json",
                "--suite", f"enrich={suite_files['enrich-sane']}"]
    assert main([*validate, snaps[0].snapshot_id, "--suite", f"totals={suite_files['totals-sane']}"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["success"] is True
    assert main([*validate, snaps[1].snapshot_id, "--suite", f"totals={suite_files['totals-tiny']}"]) == 3
    failed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert failed["members"]["enrich"]["success"] is True and failed["members"]["totals"]["success"] is False
    assert get_pipeline_snapshot(store, "orders", "latest-good").snapshot_id == snaps[0].snapshot_id
    assert main(["pipeline", "list", "--pipeline", "orders", "--store", store_url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["good"] for r in listed] == [True, False]

    for i, snap in enumerate(snaps):
        # Restored in place, then run to the end of the same input: the same totals.
        result = restore_pipeline(store, snap, bootstrap)
        assert result.channel_records == {link: snap.channels[0].records}
        drain(spark, bootstrap, topic, link, ck, f"in-place-{i}")
        assert totals(spark, ck["totals"]) == expected, (seed, i, "in place")

        # Cloned onto a new link topic: the same totals.
        clone_topic = f"{link}-clone-{i}"
        clone_ck = {m: str(tmp_path / f"clone-{i}-{m}") for m in ck}
        if i == 0:  # through the CLI, recorded as clones that expire with their link topic
            assert main(["pipeline", "clone", snap.snapshot_id, "--pipeline", "orders", "--store", store_url,
                         "--kafka-bootstrap", bootstrap, "--suffix", f"clone-{i}", "--ttl", "1d", "--json",
                         *(a for m in ck for a in ("--checkpoint", f"{m}={clone_ck[m]}"))]) == 0
            cloned = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
            assert cloned["topics"] == {link: clone_topic}
            assert {r.clone: r.delete_topics for r in list_clones(store)} == {
                "enrich-clone-0": [clone_topic], "totals-clone-0": []}
        else:  # through RestorePipelineOperator in a DAG run
            dag_run = run_dag("streamstate_test_pipeline_restore", {
                "pipeline": {**spec.to_json(), "store": store_url, "kafka_conn_id": "kafka_stack"},
                "snapshot": snap.snapshot_id,
                "clone": {"suffix": f"clone-{i}", "checkpoints": clone_ck, "topics": {link: clone_topic}}})
            assert dag_run.state == "success", dag_run.log[-4000:]
            restored = dag_run.tasks["restore"].xcom
            assert restored["snapshot_id"] == snap.snapshot_id and restored["topics"] == {link: clone_topic}
            assert restored["resume"] == {clone_topic: {str(p): 0 for p in snap.channels[0].range.end}}
        drain(spark, bootstrap, topic, clone_topic, clone_ck, f"clone-{i}")
        assert totals(spark, clone_ck["totals"]) == expected, (seed, i, "clone")
        if i == 0:  # the clones' own snapshots, for their expiry to delete (at the end)
            expiring = {f"{m}-clone-0": clone_ck[m] for m in ck}
            for name, location in expiring.items():
                create_snapshot(location, store, name)

    # Replicated to an S3 store (the DR region's) as units, and cloned from there: the same totals.
    dr, _, _ = make_store("s3")
    rep = replicate_pipeline(store, dr, "orders", parallelism=4)
    assert rep.published == [c.snapshot_id for c in snaps] and rep.member_snapshots_published == 2 * len(snaps)
    assert replicate_pipeline(store, dr, "orders").published == []  # a re-run copies nothing
    dr_snap = get_pipeline_snapshot(dr, "orders", "latest")
    assert dr_snap.to_json() == snaps[-1].to_json()
    assert all(pinned_ids(dr, m.stream) >= {m.snapshot_id} for m in dr_snap.members.values())
    dr_ck = {m: str(tmp_path / f"dr-{m}") for m in ck}
    restore_pipeline(dr, dr_snap, bootstrap, clone=PipelineClone(
        names={m: f"{m}-dr" for m in ck}, checkpoints=dr_ck, topics={link: f"{link}-dr"}))
    drain(spark, bootstrap, topic, f"{link}-dr", dr_ck, "dr")
    assert totals(spark, dr_ck["totals"]) == expected, (seed, "from the DR store")

    # Retention as units: the older pipeline snapshots go with their channels and pins, and
    # the members' own retention cannot break the one kept.
    kept = snaps[-1]
    result = apply_pipeline_retention(store, "orders", keep_last=1)
    assert result.deleted == [s.snapshot_id for s in snaps[:-1]] and result.kept == [kept.snapshot_id]
    assert result.pins_released == 2 * (len(snaps) - 1)
    assert list_pipeline_snapshots(store, "orders") == [kept.snapshot_id]
    assert store.list_record_tree("pipelines/orders/channels/") == [kept.channels[0].key]
    verdicts = {v.snapshot_id: v for m in ck for v in apply_retention(store, m, RetentionPolicy(keep_last=1)).kept}
    assert get_pipeline_snapshot(store, "orders", kept.snapshot_id).to_json() == kept.to_json()  # members all there
    assert all(any("pinned" in r for r in verdicts[m.snapshot_id].reasons) for m in kept.members.values())
    # The older members are ordinary snapshots again: deleted, or kept for another reason
    # (the first cut's passed their suites: the newest known-good of each is kept).
    for old in snaps[:-1]:
        for m in old.members.values():
            assert m.snapshot_id not in verdicts or not any("pinned" in r for r in verdicts[m.snapshot_id].reasons)

    # The CLI clone's expiry, run now (`clone expire` is what the clone-expiry DAG runs):
    # each member clone's snapshots and its link topic go, and its record; the original
    # pipeline's topics, and the other clone's (recorded without a TTL), are untouched.
    def topic_ends() -> dict[str, dict[str, int]]:
        admin = admin_client(bootstrap)
        parts = {t: sorted(m.partitions) for t, m in admin.list_topics(timeout=10).topics.items()}
        return list_offsets(admin, {t: parts[t] for t in (topic, link, f"{link}-clone-0", f"{link}-clone-1")
                                    if t in parts})

    untouched = {t: o for t, o in topic_ends().items() if t != f"{link}-clone-0"}
    assert set(untouched) == {topic, link, f"{link}-clone-1"}
    assert main(["clone", "expire", "--store", store_url, "--force", "--kafka-bootstrap", bootstrap, "--json",
                 *(a for name in expiring for a in ("--clone", name))]) == 0
    expired = {e["clone"]: e for e in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["expired"]}
    assert {c: (e["snapshots_deleted"], e["topics_deleted"]) for c, e in expired.items()} == {
        "enrich-clone-0": (1, [f"{link}-clone-0"]), "totals-clone-0": (1, [])}
    assert list_clones(store) == [] and all(store.list_snapshot_ids(name) == [] for name in expiring)
    assert topic_ends() == untouched
    # Each member clone's checkpoint is labelled as that clone (restore_pipeline wrote it), so
    # expiry deletes it too.
    assert not any(e["notes"] for e in expired.values()), expired
    assert not any(Path(location).exists() for location in expiring.values())


def test_the_pipeline_snapshot_dag_cuts_replicates_and_keeps_the_newest(
    stack, spark, topic, tmp_path, make_store, run_dag, monkeypatch
) -> None:
    """Two scheduled runs of `streamstate_pipeline_snapshot` on a running pipeline: each
    takes a cut and replicates it to the DR store; with keep_last 1 both stores end with
    the second run's pipeline snapshot only, its members pinned. The first run's pipeline
    names no suites (its validation is skipped), the second's does: its cut is validated as a
    unit, in the task, and is the pipeline's `latest-good`."""
    bootstrap = stack.kafka_bootstrap
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_STACK", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}))
    use_state_store(spark, "hdfs", **{"spark.sql.shuffle.partitions": "2"})
    link = f"link-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, link, partitions=2)
    store, store_url, _ = make_store("local")
    dr, dr_url, _ = make_store("local")
    ck = {"enrich": str(tmp_path / "enrich"), "totals": str(tmp_path / "totals")}
    spec = PipelineSpec("payments", ck, (Link("enrich", link, "totals"),))
    produce(bootstrap, topic, GeneratorSpec(seed=29, accounts=10, events=120))
    queries = start_pipeline(spark, bootstrap, topic, link, ck, trigger_ms=300, max_offsets=40)
    try:
        wait_for(lambda: all(q.lastProgress for q in queries), 120, "both members' first batches")
        pipeline = {**spec.to_json(), "store": store_url, "kafka_conn_id": "kafka_stack"}
        suites = {"enrich": {"name": "enrich-sane", "meta": {"streamstate": {"operator": "dedupeWithinWatermark"}},
                             "expectations": [{"type": "expect_column_values_to_not_be_null",
                                               "kwargs": {"column": "key_txn_id"}}]},
                  "totals": {**SUITE, "name": "totals-sane", "meta": {"streamstate": {"operator": "stateStoreSave"}}}}
        runs = [run_dag("streamstate_pipeline_snapshot", {"pipelines": [p], "dr_store": dr_url, "keep_last": 1})
                for p in (pipeline, {**pipeline, "suites": suites})]
    finally:
        for q in queries:
            q.stop()
    for result in runs:
        assert result.state == "success", result.log[-4000:]
    first, second = (r.tasks["pipeline.snapshot[0]"].xcom["snapshot_id"] for r in runs)
    assert list_pipeline_snapshots(store, "payments") == [second] == list_pipeline_snapshots(dr, "payments")
    assert runs[1].tasks["pipeline.retention[0]"].xcom["deleted"] == [first]
    assert runs[1].tasks["pipeline.retention_dr[0]"].xcom["deleted"] == [first]
    assert runs[1].tasks["pipeline.replicate[0]"].xcom["published"] == [second]
    assert runs[0].tasks["pipeline.validate[0]"].state == "skipped"
    validated = runs[1].tasks["pipeline.validate[0]"].xcom
    assert validated["snapshot_id"] == second and validated["success"] is True, validated
    assert get_pipeline_snapshot(store, "payments", "latest-good").snapshot_id == second
    for s in (store, dr):
        snap = get_pipeline_snapshot(s, "payments", second)
        assert all(m.snapshot_id in pinned_ids(s, m.stream) for m in snap.members.values())
