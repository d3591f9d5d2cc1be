"""Replication benchmark: streamstate replicate against a plain parallel boto3 copy.

    .venv/bin/python benchmarks/replicate_bench.py [--rows-per-batch N] [--batches N] [--parallelism N] [--rounds N]

Builds RocksDB state with a real Spark query (the snapshot benchmark's deduplication over
wide synthetic keys), snapshots it into the local stack's `primary` S3 endpoint, then, in
one run and on the same objects:

* full replication primary -> dr (two endpoints, two clients, every byte hashed while it
  streams) vs a plain parallel boto3 copy of the same blob objects between the two
  endpoints (`get_object` + `put_object`, same concurrency, no hashing, no checks);
  each contender `--rounds` times into fresh prefixes, alternating which goes first; the
  best of each counts;
* incremental replication after one more batch: bytes copied vs the bytes the new
  snapshot added to the source store.

Prints a Markdown table and writes .bench/replicate_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench_common import WORK, MiB  # this folder is on sys.path; it puts the repo there too
from snapshot_bench import build_state

from dev import stack as stack_mod


def client(stack: stack_mod.Stack, region: str, n: int) -> Any:
    import boto3
    from botocore.config import Config

    s3 = stack.s3[region]
    return boto3.client(
        "s3", endpoint_url=s3["endpoint_url"], region_name=s3["region"], aws_access_key_id=stack_mod.S3_ACCESS_KEY,
        aws_secret_access_key=stack_mod.S3_SECRET_KEY,
        config=Config(max_pool_connections=n * 2, s3={"addressing_style": "path"}),
    )


def timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows-per-batch", type=int, default=150_000)
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--parallelism", type=int, default=8)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args(argv)

    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.lifecycle.replicate import replicate
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.engine.stores.base import blob_key

    run = WORK / "replicate-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    stack = stack_mod.up(WORK / "stack-replicate")  # its own: other benchmarks may run meanwhile
    n = args.parallelism
    primary, dr = client(stack, "primary", n), client(stack, "dr", n)
    bucket = stack.s3["primary"]["bucket"]
    spark = spark_session("streamstate-replicate-bench", stack.spark_jars, state_store="rocksdb", shuffle_partitions=8)
    checkpoint = str(run / "checkpoint")
    try:
        print(f"building state: {args.batches} batches x {args.rows_per_batch} rows ...", flush=True)
        build_s, last_batch = timed(lambda: build_state(spark, checkpoint, args.rows_per_batch, args.batches))
        src = S3Store(primary, bucket, "bench/source")
        snap = create_snapshot(checkpoint, src, "bench", parallelism=n)
        blobs = snap.manifest.blobs
        total = sum(blobs.values())
        print(f"  batch {last_batch}: {len(blobs)} blobs, {total / MiB:.0f} MiB in the snapshot ({build_s:.0f}s)", flush=True)
        r: dict[str, Any] = {"blobs": len(blobs), "bytes": total, "parallelism": n, "batch_id": last_batch,
                             "rounds": args.rounds, "baseline_s": [], "replicate_s": []}

        def plain_copy(prefix: str) -> None:
            def one(digest: str) -> None:
                body = primary.get_object(Bucket=bucket, Key=f"bench/source/{blob_key(digest)}")["Body"].read()
                dr.put_object(Bucket=bucket, Key=f"{prefix}/{blob_key(digest)}", Body=body)

            with ThreadPoolExecutor(max_workers=n) as pool:
                list(pool.map(one, list(blobs)))

        def baseline_round(i: int) -> None:
            r["baseline_s"].append(timed(lambda: plain_copy(f"bench/baseline-{i}"))[0])

        def replicate_round(i: int) -> None:
            dst = S3Store(dr, bucket, f"bench/replica-{i}")
            secs, result = timed(lambda: replicate(src, dst, "bench", parallelism=n))
            assert result.bytes_copied == total, (result.bytes_copied, total)
            r["replicate_s"].append(secs)

        for i in range(args.rounds):  # alternating who goes first: a load change hits both alike
            for step in (baseline_round, replicate_round) if i % 2 == 0 else (replicate_round, baseline_round):
                step(i)
            print(f"  round {i + 1}: boto3 copy {r['baseline_s'][-1]:.2f}s, replicate {r['replicate_s'][-1]:.2f}s",
                  flush=True)
        dst = S3Store(dr, bucket, "bench/replica-0")
        r["again_s"], again = timed(lambda: replicate(src, dst, "bench", parallelism=n))
        r["again_bytes_copied"] = again.bytes_copied

        build_state(spark, checkpoint, args.rows_per_batch, 1)
        one = create_snapshot(checkpoint, src, "bench", parallelism=n)
        r["one_batch_bytes_new"] = one.bytes_uploaded
        r["one_batch_bytes_total"] = one.manifest.bytes_total
        r["incremental_s"], inc = timed(lambda: replicate(src, dst, "bench", all_missing=True, parallelism=n))
        r["incremental_bytes_copied"] = inc.bytes_copied
        r["incremental_lag_s"] = inc.snapshots[0].lag_seconds
    finally:
        spark.sparkContext.setLogLevel("OFF")  # RocksDB maintenance racing shutdown logs harmless errors
        spark.stop()
        stack_mod.down(WORK / "stack-replicate")

    base, rep = min(r["baseline_s"]), min(r["replicate_s"])
    mb = total / MiB
    r["throughput_ratio"] = base / rep
    print(f"\nsnapshot: {mb:.0f} MiB in {len(blobs)} blobs (RocksDB, batch {last_batch}); parallelism {n}; "
          f"best of {args.rounds}\n")
    print("| operation | seconds | MiB/s | baseline | baseline s | throughput ratio (op / baseline) |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    print(f"| full replication primary -> dr | {rep:.2f} | {mb / rep:.0f} | boto3 parallel get + put | {base:.2f} | "
          f"{base / rep:.2f} |")
    print(f"\nreplicating again: {r['again_bytes_copied']} bytes copied in {r['again_s']:.2f}s")
    print(f"after one new batch: {r['incremental_bytes_copied'] / MiB:.1f} MiB copied in {r['incremental_s']:.2f}s; "
          f"the snapshot added {r['one_batch_bytes_new'] / MiB:.1f} MiB of {r['one_batch_bytes_total'] / MiB:.0f} MiB "
          f"to the source store; lag {r['incremental_lag_s']:.1f}s")
    (WORK / "replicate_results.json").write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
