"""Replication between real S3 endpoints (the stack's `primary` and `dr` moto regions, and
s3proxy) and local stores: a snapshot of a real stream replicated to the DR region restores
to exactly Spark's state at its batch; replicating again copies nothing and after one more
batch only what it wrote; a corrupt source blob stops the copy naming the file, with nothing
published; a replication SIGKILLed mid-copy leaves nothing listed and the next run finishes
it; local to S3 to local (large blobs in parts); one endpoint copies server-side."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.store import PART_SIZE
from airflow_provider_streamstate.engine.catalog.snapshots import resolve_snapshot
from airflow_provider_streamstate.engine.catalog.verify import verify_snapshots
from airflow_provider_streamstate.engine.core.errors import CorruptionError
from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from airflow_provider_streamstate.engine.stores.base import blob_key
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
from tests.streams import account_state, run_to_end, use_state_store
from tests.unit.fake_checkpoint import make_checkpoint, store_dirs, write

pytestmark = pytest.mark.integration
STREAMSTATE = str(Path(sys.executable).parent / "streamstate")
FIRST = GeneratorSpec(seed=77, accounts=40, events=600, duplicate_rate=0.05)


def cli(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([STREAMSTATE, *args], capture_output=True, text=True, env={**os.environ, **env})
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def stream(stack, spark, tmp_path_factory) -> tuple[str, str]:
    """(topic, checkpoint): a finished `accounts` query over one generator round."""
    topic = f"repl-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    use_state_store(spark, "rocksdb-changelog")
    produce(stack.kafka_bootstrap, topic, FIRST)
    path = str(tmp_path_factory.mktemp("repl") / "ckpt")
    run_to_end(spark, stack.kafka_bootstrap, topic, path)
    return topic, path


def objects(store, under: str = "blobs/") -> dict[str, int]:  # noqa: ANN001
    """Key (below the store's prefix) -> size, of what an S3 store holds under `under`."""
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=f"{store.prefix}/{under}")
    return {o["Key"][len(store.prefix) + 1 :]: o["Size"] for p in pages for o in p.get("Contents", [])}


@pytest.mark.parametrize("region", ["dr", pytest.param("s3proxy", marks=pytest.mark.s3proxy)])
def test_a_snapshot_replicated_to_another_region_restores_to_sparks_state_and_a_second_run_copies_nothing(
    stack, spark, stream, make_store, tmp_path, region
) -> None:
    _, checkpoint = stream
    src, src_url, src_env = make_store("s3")
    dst, dst_url, dst_env = make_store(region)
    snap = create_snapshot(checkpoint, src, "accounts").manifest
    # Two clients: the source from the AWS_* environment, the destination at its own endpoint.
    args = ["replicate", "--from", src_url, "--to", dst_url, "--to-endpoint-url", stack.s3[region]["endpoint_url"],
            "--stream", "accounts", "--json"]
    first = json.loads(cli(*args, env=src_env).stdout)
    [one] = first["snapshots"]
    assert one["snapshot_id"] == snap.snapshot_id and not one["already_present"]
    assert (one["blobs_copied"], one["bytes_copied"]) == (len(snap.blobs), sum(snap.blobs.values()))
    assert first["bytes_copied"] == one["bytes_copied"] and not first["server_side_copy"]
    assert 0 < one["lag_seconds"] < 300
    assert dst.get_manifest("accounts", snap.snapshot_id) == src.get_manifest("accounts", snap.snapshot_id)

    target = tmp_path / "from-dr"
    restore_snapshot(dst, "accounts", snap.snapshot_id, target)
    assert account_state(spark, str(target), snap.batch_id) == account_state(spark, checkpoint, snap.batch_id)
    assert verify_snapshots(dst, "accounts").ok

    again = json.loads(cli(*args, env=src_env).stdout)
    assert (again["bytes_copied"], again["blobs_copied"], again["snapshots"][0]["already_present"]) == (0, 0, True)
    assert again["bytes_skipped"] == one["bytes_copied"]
    listed = json.loads(cli("snapshot", "list", "--store", dst_url, "--stream", "accounts", "--json", env=dst_env).stdout)
    assert [(s["snapshot_id"], s["origin"]) for s in listed] == [(snap.snapshot_id, src_url)]
    text = cli("snapshot", "list", "--store", dst_url, "--stream", "accounts", env=dst_env).stdout
    assert "ORIGIN" in text and src_url in text


