"""Checkpoints in S3 (`s3a://`, `s3://`) are planned, snapshotted and restored like local ones:
the same cut, hash reuse on object identity, re-planning when Spark's maintenance changes
files under the snapshot, server-side copies on one endpoint, and a restore onto S3 that is
published whole or visibly unfinished. Against moto's S3 server on loopback."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_streamstate.backends.local.store import LocalStore
from airflow_provider_streamstate.backends.s3.store import S3Store
from airflow_provider_streamstate.engine.catalog.gc import collect_garbage
from airflow_provider_streamstate.engine.checkpoint.reader import ROCKSDB_PROVIDER as ROCKSDB
from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
from airflow_provider_streamstate.engine.checkpoint.swap import FENCE_TOKEN, SWAP_FILE, recover_swap
from airflow_provider_streamstate.engine.core.errors import (
    CheckpointChanged,
    CorruptionError,
    NotFoundError,
    StreamstateError,
    UnsupportedCheckpointError,
    UsageError,
)
from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
from tests.unit.conftest import moto_bucket, serve_moto
from tests.unit.fake_checkpoint import make_checkpoint, rocksdb_zip, store_dirs, write

BUCKET = "ckpts"


@pytest.fixture
def endpoint(moto_endpoint: str) -> str:
    return moto_endpoint



@pytest.fixture
def s3(endpoint: str, request: pytest.FixtureRequest) -> Any:
    return moto_bucket(endpoint, BUCKET)


def upload(c: Any, root: Path, prefix: str) -> str:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            c.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(root).as_posix()}", Body=p.read_bytes())
    return f"s3a://{BUCKET}/{prefix}"


def hdfs_checkpoint(root: Path, batches: int = 4) -> Path:
    make_checkpoint(root, batches=batches)
    for d in store_dirs(root):
        write(d / "1.snapshot", f"snap of {d.name}")
        for v in range(2, batches + 1):
            write(d / f"{v}.delta", f"delta {v} of {d.name}")
            write(d / f".{v}.delta.crc", b"c")
    return root


def plan_view(plan: Any) -> list[tuple[str, int, bool]]:
    return [(f.path, f.size, f.essential) for f in plan.files]


@pytest.mark.parametrize("scheme", ["s3a", "s3"])
def test_an_s3_checkpoint_is_planned_exactly_like_its_local_copy(tmp_path, s3, scheme) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, f"plan-{scheme}").replace("s3a://", f"{scheme}://")
    local, remote = CheckpointReader(str(root)).plan(), CheckpointReader(url, connection=s3).plan()
    assert plan_view(remote) == plan_view(local)
    assert (remote.batch_id, remote.query_id, remote.kafka_offsets) == (local.batch_id, local.query_id,
                                                                       local.kafka_offsets)
    assert all(f.etag for f in remote.files)


def test_a_rocksdb_checkpoint_in_s3_plans_its_zip_and_the_ssts_it_names(tmp_path, s3) -> None:
    root = make_checkpoint(tmp_path / "c", batches=2, provider=ROCKSDB)
    for d in store_dirs(root):
        rocksdb_zip(d, 2, [f"00{i}-{d.parent.name}.sst" for i in range(2)])
        write(d / "SSTs" / "999-unused.sst", b"old")
    url = upload(s3, root, "rocks")
    assert plan_view(CheckpointReader(url, connection=s3).plan()) == plan_view(CheckpointReader(str(root)).plan())


def test_a_snapshot_of_an_s3_checkpoint_copies_server_side_restores_byte_for_byte_and_reuses_hashes(
    tmp_path, s3
) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, "snap")
    store = S3Store(s3, BUCKET, "store-a")
    requests: Counter[str] = Counter()
    s3.meta.events.register("before-call.s3.*", lambda model, **_: requests.update([model.name]))
    first = create_snapshot(url, store, "orders")
    m = first.manifest
    assert m.checkpoint == url
    # Each file: one CopyObject to a blob under a unique id, named by the SHA-256 S3 computed.
    assert (first.files_hashed, first.files_from_checksum, first.blobs_uploaded) == (0, len(m.files), len(m.files))
    assert all(e.blob is not None for e in m.files) and requests["CopyObject"] == len(m.files)
    assert requests["HeadObject"] == 0
    for e in m.files:
        assert e.sha256 == hashlib.sha256((root / e.path).read_bytes()).hexdigest(), e.path
    target = tmp_path / "restored"
    restore_snapshot(store, "orders", m.snapshot_id, target)
    for e in m.files:
        assert (target / e.path).read_bytes() == (root / e.path).read_bytes(), e.path

    # One more batch: only its files are copied again; unchanged objects are known by identity.
    write(root / "offsets/4", (root / "offsets/3").read_text())
    write(root / "commits/4", (root / "commits/3").read_text())
    for d in store_dirs(root):
        write(d / "5.delta", f"delta 5 of {d.name}")
    upload(s3, root, "snap")  # re-puts every object: same ETag where the bytes did not change
    second = create_snapshot(url, store, "orders")
    assert second.manifest.batch_id == 4
    assert second.manifest.parent == m.snapshot_id
    # Objects re-put with identical bytes keep their ETag but get a new LastModified second,
    # so they may be copied again; by the checksum S3 returns, their entries name the parent's blob.
    new_paths = {"offsets/4", "commits/4", *(f"{d.relative_to(root).as_posix()}/5.delta" for d in store_dirs(root))}
    kept = {e.blob_id for e in second.manifest.files if e.path not in new_paths}
    assert kept <= set(m.blobs)
    new_blobs = {e.blob_id for e in second.manifest.files if e.path in new_paths} - set(m.blobs)
    assert len(new_blobs) == len({e.sha256 for e in second.manifest.files if e.path in new_paths} - set(
        m.blob_sha256.values()))
    assert second.manifest.delta is not None  # a delta of the first: what changed
    restore_snapshot(store, "orders", second.manifest.snapshot_id, tmp_path / "second")
    for e in second.manifest.files:
        assert (tmp_path / "second" / e.path).read_bytes() == (root / e.path).read_bytes(), e.path

    collect_garbage(store)  # its census: the parent's blobs are relied on without a request each
    requests.clear()
    third = create_snapshot(url, store, "orders", always=True)
    assert third.unchanged and third.files_hashed == third.blobs_uploaded == 0  # the commit log says: nothing new
    assert requests["CopyObject"] == requests["HeadObject"] == 0 and requests["PutObject"] == 3  # hint, manifest, head
    assert third.manifest.delta is not None and third.manifest_bytes < 2000
    assert list(third.manifest.files) == list(second.manifest.files)


def upload_with_sha256(c: Any, root: Path, prefix: str) -> str:
    """As S3A writes with `fs.s3a.create.checksum.algorithm=SHA256`: S3 checks and keeps each object's SHA-256."""
    for p in sorted(root.rglob("*")):
        if p.is_file():
            c.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(root).as_posix()}", Body=p.read_bytes(),
                         ChecksumAlgorithm="SHA256")
    return f"s3a://{BUCKET}/{prefix}"


