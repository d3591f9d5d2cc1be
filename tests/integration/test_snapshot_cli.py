"""The `streamstate` CLI contract, crash safety, and refusal of damaged or hostile input."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.manifest import Manifest
from airflow_provider_streamstate.engine.stores.base import blob_key
from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
from tests.streams import account_state, run_to_end, use_state_store

pytestmark = pytest.mark.integration
STREAMSTATE = str(Path(sys.executable).parent / "streamstate")


def cli(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([STREAMSTATE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def checkpoint(stack, spark, tmp_path_factory) -> str:
    """A finished `accounts` checkpoint with many small files (16 partitions, 4+ batches)."""
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=8, accounts=80, events=800))
    use_state_store(spark, "rocksdb-changelog", **{"spark.sql.shuffle.partitions": "16"})
    path = str(tmp_path_factory.mktemp("cli") / "ckpt")
    run_to_end(spark, stack.kafka_bootstrap, topic, path, max_offsets=200)
    use_state_store(spark, "rocksdb-changelog")
    return path


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_cli_create_list_show_restore_verify(checkpoint, make_store, store_kind, tmp_path, spark) -> None:
    _, url, env = make_store(store_kind)
    created = json.loads(cli("snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "s1",
                             "--label", "reason=test", "--label", "owner=ci", "--json", env=env).stdout)
    assert {"snapshot_id", "stream", "batch_id", "files", "bytes_total", "bytes_uploaded", "seconds"} <= set(created)
    assert created["bytes_uploaded"] > 0 and created["files"] > 100

    listed = json.loads(cli("snapshot", "list", "--store", url, "--stream", "s1", "--json", env=env).stdout)
    assert [s["snapshot_id"] for s in listed] == [created["snapshot_id"]]
    assert listed[0]["labels"] == {"reason": "test", "owner": "ci"}

    shown = json.loads(cli("snapshot", "show", "--store", url, "--stream", "s1", created["snapshot_id"], "--json",
                           env=env).stdout)
    assert shown["format"] == "streamstate.manifest/v3" and shown["timeline"] == 1
    assert shown["batch_id"] == created["batch_id"]
    assert sum(shown["kafka_offsets"][next(iter(shown["kafka_offsets"]))].values()) == 800
    people = cli("snapshot", "show", "--store", url, "--stream", "s1", created["snapshot_id"], env=env).stdout
    assert f"resumes with batch {created['batch_id'] + 1}" in people

    target = tmp_path / "restored"
    restored = json.loads(cli("restore", "--store", url, "--stream", "s1", created["snapshot_id"],
                              "--target", str(target), "--new-query-id", "--json", env=env).stdout)
    assert {"snapshot_id", "batch_id", "target", "files", "bytes"} <= set(restored)
    assert restored["files"] == created["files"] and restored["bytes"] == created["bytes_total"]
    assert json.loads((target / "metadata").read_text())["id"] == restored["query_id"] != shown["query_id"]
    assert account_state(spark, str(target), created["batch_id"]) == account_state(spark, checkpoint, created["batch_id"])

    verified = json.loads(cli("verify", "--store", url, "--stream", "s1", "--json", env=env).stdout)
    assert verified["ok"] and verified["blobs_checked"] > 0


def test_cli_errors_are_one_line_with_the_right_exit_code(checkpoint, make_store, tmp_path) -> None:
    _, url, _ = make_store("local")
    cases = [
        (["snapshot", "create", "--store", url], 2, "required"),
        (["snapshot", "create", "--checkpoint", str(tmp_path / "nope"), "--store", url, "--stream", "s"], 1, "does not exist"),
        (["snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "bad name!"], 2, "invalid stream name"),
        (["snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "s", "--batch", "999"], 1, "not a committed batch"),
        (["snapshot", "create", "--checkpoint", checkpoint, "--store", "ftp://x", "--stream", "s"], 2, "unsupported store"),
        (["snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "s", "--label", "x"], 2, "KEY=VALUE"),
        (["restore", "--store", url, "--stream", "s", "000000000001-20260101T000000000000Z", "--target", str(tmp_path / "t")], 1, "no snapshot"),
    ]
    for args, code, words in cases:
        proc = cli(*args, check=False)
        assert proc.returncode == code, (args, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "t").exists()


def test_restore_refuses_a_non_empty_target_unless_forced(checkpoint, make_store, tmp_path) -> None:
    _, url, _ = make_store("local")
    sid = json.loads(cli("snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "s", "--json").stdout)["snapshot_id"]
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("precious")
    proc = cli("restore", "--store", url, "--stream", "s", sid, "--target", str(target), check=False)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert (target / "keep.txt").read_text() == "precious"
    cli("restore", "--store", url, "--stream", "s", sid, "--target", str(target), "--force")
    assert not (target / "keep.txt").exists() and (target / "metadata").exists()
    assert [p.name for p in tmp_path.iterdir() if "streamstate" in p.name] == []


def _blob_count(store_kind: str, store, url: str) -> int:
    if store_kind == "local":
        return sum(1 for _ in (Path(url[len("file://"):]) / "blobs").rglob("*") if _.is_file()) if (Path(url[len("file://"):]) / "blobs").exists() else 0
    page = store.client.list_objects_v2(Bucket=store.bucket, Prefix=f"{store.prefix}/blobs/")
    return int(page.get("KeyCount", 0))


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_snapshot_killed_mid_upload_leaves_no_snapshot(checkpoint, make_store, store_kind) -> None:
    store, url, env = make_store(store_kind)
    proc = subprocess.Popen(
        [STREAMSTATE, "snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "k", "--parallelism", "1"],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while _blob_count(store_kind, store, url) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the snapshot finished before it could be killed"
    assert 3 <= _blob_count(store_kind, store, url)
    listed = cli("snapshot", "list", "--store", url, "--stream", "k", "--json", env=env, check=False)
    assert listed.returncode == 1 and "has no snapshots" in listed.stderr  # nothing was published

    done = json.loads(cli("snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "k", "--json", env=env).stdout)
    assert done["bytes_uploaded"] < done["bytes_total"]  # blobs of the killed run are reused
    assert [s["snapshot_id"] for s in json.loads(cli("snapshot", "list", "--store", url, "--stream", "k", "--json", env=env).stdout)] == [done["snapshot_id"]]
    assert json.loads(cli("verify", "--store", url, "--stream", "k", "--json", env=env).stdout)["ok"]


def _flip_a_byte(store_kind: str, store, digest: str) -> None:
    if store_kind == "local":
        path = store.root / blob_key(digest)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        key = f"{store.prefix}/{blob_key(digest)}"
        data = bytearray(store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
        data[len(data) // 2] ^= 0xFF
        store.client.put_object(Bucket=store.bucket, Key=key, Body=bytes(data))


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_a_flipped_byte_fails_verify_and_restore_naming_the_file(checkpoint, make_store, store_kind, tmp_path) -> None:
    store, url, env = make_store(store_kind)
    sid = json.loads(cli("snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "c", "--json", env=env).stdout)["snapshot_id"]
    manifest = Manifest.from_json(store.get_manifest("c", sid))
    unique = [f for f in manifest.files if f.path.startswith("state/") and sum(g.sha256 == f.sha256 for g in manifest.files) == 1]
    victim = max(unique, key=lambda f: f.size)
    _flip_a_byte(store_kind, store, victim.sha256)

    proc = cli("verify", "--store", url, "--stream", "c", env=env, check=False)
    assert proc.returncode == 1 and victim.path in proc.stderr and "corrupt" in proc.stderr
    report = json.loads(cli("verify", "--store", url, "--stream", "c", sid, "--json", env=env, check=False).stdout)
    assert [p["path"] for p in report["problems"]] == [victim.path]

    work = tmp_path / "work"
    work.mkdir()
    proc = cli("restore", "--store", url, "--stream", "c", sid, "--target", str(work / "restore"), env=env, check=False)
    assert proc.returncode == 1 and victim.path in proc.stderr and "corrupt" in proc.stderr
    assert list(work.iterdir()) == []  # no target, no staging directory left behind


@pytest.mark.parametrize("bad_path", ["../escaped.txt", "state/../../escaped.txt", "/tmp/escaped-abs.txt", "a//b", "./metadata"])
def test_a_manifest_with_an_escaping_path_is_refused_before_writing(checkpoint, make_store, tmp_path, bad_path) -> None:
    store, url, _ = make_store("local")
    sid = json.loads(cli("snapshot", "create", "--checkpoint", checkpoint, "--store", url, "--stream", "e", "--json").stdout)["snapshot_id"]
    header, files = (json.loads(line) for line in store.get_manifest("e", sid).splitlines()[:2])  # format v3
    files["files"][-1]["path"] = bad_path  # keep a real blob: only the path is hostile
    listing = json.dumps(files).encode()
    evil_id = sid[:13] + "20300101T000000000000Z"
    header.update(snapshot_id=evil_id, files_sha256=hashlib.sha256(listing).hexdigest())  # whole, but hostile
    store.put_manifest("e", evil_id, json.dumps(header).encode() + b"\n" + listing + b"\n")

    work = tmp_path / "work"
    work.mkdir()
    target = work / "restore"
    proc = cli("restore", "--store", url, "--stream", "e", evil_id, "--target", str(target), check=False)
    assert proc.returncode == 1, proc.stderr
    assert "manifest" in proc.stderr and bad_path in proc.stderr
    assert list(work.iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped-abs.txt").exists()
