"""Failover onto a real MirrorMaker 2 mirror is exact: the stream resumes in the DR cluster
with the batch after the snapshot's, and its final state counts every mirrored event once.

The run's region pair of each policy (a primary broker of its own, a DR broker and MM2;
tests/integration/conftest.py), and a private pair for the test that stops its mirror. The primary's producer is transactional: its commit markers
take offsets the mirror does not copy, so DR offsets differ from primary offsets and a copied
offset would skip or re-read records."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
    messages,
)
from dev import stack as stack_mod
from tests.dr_regions import end_offsets, produce_transactionally, wait_mirrored
from tests.streams import account_state, run_to_end, use_state_store

pytestmark = [pytest.mark.integration, pytest.mark.dr_regions]


def failover_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("regions", ["default", "identity"], indirect=True)
def test_a_failed_over_stream_resumes_with_the_next_batch_and_counts_every_mirrored_event_once(
    regions, spark, tmp_path
) -> None:
    primary, dr = regions
    use_state_store(spark, "hdfs")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    first = GeneratorSpec(seed=71, accounts=12, events=300, duplicate_rate=0.05)
    second = first.next_round(200)
    sent = produce_transactionally(primary.kafka_bootstrap, topic, first)
    primary_ends = end_offsets(primary.kafka_bootstrap, topic, 3)
    assert sum(primary_ends.values()) > sent  # the commit markers take offsets

    checkpoint = str(tmp_path / "ckpt")
    batch = run_to_end(spark, primary.kafka_bootstrap, topic, checkpoint, max_offsets=120)
    store = LocalStore(tmp_path / "dr-store", fsync=False)
    snap = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=primary.kafka_bootstrap)
    assert snap.manifest.batch_id == batch and not snap.anchor_problems

    # The primary goes on after the last snapshot; the mirror has it all before the failover.
    sent += produce_transactionally(primary.kafka_bootstrap, topic, second)
    wait_mirrored(dr, topic, sent)

    target = tmp_path / "dr-ckpt"
    policy = ["--replication-policy", dr.policy] + (["--source-alias", dr.source_alias] if dr.policy == "default" else [])
    out = failover_cli("--store", str(tmp_path / "dr-store"), "--stream", "accounts", "--target", str(target),
                       "--kafka-bootstrap", dr.bootstrap, *policy, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["snapshot_id"] == snap.manifest.snapshot_id and result["batch_id"] == batch
    assert result["skipped_snapshots"] == []
    assert {p["dr_topic"] for p in result["translated"]} == {dr.dr_topic(topic)}
    assert result["events_behind"] == sum(1 for _ in messages(second))  # all the primary wrote after the cut
    # Translated, not copied: the DR offsets are not the primary's wherever a marker preceded.
    assert any(p["dr_offset"] != p["primary_offset"] for p in result["translated"])

    last = run_to_end(spark, dr.bootstrap, dr.dr_topic(topic), str(target), max_offsets=120)
    assert last > batch
    resumed = sorted(int(p.name) for p in (target / "commits").iterdir() if p.name.isdigit() and int(p.name) > batch)
    assert resumed == list(range(batch + 1, last + 1))  # batch N+1 first, no gap
    offsets = json.loads((target / "offsets" / str(batch + 1)).read_text().splitlines()[-1])
    assert set(offsets) == {dr.dr_topic(topic)}
    assert account_state(spark, str(target)) == expected_aggregates([first, second])


@pytest.mark.parametrize("private_regions", ["default"], indirect=True)
def test_a_snapshot_the_mirror_has_not_caught_up_with_is_skipped_for_an_older_one(private_regions, spark,
                                                                                  tmp_path) -> None:
    primary, dr = private_regions
    use_state_store(spark, "hdfs")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
    first = GeneratorSpec(seed=72, accounts=8, events=150)
    second = first.next_round(150)
    produce_transactionally(primary.kafka_bootstrap, topic, first)
    checkpoint = str(tmp_path / "ckpt")
    store = LocalStore(tmp_path / "store", fsync=False)
    batch_a = run_to_end(spark, primary.kafka_bootstrap, topic, checkpoint)
    a = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=primary.kafka_bootstrap).manifest
    wait_mirrored(dr, topic, sum(1 for _ in messages(first)))

    stack_mod.stop_part(dr.state_dir, stack_mod.MM2_PART)  # the mirror falls behind
    produce_transactionally(primary.kafka_bootstrap, topic, second)
    run_to_end(spark, primary.kafka_bootstrap, topic, checkpoint)
    b = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=primary.kafka_bootstrap).manifest
    assert b.batch_id > batch_a

    target = tmp_path / "dr-ckpt"
    out = failover_cli("--store", str(tmp_path / "store"), "--stream", "accounts", "--target", str(target),
                       "--kafka-bootstrap", dr.bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["snapshot_id"] == a.snapshot_id
    [skipped] = result["skipped_snapshots"]
    assert skipped["snapshot_id"] == b.snapshot_id and "has not reached" in skipped["reason"]
    # Resuming from the older snapshot reads exactly what the mirror holds after it.
    assert account_state(spark, str(target), a.batch_id) == account_state(spark, checkpoint, a.batch_id)

    # Naming the newer one explicitly is refused in one line, and nothing is written.
    other = tmp_path / "dr-ckpt-2"
    out = failover_cli("--store", str(tmp_path / "store"), "--stream", "accounts", b.snapshot_id, "--target",
                       str(other), "--kafka-bootstrap", dr.bootstrap)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "has not reached" in out.stderr and not Path(other).exists()
