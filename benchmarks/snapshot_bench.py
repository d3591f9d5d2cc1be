"""Snapshot benchmark: streamstate against a plain parallel copy of the same files.

    .venv/bin/python benchmarks/snapshot_bench.py [--rows-per-batch N] [--batches N] [--parallelism N]

Builds a RocksDB state of at least 500 MB with a real Spark query (deduplication over
wide synthetic keys), then, in one run and on the same files:

* full snapshot vs a plain parallel copy (local: file copies; S3: boto3 uploads with the
  same concurrency);
* restore vs the plain copy back (local) / boto3 downloads (S3);
* a snapshot after one more batch, and a snapshot with no new batch.

Results are ratios to the baselines measured in the same run, so they carry over between
machines better than seconds do. Prints a Markdown table and writes .bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench_common import WORK, MiB, rate_rows  # this folder is on sys.path; it puts the repo there too

from dev import stack as stack_mod


def build_state(spark: Any, checkpoint: str, rows_per_batch: int, batches: int) -> int:
    """Run a dedup query over `rate-micro-batch` rows until `batches` more batches commit."""
    from pyspark.sql import functions as F

    rows = rate_rows(spark, rows_per_batch)
    # ~260-byte keys of hex digests: close to incompressible, so state size is predictable.
    wide = rows.select(
        F.concat_ws(":", F.col("value").cast("string"), F.sha2(F.col("value").cast("string"), 512),
                    F.sha2(F.concat(F.col("value").cast("string"), F.lit("x")), 512)).alias("k")
    )
    query = (
        wide.dropDuplicates(["k"]).writeStream.format("noop").outputMode("append")
        .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start()
    )
    start = query.lastProgress["batchId"] if query.lastProgress else -1
    target = None
    while True:
        p = query.lastProgress
        if p is not None:
            target = target if target is not None else p["batchId"] + batches - 1
            if p["batchId"] >= target:
                break
        if query.exception():
            raise RuntimeError(query.exception())
        time.sleep(0.5)
    query.stop()
    del start
    return int(query.lastProgress["batchId"])


def timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def parallel(fn: Any, items: list[Any], n: int) -> None:
    with ThreadPoolExecutor(max_workers=n) as pool:
        list(pool.map(fn, items))


def state_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options that size the RocksDB state `build_state` makes (shared by the S3 benchmarks)."""
    p.add_argument("--rows-per-batch", type=int, default=300_000)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--parallelism", type=int, default=8)
    p.add_argument("--min-state-mb", type=int, default=500)
    return p