def test_after_one_more_batch_replication_copies_only_the_bytes_it_wrote(stack, spark, stream, make_store, tmp_path) -> None:
    topic, shared = stream
    checkpoint = str(tmp_path / "ckpt")
    shutil.copytree(shared, checkpoint)
    src, _, _ = make_store("s3")
    dst, _, _ = make_store("dr")
    first = create_snapshot(checkpoint, src, "accounts")
    assert replicate(src, dst, "accounts").bytes_copied == first.bytes_uploaded
    produce(stack.kafka_bootstrap, topic, FIRST.next_round())
    run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint)
    second = create_snapshot(checkpoint, src, "accounts")
    assert second.manifest.batch_id > first.manifest.batch_id
    result = replicate(src, dst, "accounts", all_missing=True)
    assert [s.snapshot_id for s in result.snapshots] == [second.manifest.snapshot_id]
    assert result.bytes_copied == second.bytes_uploaded  # bytes new in the source = bytes copied
    assert result.bytes_skipped == sum(second.manifest.blobs.values()) - second.bytes_uploaded
    target = tmp_path / "from-dr"
    restore_snapshot(dst, "accounts", "latest", target)
    batch = second.manifest.batch_id
    assert account_state(spark, str(target), batch) == account_state(spark, checkpoint, batch)


def test_a_corrupt_source_blob_stops_the_copy_names_the_file_and_publishes_nothing(stack, stream, make_store) -> None:
    _, checkpoint = stream
    src, src_url, src_env = make_store("s3")
    dst, dst_url, _ = make_store("dr")
    m = create_snapshot(checkpoint, src, "accounts").manifest
    victim = max(m.files, key=lambda f: (f.path.endswith(".changelog"), f.size))
    src.client.put_object(Bucket=src.bucket, Key=f"{src.prefix}/{blob_key(victim.sha256)}", Body=b"bit rot")
    proc = cli("replicate", "--from", src_url, "--to", dst_url, "--to-endpoint-url", stack.s3["dr"]["endpoint_url"],
               "--stream", "accounts", m.snapshot_id, env=src_env, check=False)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert victim.sha256 in line and victim.path in line and "nothing was published" in line
    assert dst.list_snapshot_ids("accounts") == []
    assert blob_key(victim.sha256) not in objects(dst)
    assert objects(dst, "streams/") == {}


