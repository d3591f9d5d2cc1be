"""Key lookups in a snapshot in the S3 store, against Spark's state reader on the same
snapshot, and a key's history over many snapshots (engine/lookup).

    .venv/bin/python benchmarks/lookup_store_bench.py [--keys 10000000] [--partitions 200] \
        [--store rocksdb-changelog|rocksdb|hdfs] [--history 100] [--touch 2000] [--lookups 200] \
        [--no-spark] [--no-history]

Builds once (kept in .bench/lookup-store-<store>-<keys>-<partitions>-<history>) an aggregation
checkpoint: count and sum per `account-<n>`, n < --keys, over --partitions state partitions
(batches 0 and 1 write every key once), then --history batches of --touch rows each (each
writes a few keys of every partition: RocksDB changelogs, or HDFS-backed deltas; a zip or
`.snapshot` every 10 versions). Then, in one run (ratios within it, never across runs):

* snapshots of each of the last --history batches into an S3 store (a moto server on
  loopback, started here): incremental, so each uploads what changed;
* cold lookup: a fresh process (nothing cached) opens the store, resolves `latest` and looks
  one key up (`state get` without the interpreter's start), with the bytes it read against
  the size of the key's partition in the snapshot, the GETs it sent (ranged or whole), the
  RocksDB tables it consulted and, for those, their index and filter sizes and the data
  blocks read: what the bytes read are bounded by; and its peak RSS;
* warm lookups: `--lookups` other keys of that partition in the same process (one source:
  tables opened once, each key then a data block per table consulted), p50 and p95;
* the CLI: `streamstate state get --json` on the same key, `--cli-runs` times (the median kept),
  wall time including Python's start, and the CPU of each run;
* Spark: the same key through Spark's state reader on the same snapshot, as `streamstate state
  show --where` does it (the snapshot laid out from S3, then a filter on the state data
  source), in a session already started; and the filter alone on the laid-out copy;
* history: the key across the --history snapshots in a fresh process: time, manifests read,
  blobs fetched (each once?) against the blobs of its partition that changed in the range,
  and its peak RSS.

Writes .bench/lookup_store_results-<store>-<keys>-<partitions>.json. `--no-spark` and
`--no-history` leave out the Spark baseline and the history (the partition-growth run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import REPO, WORK

BUCKET = "lookup-bench"


def build(path: Path, keys: int, partitions: int, store: str, history: int, touch: int) -> Any:
    """The checkpoint (built once) and a Spark session kept for the baseline."""
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.state.spark import spark_session

    spark = spark_session("lookup-store-bench", shuffle_partitions=partitions, state_store=store, conf={
        "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
        "spark.sql.streaming.minBatchesToRetain": str(history + 10),
        "spark.driver.memory": "3g"})
    _ = spark.streams.active

    def run(rows: int, until: int) -> None:
        df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).option("numPartitions", 8).load()
              .withColumn("account", F.concat(F.lit("account-"), (F.col("value") % keys).cast("string")))
              .groupBy("account").agg(F.count("*").alias("n"), F.sum("value").alias("total")))
        q = df.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(path)) \
            .trigger(processingTime="500 milliseconds").start()
        while not q.lastProgress or q.lastProgress["batchId"] < until:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            time.sleep(0.5)
        q.stop()

    done = CheckpointReader(str(path)).committed_batches() if (path / "commits").is_dir() else []
    if not done or done[-1] < 1:
        t0 = time.perf_counter()
        run(keys // 2, 1)
        print(f"built {keys} keys in {time.perf_counter() - t0:.0f} s", flush=True)
    done = CheckpointReader(str(path)).committed_batches()
    if done[-1] < 1 + history:
        t0 = time.perf_counter()
        run(touch, 1 + history)  # the rate source goes on from where it stopped, `touch` rows a batch
        print(f"{history} small batches in {time.perf_counter() - t0:.0f} s", flush=True)
    return spark


def child(args: argparse.Namespace) -> None:
    """A fresh process: one cold lookup, warm ones in its partition, or a key's history."""
    import boto3
    from botocore.config import Config

    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.lookup import (
        PartitionCache,
        SnapshotSource,
        key_history,
        lookup_key,
    )

    client = boto3.client("s3", endpoint_url=args.endpoint, region_name="us-east-1", aws_access_key_id="k",
                          aws_secret_access_key="s", config=Config(s3={"addressing_style": "path"}))
    store = S3Store(client, BUCKET, "store")
    gets: list[tuple[str, int | None]] = []

    def counted(params: dict[str, Any], **_: Any) -> None:
        rng = params.get("headers", {}).get("Range")
        lo_hi = rng.split("=")[1].split("-") if rng else None
        gets.append((params.get("url_path", ""), int(lo_hi[1]) - int(lo_hi[0]) + 1 if lo_hi else None))

    client.meta.events.register("before-call.s3.GetObject", counted)
    out: dict[str, Any] = {}
    if args.child == "lookup":
        cache = PartitionCache(max_bytes=1 << 30)
        t0 = time.perf_counter()
        source = SnapshotSource(store, "bench", "latest")
        gets.clear()
        hit = lookup_key(source, key=[args.key], cache=cache)
        out["cold_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        out.update(found=hit.found, value=hit.to_json()["value"], partition=hit.partition, bytes_read=hit.bytes_read,
                   files_read=len(hit.files_read), snapshot_id=source.manifest.snapshot_id,
                   lookup_ms=round(hit.elapsed_ms, 1), requests=hit.requests,
                   gets_whole=sum(1 for _, n in gets if n is None), gets_ranged=sum(1 for _, n in gets if n),
                   bytes_ranged=sum(n for _, n in gets if n))
        out.update(tables_consulted(source, hit, cache))
        others = [k for k in json.loads(args.others)]
        warm, warm_bytes = [], []
        for k in others:
            t0 = time.perf_counter()
            h = lookup_key(source, key=[k], cache=cache)
            warm.append((time.perf_counter() - t0) * 1000)
            warm_bytes.append(h.bytes_read)
            assert h.partition == hit.partition, k
        out.update(warm_bytes_p50=int(statistics.median(warm_bytes)))
        warm.sort()
        out.update(warm_p50_ms=round(statistics.median(warm), 3), warm_p95_ms=round(warm[int(0.95 * len(warm))], 3),
                   warm_lookups=len(warm))
    else:
        t0 = time.perf_counter()
        h = key_history(store, "bench", key=[args.key], limit=args.history)
        out.update(history_s=round(time.perf_counter() - t0, 2), snapshots=len(h.versions), changes=len(h.changes),
                   manifests_read=h.manifests_read, blobs_read=h.blobs_read, distinct_blobs_read=h.distinct_blobs_read,
                   bytes_read=h.bytes_read, partition=h.versions[-1].partition)
    out["rss_mb"] = peak_rss_mb()
    print(json.dumps(out))