def test_objects_carrying_their_sha256_are_named_by_it_and_copied_without_a_byte_read_here(tmp_path, s3) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload_with_sha256(s3, root, "summed")
    store = S3Store(s3, BUCKET, "store-summed")
    reads: list[str] = []
    copies: list[str | None] = []  # the checksum each CopyObject asked S3 to compute

    def seen(params: dict[str, Any], **_: Any) -> None:
        if params["Key"].startswith("summed/"):
            reads.append(params["Key"])

    def copied(params: dict[str, Any], **_: Any) -> None:
        copies.append(params.get("ChecksumAlgorithm"))
    s3.meta.events.register("before-parameter-build.s3.GetObject", seen)
    s3.meta.events.register("before-parameter-build.s3.CopyObject", copied)
    try:
        taken = create_snapshot(url, store, "orders")
    finally:
        s3.meta.events.unregister("before-parameter-build.s3.GetObject", seen)
    m = taken.manifest
    assert (taken.files_from_checksum, taken.files_hashed, taken.bytes_hashed) == (len(m.files), 0, 0)
    # One plain CopyObject each: the copy keeps the object's checksum, S3 computes none.
    assert copies == [None] * len(m.files)
    copies.clear()
    restore_snapshot(store, "orders", m.snapshot_id, f"s3a://{BUCKET}/summed-restored/orders")
    s3.meta.events.unregister("before-parameter-build.s3.CopyObject", copied)
    # The blobs carry it on: checked against the manifest, computed by none (`metadata` is
    # written, last, by the swap that lifts the fence).
    assert copies == [None] * (len(m.files) - 1)
    # Only what the plan parses (metadata logs, the newest offsets and commits) is read here, no state file.
    state_files = {f"summed/{e.path}" for e in m.files if e.path.startswith("state/") and "_metadata" not in e.path}
    assert reads and not state_files & set(reads), reads
    for e in m.files:
        assert e.sha256 == hashlib.sha256((root / e.path).read_bytes()).hexdigest(), e.path
    target = tmp_path / "restored"
    restore_snapshot(store, "orders", m.snapshot_id, target)  # hashes every blob it writes
    for e in m.files:
        assert (target / e.path).read_bytes() == (root / e.path).read_bytes(), e.path


