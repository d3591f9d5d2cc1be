"""S3 checkpoint benchmark, real RocksDB state: a snapshot of a checkpoint that lives in S3
into an S3 store on the same endpoint (one server-side copy per object, to a blob under a
unique id named by the SHA-256 S3 computes) and on another endpoint (streamed through this
host, hashed on the way), and a restore into the same endpoint, each against plain boto3
doing the same copy of the same objects with the same concurrency, in the same run.

    .venv/bin/python benchmarks/s3_rocksdb_checkpoint_bench.py [--rows-per-batch 300000] [--batches 8]

Builds RocksDB state with a real Spark query (the `snapshot_bench.py` builder: deduplication
over ~260-byte keys, 8 shuffle partitions, no changelog checkpointing) into a local
checkpoint, uploads that checkpoint as-is to the stack's `primary` S3 endpoint (the layout
S3A writes: one object per file), then times, with 8 parallel transfers for everyone:

* same endpoint: `create_snapshot("s3a://...")` into a store in the same bucket, against
  `copy_object` of every planned object (no bytes through this host, the floor), without
  and with the objects carrying their SHA-256;
* restore, same endpoint: `restore_snapshot` of that snapshot into an empty prefix of the
  bucket, against `copy_object` of the same objects;
* other endpoint: `create_snapshot` into a store on the `dr` endpoint, against a
  `get_object` -> `put_object` of every planned object through this host.

Prints a Markdown table (ratio = baseline seconds / snapshot seconds: 1.0 is as fast as
the plain copy) and writes .bench/s3_rocksdb_checkpoint_results.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench_common import WORK, MiB  # this folder is on sys.path; it puts the repo there too
from snapshot_bench import build_state, parallel, state_options, timed

from dev import stack as stack_mod

STATE_DIR = WORK / "stack-s3-rocksdb"


def client(stack: Any, region: str, pool: int) -> Any:
    import boto3
    from botocore.config import Config

    s3 = stack.s3[region]
    return boto3.client(
        "s3", endpoint_url=s3["endpoint_url"], region_name=s3["region"],
        aws_access_key_id=stack_mod.S3_ACCESS_KEY, aws_secret_access_key=stack_mod.S3_SECRET_KEY,
        config=Config(max_pool_connections=pool, s3={"addressing_style": "path"}),
    )


def counting(c: Any) -> Counter[str]:
    """HTTP requests the client sends, by operation."""
    seen: Counter[str] = Counter()
    c.meta.events.register("before-call.s3.*", lambda model, **_: seen.update([model.name]))
    return seen


def main(argv: list[str] | None = None) -> int:
    args = state_options(argparse.ArgumentParser(description=__doc__.split("\n")[0])).parse_args(argv)

    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.spark import spark_session

    n = args.parallelism
    run = WORK / "s3-rocksdb-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    stack_mod.down(STATE_DIR)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    stack = stack_mod.up(STATE_DIR)
    r: dict[str, Any] = {"parallelism": n}
    try:
        spark = spark_session("streamstate-s3-rocksdb-bench", stack.spark_jars, state_store="rocksdb",
                              shuffle_partitions=8)
        local = str(run / "checkpoint")
        print(f"building state: {args.batches} batches x {args.rows_per_batch} rows ...", flush=True)
        r["build_s"], r["batch_id"] = timed(lambda: build_state(spark, local, args.rows_per_batch, args.batches))
        spark.sparkContext.setLogLevel("OFF")  # RocksDB maintenance racing shutdown logs harmless errors
        spark.stop()

        primary, dr = client(stack, "primary", 2 * n), client(stack, "dr", 2 * n)
        bucket, dr_bucket = stack.s3["primary"]["bucket"], stack.s3["dr"]["bucket"]
        root = Path(local)
        every = sorted(str(f.relative_to(root)) for f in root.rglob("*") if f.is_file())
        r["upload_s"], _ = timed(lambda: parallel(
            lambda rel: primary.put_object(Bucket=bucket, Key=f"ckpt/{rel}", Body=(root / rel).read_bytes()), every, n))
        url = f"s3a://{bucket}/ckpt"

        seen = counting(primary)
        r["plan_s"], plan = timed(lambda: CheckpointReader(url, connection=primary).plan())
        r["plan_requests"] = dict(seen)
        files = [(f.path, f.size) for f in plan.files]
        r["files"], r["state_bytes"] = len(files), sum(s for _, s in files)
        print(f"  batch {plan.batch_id}: {len(files)} files, {r['state_bytes'] / MiB:.0f} MiB in the cut, in S3",
              flush=True)
        if r["state_bytes"] < args.min_state_mb * MiB:
            print(f"state is below {args.min_state_mb} MB; raise --rows-per-batch or --batches", file=sys.stderr)
            return 1

        # Same endpoint: server-side copies.
        r["same_plain_copy_s"], _ = timed(lambda: parallel(lambda f: primary.copy_object(
            Bucket=bucket, Key=f"plain/{f[0]}", CopySource={"Bucket": bucket, "Key": f"ckpt/{f[0]}"}), files, n))
        # The copy the snapshot makes asks S3 for the copy's SHA-256 (the proof of the blob's
        # name); moto computes it here, on this host's cores, where S3 does it server side.
        r["same_plain_copy_checksum_s"], _ = timed(lambda: parallel(lambda f: primary.copy_object(
            Bucket=bucket, Key=f"plain-summed/{f[0]}", CopySource={"Bucket": bucket, "Key": f"ckpt/{f[0]}"},
            ChecksumAlgorithm="SHA256"), files, n))
        seen.clear()
        same = S3Store(primary, bucket, "store-same")
        r["same_snapshot_s"], snap = timed(lambda: create_snapshot(url, same, "bench", parallelism=n,
                                                                   checkpoint_connection=primary))
        r["same_snapshot_requests"] = dict(seen)
        r["same_snapshot_bytes_uploaded"] = snap.bytes_uploaded

        # Restore into the same endpoint, an empty prefix: one checked copy per file, in place.
        r["restore_plain_copy_s"], _ = timed(lambda: parallel(lambda f: primary.copy_object(
            Bucket=bucket, Key=f"plain-restore/{f[0]}", CopySource={"Bucket": bucket, "Key": f"ckpt/{f[0]}"}), files, n))
        seen.clear()
        r["restore_s"], _ = timed(lambda: restore_snapshot(same, "bench", snap.manifest.snapshot_id,
                                                           f"s3a://{bucket}/restored", parallelism=n))
        r["restore_requests"] = dict(seen)

        # Same endpoint, the objects carrying their SHA-256 (as S3A writes them with
        # fs.s3a.create.checksum.algorithm=SHA256): named by a HEAD, no byte read here.
        parallel(lambda rel: primary.put_object(Bucket=bucket, Key=f"summed/{rel}", Body=(root / rel).read_bytes(),
                                                ChecksumAlgorithm="SHA256"), every, n)
        seen.clear()
        summed = S3Store(primary, bucket, "store-summed")
        r["summed_snapshot_s"], snap3 = timed(lambda: create_snapshot(
            f"s3a://{bucket}/summed", summed, "bench", parallelism=n, checkpoint_connection=primary))
        r["summed_snapshot_requests"] = dict(seen)
        r["summed_files_from_checksum"] = snap3.files_from_checksum
        r["summed_bytes_hashed"] = snap3.bytes_hashed

        # Another endpoint: every byte through this host.
        def stream_one(f: tuple[str, int]) -> None:
            body = primary.get_object(Bucket=bucket, Key=f"ckpt/{f[0]}")["Body"].read()
            dr.put_object(Bucket=dr_bucket, Key=f"plain/{f[0]}", Body=body)

        r["other_plain_copy_s"], _ = timed(lambda: parallel(stream_one, files, n))
        seen.clear()
        dr_seen = counting(dr)
        other = S3Store(dr, dr_bucket, "store-other")
        r["other_snapshot_s"], snap2 = timed(lambda: create_snapshot(url, other, "bench", parallelism=n,
                                                                     checkpoint_connection=primary))
        r["other_snapshot_requests"] = {"checkpoint": dict(seen), "store": dict(dr_seen)}
        r["other_snapshot_bytes_uploaded"] = snap2.bytes_uploaded
    finally:
        stack_mod.down(STATE_DIR)
    shutil.rmtree(run, ignore_errors=True)

    r["same_ratio"] = round(r["same_plain_copy_s"] / r["same_snapshot_s"], 2)
    r["same_ratio_to_checksummed_copy"] = round(r["same_plain_copy_checksum_s"] / r["same_snapshot_s"], 2)
    r["restore_ratio"] = round(r["restore_plain_copy_s"] / r["restore_s"], 2)
    r["other_ratio"] = round(r["other_plain_copy_s"] / r["other_snapshot_s"], 2)
    r["summed_ratio"] = round(r["same_plain_copy_s"] / r["summed_snapshot_s"], 2)
    r["summed_ratio_to_checksummed_copy"] = round(r["same_plain_copy_checksum_s"] / r["summed_snapshot_s"], 2)
    mb = r["state_bytes"] / MiB
    print()
    print(f"State: {mb:.0f} MiB in {r['files']} files at batch {r['batch_id']}; planned in {r['plan_s']:.2f} s "
          f"({sum(r['plan_requests'].values())} requests)")
    print("| snapshot into | streamstate s | MiB/s | baseline | baseline s | ratio (baseline / streamstate) |")
    print("|---|---:|---:|---|---:|---:|")
    print(f"| S3 store, same endpoint | {r['same_snapshot_s']:.2f} | {mb / r['same_snapshot_s']:.0f} | "
          f"boto3 copy_object | {r['same_plain_copy_s']:.2f} | {r['same_ratio']} |")
    print(f"| S3 store, same endpoint | {r['same_snapshot_s']:.2f} | {mb / r['same_snapshot_s']:.0f} | "
          f"boto3 copy_object asking for SHA-256 | {r['same_plain_copy_checksum_s']:.2f} | "
          f"{r['same_ratio_to_checksummed_copy']} |")
    print(f"| S3 store, same endpoint, objects with SHA-256 | {r['summed_snapshot_s']:.2f} | "
          f"{mb / r['summed_snapshot_s']:.0f} | boto3 copy_object | {r['same_plain_copy_s']:.2f} | {r['summed_ratio']} |")
    print(f"| S3 store, same endpoint, objects with SHA-256 | {r['summed_snapshot_s']:.2f} | "
          f"{mb / r['summed_snapshot_s']:.0f} | boto3 copy_object asking for SHA-256 | "
          f"{r['same_plain_copy_checksum_s']:.2f} | {r['summed_ratio_to_checksummed_copy']} |")
    print(f"| S3 store, other endpoint | {r['other_snapshot_s']:.2f} | {mb / r['other_snapshot_s']:.0f} | "
          f"boto3 get_object + put_object | {r['other_plain_copy_s']:.2f} | {r['other_ratio']} |")
    print(f"| restore into the same endpoint | {r['restore_s']:.2f} | {mb / r['restore_s']:.0f} | "
          f"boto3 copy_object | {r['restore_plain_copy_s']:.2f} | {r['restore_ratio']} |")
    (WORK / "s3_rocksdb_checkpoint_results.json").write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
