"""A real stream whose checkpoint is in S3 (`s3a://` on the stack's moto endpoint, written by
Spark's own S3A connector): its snapshots, taken while it runs, restore to exactly Spark's
state at their batch; a restore onto another S3 location resumes with batch N+1 and ends in
the same state as the uninterrupted run."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace

import pytest

from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, expected_aggregates, produce
from tests.s3 import s3_client
from tests.streams import account_state, oracle_state, use_state_store

pytestmark = pytest.mark.integration


@pytest.fixture
def s3a(stack, spark):  # noqa: ANN001, ANN201
    """The shared session's S3A settings pointed at the primary S3 region (set before a
    query starts, they reach its state stores)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    # Hadoop caches one S3AFileSystem per bucket with the settings it was first made with:
    # the stack's two regions share the bucket name, so a cached one may point at the other.
    hadoop.set("fs.s3a.impl.disable.cache", "true")
    for key, value in stack.s3a_conf("primary").items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    return f"s3a://{stack.s3['primary']['bucket']}/tests/{uuid.uuid4().hex[:10]}"


@pytest.mark.usefixtures("spark_default_checkpoint_manager")
def test_a_stream_checkpointing_to_s3_snapshots_restores_exactly_and_a_restored_s3_copy_resumes(
    stack, spark, topic, tmp_path, make_store, s3a
) -> None:
    use_state_store(spark, "hdfs")
    store, _, _ = make_store("s3")  # the same endpoint as the checkpoint: blobs copied server-side
    checkpoint = f"{s3a}/ckpt"
    first = GeneratorSpec(seed=11, accounts=30, events=240, duplicate_rate=0.05)
    specs = [first, first.next_round()]
    produce(stack.kafka_bootstrap, topic, specs[0])
    args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="processing:1 second", max_offsets_per_trigger=80)
    query = start_query(spark, args)
    try:  # a failure must not leave the query running in the shared session
        producer = threading.Thread(target=lambda: produce(stack.kafka_bootstrap, topic, specs[1], rate=60))
        producer.start()
        snapshots = []
        deadline = time.monotonic() + 300
        while (producer.is_alive() or len(snapshots) < 3) and time.monotonic() < deadline:
            progress = query.lastProgress
            if progress and (not snapshots or progress["batchId"] > snapshots[-1].manifest.batch_id):
                snapshots.append(create_snapshot(checkpoint, store, "accounts", parallelism=4))
            time.sleep(1.0)
        producer.join()
        query.processAllAvailable()
        assert query.exception() is None
        final = account_state(spark, checkpoint)
    finally:
        query.stop()
    assert final == expected_aggregates(specs)

    batches = [s.manifest.batch_id for s in snapshots]
    assert len(set(batches)) >= 2, batches
    assert snapshots[0].manifest.checkpoint == checkpoint
    for i, snap in enumerate(snapshots):
        m = snap.manifest
        target = tmp_path / f"restore-{i}"
        restore_snapshot(store, "accounts", m.snapshot_id, target)
        restored = account_state(spark, str(target), m.batch_id)
        assert restored == account_state(spark, checkpoint, m.batch_id)
        assert restored == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)
        assert not (target / "offsets" / str(m.batch_id + 1)).exists()

    # The earliest snapshot cloned onto another S3 location: Spark resumes there with batch
    # N+1 and, over the same input, ends in the uninterrupted run's state.
    earliest = snapshots[0].manifest
    clone_at = f"{s3a}/clone"
    result = restore_snapshot(store, "accounts", earliest.snapshot_id, clone_at, new_query_id=True)
    assert result.target == clone_at
    resumed = start_query(spark, replace(args, checkpoint=clone_at, alerts_topic=f"{topic}-alerts-clone",
                                         trigger="available-now"))
    try:
        resumed.awaitTermination(240)
    finally:
        resumed.stop()
    assert resumed.exception() is None
    assert resumed.recentProgress[0]["batchId"] == earliest.batch_id + 1
    assert account_state(spark, clone_at) == final


def test_a_restore_onto_a_used_s3_checkpoint_is_refused_without_force(stack, make_store, tmp_path) -> None:
    store, _, _ = make_store("s3")
    client = s3_client(stack)
    bucket = stack.s3["primary"]["bucket"]
    prefix = f"tests/{uuid.uuid4().hex[:10]}/used"
    client.put_object(Bucket=bucket, Key=f"{prefix}/offsets/0", Body=b"v1\n{}")
    from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

    root = make_checkpoint(tmp_path / "c", batches=1)
    for d in store_dirs(root):
        write(d / "1.delta", f"delta 1 of {d.name}")
    snap = create_snapshot(str(root), store, "orders").manifest
    with pytest.raises(Exception, match="is not empty") as err:
        restore_snapshot(store, "orders", snap.snapshot_id, f"s3a://{bucket}/{prefix}")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("region", ["primary", pytest.param("s3proxy", marks=pytest.mark.s3proxy)])