def test_objects_listed_without_a_sha256_are_copied_too_with_no_byte_read_and_no_head(tmp_path, s3) -> None:
    root = hdfs_checkpoint(tmp_path / "c", batches=6)
    url = upload(s3, root, "unsummed")
    heads: list[str] = []

    def seen(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "HeadObject" and params["Key"].startswith("unsummed/"):
            heads.append(params["Key"])
    s3.meta.events.register("before-parameter-build.s3.HeadObject", seen)
    try:
        taken = create_snapshot(url, S3Store(s3, BUCKET, "store-unsummed"), "orders", parallelism=1)
    finally:
        s3.meta.events.unregister("before-parameter-build.s3.HeadObject", seen)
    assert (taken.files_from_checksum, taken.files_hashed) == (len(taken.manifest.files), 0)
    assert heads == []


@pytest.mark.parametrize("copy_reports_checksum", [True, False], ids=["copy-checksum", "read-back"])
def test_a_copy_whose_reported_checksum_is_not_its_bytes_makes_the_snapshot_fail_to_restore_not_restore_wrong(
    tmp_path, s3, monkeypatch, copy_reports_checksum
) -> None:
    """A blob under a unique id is named by the checksum its copy reported, never checked
    here when it was written: a restore checks every byte against it. An endpoint that
    misreports a copy's checksum yields a snapshot that fails to restore (naming the file),
    never one that restores other bytes; one that reports none has its copies read back."""
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, f"lying-{copy_reports_checksum}")
    store = S3Store(s3, BUCKET, f"store-lying-{copy_reports_checksum}")
    victim = f"lying-{copy_reports_checksum}/offsets/3"
    lie = hashlib.sha256(b"not these bytes").digest()
    copy = s3.copy_object

    def reported(**kwargs: Any) -> Any:
        r = copy(**kwargs)
        if kwargs["CopySource"]["Key"] == victim:
            r.setdefault("CopyObjectResult", {})["ChecksumSHA256"] = __import__("base64").b64encode(lie).decode()
        elif not copy_reports_checksum:
            r.get("CopyObjectResult", {}).pop("ChecksumSHA256", None)
        return r
    monkeypatch.setattr(s3, "copy_object", reported)
    m = create_snapshot(url, store, "orders").manifest
    entry = next(e for e in m.files if e.path == "offsets/3")
    assert entry.sha256 == lie.hex()
    target = tmp_path / "restored"
    with pytest.raises(CorruptionError, match="offsets/3: stored blob"):
        restore_snapshot(store, "orders", m.snapshot_id, target)
    assert not target.exists()
    for e in m.files:  # every other file is named by its bytes, reported or read back
        if e.path != "offsets/3":
            assert e.sha256 == hashlib.sha256((root / e.path).read_bytes()).hexdigest(), e.path


def test_a_copy_reporting_no_checksum_is_read_back_to_confirm_a_digest_nothing_here_computed(
    tmp_path, s3, monkeypatch
) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload_with_sha256(s3, root, "readback")
    store = S3Store(s3, BUCKET, "store-readback")
    copy, reads = s3.copy_object, []

    def without_checksum(**kwargs: Any) -> Any:
        r = copy(**kwargs)
        r.get("CopyObjectResult", {}).pop("ChecksumSHA256", None)
        return r
    get = s3.get_object

    def counted_get(**kwargs: Any) -> Any:
        reads.append(kwargs["Key"])
        return get(**kwargs)
    monkeypatch.setattr(s3, "copy_object", without_checksum)
    monkeypatch.setattr(s3, "get_object", counted_get)
    taken = create_snapshot(url, store, "orders")
    blob_reads = [k for k in reads if "/blobs/" in k]
    assert taken.files_from_checksum == len(taken.manifest.files)
    assert len(blob_reads) == taken.blobs_uploaded > 0  # each copy read back once, nothing else


def test_an_object_rewritten_with_other_bytes_of_the_same_size_is_hashed_again(tmp_path, s3) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, "rewrite")
    store = LocalStore(tmp_path / "store")
    first = create_snapshot(url, store, "orders", checkpoint_connection=s3)
    rel = next(e.path for e in first.manifest.files if e.path.endswith("4.delta"))
    s3.put_object(Bucket=BUCKET, Key=f"rewrite/{rel}", Body=(root / rel).read_bytes().upper())
    # A snapshot of the same batch trusts the commit log (a committed batch's files are final)...
    assert create_snapshot(url, store, "orders", always=True, checkpoint_connection=s3).unchanged
    # ...the next batch's plans the cut, and the object's new identity has it hashed again.
    for b in ("offsets", "commits"):
        s3.put_object(Bucket=BUCKET, Key=f"rewrite/{b}/4", Body=(root / f"{b}/3").read_bytes())
    for d in store_dirs(root):
        s3.put_object(Bucket=BUCKET, Key=f"rewrite/{d.relative_to(root).as_posix()}/5.delta", Body=b"v5")
    second = create_snapshot(url, store, "orders", checkpoint_connection=s3)
    assert not second.unchanged and second.files_hashed >= 1
    by_path = {e.path: e.sha256 for e in second.manifest.files}
    assert by_path[rel] != {e.path: e.sha256 for e in first.manifest.files}[rel]