def main(argv: list[str] | None = None) -> int:
    args = state_options(argparse.ArgumentParser(description=__doc__.split("\n")[0])).parse_args(argv)

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.lifecycle.restore import restore_snapshot
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.spark import spark_session

    shutil.rmtree(WORK / "run", ignore_errors=True)
    run = WORK / "run"
    run.mkdir(parents=True)
    stack = stack_mod.up(WORK / "stack")
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3", endpoint_url=stack.s3["primary"]["endpoint_url"], region_name="us-east-1",
        aws_access_key_id="bench", aws_secret_access_key="bench",
        config=Config(max_pool_connections=args.parallelism * 2),
    )
    bucket = stack.s3["primary"]["bucket"]
    spark = spark_session("streamstate-bench", stack.spark_jars, state_store="rocksdb", shuffle_partitions=8)
    checkpoint = str(run / "checkpoint")

    print(f"building state: {args.batches} batches x {args.rows_per_batch} rows ...", flush=True)
    build_s, last_batch = timed(lambda: build_state(spark, checkpoint, args.rows_per_batch, args.batches))
    plan = CheckpointReader(checkpoint).plan()
    files = [f.path for f in plan.files]
    state_bytes = sum(f.size for f in plan.files)
    print(f"  batch {last_batch}: {len(files)} files, {state_bytes / MiB:.0f} MiB in the cut ({build_s:.0f}s)")
    if state_bytes < args.min_state_mb * MiB:
        print(f"state is below {args.min_state_mb} MB; raise --rows-per-batch or --batches", file=sys.stderr)
        return 1
    root = Path(checkpoint)
    for f in files:  # warm the page cache so every contender reads from memory
        (root / f).read_bytes()
    n = args.parallelism
    r: dict[str, Any] = {"state_bytes": state_bytes, "files": len(files), "parallelism": n, "batch_id": last_batch}

    # --- local -------------------------------------------------------------------------
    def plain_copy(dst: Path, fsync: bool = False) -> None:
        def one(rel: str) -> None:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, dst / rel)
            if fsync:  # the durability the local store gives every blob before publishing
                fd = os.open(dst / rel, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)

        parallel(one, files, n)

    r["local_copy_s"], _ = timed(lambda: plain_copy(run / "copy"))
    r["local_copy_fsync_s"], _ = timed(lambda: plain_copy(run / "copy-fsync", fsync=True))
    shutil.rmtree(run / "copy-fsync")
    local = LocalStore(run / "store")
    r["local_snapshot_s"], full = timed(lambda: create_snapshot(checkpoint, local, "bench", parallelism=n))
    r["local_snapshot_uploaded"] = full.bytes_uploaded
    r["local_restore_s"], _ = timed(lambda: restore_snapshot(local, "bench", full.manifest.snapshot_id, run / "restored", parallelism=n))
    r["local_copy_back_s"], _ = timed(lambda: plain_copy(run / "copy-back"))
    r["local_copy_back_fsync_s"], _ = timed(lambda: plain_copy(run / "copy-back-fsync", fsync=True))
    shutil.rmtree(run / "copy")
    shutil.rmtree(run / "copy-back")
    shutil.rmtree(run / "copy-back-fsync")
    shutil.rmtree(run / "restored")

    # --- S3 ----------------------------------------------------------------------------
    def upload(prefix: str) -> None:
        parallel(lambda rel: s3.upload_file(str(root / rel), bucket, f"{prefix}/{rel}"), files, n)

    def download(prefix: str, dst: Path) -> None:
        def one(rel: str) -> None:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, f"{prefix}/{rel}", str(dst / rel))

        parallel(one, files, n)

    r["s3_upload_s"], _ = timed(lambda: upload("baseline"))
    remote = S3Store(s3, bucket, "snapshots")
    r["s3_snapshot_s"], s3_full = timed(lambda: create_snapshot(checkpoint, remote, "bench", parallelism=n))
    r["s3_download_s"], _ = timed(lambda: download("baseline", run / "download"))
    r["s3_restore_s"], _ = timed(lambda: restore_snapshot(remote, "bench", s3_full.manifest.snapshot_id, run / "s3-restored", parallelism=n))
    shutil.rmtree(run / "download")
    shutil.rmtree(run / "s3-restored")

    # --- incremental -------------------------------------------------------------------
    r["local_nochange_s"], nochange = timed(lambda: create_snapshot(checkpoint, local, "bench", parallelism=n))
    r["local_nochange_uploaded"] = nochange.bytes_uploaded
    r["s3_nochange_s"], s3_nochange = timed(lambda: create_snapshot(checkpoint, remote, "bench", parallelism=n))
    r["s3_nochange_uploaded"] = s3_nochange.bytes_uploaded
    build_state(spark, checkpoint, args.rows_per_batch, 1)
    r["local_one_batch_s"], one = timed(lambda: create_snapshot(checkpoint, local, "bench", parallelism=n))
    r["local_one_batch_uploaded"] = one.bytes_uploaded
    r["s3_one_batch_s"], s3_one = timed(lambda: create_snapshot(checkpoint, remote, "bench", parallelism=n))
    r["s3_one_batch_uploaded"] = s3_one.bytes_uploaded
    r["one_batch_state_bytes"] = one.manifest.bytes_total
    spark.sparkContext.setLogLevel("OFF")  # RocksDB maintenance racing shutdown logs harmless errors
    spark.stop()
    stack_mod.down(WORK / "stack")

    mb = state_bytes / MiB
    rows = [
        ("full snapshot, local store", r["local_snapshot_s"], "parallel file copy", r["local_copy_s"]),
        ("full snapshot, local store", r["local_snapshot_s"], "parallel file copy + fsync", r["local_copy_fsync_s"]),
        ("restore, local store", r["local_restore_s"], "parallel file copy", r["local_copy_back_s"]),
        ("restore, local store", r["local_restore_s"], "parallel file copy + fsync", r["local_copy_back_fsync_s"]),
        ("full snapshot, S3 store", r["s3_snapshot_s"], "boto3 parallel upload", r["s3_upload_s"]),
        ("restore, S3 store", r["s3_restore_s"], "boto3 parallel download", r["s3_download_s"]),
        ("snapshot after one new batch, local", r["local_one_batch_s"], "full local snapshot", r["local_snapshot_s"]),
        ("snapshot after one new batch, S3", r["s3_one_batch_s"], "full S3 snapshot", r["s3_snapshot_s"]),
        ("no-change snapshot, local", r["local_nochange_s"], "full local snapshot", r["local_snapshot_s"]),
        ("no-change snapshot, S3", r["s3_nochange_s"], "full S3 snapshot", r["s3_snapshot_s"]),
    ]
    print(f"\nstate: {mb:.0f} MiB in {len(files)} files (RocksDB, batch {last_batch}); parallelism {n}\n")
    print("| operation | seconds | MiB/s | baseline | baseline s | ratio (op / baseline) |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    for name, secs, base, base_s in rows:
        print(f"| {name} | {secs:.2f} | {mb / secs:.0f} | {base} | {base_s:.2f} | {secs / base_s:.2f} |")
    print(
        f"\nbytes uploaded: no-change {r['local_nochange_uploaded']} (local) / {r['s3_nochange_uploaded']} (S3); "
        f"after one batch {r['local_one_batch_uploaded'] / MiB:.1f} MiB (local) / {r['s3_one_batch_uploaded'] / MiB:.1f} MiB (S3) "
        f"of {r['one_batch_state_bytes'] / MiB:.0f} MiB"
    )
    (WORK / "results.json").write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