def tables_consulted(source: Any, hit: Any, cache: Any) -> dict[str, Any]:
    """The RocksDB tables the cold lookup opened: how many of the partition's, the sizes of
    their index and filter blocks, and the data blocks read (what bounds the bytes read)."""
    files = {f.path: f for s in ("default",) for f in source.partition_files(0, hit.partition, s)}
    tables = [p for p in files if p.endswith(".sst")]
    opened = [cache.peek(("table", files[p].identity)) for p in hit.files_read if p.endswith(".sst")]
    opened = [t for t in opened if t is not None]
    return {"tables_in_partition": len(tables), "tables_consulted": len(opened),
            "consulted_index_bytes": sum(t.index_handle.size for t in opened),
            "consulted_filter_bytes": sum(t.filter_bytes for t in opened),
            "consulted_meta_bytes_read": sum(t.meta_bytes for t in opened),
            "consulted_table_bytes": sum(t.size for t in opened),
            "data_blocks_read": sum(len(t._blocks) for t in opened),
            "data_block_bytes": sum(len(b) for t in opened for b in t._blocks.values())}


def peak_rss_mb() -> float:
    """This process's own peak RSS since it exec'd (VmHWM). Not `ru_maxrss`: Linux keeps that
    across execve, so a child forked from this benchmark (moto and the whole store in memory)
    would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # not Linux


def in_child(mode: str, endpoint: str, key: str, **extra: Any) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--endpoint", endpoint, "--key", key]
    for k, v in extra.items():
        argv += [f"--{k}", str(v)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--store", default="rocksdb-changelog", choices=("rocksdb-changelog", "rocksdb", "hdfs"))
    ap.add_argument("--no-spark", action="store_true", help="leave out Spark's state reader (the baseline)")
    ap.add_argument("--no-history", action="store_true", help="leave out the key's history")
    ap.add_argument("--history", type=int, default=100)
    ap.add_argument("--touch", type=int, default=2000)
    ap.add_argument("--lookups", type=int, default=200)
    ap.add_argument("--child", default=None)
    ap.add_argument("--endpoint", default=None)
    ap.add_argument("--key", default=None)
    ap.add_argument("--others", default="[]")
    ap.add_argument("--cli-runs", type=int, default=1, help="times `streamstate state get` runs (the median is kept)")
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    from bench_common import moto_s3

    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.lookup.encodings.murmur3 import partition_of
    from airflow_provider_streamstate.engine.lookup.encodings.types import atomic
    from airflow_provider_streamstate.engine.state.reader import StateReader
    from airflow_provider_streamstate.engine.state.spark import read_state

    WORK.mkdir(exist_ok=True)
    path = WORK / f"lookup-store-{args.store}-{args.keys}-{args.partitions}-{args.history}"
    spark = build(path, args.keys, args.partitions, args.store, args.history, args.touch)
    batches = CheckpointReader(str(path)).committed_batches()[-args.history:]

    server, client, _ = moto_s3(BUCKET)
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    store = S3Store(client, BUCKET, "store")
    t0 = time.perf_counter()
    manifests = [create_snapshot(str(path), store, "bench", batch_id=b, parallelism=8).manifest for b in batches]
    snapshot_s = time.perf_counter() - t0
    newest = manifests[-1]
    state_bytes = sum(f.size for f in newest.files if f.path.startswith("state/"))
    print(f"{len(manifests)} snapshots in {snapshot_s:.0f} s; newest holds {state_bytes / 2**20:.1f} MiB of state",
          flush=True)

    rnd = random.Random(5)
    string = atomic("string")
    key = f"account-{rnd.randrange(args.keys)}"
    partition = partition_of([key], [string], args.partitions)
    others: list[str] = []
    while len(others) < args.lookups:
        k = f"account-{rnd.randrange(args.keys)}"
        if k != key and partition_of([k], [string], args.partitions) == partition:
            others.append(k)
    part_bytes = sum(f.size for f in newest.files if f.path.startswith(f"state/0/{partition}/"))
    cold = in_child("lookup", endpoint, key, others=json.dumps(others))
    assert cold["found"] and cold["partition"] == partition, cold

    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "AWS_DEFAULT_REGION": "us-east-1"}
    cli_runs: list[tuple[float, float]] = []  # (wall ms, CPU ms) of each run, Python's start included
    for _ in range(args.cli_runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        # `python -m` from the repo: this checkout's package, whatever the venv's console script points at
        cli = subprocess.run([sys.executable, "-m", "airflow_provider_streamstate.cli", "state", "get", "--store",
                              f"s3://{BUCKET}/store", "--stream", "bench", "latest", "--key", f"account={key}",
                              "--json"], capture_output=True, text=True, env=env, cwd=REPO, check=False)
        wall = (time.perf_counter() - t0) * 1000
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli_runs.append((wall, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000))
        assert cli.returncode == 0, cli.stderr[-2000:]
    cli_ms = statistics.median(w for w, _ in cli_runs)
    print(f"state get on S3, {len(cli_runs)} runs (wall ms, CPU ms): "
          + ", ".join(f"{w:.0f}/{c:.0f}" for w, c in cli_runs) + f"; median wall {cli_ms:.0f} ms, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)

    spark_runs, filter_runs = [], []
    where = f"key_account = '{key}'"
    for _ in range(0 if args.no_spark else 2):
        t0 = time.perf_counter()
        with StateReader(store, spark=spark, workdir=WORK / "lookup-store-layout") as reader:
            rows = reader.state("bench", newest.snapshot_id).where(where).collect()
            spark_runs.append(time.perf_counter() - t0)
            location = reader.materialise("bench", newest.snapshot_id).location
            for _ in range(2):
                t1 = time.perf_counter()
                direct = read_state(spark, str(location), batchId=newest.batch_id).where(f"key.account = '{key}'").collect()
                filter_runs.append(time.perf_counter() - t1)
    if spark_runs:
        assert len(rows) == 1 and len(direct) == 1
        # (state value fields are the aggregate buffers' names: count, sum)
        assert [rows[0]["value_count"], rows[0]["value_sum"]] == [cold["value"]["count"], cold["value"]["sum"]], \
            (rows, cold)

    hist = {} if args.no_history else in_child("history", endpoint, key, history=args.history)
    changed = set()
    for m in manifests if hist else []:
        changed |= {f.sha256 for f in m.files if f.path.startswith(f"state/0/{hist['partition']}/")
                    or "/_metadata/" in f.path}
    all_blobs = {f.sha256 for m in manifests for f in m.files}
    server.stop()

    spark_s = min(spark_runs) if spark_runs else float("nan")
    result = {
        "command": " ".join(sys.argv), "keys": args.keys, "partitions": args.partitions, "store": args.store,
        "snapshots": len(manifests), "snapshots_s": round(snapshot_s, 1), "state_mib": round(state_bytes / 2**20, 1),
        "key": key, "partition": partition, "partition_bytes": part_bytes,
        "cold_ms": cold["cold_ms"], "cold_bytes_read": cold["bytes_read"], "cold_files_read": cold["files_read"],
        "cold": {k: v for k, v in cold.items() if k not in ("value",)},
        "bytes_read_over_partition": round(cold["bytes_read"] / max(1, part_bytes), 2),
        "warm_p50_ms": cold["warm_p50_ms"], "warm_p95_ms": cold["warm_p95_ms"], "lookup_rss_mb": cold["rss_mb"],
        "cli_wall_ms": round(cli_ms), "cli_runs_ms": [[round(w), round(c)] for w, c in cli_runs], "spark_show_where_s": [round(x, 1) for x in spark_runs],
        "spark_filter_on_copy_s": [round(x, 1) for x in filter_runs],
        "cold_over_spark": round(cold["cold_ms"] / 1000 / spark_s, 4) if spark_runs else None,
        "cold_over_spark_filter_only": round(cold["cold_ms"] / 1000 / min(filter_runs), 4) if filter_runs else None,
        "history": hist, "history_partition_blobs_in_range": len(changed), "blobs_in_range": len(all_blobs),
    }
    print(json.dumps(result, indent=1))
    out = WORK / f"lookup_store_results-{args.store}-{args.keys}-{args.partitions}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    spark.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