def test_the_cut_is_planned_again_when_maintenance_deletes_deltas_under_the_snapshot(
    tmp_path, s3, monkeypatch
) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, "maint")
    real_plan = CheckpointReader.plan
    calls: list[int] = []

    def plan_then_maintain(self: CheckpointReader, batch_id: int | None = None) -> Any:
        plan = real_plan(self, batch_id)
        if not calls:  # maintenance: a snapshot at version 4 replaces deltas 2..4
            for d in store_dirs(root):
                rel = d.relative_to(root).as_posix()
                s3.put_object(Bucket=BUCKET, Key=f"maint/{rel}/4.snapshot", Body=f"snap4 {d.name}".encode())
                for v in (2, 3, 4):
                    s3.delete_object(Bucket=BUCKET, Key=f"maint/{rel}/{v}.delta")
        calls.append(1)
        return plan

    monkeypatch.setattr(CheckpointReader, "plan", plan_then_maintain)
    result = create_snapshot(url, LocalStore(tmp_path / "store"), "orders", checkpoint_connection=s3)
    assert result.attempts == 2
    paths = {e.path for e in result.manifest.files}
    assert "state/0/0/4.snapshot" in paths and "state/0/0/3.delta" not in paths


def test_a_file_rewritten_between_plan_and_read_fails_the_read(tmp_path, s3) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, "reread")
    reader = CheckpointReader(url, connection=s3)
    pf = next(f for f in reader.plan().files if f.path == "commits/3")
    s3.put_object(Bucket=BUCKET, Key="reread/commits/3", Body=b"v1\n{}")
    with pytest.raises(CheckpointChanged), reader.fs.open_checked(pf.path, pf.identity) as f:
        f.read()


@pytest.fixture(scope="module")
def other_endpoint() -> Any:
    """A second S3 endpoint (another region): no server-side copy from the checkpoint's."""
    yield from serve_moto()


@pytest.fixture
def dr(other_endpoint: str) -> Any:
    return moto_bucket(other_endpoint, BUCKET)


