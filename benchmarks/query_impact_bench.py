"""What snapshots cost the running query: batch times with and without snapshots in flight.

    .venv/bin/python benchmarks/query_impact_bench.py [--keys N] [--rows-per-batch N] [--phase-seconds S] [--parallelism N]

A stateful aggregation (RocksDB with changelog checkpointing, bounded state of `--keys`
keys, every batch updating `--rows-per-batch` of them) runs as fast as it can. Phases
alternate: no snapshot; a snapshot of every committed batch; none; snapshots back to back
(no pause at all, most of them with no new batch); none; a snapshot per batch again; none. Each phase reports the median batch time; a snapshot phase is
compared with the mean of the quiet phases on either side (so slow drift cancels out).
A snapshot per batch is the most a schedule would ask; one every few minutes is usual.
Prints a Markdown table and writes .bench/query_impact.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from typing import Any

from bench_common import WORK, MiB, rate_rows  # this folder is on sys.path; it puts the repo there too


def start_query(spark: Any, checkpoint: str, keys: int, rows_per_batch: int) -> Any:
    from pyspark.sql import functions as F

    rows = rate_rows(spark, rows_per_batch)
    keyed = rows.select((F.col("value") * 7919 % keys).alias("k"), F.col("value").alias("v"))
    agg = keyed.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.max("v").alias("m"))
    return (
        agg.writeStream.format("noop").outputMode("update")
        .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start()
    )


def batch_times(query: Any, since_batch: int) -> list[tuple[int, float]]:
    """(batch id, seconds) of batches after `since_batch` still in the progress buffer."""
    return [
        (p["batchId"], p["durationMs"]["triggerExecution"] / 1000)
        for p in query.recentProgress
        if p["batchId"] > since_batch and p.get("numInputRows", 0) > 0
    ]


def snapshot_loop(
    query: Any, checkpoint: str, store: Any, parallelism: int, every_batch: bool, stop: threading.Event, out: list[Any]
) -> None:
    """Snapshot until `stop`: each newly committed batch once, or back to back."""
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot

    done = -1
    while not stop.is_set():
        if every_batch and query.lastProgress["batchId"] <= done:
            time.sleep(0.05)  # wait for the next commit
            continue
        out.append(create_snapshot(checkpoint, store, "impact", parallelism=parallelism))
        done = out[-1].manifest.batch_id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--rows-per-batch", type=int, default=100_000)
    p.add_argument("--phase-seconds", type=float, default=60)
    p.add_argument("--parallelism", type=int, default=8, help="snapshot transfers (the CLI's default)")
    args = p.parse_args(argv)

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.state.spark import spark_session

    run = WORK / "impact"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    spark = spark_session(
        "streamstate-query-impact", state_store="rocksdb-changelog", shuffle_partitions=8,
        conf={"spark.sql.streaming.numRecentProgressUpdates": "1000"},
    )
    checkpoint = str(run / "checkpoint")
    store = LocalStore(run / "store")
    query = start_query(spark, checkpoint, args.keys, args.rows_per_batch)

    warm_batches = args.keys // args.rows_per_batch + 10  # every key in state before measuring
    print(f"warming up: {warm_batches} batches to fill {args.keys:,} keys ...", flush=True)
    while not query.lastProgress or query.lastProgress["batchId"] < warm_batches:
        if query.exception():
            raise RuntimeError(query.exception())
        time.sleep(0.5)

    phases: list[dict[str, Any]] = []
    n = args.parallelism
    for mode, parallelism in (("quiet", 0), ("per batch", n), ("quiet", 0), ("back to back", n), ("quiet", 0),
                              ("per batch", n), ("quiet", 0)):
        stop = threading.Event()
        snaps: list[Any] = []

        since = query.lastProgress["batchId"]
        worker = threading.Thread(
            target=snapshot_loop, args=(query, checkpoint, store, parallelism, mode == "per batch", stop, snaps),
            daemon=True,
        ) if parallelism else None
        if worker:
            worker.start()
        time.sleep(args.phase_seconds)
        stop.set()
        if worker:
            worker.join()
        times = batch_times(query, since)
        phases.append({
            "mode": mode,
            "snapshot_parallelism": parallelism,
            "batches": len(times),
            "median_batch_s": statistics.median(t for _, t in times),
            "snapshots": len(snaps),
            "mean_snapshot_s": statistics.mean(s.seconds for s in snaps) if snaps else None,
            "mean_uploaded_mib": statistics.mean(s.bytes_uploaded for s in snaps) / MiB if snaps else None,
            "state_mib": snaps[-1].manifest.bytes_total / MiB if snaps else None,
        })
        print(f"  phase {len(phases)}: {phases[-1]}", flush=True)
    query.stop()
    spark.sparkContext.setLogLevel("OFF")  # RocksDB maintenance racing shutdown logs harmless errors
    spark.stop()

    print(f"\n{args.keys:,} keys, {args.rows_per_batch:,} rows per batch, {args.phase_seconds:.0f} s phases; "
          f"CPUs: {os.cpu_count()}\n")
    print("| snapshots in flight | batches | median batch s | quiet median s | ratio | snapshots taken | mean snapshot s | mean MiB uploaded |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, ph in enumerate(phases):
        if not ph["snapshot_parallelism"]:
            continue
        quiet = (phases[i - 1]["median_batch_s"] + phases[i + 1]["median_batch_s"]) / 2
        ph["ratio"] = ph["median_batch_s"] / quiet
        print(f"| {ph['mode']}, parallelism {ph['snapshot_parallelism']} | {ph['batches']} | {ph['median_batch_s']:.2f} "
              f"| {quiet:.2f} | {ph['ratio']:.2f} | {ph['snapshots']} | {ph['mean_snapshot_s']:.2f} "
              f"| {ph['mean_uploaded_mib']:.1f} |")
    quiet_all = [ph["median_batch_s"] for ph in phases if not ph["snapshot_parallelism"]]
    print(f"\nquiet phases' median batch s: {', '.join(f'{q:.2f}' for q in quiet_all)}")
    (WORK / "query_impact.json").write_text(json.dumps({"args": vars(args), "phases": phases}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
