"""A warm standby in the DR region, against the real stream, stores and brokers.

Kept current while the primary stream runs and snapshots (each update racing the next
snapshot and its replication), every update writes only the files its snapshot changed and
leaves a standby that verifies byte for byte without reading a file; a failover then writes
only the offset files, and the standby is then what a failover restoring that snapshot
writes, object for object. A stale standby, and one corrupted by hand, are not used: the snapshot is
restored over them, the report says why, and the stream resumes exactly. On HDFS the same
update, verification and promotion hold. The real MirrorMaker 2 failover from a standby,
through the DR failover DAG, is in test_dr_drill.py.

The "DR cluster" is the shared stack's broker under other topic names, fed by a faithful
copier (test_failover_translation.py's `mirror`), as in the other failover tests here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.engine.checkpoint.filesystems import open_checkpoint_fs
from airflow_provider_streamstate.engine.checkpoint.sidecar import refuse_unfinished_restore
from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError
from airflow_provider_streamstate.engine.dr.failover import DrRewrite, TopicMap, failover
from airflow_provider_streamstate.engine.dr.standby import (
    check_standby,
    promote_standby,
    read_standby,
    update_standby,
)
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.restore import rewritten_files
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.generator import (
    GeneratorSpec,
    ensure_topic,
    expected_aggregates,
)
from tests.integration.test_failover_translation import mirror, produce_into
from tests.s3 import s3_client
from tests.streams import (
    account_state,
    heartbeat_query,
    run_to_end,
    snapshots_while_producing,
    use_state_store,
)

pytestmark = [pytest.mark.integration, pytest.mark.hdfs]


def failover_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "failover", *args],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def changed_files(older: Any, newer: Any) -> set[str]:
    """Paths whose bytes differ between two manifests, or new in `newer`."""
    before = {e.path: e.sha256 for e in older.files} if older is not None else {}
    return {e.path for e in newer.files if before.get(e.path) != e.sha256}


def test_a_standby_kept_current_while_the_primary_snapshots_is_promoted_writing_only_its_offsets(
    stack, spark, tmp_path: Path, make_store
) -> None:
    """On S3 (the DR store and the standby on the DR region's endpoint)."""
    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=2)
    first = GeneratorSpec(seed=91, accounts=12, events=150)
    second, third = first.next_round(150), first.next_round(150).next_round(60)
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1])
    checkpoint = str(tmp_path / "ckpt")
    primary = LocalStore(tmp_path / "primary-store", fsync=False)
    dr_store, dr_url, dr_env = make_store("dr")
    bucket = stack.s3["dr"]["bucket"]
    prefix = f"standby/{uuid.uuid4().hex[:10]}/accounts"
    standby = f"s3a://{bucket}/{prefix}"  # reached with the DR store's own client (same endpoint)

    # The primary runs and snapshots; each snapshot is replicated to DR, and the standby is
    # updated to it while the stream goes on and the next snapshot is taken and replicated.
    updates: list[tuple[Any, Any, Any]] = []  # (update, its snapshot's manifest, the check right after it)
    failures: list[BaseException] = []
    updater: list[threading.Thread] = []

    def update_to(manifest: Any) -> None:
        try:
            up = update_standby(dr_store, "accounts", standby, snapshot=manifest.snapshot_id, parallelism=4)
            fs = open_checkpoint_fs(standby, connection=dr_store.checkpoint_connection(standby))
            updates.append((up, manifest, check_standby(dr_store, "accounts", fs, manifest.snapshot_id)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    def take() -> Any:
        snap = create_snapshot(checkpoint, primary, "accounts", parallelism=4)
        replicate(primary, dr_store, "accounts", snapshots=[snap.manifest.snapshot_id], parallelism=4)
        if updater:
            updater[-1].join(120)
        updater.append(threading.Thread(target=update_to, args=(snap.manifest,)))
        updater[-1].start()
        return snap

    with heartbeat_query(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets_per_trigger=75) as (query, _):
        producer = threading.Thread(target=lambda: produce_into(stack.kafka_bootstrap, topic, second, [0, 1]))
        taken = snapshots_while_producing(query, producer, take, at_least=3)
        query.processAllAvailable()
    updater[-1].join(120)
    assert failures == [] and len(updates) == len(taken) >= 3
    previous = None
    for up, manifest, check in updates:
        assert (up.snapshot_id, up.previous_snapshot_id) == (manifest.snapshot_id, previous and previous.snapshot_id)
        assert up.files_written == len(changed_files(previous, manifest)), up  # only what the batch changed
        assert up.files_removed == len({e.path for e in (previous.files if previous else [])}
                                       - {e.path for e in manifest.files})
        assert check.usable and check.files == len(manifest.files) and check.files_read == 0, check
        previous = manifest

    # The primary's last snapshot, anchored, reaches DR and the standby; then the region is lost.
    last = create_snapshot(checkpoint, primary, "accounts", kafka_bootstrap=stack.kafka_bootstrap).manifest
    replicate(primary, dr_store, "accounts", snapshots=[last.snapshot_id])
    up = update_standby(dr_store, "accounts", standby)
    assert up.snapshot_id == last.snapshot_id
    fs = open_checkpoint_fs(standby, connection=s3_client(stack, "dr"))
    with pytest.raises(UnsupportedCheckpointError, match="warm standby"):
        refuse_unfinished_restore(fs)  # never started before a failover
    mirror(stack.kafka_bootstrap, topic, dr_topic, 2)
    behind = produce_into(stack.kafka_bootstrap, dr_topic, third, partitions=[0, 1])
    client = s3_client(stack, "dr")

    def etags() -> dict[str, str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        return {o["Key"][len(prefix) + 1:]: o["ETag"] for p in pages for o in p.get("Contents", [])
                if not o["Key"][len(prefix) + 1:].startswith("_streamstate/")}

    before = etags()
    out = failover_cli("--store", dr_url, "--stream", "accounts", "--standby", standby, "--kafka-bootstrap",
                       stack.kafka_bootstrap, "--topic-map", f"{topic}={dr_topic}", "--json", env=dr_env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["snapshot_id"] == last.snapshot_id and result["target"] == standby
    assert result["standby"]["used"] is True and result["standby"]["files_read"] == 0
    assert result["events_behind"] == behind and result["seconds_restore"] == 0.0
    after = etags()
    written = {rel for rel in after if after[rel] != before.get(rel)}
    assert written and all(rel.startswith(("offsets/", "sources/")) for rel in written), written  # offsets only
    assert set(after) == set(before)
    assert {r for r in written if not r.rsplit("/", 1)[-1].startswith(".")} == set(result["rewritten"])
    record = read_standby(fs)
    assert record is not None and (record.status, record.promoted_via) == ("promoted", "standby")
    refuse_unfinished_restore(fs)  # a normal checkpoint now

    # Byte for byte what a failover restoring the same snapshot writes (which test_failover_translation
    # resumes through S3A): the state as the primary left it, the offsets of the DR topic.
    restored = f"s3a://{bucket}/{prefix}-restored"
    failover(dr_store, "accounts", restored, stack.kafka_bootstrap, topic_map=TopicMap.parse([f"{topic}={dr_topic}"]))
    assert objects(client, bucket, prefix + "-restored") == objects(client, bucket, prefix)
    offsets = client.get_object(Bucket=bucket, Key=f"{prefix}/offsets/{last.batch_id}")["Body"].read().decode()
    assert dr_topic in offsets and f'"{topic}"' not in offsets


def objects(client: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    """The checkpoint's objects below `prefix` (our records beside it left out), by relative key."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            rel = o["Key"][len(prefix) + 1:]
            if not rel.startswith("_streamstate/"):
                out[rel] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def test_a_stale_standby_and_one_corrupted_by_hand_are_restored_over_and_the_report_says_why(
    stack, spark, tmp_path: Path
) -> None:
    use_state_store(spark, "hdfs")
    topic, dr_topic = f"t-{uuid.uuid4().hex[:10]}", f"dr-{uuid.uuid4().hex[:10]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=2)
    ensure_topic(stack.kafka_bootstrap, dr_topic, partitions=2)
    first = GeneratorSpec(seed=92, accounts=9, events=160)
    second, third = first.next_round(120), first.next_round(120).next_round(60)
    store = LocalStore(tmp_path / "store", fsync=False)
    checkpoint = str(tmp_path / "ckpt")
    produce_into(stack.kafka_bootstrap, topic, first, partitions=[0, 1])
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=60)
    a = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=stack.kafka_bootstrap).manifest
    stale = tmp_path / "stale"
    update_standby(store, "accounts", stale)  # then its updates stopped
    produce_into(stack.kafka_bootstrap, topic, second, partitions=[0, 1])
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=60)
    b = create_snapshot(checkpoint, store, "accounts", kafka_bootstrap=stack.kafka_bootstrap).manifest
    corrupt = tmp_path / "corrupt"
    update_standby(store, "accounts", corrupt)
    victim = max((e for e in b.files if e.path.startswith("state/")), key=lambda e: e.size).path
    path = corrupt / victim
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20  # one bit, same size, and the mtime put back
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    mirror(stack.kafka_bootstrap, topic, dr_topic, 2)
    behind = produce_into(stack.kafka_bootstrap, dr_topic, third, partitions=[0, 1])

    common = ["--store", str(tmp_path / "store"), "--stream", "accounts", "--kafka-bootstrap", stack.kafka_bootstrap,
              "--topic-map", f"{topic}={dr_topic}"]
    out = failover_cli(*common, "--standby", str(stale), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["snapshot_id"] == b.snapshot_id and result["events_behind"] == behind
    assert result["standby"]["used"] is False
    assert result["standby"]["reason"] == (
        f"stale: it holds {a.snapshot_id} (batch {a.batch_id}), the failover chose {b.snapshot_id}")
    assert result["seconds_restore"] > 0

    out = failover_cli(*common, "--standby", str(corrupt), "--target", str(corrupt))  # the text report
    assert out.returncode == 0, out.stderr
    assert f"the warm standby was not used (verification failed: {victim}: read " in out.stdout
    assert "the snapshot was restored over it" in out.stdout
    for location, why in ((stale, "stale: "), (corrupt, f"verification failed: {victim}")):
        record = read_standby(open_checkpoint_fs(str(location)))
        assert record is not None and (record.status, record.promoted_via) == ("promoted", "restore")
        assert record.snapshot_id == b.snapshot_id and (record.note or "").startswith(why)

    def data_files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and not p.relative_to(root).as_posix().startswith("_streamstate/")}

    assert data_files(corrupt) == data_files(stale)  # both: b, restored for DR, the damage gone
    resumed = run_to_end(spark, stack.kafka_bootstrap, dr_topic, str(corrupt), max_offsets=60)
    assert resumed > b.batch_id
    assert account_state(spark, str(corrupt)) == expected_aggregates([first, second, third])


def test_a_standby_in_hdfs_is_updated_incrementally_verified_and_promoted(tmp_path: Path, hdfs, monkeypatch) -> None:
    from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write
    from tests.unit.test_failover_rewrite import translation

    for key, value in hdfs.env().items():
        monkeypatch.setenv(key, value)
    root = make_checkpoint(tmp_path / "ck", batches=3)
    for d in store_dirs(root):
        for v in range(1, 4):
            write(d / f"{v}.delta", os.urandom(3000))
    store = LocalStore(tmp_path / "store", fsync=False)
    a = create_snapshot(str(root), store, "s").manifest
    location = hdfs.url(f"/standby/{uuid.uuid4().hex[:10]}/s")
    assert update_standby(store, "s", location).files_written == len(a.files)
    write(root / "offsets/3", (root / "offsets/2").read_text())  # one more batch; maintenance
    write(root / "commits/3", (root / "commits/2").read_text())  # replaced deltas 1-3 by a snapshot
    for d in store_dirs(root):
        write(d / "4.delta", os.urandom(500))
        write(d / "3.snapshot", os.urandom(4000))
        for v in range(1, 4):
            (d / f"{v}.delta").unlink()
    b = create_snapshot(str(root), store, "s").manifest
    up = update_standby(store, "s", location)
    assert (up.files_written, up.files_removed) == (len(changed_files(a, b)), 6)
    fs = open_checkpoint_fs(location)
    check = check_standby(store, "s", fs, b.snapshot_id)
    assert check.usable and check.files_read == 0 and check.files_trusted == len(b.files)

    victim = "state/0/1/4.delta"  # written again by hand: same size, another inode
    data = bytearray(fs.read_bytes(victim))
    data[0] ^= 1
    fs.client.create(fs.path(victim), bytes(data), overwrite=True)  # type: ignore[attr-defined]
    check = check_standby(store, "s", open_checkpoint_fs(location), b.snapshot_id)
    assert not check.usable and (check.reason or "").startswith(f"verification failed: {victim}: read 500 bytes")
    assert update_standby(store, "s", location).files_written == 1  # the next update repairs it

    fs = open_checkpoint_fs(location)
    rewritten = rewritten_files(store, b.files, DrRewrite(translation()))
    assert check_standby(store, "s", fs, b.snapshot_id, skip=frozenset(rewritten)).usable
    promote_standby(store, b, fs, rewritten)
    refuse_unfinished_restore(fs)
    offsets = open_checkpoint_fs(location).read_bytes("offsets/3").decode()
    assert json.loads(offsets.split("\n")[2]) == {"primary.tx": {"0": 27, "1": 51}}
    assert read_standby(fs).status == "promoted"  # type: ignore[union-attr]