def requests_by_key(c: Any, *operations: str) -> Counter[tuple[str, str]]:
    """(operation, key) of every request the client sends for `operations`."""
    seen: Counter[tuple[str, str]] = Counter()

    def count(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in operations:
            seen[(model.name, params.get("Key", ""))] += 1

    c.meta.events.register("before-parameter-build.s3.*", count)  # once per API call, retries aside
    return seen


def sized_checkpoint(root: Path, batches: int = 4) -> Path:
    """hdfs_checkpoint with state files of a few KiB, distinct contents."""
    hdfs_checkpoint(root, batches)
    for d in store_dirs(root):
        for f in d.iterdir():
            write(f, (f"{d.name}/{f.name} " * 400).encode())
    return root


def blobs_named_by_their_bytes(c: Any, store: S3Store) -> dict[str, int]:
    """Every blob of the store, read back: its sha256 must be its name. digest -> size."""
    import hashlib

    out = {}
    for digest, size in store.iter_blobs():
        with store.open_blob(digest) as f:
            data = f.read()
        assert hashlib.sha256(data).hexdigest() == digest and len(data) == size
        out[digest] = size
    return out


def test_into_a_store_on_another_endpoint_each_new_object_is_read_once(tmp_path, s3, dr) -> None:
    """Hashing and uploading share one GET: the body read to compute the blob's name is the
    body uploaded under it (objects up to a part), with no HEAD before the conditional PUT."""
    root = sized_checkpoint(tmp_path / "c")
    url = upload(s3, root, "once")
    planning = requests_by_key(s3, "GetObject")
    CheckpointReader(url, connection=s3).plan()
    planned_reads = dict(planning)  # the metadata-log files a plan parses

    reads = requests_by_key(s3, "GetObject")
    writes = requests_by_key(dr, "PutObject", "HeadObject", "CopyObject")
    store = S3Store(dr, BUCKET, "other")
    result = create_snapshot(url, store, "orders", checkpoint_connection=s3)
    m = result.manifest
    state = [e for e in m.files if "/_metadata/" not in e.path and e.path.startswith("state/")]
    assert len(state) >= 8
    for e in state:  # never parsed by the planner: the hash's read is the only one
        assert reads[("GetObject", f"once/{e.path}")] == 1, e.path
    for e in m.files:  # at most one read beyond those a plan makes
        key = f"once/{e.path}"
        assert reads[("GetObject", key)] <= 2 * planned_reads.get(("GetObject", key), 0) + 1, e.path
    blob_puts = {k for (op, k) in writes if op == "PutObject" and "/blobs/" in k}
    assert len(blob_puts) == sum(writes[("PutObject", k)] for k in blob_puts) == len(m.blobs) == result.blobs_uploaded
    assert not [k for (op, k) in writes if op in ("HeadObject", "CopyObject") and "/blobs/" in k]
    assert result.bytes_uploaded == sum(blobs_named_by_their_bytes(dr, store).values())
    target = tmp_path / "restored"
    restore_snapshot(store, "orders", m.snapshot_id, target)
    for e in m.files:
        assert (target / e.path).read_bytes() == (root / e.path).read_bytes(), e.path

    # An unchanged snapshot reads nothing; one more batch reads only its new files, once.
    reads.clear()
    assert create_snapshot(url, store, "orders", always=True, checkpoint_connection=s3).files_hashed == 0
    assert not [k for (_, k) in reads if k.startswith("once/state/") and "/_metadata/" not in k]


@pytest.mark.parametrize(("body", "kept"), [(b"abcd", b"abcd"), (b"ab", b"ab"), (b"abcdefgh", b"abcde"), (b"", b"")])
def test_the_read_once_buffer_holds_what_was_hashed_and_shows_a_longer_or_shorter_object(body, kept) -> None:
    import hashlib
    import io

    from airflow_provider_streamstate.engine.core.digest import sha256_read

    digest, data = sha256_read(io.BytesIO(body), 4)
    assert bytes(data) == kept and digest == hashlib.sha256(kept).hexdigest()


def test_an_object_rewritten_after_the_plan_is_planned_again_not_stored(tmp_path, s3, dr, monkeypatch) -> None:
    """The one read is still `GetObject(IfMatch=<planned ETag>)`: maintenance rewriting a file
    after the plan fails it, the cut is planned again, and the blob holds the new bytes."""
    root = sized_checkpoint(tmp_path / "c")
    url = upload(s3, root, "changed")
    rel = f"{store_dirs(root)[0].relative_to(root).as_posix()}/4.delta"
    old = (root / rel).read_bytes()
    new = old.upper()
    assert len(new) == len(old) and new != old
    real_plan = CheckpointReader.plan
    plans: list[int] = []

    def plan_then_rewrite(self: CheckpointReader, batch_id: int | None = None) -> Any:
        plan = real_plan(self, batch_id)
        if not plans:
            s3.put_object(Bucket=BUCKET, Key=f"changed/{rel}", Body=new)
        plans.append(1)
        return plan

    monkeypatch.setattr(CheckpointReader, "plan", plan_then_rewrite)
    store = S3Store(dr, BUCKET, "changed-store")
    result = create_snapshot(url, store, "orders", checkpoint_connection=s3)
    assert result.attempts == 2
    import hashlib

    digest = {e.path: e.sha256 for e in result.manifest.files}[rel]
    assert digest == hashlib.sha256(new).hexdigest()
    blobs = blobs_named_by_their_bytes(dr, store)
    assert hashlib.sha256(old).hexdigest() not in blobs and digest in blobs


def test_objects_above_the_read_once_size_are_hashed_then_streamed(tmp_path, s3, dr, monkeypatch) -> None:
    """Above READ_ONCE_BYTES (a part of the S3 store) memory would not be bounded by a part:
    such an object is read twice, once to hash, once streamed into the store."""
    from airflow_provider_streamstate.engine.lifecycle import snapshot_files

    monkeypatch.setattr(snapshot_files, "READ_ONCE_BYTES", 5000)
    root = sized_checkpoint(tmp_path / "c")
    url = upload(s3, root, "twice")
    reads = requests_by_key(s3, "GetObject")
    store = S3Store(dr, BUCKET, "twice-store")
    m = create_snapshot(url, store, "orders", checkpoint_connection=s3).manifest
    big = [e for e in m.files if e.size > 5000]
    small = [e for e in m.files if e.size <= 5000 and e.path.startswith("state/") and "/_metadata/" not in e.path]
    assert big and small
    assert all(reads[("GetObject", f"twice/{e.path}")] == 2 for e in big)
    assert all(reads[("GetObject", f"twice/{e.path}")] == 1 for e in small)
    assert set(blobs_named_by_their_bytes(dr, store)) == set(m.blobs)


def test_a_blob_found_present_on_the_other_endpoint_is_refreshed_not_trusted(tmp_path, s3, dr, monkeypatch) -> None:
    """Writer rule 4 holds on the read-once path: a blob nobody vouches for (a crashed
    writer's orphan) is refreshed so GC's grace period starts again, and checked again
    before the manifest is published."""
    import hashlib

    root = sized_checkpoint(tmp_path / "c")
    url = upload(s3, root, "orphan")
    store = S3Store(dr, BUCKET, "orphan-store")
    rel = f"{store_dirs(root)[1].relative_to(root).as_posix()}/3.delta"
    data = (root / rel).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert store.put_blob_bytes(digest, data) == len(data)
    assert store.put_blob_bytes(digest, data) == 0  # conditional: present is a no-op
    refreshed: list[str] = []
    real = store.refresh_blob
    monkeypatch.setattr(store, "refresh_blob", lambda d: refreshed.append(d) or real(d))
    rechecked: list[str] = []
    real_has = store.has_blob
    monkeypatch.setattr(store, "has_blob", lambda d: rechecked.append(d) or real_has(d))
    result = create_snapshot(url, store, "orders", checkpoint_connection=s3)
    assert refreshed == [digest] and digest in rechecked
    assert result.blobs_uploaded == len(result.manifest.blobs) - 1


def test_files_of_one_content_read_at_once_are_stored_once_and_nothing_is_refreshed(
    tmp_path, s3, dr, monkeypatch
) -> None:
    """Identical files (Spark's .crc files often are) hashed by parallel workers: one stores
    the blob, the others do not PUT it again, find it present and refresh it (which would
    make an S3 snapshot wait the store's settle time before publishing)."""
    root = hdfs_checkpoint(tmp_path / "c")  # every .crc file holds the same byte
    url = upload(s3, root, "same")
    store = S3Store(dr, BUCKET, "same-store")
    real = S3Store.put_blob_bytes

    def slow_put(self: S3Store, digest: str, data: Any) -> int:
        time.sleep(0.3)  # the other readers of this content finish meanwhile
        return real(self, digest, data)

    monkeypatch.setattr(S3Store, "put_blob_bytes", slow_put)
    writes = requests_by_key(dr, "PutObject", "CopyObject")
    result = create_snapshot(url, store, "orders", checkpoint_connection=s3, parallelism=8)
    m = result.manifest
    assert len(m.files) - len(m.blobs) >= 4  # several files share a blob
    assert not [k for (op, k) in writes if op == "CopyObject"]  # no refresh of our own blob
    assert all(n == 1 for (op, k), n in writes.items() if "/blobs/" in k)
    assert result.blobs_uploaded == len(m.blobs) and result.seconds < store.refresh_settle_seconds


def test_a_snapshot_reading_once_into_another_endpoint_can_be_cancelled_and_publishes_nothing(
    tmp_path, s3, dr, monkeypatch
) -> None:
    from airflow_provider_streamstate.engine.core.cancel import CancelToken
    from airflow_provider_streamstate.engine.core.errors import Cancelled

    root = sized_checkpoint(tmp_path / "c")
    url = upload(s3, root, "cancel")
    store = S3Store(dr, BUCKET, "cancel-store")
    token = CancelToken()
    real = S3Store.put_blob_bytes
    puts: list[str] = []

    def put_then_cancel(self: S3Store, digest: str, data: Any) -> int:
        puts.append(digest)
        if len(puts) == 3:
            token.cancel("test")
        return real(self, digest, data)

    monkeypatch.setattr(S3Store, "put_blob_bytes", put_then_cancel)
    with pytest.raises(Cancelled):
        create_snapshot(url, store, "orders", checkpoint_connection=s3, cancel=token, parallelism=1)
    assert len(puts) == 3
    assert store.list_snapshot_ids("orders") == []


def test_a_restore_onto_s3_refuses_a_non_empty_target_and_publishes_exactly_the_manifest(tmp_path, s3) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    store = S3Store(s3, BUCKET, "store-r")
    m = create_snapshot(str(root), store, "orders").manifest
    target = f"s3a://{BUCKET}/restored/orders"
    r = restore_snapshot(store, "orders", m.snapshot_id, target)
    assert r.target == target

    def listing() -> dict[str, bytes]:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="restored/").get("Contents", [])]
        return {k: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys}

    got = listing()
    assert {k.removeprefix("restored/orders/") for k in got} == {e.path for e in m.files} | {
        "_streamstate/lineage.json", "_streamstate/last-swap.json"}
    for e in m.files:
        assert got[f"restored/orders/{e.path}"] == (root / e.path).read_bytes()
    assert not [k for k in got if "streamstate-restore" in k]  # staging removed
    with pytest.raises(UsageError, match="is not empty"):
        restore_snapshot(store, "orders", m.snapshot_id, target)
    s3.put_object(Bucket=BUCKET, Key="restored/orders/offsets/99", Body=b"stale")
    clone = restore_snapshot(store, "orders", m.snapshot_id, target, force=True, new_query_id=True)
    got = listing()
    assert "restored/orders/offsets/99" not in got
    assert json.loads(got["restored/orders/metadata"])["id"] == clone.query_id != m.query_id
    assert "restored/orders/.metadata.crc" not in got
    # The restored prefix is a checkpoint the engine reads like the original.
    assert plan_view(CheckpointReader(target, connection=s3).plan())[-3:] == plan_view(
        CheckpointReader(str(root)).plan())[-3:]