def synthetic(root: Path, *, files: int, size: int, big: int = 0) -> Path:
    """A checkpoint whose state files hold `files` x `size` random bytes (plus one of `big`)."""
    versions = -(-files // 4)  # 4 stores; the cut at the last batch needs each one's deltas 1..versions
    ckpt = make_checkpoint(root, batches=versions, partitions=4)
    for d in store_dirs(ckpt):
        for v in range(1, versions + 1):
            write(d / f"{v}.delta", os.urandom(size))
    if big:
        write(store_dirs(ckpt)[0] / "2.snapshot", os.urandom(big))
    return ckpt


def test_a_replication_killed_mid_copy_leaves_nothing_listed_and_the_next_run_finishes_it(
    stack, make_store, tmp_path
) -> None:
    ckpt = synthetic(tmp_path / "ckpt", files=80, size=1_500_000)
    src, src_url, src_env = make_store("s3")
    dst, dst_url, _ = make_store("dr")
    m = create_snapshot(str(ckpt), src, "big", parallelism=4).manifest
    assert sum(m.blobs.values()) >= 80 * 1_500_000
    args = ["replicate", "--from", src_url, "--to", dst_url, "--to-endpoint-url", stack.s3["dr"]["endpoint_url"],
            "--stream", "big", "--parallelism", "2", "--json"]
    proc = subprocess.Popen([STREAMSTATE, *args], env={**os.environ, **src_env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(objects(dst)) < 4:
            assert proc.poll() is None, "the replication ended before it could be killed"
            assert time.monotonic() < deadline, "no blob arrived at dr"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.5)  # let the endpoint drop the requests that were cut
    assert dst.list_snapshot_ids("big") == []
    orphans = {k.rsplit("/", 1)[-1]: size for k, size in objects(dst).items()}
    assert 4 <= len(orphans) < len(m.blobs)

    rerun = json.loads(cli(*args, env=src_env).stdout)
    [one] = rerun["snapshots"]
    assert one["blobs_refreshed"] == len(orphans)  # nobody vouches for them: refreshed, not trusted blindly
    assert one["bytes_copied"] == sum(m.blobs.values()) - sum(orphans.values())  # only what was missing
    assert dst.get_manifest("big", m.snapshot_id) == src.get_manifest("big", m.snapshot_id)
    assert verify_snapshots(dst, "big").ok


@pytest.mark.parametrize("region", ["dr", pytest.param("s3proxy", marks=pytest.mark.s3proxy)])
def test_local_to_s3_and_back_to_local_with_a_blob_larger_than_a_part(make_store, tmp_path, region) -> None:
    ckpt = synthetic(tmp_path / "ckpt", files=12, size=50_000, big=PART_SIZE + 300_000)
    local, _, _ = make_store("local")
    remote, _, _ = make_store(region)
    back = LocalStore(tmp_path / "back")
    m = create_snapshot(str(ckpt), local, "x").manifest
    assert len([f for f in m.files if f.path.endswith(".delta")]) >= 8
    up = replicate(local, remote, "x")
    assert up.bytes_copied == sum(m.blobs.values())
    down = replicate(remote, back, "x")
    assert down.bytes_copied == sum(m.blobs.values())
    assert back.get_manifest("x", m.snapshot_id) == local.get_manifest("x", m.snapshot_id)
    assert verify_snapshots(remote, "x").ok and verify_snapshots(back, "x").ok
    restored = tmp_path / "restored"
    restore_snapshot(back, "x", m.snapshot_id, restored)
    assert all((restored / f.path).read_bytes() == (ckpt / f.path).read_bytes() for f in m.files)

    # A damaged large blob is refused by the multipart path too: no object, no upload left over.
    big = next(f for f in m.files if f.size > PART_SIZE)
    path = local.root / blob_key(big.sha256)
    data = bytearray(path.read_bytes())
    data[PART_SIZE + 10] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh, _, _ = make_store(region)
    with pytest.raises(CorruptionError, match=f"{big.sha256}.*{big.path}"):
        replicate(local, fresh, "x")
    assert fresh.list_snapshot_ids("x") == [] and blob_key(big.sha256) not in objects(fresh)
    uploads = fresh.client.list_multipart_uploads(Bucket=fresh.bucket, Prefix=fresh.prefix).get("Uploads", [])
    assert uploads == []


def test_on_one_endpoint_blobs_are_copied_server_side_and_verified(make_store, tmp_path) -> None:
    ckpt = synthetic(tmp_path / "ckpt", files=10, size=40_000)
    src, _, _ = make_store("s3")
    dst, _, _ = make_store("s3")  # another prefix, another client, same endpoint and credentials
    m = create_snapshot(str(ckpt), src, "x").manifest
    result = replicate(src, dst, "x")
    assert result.server_side_copy and result.bytes_copied == sum(m.blobs.values())
    assert verify_snapshots(dst, "x").ok
    assert resolve_snapshot(dst, "x", "latest").snapshot_id == m.snapshot_id

    victim = m.files[0]
    src.client.put_object(Bucket=src.bucket, Key=f"{src.prefix}/{blob_key(victim.sha256)}", Body=b"bit rot")
    fresh, _, _ = make_store("s3")
    with pytest.raises(CorruptionError, match=f"{victim.sha256} is corrupt in the source.*{victim.path}"):
        replicate(src, fresh, "x")
    assert fresh.list_snapshot_ids("x") == []
    assert blob_key(victim.sha256) not in objects(fresh)  # the bad copy was deleted at once


def test_a_blob_three_parts_large_streams_s3_to_s3_in_less_memory_than_two_parts(make_store) -> None:
    import hashlib
    import io
    import tracemalloc

    src, _, _ = make_store("s3")
    dst, _, _ = make_store("dr")
    data = os.urandom(3 * PART_SIZE + 4321)
    digest = hashlib.sha256(data).hexdigest()
    assert src.put_blob_stream(digest, io.BytesIO(data), len(data)) == len(data)
    del data
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        with src.open_blob(digest) as body:  # what replication does for each blob
            assert dst.put_blob_stream(digest, body, 3 * PART_SIZE + 4321) == 3 * PART_SIZE + 4321
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert peak < 2 * PART_SIZE, f"peak {peak / 2**20:.1f} MiB"
    with dst.open_blob(digest) as f:
        from airflow_provider_streamstate.engine.core.digest import sha256_stream

        assert sha256_stream(f) == (digest, 3 * PART_SIZE + 4321)


def test_each_side_of_the_cli_takes_its_client_from_its_own_options(stack, make_store, tmp_path) -> None:
    ckpt = synthetic(tmp_path / "ckpt", files=8, size=10_000)
    local, local_url, _ = make_store("local")
    dst, dst_url, _ = make_store("dr")
    sid = create_snapshot(str(ckpt), local, "x").manifest.snapshot_id
    # No AWS_* variables at all: the destination's endpoint and credentials come from an Airflow connection.
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {**bare, **stack.airflow_conn_env("dr", "s3_dr_cli")}
    proc = subprocess.run([STREAMSTATE, "replicate", "--from", local_url, "--to", dst_url, "--to-storage-conn-id", "s3_dr_cli",
                           "--stream", "x", "--json"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [s["snapshot_id"] for s in json.loads(proc.stdout)["snapshots"]] == [sid]
    assert dst.list_snapshot_ids("x") == [sid]
    mistakes = {
        ("--to-endpoint-url", "http://127.0.0.1:9", "--to", local_url + "-copy"): "applies only to s3:// stores",
        ("--to", dst_url, "--to-storage-conn-id", "c", "--to-region", "eu-west-1"): "both configure the same client",
        ("--to", dst_url, "--all", "--since", sid): "choose the snapshots one way",
    }
    for args, words in mistakes.items():
        proc = subprocess.run([STREAMSTATE, "replicate", "--from", local_url, "--stream", "x", *args],
                              capture_output=True, text=True, env=env)
        assert (proc.returncode, proc.stdout) == (2, ""), (args, proc.stderr)
        [line] = proc.stderr.strip().splitlines()
        assert words in line, line