def test_the_engine_reads_restores_and_copies_checkpoints_on_both_s3_implementations(
    stack, make_store, tmp_path, region
) -> None:
    """moto and s3proxy: conditional reads (IfMatch), CopyObject with CopySourceIfMatch, and a
    restore onto S3 that lands exactly the manifest's bytes."""
    from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

    store, _, _ = make_store("s3" if region == "primary" else region)
    client, bucket = store.client, store.bucket
    root = make_checkpoint(tmp_path / "c", batches=3)
    for d in store_dirs(root):
        for v in (1, 2, 3):
            write(d / f"{v}.delta", f"delta {v} of {d.name}")
    prefix = f"ckpts/{uuid.uuid4().hex[:10]}"
    for p in sorted(root.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/src/{p.relative_to(root).as_posix()}", Body=p.read_bytes())
    url = f"s3a://{bucket}/{prefix}/src"
    snap = create_snapshot(url, store, "orders")
    assert snap.blobs_uploaded > 0 and snap.manifest.checkpoint == url
    assert create_snapshot(url, store, "orders", always=True).files_hashed == 0
    target = f"s3a://{bucket}/{prefix}/restored"
    restore_snapshot(store, "orders", snap.manifest.snapshot_id, target)
    for e in snap.manifest.files:
        body = client.get_object(Bucket=bucket, Key=f"{prefix}/restored/{e.path}")["Body"].read()
        assert body == (root / e.path).read_bytes(), e.path


@pytest.mark.s3proxy
@pytest.mark.usefixtures("spark_default_checkpoint_manager")
def test_a_stream_checkpointing_to_s3proxy_through_s3a_snapshots_and_restores_exactly(
    stack, spark, topic, tmp_path, make_store, s3proxy
) -> None:
    """Spark's S3A on the second S3 implementation: a bucket of its own there, pointed at by
    S3A's per-bucket settings, so the shared session keeps moto for everything else."""
    from tests.streams import run_to_end

    store, _, _ = make_store("s3proxy")
    bucket = f"s3a-{uuid.uuid4().hex[:8]}"
    store.client.create_bucket(Bucket=bucket)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    for key, value in stack.s3a_conf("s3proxy").items():
        hadoop.set(key.removeprefix("spark.hadoop.").replace("fs.s3a.", f"fs.s3a.bucket.{bucket}.", 1), value)
    use_state_store(spark, "hdfs")
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=17, accounts=12, events=150))
    checkpoint = f"s3a://{bucket}/ckpt"
    last = run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=60, heartbeat_s=None)
    snap = create_snapshot(checkpoint, store, "accounts").manifest
    assert snap.batch_id == last
    target = tmp_path / "restored"
    restore_snapshot(store, "accounts", snap.snapshot_id, target)
    assert account_state(spark, str(target), last) == account_state(spark, checkpoint, last)
    assert account_state(spark, str(target), last) == oracle_state(stack.kafka_bootstrap, snap.kafka_offsets)


@pytest.mark.usefixtures("spark_default_checkpoint_manager")
def test_checkpoint_objects_s3a_wrote_with_sha256_checksums_are_snapshotted_without_being_read(
    stack, spark, topic, tmp_path, make_store, s3a
) -> None:
    """With `fs.s3a.create.checksum.algorithm=SHA256` every checkpoint object carries the
    SHA-256 S3 checked when it was written: a snapshot into a store on the same endpoint
    names the new files by it and copies them server side, reading none of their bytes here,
    and the snapshot still restores to exactly Spark's state at its batch."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    hadoop.set("fs.s3a.create.checksum.algorithm", "SHA256")
    try:
        use_state_store(spark, "hdfs")
        store, _, _ = make_store("s3")
        checkpoint = f"{s3a}/ckpt"
        produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=23, accounts=20, events=160))
        args = StreamArgs(stack.kafka_bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                          trigger="processing:1 second", max_offsets_per_trigger=60)
        query = start_query(spark, args)
        try:
            deadline = time.monotonic() + 120
            while (query.lastProgress or {}).get("batchId", -1) < 1 and time.monotonic() < deadline:
                time.sleep(0.5)
            snap = create_snapshot(checkpoint, store, "summed", parallelism=4)
            query.processAllAvailable()
            assert query.exception() is None
        finally:
            query.stop()
    finally:
        hadoop.unset("fs.s3a.create.checksum.algorithm")
    files = len(snap.manifest.files)
    print({"files": files, "from_checksum": snap.files_from_checksum, "hashed": snap.files_hashed,
           "bytes_hashed": snap.bytes_hashed, "bytes_total": snap.manifest.bytes_total})
    assert snap.files_from_checksum + snap.files_hashed == files
    assert snap.files_from_checksum >= files // 2, "most objects S3A wrote carry their SHA-256"
    m = snap.manifest
    target = tmp_path / "restored"
    restore_snapshot(store, "summed", m.snapshot_id, target)  # hashes every blob it writes
    assert account_state(spark, str(target), m.batch_id) == oracle_state(stack.kafka_bootstrap, m.kafka_offsets)