def test_a_restore_into_an_empty_prefix_copies_each_file_once_and_a_failure_leaves_it_empty(
    tmp_path, s3, monkeypatch
) -> None:
    """Nothing to replace: the files are copied in place behind the incomplete marker (one
    CopyObject each, checked by the SHA-256 S3 returns), not staged and copied again."""
    from airflow_provider_streamstate.backends.s3.checkpoint import S3Staging

    root = hdfs_checkpoint(tmp_path / "c")
    store = S3Store(s3, BUCKET, "store-once")
    m = create_snapshot(str(root), store, "orders").manifest
    requests: Counter[str] = Counter()
    s3.meta.events.register("before-call.s3.*", lambda model, **_: requests.update([model.name]))
    restore_snapshot(store, "orders", m.snapshot_id, f"s3a://{BUCKET}/restored-once/orders")
    # One each, from its blob or from the first of identical files; `metadata` is written last, by the swap.
    assert requests["CopyObject"] == len(m.files) - 1

    def keys(prefix: str) -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]
    real = S3Staging.write_blob
    calls: list[str] = []

    def failing(self: Any, store_: Any, entry: Any) -> None:
        calls.append(entry.path)
        if len(calls) == 3:
            raise OSError("connection reset while copying")
        real(self, store_, entry)
    monkeypatch.setattr(S3Staging, "write_blob", failing)
    with pytest.raises(OSError):
        restore_snapshot(store, "orders", m.snapshot_id, f"s3a://{BUCKET}/interrupted/orders", parallelism=1)
    assert keys("interrupted/") == []  # as it was: empty, its fence and swap record included
    # A crash (nothing cleaned up) leaves it fenced: refused until the restore is run again.
    calls.clear()
    from airflow_provider_streamstate.engine.lifecycle import restore as restore_mod

    monkeypatch.setattr(S3Staging, "discard", lambda self: None)
    monkeypatch.setattr(restore_mod, "unfence_empty", lambda fs: None)
    with pytest.raises(OSError):
        restore_snapshot(store, "orders", m.snapshot_id, f"s3a://{BUCKET}/interrupted/orders", parallelism=1)
    assert f"interrupted/orders/{SWAP_FILE}" in keys("interrupted/")
    metadata = s3.get_object(Bucket=BUCKET, Key="interrupted/orders/metadata")["Body"].read()
    assert metadata.startswith(FENCE_TOKEN.encode())  # what every Spark refuses to start on
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap"):
        create_snapshot(f"s3a://{BUCKET}/interrupted/orders", store, "orders-copy")
    monkeypatch.undo()
    restore_snapshot(store, "orders", m.snapshot_id, f"s3a://{BUCKET}/interrupted/orders", force=True)
    assert f"interrupted/orders/{SWAP_FILE}" not in keys("interrupted/")
    metadata = s3.get_object(Bucket=BUCKET, Key="interrupted/orders/metadata")["Body"].read()
    assert metadata == (root / "metadata").read_bytes()


