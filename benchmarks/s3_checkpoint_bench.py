"""S3 checkpoint benchmark: planning cost of a large checkpoint in S3, and a snapshot of it
into an S3 store on the same endpoint (one server-side copy per object, to a blob under a
unique id named by the SHA-256 S3 computes) against a plain boto3 server-side copy of the
same objects; then a restore of it into an empty prefix on the same endpoint against the
same plain copy.

    .venv/bin/python benchmarks/s3_checkpoint_bench.py [--partitions N] [--files-per-store N] [--file-kib N]

Builds a synthetic HDFS-state-store checkpoint (the layout Spark writes: metadata logs,
operator metadata, one snapshot + deltas + Hadoop .crc sidecars per partition store) of
`partitions * (2 * files_per_store)` objects in a moto S3 server on loopback, then:

* plan: one `CheckpointReader.plan()`, counting the HTTP requests boto3 sends by operation;
* snapshot: `create_snapshot` into an S3 store in the same bucket (one CopyObject per file,
  asking for the copy's SHA-256), vs `copy_object` of the same planned objects with the same
  concurrency and no checksum (the floor for "no bytes through this host");
* restore: `restore_snapshot` of it into an empty prefix (one CopyObject per file, checked
  by the SHA-256 S3 returns, behind the incomplete marker) vs the same plain copy;
* an unchanged second snapshot after one garbage collection (the commit log says nothing
  changed: no listing of the checkpoint, a delta of no change; the parent's blobs relied on
  without a request each, on the GC's census), with its requests counted;
* the same objects written with their SHA-256 attached (as S3A writes them with
  `fs.s3a.create.checksum.algorithm=SHA256`): a first snapshot of them, the same way.

Prints a Markdown table and writes .bench/s3_checkpoint_results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import moto_s3, write_results  # noqa: E402

BUCKET = "bench"
PARALLELISM = 8


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--files-per-store", type=int, default=25, help="deltas per partition (each with a .crc)")
    ap.add_argument("--file-kib", type=int, default=16)
    a = ap.parse_args()



    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.checkpoint.reader import (
        HDFS_PROVIDER,
        PROVIDER_CONF,
        CheckpointReader,
    )
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    server, c, backend = moto_s3(BUCKET)
    prefix = "ckpt"
    n_deltas = a.files_per_store
    objects: dict[str, bytes] = {
        "metadata": json.dumps({"id": "11111111-2222-3333-4444-555555555555"}).encode(),
        "sources/0/0": b'v1\n{"t":{"0":0}}',
    }
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {PROVIDER_CONF: HDFS_PROVIDER}}
    for b in range(n_deltas):
        objects[f"offsets/{b}"] = f"v1\n{json.dumps(meta)}\n" + json.dumps({"t": {"0": b + 1}})
        objects[f"commits/{b}"] = b"v1\n{}"
    info = [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": a.partitions}]
    objects["state/0/_metadata/metadata"] = "v1\n" + json.dumps(
        {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"}, "stateStoreInfo": info})
    for p in range(a.partitions):
        for v in range(1, n_deltas + 1):
            body = (f"p{p}v{v}".encode() * (a.file_kib * 1024))[: a.file_kib * 1024]
            objects[f"state/0/{p}/{v}.delta"] = body
            objects[f"state/0/{p}/.{v}.delta.crc"] = b"crc" + body[:8]
    t = time.monotonic()
    # Built straight into moto's backend (same process): the benchmark measures reading them.
    import base64
    import hashlib


    for key, body in objects.items():
        data = body if isinstance(body, bytes) else body.encode()
        backend.put_object(BUCKET, f"{prefix}/{key}", data)
        # The same object as S3 keeps it when the writer attached its SHA-256.
        summed = backend.put_object(BUCKET, f"summed/{key}", data,
                                    checksum_value=base64.b64encode(hashlib.sha256(data).digest()).decode())
        summed.checksum_algorithm = "SHA256"
    print(f"built {len(objects)} objects in {time.monotonic() - t:.1f}s", file=sys.stderr)

    requests: Counter[str] = Counter()
    c.meta.events.register("before-call.s3.*", lambda model, **_: requests.update([model.name]))
    url = f"s3a://{BUCKET}/{prefix}"
    t = time.monotonic()
    plan = CheckpointReader(url, connection=c).plan()
    plan_s = time.monotonic() - t
    plan_requests = dict(requests)
    total_bytes = sum(f.size for f in plan.files)

    store = S3Store(c, BUCKET, "store")
    requests.clear()
    t = time.monotonic()
    snap = create_snapshot(url, store, "bench", parallelism=PARALLELISM)
    snap_s = time.monotonic() - t
    snap_requests = dict(requests)

    t = time.monotonic()
    with ThreadPoolExecutor(PARALLELISM) as pool:
        list(pool.map(lambda f: c.copy_object(Bucket=BUCKET, Key=f"plain/{f.path}",
                                              CopySource={"Bucket": BUCKET, "Key": f"{prefix}/{f.path}"}), plan.files))
    plain_s = time.monotonic() - t

    requests.clear()
    t = time.monotonic()
    restore_snapshot(store, "bench", snap.manifest.snapshot_id, f"s3a://{BUCKET}/restored", parallelism=PARALLELISM)
    restore_s = time.monotonic() - t
    restore_requests = dict(requests)
    t = time.monotonic()
    with ThreadPoolExecutor(PARALLELISM) as pool:
        list(pool.map(lambda f: c.copy_object(Bucket=BUCKET, Key=f"plain2/{f.path}",
                                              CopySource={"Bucket": BUCKET, "Key": f"{prefix}/{f.path}"}), plan.files))
    plain2_s = time.monotonic() - t

    from airflow_provider_streamstate.engine.catalog.gc import collect_garbage

    collect_garbage(store)  # its census lets the next snapshot rely on the parent's blobs
    requests.clear()
    t = time.monotonic()
    again = create_snapshot(url, store, "bench", parallelism=PARALLELISM, always=True)
    again_s = time.monotonic() - t
    again_requests = dict(requests)

    requests.clear()
    t = time.monotonic()
    summed = create_snapshot(f"s3a://{BUCKET}/summed", S3Store(c, BUCKET, "store-summed"), "bench",
                             parallelism=PARALLELISM)
    summed_s = time.monotonic() - t
    summed_requests = dict(requests)
    server.stop()

    results = {
        "objects_in_checkpoint": len(objects), "planned_files": len(plan.files), "planned_bytes": total_bytes,
        "plan_seconds": round(plan_s, 3), "plan_requests": plan_requests,
        "snapshot_seconds": round(snap_s, 3), "snapshot_requests": snap_requests,
        "snapshot_files_hashed": snap.files_hashed, "snapshot_blobs_stored": snap.blobs_uploaded,
        "snapshot_manifest_bytes": snap.manifest_bytes,
        "plain_copy_object_seconds": round(plain_s, 3),
        "restore_seconds": round(restore_s, 3), "restore_requests": restore_requests,
        "plain_copy_object_again_seconds": round(plain2_s, 3),
        "restore_over_plain_copy": round(restore_s / plain2_s, 2),
        "unchanged_snapshot_unchanged": again.unchanged, "unchanged_snapshot_manifest_bytes": again.manifest_bytes,
        "unchanged_snapshot_seconds": round(again_s, 3), "unchanged_snapshot_files_hashed": again.files_hashed,
        "unchanged_snapshot_requests": again_requests,
        "unchanged_snapshot_blobs_inherited": again.blobs_inherited,
        "unchanged_snapshot_blobs_checked": again.blobs_checked,
        "snapshot_over_plain_copy": round(snap_s / plain_s, 2),
        "checksummed_snapshot_seconds": round(summed_s, 3), "checksummed_snapshot_requests": summed_requests,
        "checksummed_files_from_checksum": summed.files_from_checksum,
        "checksummed_bytes_hashed": summed.bytes_hashed,
        "checksummed_snapshot_over_plain_copy": round(summed_s / plain_s, 2),
    }
    write_results("s3_checkpoint", results)


if __name__ == "__main__":
    main()
