"""What a state job costs the Airflow task that runs it: ValidateSnapshotOperator on a snapshot
of >= 10 M keys (RocksDB state in an S3 store on the stack's moto endpoint), run as its own
task process, once on today's local path (Spark in the task, the snapshot copied to the
task's disk) as the baseline, and once as a Spark application in YARN cluster mode
(`spark_conn_id`) on the stack's YARN cluster, in the same run on the same snapshot.

Per mode: the task's peak memory (the task process and all its children, sampled every 50 ms:
PSS summed, the honest total of a process tree, and RSS summed, which counts pages a forked
child still shares with its parent twice), the bytes its process tree wrote to local storage (`getrusage(RUSAGE_CHILDREN)`
block outputs of the waited-for tree), and wall time from the task's start to its result.

    .venv/bin/python benchmarks/state_jobs_bench.py [--keys 10000000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench_common import WORK, MiB, rate_rows, stack_with_yarn

from dev import stack as stack_mod

RESULT = "state-jobs-bench result: "
SUITE = {"expectations": [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "key_k"}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value_count", "min_value": 1,
                                                              "max_value": 1}},
]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=10_000_000)
    p.add_argument("--task", default=None, help=argparse.SUPPRESS)  # internal: run one task
    args = p.parse_args(argv)
    if args.task:
        return _task(json.loads(args.task))
    with stack_with_yarn("state-jobs-") as (stack, yarn, work):
        return _run(args, stack, yarn, work)


def _snapshot(stack: stack_mod.Stack, work: Path, keys: int) -> tuple[str, str, int]:
    """`keys` distinct keys counted once each, RocksDB state; snapshotted into an S3 store."""
    from pyspark.sql import functions as F

    from airflow_provider_streamstate.backends.s3.clients import s3_client
    from airflow_provider_streamstate.backends.s3.store import S3Store
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.spark import spark_session

    spark = spark_session("state-jobs-bench", state_store="rocksdb", shuffle_partitions=4)
    checkpoint = str(work / "ckpt")
    counts = rate_rows(spark, keys).select(F.col("value").alias("k")).groupBy("k").count()
    query = (counts.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 hour").start())
    try:
        while not query.lastProgress:
            assert query.exception() is None, query.exception()
            time.sleep(1)
    finally:
        query.stop()
    spark.stop()
    for key, value in stack.s3_env("primary").items():
        os.environ[key] = value
    bucket = stack.s3["primary"]["bucket"]
    prefix = f"bench/state-jobs-{uuid.uuid4().hex[:8]}"
    store = S3Store(s3_client(), bucket, prefix)
    result = create_snapshot(checkpoint, store, "keys", parallelism=8)
    return f"s3://{bucket}/{prefix}", result.manifest.snapshot_id, result.manifest.bytes_total


def _yarn_conf(yarn: stack_mod.YarnCluster, work: Path) -> dict[str, str]:
    return {**yarn.pyspark_conf(work / "staging", executors=2, executor_memory="2g", driver_memory="1g"),
            "spark.sql.shuffle.partitions": "4"}


def _task(task: dict[str, Any]) -> int:
    """One task process: the operator's execute, as a worker runs it."""
    from airflow_provider_streamstate.operators.validate import ValidateSnapshotOperator

    op = ValidateSnapshotOperator(task_id="validate", stream=task["stream"], suite=task["suite"],
                                  snapshot=task["snapshot"], **task["cluster"])
    started = time.monotonic()
    result = op.execute({})  # type: ignore[arg-type]
    print(RESULT + json.dumps({"seconds": time.monotonic() - started, "success": result["success"],
                               "ran_on": result.get("ran_on")}), flush=True)
    return 0


def _tree_memory(pid: int) -> tuple[int, int, int]:
    """(RSS of the process `pid`, RSS summed over it and its descendants, PSS summed over
    them). A forked child shares its parent's pages until it execs (the JVM forks to run
    `chmod` on a file:// staging directory): the RSS sum counts those twice, PSS once."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0
    own = rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        pss += info.pss
        if proc.pid == pid:
            own = info.rss
    return own, rss, pss


def _measure(task: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--task", json.dumps(task)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_rss = peak_pss = peak_task = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_rss, peak_pss, peak_task
        while not done.is_set():
            own, rss, pss = _tree_memory(proc.pid)
            peak_rss, peak_pss, peak_task = max(peak_rss, rss), max(peak_pss, pss), max(peak_task, own)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"task failed ({proc.returncode}):\n{err[-4000:]}")
    written = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512
    result = json.loads(next(line for line in out.splitlines() if line.startswith(RESULT))[len(RESULT):])
    return {"peak_pss_mib": round(peak_pss / MiB, 1), "peak_rss_sum_mib": round(peak_rss / MiB, 1),
            "peak_task_process_rss_mib": round(peak_task / MiB, 1), "local_writes_mib": round(written / MiB, 1),
            "wall_s": round(wall, 1), "execute_s": round(result["seconds"], 1), "success": result["success"],
            "ran_on": result["ran_on"]}


def _run(args: argparse.Namespace, stack: stack_mod.Stack, yarn: stack_mod.YarnCluster, work: Path) -> int:
    t = time.monotonic()
    store, snapshot_id, size = _snapshot(stack, work, args.keys)
    print(f"snapshot {snapshot_id}: {args.keys:,} keys, {size / MiB:.1f} MiB of state "
          f"({time.monotonic() - t:.0f} s to build)", flush=True)
    env = {**os.environ, **stack.s3_env("primary"), "STREAMSTATE_HOME": str(work / "home"),
           "AIRFLOW_CONN_SPARK_YARN": json.dumps({"conn_type": "spark", "host": "yarn",
                                                  "extra": {"deploy-mode": "cluster"}}),
           "TMPDIR": str(work / "tmp")}
    (work / "tmp").mkdir()
    stream = {"name": "keys", "checkpoint": str(work / "ckpt"), "store": store}
    results = {}
    for mode in ("local", "yarn-cluster"):
        suite = {"name": f"bench-{mode}", **SUITE}
        cluster: dict[str, Any] = {}
        if mode != "local":
            cluster = {"spark_conn_id": "spark_yarn", "spark_conf": _yarn_conf(yarn, work),
                       "spark_jars": list(stack.spark_jars), "spark_env": yarn.env()}
        results[mode] = _measure({"stream": stream, "suite": suite, "snapshot": snapshot_id, "cluster": cluster},
                                 env)
        print(f"{mode:13} {json.dumps(results[mode])}", flush=True)
    local, remote = results["local"], results["yarn-cluster"]
    summary = {"keys": args.keys, "state_mib": round(size / MiB, 1),
               "peak_pss_ratio": round(remote["peak_pss_mib"] / local["peak_pss_mib"], 3),
               "wall_ratio": round(remote["wall_s"] / local["wall_s"], 3), "local": local, "yarn_cluster": remote}
    (WORK / "state_jobs_results.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