def test_a_fenced_checkpoint_is_refused_by_snapshots(tmp_path, s3) -> None:
    root = hdfs_checkpoint(tmp_path / "c")
    url = upload(s3, root, "unfinished")
    s3.put_object(Bucket=BUCKET, Key="unfinished/metadata", Body=f"{FENCE_TOKEN} {{}}".encode())
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap"):
        create_snapshot(url, LocalStore(tmp_path / "store"), "orders", checkpoint_connection=s3)


@pytest.mark.parametrize("url", ["viewfs://cluster/ckpt", "gs://bucket/ckpt", "abfs://c@acct/ckpt"])
def test_a_checkpoint_scheme_we_cannot_read_is_refused_in_one_line(tmp_path, url) -> None:
    with pytest.raises(UnsupportedCheckpointError) as err:
        create_snapshot(url, LocalStore(tmp_path / "store"), "orders")
    line = err.value.one_line()
    assert "scheme is not supported" in line and "\n" not in line
    with pytest.raises(UnsupportedCheckpointError):
        restore_snapshot(LocalStore(tmp_path / "store"), "orders", "latest", url)


def test_a_missing_bucket_or_prefix_and_missing_credentials_are_one_line_errors(tmp_path, s3, endpoint,
                                                                              monkeypatch) -> None:
    with pytest.raises(StreamstateError) as err:
        CheckpointReader("s3a://no-such-bucket-here/ckpt", connection=s3)
    line = err.value.one_line()
    assert "bucket no-such-bucket-here does not exist" in line and "checkpoint location" in line
    assert "\n" not in line
    with pytest.raises(NotFoundError, match="does not exist"):
        CheckpointReader(f"s3a://{BUCKET}/nothing/here", connection=s3)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StreamstateError) as err:
        create_snapshot(f"s3a://{BUCKET}/ckpt", LocalStore(tmp_path / "store"), "orders")
    line = err.value.one_line()
    assert "credentials" in line.lower() and "\n" not in line


