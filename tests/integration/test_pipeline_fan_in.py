"""A fan-in pipeline (two `enrich` queries, each over its own source topic and writing its
own link topic, into one `totals` reading both) cut while all three run under producers:
for every cut each link's channel is exactly the records between the downstream's read
offsets and its upstream's produced ones, and restoring in place, then running to the end of
the same input, gives exactly the totals of both inputs (no loss, no double count).

The first cut's restore also fails half way (a fault injected after the channels were
appended and the first member restored): the user gets one line, and the restore run again
for real still ends with exact totals, the records the failed run appended read by nobody."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest

from airflow_provider_streamstate.cli import main
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.core.errors import TransientError
from airflow_provider_streamstate.engine.kafka.offsets import admin_client, list_offsets
from airflow_provider_streamstate.engine.pipeline import restore as pipeline_restore
from airflow_provider_streamstate.engine.pipeline.restore import restore_pipeline
from airflow_provider_streamstate.engine.pipeline.snapshots import (
    create_pipeline_snapshot,
    get_pipeline_snapshot,
)
from airflow_provider_streamstate.engine.pipeline.spec import Link, PipelineSpec
from airflow_provider_streamstate.jobs.example_pipeline import PipelineArgs, start_member
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    produce,
)
from tests.integration.test_pipeline_cut import totals
from tests.streams import use_state_store, wait_for

pytestmark = pytest.mark.integration

UPSTREAMS = ("enrich-a", "enrich-b")


def member_args(bootstrap: str, member: str, ck: dict[str, str], src: dict[str, str], link: dict[str, str],
                trigger: str, tag: str, max_offsets: int | None = None) -> PipelineArgs:
    """`enrich-a`/`enrich-b` write their own link topic; `totals` subscribes to both."""
    if member == "totals":
        return PipelineArgs(bootstrap, ck[member], "totals", link_topic=",".join(link[u] for u in UPSTREAMS),
                            totals_topic=f"{link['enrich-a']}-totals", trigger=trigger,
                            max_offsets_per_trigger=max_offsets, query_name=f"totals-{tag}")
    return PipelineArgs(bootstrap, ck[member], "enrich", source_topic=src[member], link_topic=link[member],
                        trigger=trigger, max_offsets_per_trigger=max_offsets, query_name=f"{member}-{tag}")


def ends(bootstrap: str, topics: list[str]) -> dict[str, dict[str, int]]:
    admin = admin_client(bootstrap)
    parts = {t: sorted(m.partitions) for t, m in admin.list_topics(timeout=10).topics.items() if t in topics}
    return list_offsets(admin, parts)


def test_a_fan_in_pipeline_cut_under_load_restores_exactly_even_after_a_restore_failed_half_way(
    stack, spark, tmp_path, make_store, monkeypatch, capsys
) -> None:
    bootstrap = stack.kafka_bootstrap
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "2"})
    tag = uuid.uuid4().hex[:8]
    src = {u: f"src-{u}-{tag}" for u in UPSTREAMS}
    link = {u: f"link-{u}-{tag}" for u in UPSTREAMS}
    for u in UPSTREAMS:
        ensure_topic(bootstrap, src[u], partitions=3)
    ensure_topic(bootstrap, link["enrich-a"], partitions=3)
    ensure_topic(bootstrap, link["enrich-b"], partitions=2)  # links need not match
    store, store_url, _ = make_store("local")
    ck = {m: str(tmp_path / m) for m in (*UPSTREAMS, "totals")}
    spec = PipelineSpec("fan-in", dict(ck), tuple(Link(u, link[u], "totals") for u in UPSTREAMS))
    assert spec.order() == [*UPSTREAMS, "totals"]
    # Distinct seeds: distinct transaction ids, the same accounts (totals merges them).
    rounds = {u: [GeneratorSpec(seed=seed, accounts=30, events=120, duplicate_rate=0.05)]
              for u, seed in zip(UPSTREAMS, (41, 43), strict=True)}
    for u in UPSTREAMS:
        produce(bootstrap, src[u], rounds[u][0])
    queries = [start_member(spark, member_args(bootstrap, m, ck, src, link, "processing:400 milliseconds", tag,
                                               max_offsets=60)) for m in ck]
    seed = random.randrange(10**6)
    rnd = random.Random(seed)
    cuts = []
    writing = threading.Event()
    writing.set()

    def producer() -> None:  # 20 transactions a second into each source until the cuts are taken
        while writing.is_set():
            for u in UPSTREAMS:
                rounds[u].append(rounds[u][-1].next_round(10))
                produce(bootstrap, src[u], rounds[u][-1], rate=40)

    try:
        wait_for(lambda: all(q.lastProgress for q in queries), 120, "every member's first batch")
        feeder = threading.Thread(target=producer)
        feeder.start()
        try:
            for _ in range(2):
                time.sleep(rnd.uniform(0.2, 2.0))  # a random moment
                cuts.append(create_pipeline_snapshot(spec, store, bootstrap, wait_s=60).snapshot)
        finally:
            writing.clear()
            feeder.join()
    finally:  # no need to let them finish: each restore below runs to the end of the input
        for q in queries:
            q.stop()
    expected = expected_aggregates([*rounds["enrich-a"], *rounds["enrich-b"]])

    for snap in (get_pipeline_snapshot(store, "fan-in", c.snapshot_id) for c in cuts):
        assert sorted(c.range.topic for c in snap.channels) == sorted(link.values())
        for channel in snap.channels:
            reads = snap.members["totals"].reads[channel.range.topic]
            produced = snap.members[channel.range.upstream].produced[channel.range.topic]
            # Each link on its own: the downstream read no further than that link's upstream
            # had produced, and the channel is exactly the records in between.
            assert all(reads[p] <= produced[p] for p in produced), (seed, channel.range.topic, reads, produced)
            assert channel.range.start == reads and channel.range.end == produced
            kept = snap.channel_records(store, channel)
            assert [(r.partition, r.offset) for r in kept] == [
                (int(p), o) for p in sorted(produced, key=int) for o in range(reads[p], produced[p])], seed

    def drain(run: str) -> None:
        """Each upstream, then totals, with available-now: each reads its input to the end."""
        for m in ck:
            q = start_member(spark, member_args(bootstrap, m, ck, src, link, "available-now", f"{run}-{tag}"))
            q.awaitTermination(300)
            assert q.exception() is None, q.exception()

    # The first cut's restore fails after the channels were appended and enrich-a restored:
    # enrich-b's and totals' checkpoints are left as they were.
    first = cuts[0]
    assert sum(c.records for c in first.channels) > 0, seed  # else the failed run would append nothing
    real_restore = pipeline_restore.restore_snapshot
    restored: list[str] = []

    def fails_on_the_second_member(*args: Any, **kwargs: Any) -> Any:
        restored.append(args[1])
        if len(restored) == 2:
            raise TransientError("injected: the store stopped answering while restoring " + args[1])
        return real_restore(*args, **kwargs)

    newest = {m: CheckpointReader(ck[m]).committed_batches()[-1] for m in ck}
    before = ends(bootstrap, list(link.values()))
    monkeypatch.setattr(pipeline_restore, "restore_snapshot", fails_on_the_second_member)
    assert main(["pipeline", "restore", first.snapshot_id, "--pipeline", "fan-in", "--store", store_url,
                 "--kafka-bootstrap", bootstrap]) == 1
    monkeypatch.setattr(pipeline_restore, "restore_snapshot", real_restore)
    err = capsys.readouterr().err.strip()
    # One line: what was done (the channels appended, which member restored), the cause, and
    # what to do (run it again; start nothing before).
    assert err.count("\n") == 0 and err.startswith("streamstate: error: the restore of pipeline fan-in"), err
    assert "stopped after appending its channel records" in err and "restoring enrich-a:" in err, err
    assert "injected: the store stopped answering while restoring enrich-b" in err, err
    assert "run the same restore again" in err and "do not start enrich-b, totals before it succeeds" in err, err
    assert restored == ["enrich-a", "enrich-b"]
    after = ends(bootstrap, list(link.values()))
    grew = {c.range.topic: sum(after[c.range.topic][p] - before[c.range.topic][p] for p in after[c.range.topic])
            for c in first.channels}
    assert grew == {c.range.topic: c.records for c in first.channels}  # Kafka was written first
    assert CheckpointReader(ck["enrich-a"]).committed_batches()[-1] == first.members["enrich-a"].batch_id
    assert {m: CheckpointReader(ck[m]).committed_batches()[-1] for m in ("enrich-b", "totals")} == {
        m: newest[m] for m in ("enrich-b", "totals")}

    # Run again for real: the channels are appended anew after the failed run's copies and
    # totals resumes there, so those copies are read by nobody.
    result = restore_pipeline(store, first, bootstrap)
    assert result.resume == after and result.channel_records == grew
    drain("after-failed-restore")
    assert totals(spark, ck["totals"]) == expected, (seed, "restored after a failed restore")

    # The second cut restored in place in one go: exact too.
    second = cuts[1]
    result = restore_pipeline(store, second, bootstrap)
    assert result.channel_records == {c.range.topic: c.records for c in second.channels}
    drain("in-place")
    assert totals(spark, ck["totals"]) == expected, (seed, "restored in place")