def test_a_restore_onto_s3_that_fails_while_staging_leaves_the_target_untouched_and_one_that_fails_while_swapping_is_fenced(
    tmp_path, s3, monkeypatch
) -> None:
    from airflow_provider_streamstate.backends.s3.checkpoint import S3CheckpointFS, S3Staging

    root = hdfs_checkpoint(tmp_path / "c")
    store = S3Store(s3, BUCKET, "store-f")
    m = create_snapshot(str(root), store, "orders").manifest
    target = f"s3a://{BUCKET}/failing/orders"
    restore_snapshot(store, "orders", m.snapshot_id, target)

    def keys(prefix: str) -> dict[str, bytes]:
        objs = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
        return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in objs}

    before = keys("failing/")
    real_move = S3CheckpointFS.move_from
    real_write = S3Staging.write_blob
    calls: list[str] = []

    def failing_write(self: Any, store_: Any, entry: Any) -> None:
        calls.append(entry.path)
        if len(calls) == 3:
            raise OSError("connection reset while staging")
        real_write(self, store_, entry)

    monkeypatch.setattr(S3Staging, "write_blob", failing_write)
    with pytest.raises(OSError):
        restore_snapshot(store, "orders", m.snapshot_id, target, force=True)
    assert keys("failing/") == before  # target as it was, staging removed
    monkeypatch.setattr(S3Staging, "write_blob", real_write)

    moved: list[str] = []

    def failing_move(self: Any, src: Any, rel: str, *, exclusive: bool = False) -> bool:
        moved.append(rel)
        if len(moved) == 4:
            raise OSError("connection reset while swapping")
        return real_move(self, src, rel, exclusive=exclusive)

    monkeypatch.setattr(S3CheckpointFS, "move_from", failing_move)
    with pytest.raises(OSError):
        restore_snapshot(store, "orders", m.snapshot_id, target, force=True)
    assert f"failing/orders/{SWAP_FILE}" in keys("failing/")
    assert keys("failing/")["failing/orders/metadata"].startswith(FENCE_TOKEN.encode())
    with pytest.raises(UnsupportedCheckpointError, match="in the middle of a swap"):
        create_snapshot(target, store, "orders-copy")
    monkeypatch.setattr(S3CheckpointFS, "move_from", real_move)
    actions = recover_swap(S3CheckpointFS(target, s3))  # what `streamstate stream recover` does
    assert len(actions) == 1 and "finished the restore" in actions[0]
    after = keys("failing/")
    assert f"failing/orders/{SWAP_FILE}" not in after
    for e in m.files:
        assert after[f"failing/orders/{e.path}"] == (root / e.path).read_bytes()
    restore_snapshot(store, "orders", m.snapshot_id, target, force=True)  # and the staging goes with the next
    assert not [k for k in keys("failing/") if "streamstate-restore" in k]


@pytest.mark.parametrize(("url", "words"), [
    ("s3a://B/ckpt", ["invalid checkpoint location 's3a://B/ckpt'", "not a bucket name", "s3a://bucket/path"]),
    ("s3://bucket/a/../b", ["invalid checkpoint location 's3://bucket/a/../b'", "s3://bucket/path"]),
    ("s3a://bucket", ["is a whole bucket"]),
])
def test_a_malformed_s3_checkpoint_url_is_named_as_the_checkpoint_location(url, words) -> None:
    from airflow_provider_streamstate.backends.s3.checkpoint import parse_s3_location

    with pytest.raises(UsageError) as err:
        parse_s3_location(url)
    line = err.value.one_line()
    assert all(w in line for w in words) and "store URL" not in line, line


def test_a_listing_is_compared_with_a_manifest_in_one_place_naming_what_is_missing_extra_or_of_another_size() -> None:
    from airflow_provider_streamstate.engine.checkpoint.filesystems import listing_mismatch

    want = {"metadata": 10, "offsets/0": 20, "commits/0": 5}
    assert not listing_mismatch(dict(want), want)
    mismatch = listing_mismatch({"metadata": 10, "offsets/0": 21, "extra": 1}, want)
    assert (mismatch.missing, mismatch.unexpected, mismatch.wrong_size) == (["commits/0"], ["extra"], ["offsets/0"])
    assert mismatch.first_ones() == "missing ['commits/0'], unexpected ['extra'], wrong size ['offsets/0']"


def test_a_local_listing_skips_a_file_a_running_query_removed_while_it_was_listed(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark writes a temporary file and renames it: one listed and gone before its size is
    read is not part of the checkpoint (a restore over a running stream must reach its
    refusal, not fail on the temporary file)."""
    import os

    from airflow_provider_streamstate.backends.local.checkpoint import LocalCheckpointFS

    (tmp_path / "ckpt" / "state" / "0" / "0").mkdir(parents=True)
    (tmp_path / "ckpt" / "state" / "0" / "0" / "1.delta").write_bytes(b"abc")
    real_walk = os.walk

    def walk_with_a_vanished_tmp(top: Any) -> Any:
        for dirpath, dirnames, filenames in real_walk(top):
            extra = [".1.delta.crc.0a1b.tmp"] if dirpath.endswith("/0/0") else []
            yield dirpath, dirnames, [*filenames, *extra]

    monkeypatch.setattr(os, "walk", walk_with_a_vanished_tmp)
    fs = LocalCheckpointFS(tmp_path / "ckpt")
    assert fs.files() == {"state/0/0/1.delta": 3}
    assert list(fs.versions()) == ["state/0/0/1.delta"]
