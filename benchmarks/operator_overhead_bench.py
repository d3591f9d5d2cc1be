"""Operator overhead benchmark: a snapshot as an Airflow task against the same snapshot from
the CLI and from the engine called in-process, on the same checkpoint and store.

    .venv/bin/python benchmarks/operator_overhead_bench.py [--repeat N] [--events N] [--stores local,s3]

Starts the local stack, builds a checkpoint once by running the example stream (`accounts`
query, RocksDB with changelog checkpointing) over generated transactions until it drains
its topic, then, per store (local directory; S3 on the stack's `primary` endpoint, reached
by an Airflow `aws` connection for the task and the AWS_* variables for the CLI), takes
snapshots with `always=True` / `--always` so every call cuts and publishes a new snapshot:

* task: `SnapshotStreamOperator` in a one-task DAG run by Airflow's `dag.test()` (SQLite
  metadata DB in a private AIRFLOW_HOME, as tests/airflow_harness.py does). Reported as the
  task instance's own duration (its start to end) and the whole `dag.test()` wall time
  (DAG folder sync, run creation, scheduling loop) separately;
* CLI: `streamstate snapshot create ... --always`, the process's wall time, with Python's
  bytecode cache on (a private PYCACHEPREFIX, filled by the warm-up) as on a deployed
  machine: this project's environment sets PYTHONDONTWRITEBYTECODE, which would make every
  CLI process compile the modules it imports;
* engine: `create_snapshot(..., always=True)` in this process.

One warm-up round per store is discarded (the first snapshot uploads every blob; later ones
find them stored); the contenders then alternate, and each figure is the median of
`--repeat` rounds. Ratios are to the CLI and to the engine of the same run. Goal: the task
<= 1.2x the CLI. Writes .bench/operator_overhead.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench_common import REPO, WORK  # this folder is on sys.path; it puts the repo there too

from dev import stack as stack_mod
from tests import airflow_harness

GOAL = 1.2
DAG_ID = "bench_operator_snapshot"
DAG_FILE = f'''"""Benchmark DAG: one snapshot of the stream in the run's conf, always a new one."""
import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_streamstate.operators.snapshot import SnapshotStreamOperator

with DAG(
    dag_id="{DAG_ID}",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
    params={{"stream": Param({{}}, type="object")}},
):
    SnapshotStreamOperator(task_id="snapshot", stream="{{{{ params.stream }}}}", always=True)
'''


def build_checkpoint(stack: stack_mod.Stack, checkpoint: str, events: int, accounts: int) -> int:
    """Run the example stream over `events` transactions until it drains its topic."""
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
    from tests.streams import run_to_end, use_state_store

    topic = f"overhead-{uuid.uuid4().hex[:8]}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    produce(stack.kafka_bootstrap, topic, GeneratorSpec(seed=97, accounts=accounts, events=events))
    spark = spark_session("streamstate-overhead-bench", stack.spark_jars)
    try:
        use_state_store(spark, "rocksdb-changelog")
        return run_to_end(spark, stack.kafka_bootstrap, topic, checkpoint, max_offsets=max(events // 8, 1))
    finally:
        spark.sparkContext.setLogLevel("OFF")  # maintenance racing shutdown logs harmless errors
        spark.stop()


def run_task(spec: dict[str, Any]) -> dict[str, Any]:
    """One dag.test() run of the one-task DAG: wall time, the task's own duration, its XCom."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = bag.dags[DAG_ID]
    out = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        run = dag.test(run_conf={"stream": spec})
    wall = time.perf_counter() - t
    (ti,) = run.get_task_instances()
    if str(ti.state) != "success":
        raise RuntimeError(f"the snapshot task ended {ti.state}:\n{out.getvalue()[-3000:]}")
    xcom = ti.xcom_pull(task_ids="snapshot")
    return {"dag_test_s": wall, "task_s": (ti.end_date - ti.start_date).total_seconds(),
            "engine_in_task_s": xcom["seconds"], "reused": xcom["reused"]}


def run_cli(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    cmd = [str(Path(sys.executable).parent / "streamstate"), "snapshot", "create", "--checkpoint", spec["checkpoint"],
           "--store", spec["store"], "--stream", spec["name"], "--always", "--json"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout)
    return {"cli_s": wall, "engine_in_cli_s": out["seconds"], "reused": out["reused"]}


def run_engine(spec: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.stores import open_store

    t = time.perf_counter()
    result = create_snapshot(spec["checkpoint"], open_store(spec["store"], parallelism=8), spec["name"], always=True)
    return {"engine_s": time.perf_counter() - t, "reused": result.reused}


def measure_store(label: str, spec: dict[str, Any], cli_env: dict[str, str], repeat: int) -> dict[str, Any]:
    contenders = {"task": lambda: run_task(spec), "cli": lambda: run_cli(spec, cli_env), "engine": lambda: run_engine(spec)}
    for fn in contenders.values():  # warm-up: the first snapshot stores every blob
        fn()
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    order = list(contenders)
    for i in range(repeat):
        for name in order[i % 3:] + order[:i % 3]:  # rotate, so no contender always runs first
            sample = contenders[name]()
            if sample["reused"]:
                raise RuntimeError(f"{name} reused a snapshot: every call must take a new one")
            samples[name].append(sample)
        print(f"  {label}: round {i + 1}/{repeat}", flush=True)

    def med(name: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[name])

    r = {
        "task_s": med("task", "task_s"), "dag_test_s": med("task", "dag_test_s"),
        "engine_in_task_s": med("task", "engine_in_task_s"), "cli_s": med("cli", "cli_s"),
        "engine_in_cli_s": med("cli", "engine_in_cli_s"), "engine_s": med("engine", "engine_s"),
        "samples": samples,
    }
    r["task_vs_cli"] = r["task_s"] / r["cli_s"]
    r["task_vs_engine"] = r["task_s"] / r["engine_s"]
    r["dag_test_vs_cli"] = r["dag_test_s"] / r["cli_s"]
    r["cli_vs_engine"] = r["cli_s"] / r["engine_s"]
    r["meets_goal"] = r["task_vs_cli"] <= GOAL
    return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="measured rounds per store (median reported)")
    p.add_argument("--events", type=int, default=40_000, help="transactions the example stream consumes")
    p.add_argument("--accounts", type=int, default=5_000, help="distinct accounts (state rows of operator 0)")
    p.add_argument("--stores", default="local,s3", help="which stores to measure: local, s3 or both")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")

    run = WORK / "operator-overhead"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    # Airflow reads its home, DB and DAG folder at import: set them before anything imports it.
    airflow_harness.configure_airflow_env(run / "airflow")
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
    dags = run / "airflow" / "dags"
    dags.mkdir(parents=True)
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE)

    state_dir = WORK / "stack-overhead"
    stack = stack_mod.up(state_dir)
    try:
        os.environ.update(stack.airflow_conn_env("primary", "bench_s3"))
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                       capture_output=True, text=True)
        checkpoint = str(run / "checkpoint")
        print(f"building the checkpoint: the example stream over {args.events} transactions ...", flush=True)
        t = time.perf_counter()
        batch = build_checkpoint(stack, checkpoint, args.events, args.accounts)
        from airflow_provider_streamstate.engine.checkpoint.reader import CheckpointReader

        plan = CheckpointReader(checkpoint).plan()
        state_bytes = sum(f.size for f in plan.files)
        print(f"  batch {batch}: {len(plan.files)} files, {state_bytes / 1e6:.1f} MB in the cut "
              f"({time.perf_counter() - t:.0f}s)", flush=True)

        results: dict[str, Any] = {
            "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
            "repeat": args.repeat, "events": args.events, "batch_id": batch, "files": len(plan.files),
            "state_bytes": state_bytes, "stores": {},
        }
        for store in [s.strip() for s in args.stores.split(",") if s.strip()]:
            if store == "local":
                spec = {"name": "overhead", "checkpoint": checkpoint, "store": f"file://{run / 'store'}"}
                cli_env = dict(os.environ)
            elif store == "s3":
                bucket = stack.s3["primary"]["bucket"]
                spec = {"name": "overhead", "checkpoint": checkpoint,
                        "store": f"s3://{bucket}/overhead-{uuid.uuid4().hex[:8]}", "storage_conn_id": "bench_s3"}
                os.environ.update(stack.s3_env("primary"))  # the CLI's and the in-process engine's S3
                cli_env = dict(os.environ)
            else:
                p.error(f"unknown store {store!r}: local or s3")
            cli_env.pop("PYTHONDONTWRITEBYTECODE", None)
            cli_env["PYTHONPYCACHEPREFIX"] = str(run / "pycache")
            results["stores"][store] = measure_store(store, spec, cli_env, args.repeat)
    finally:
        stack_mod.down(state_dir)

    WORK.mkdir(exist_ok=True)
    (WORK / "operator_overhead.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"\nSnapshot of one checkpoint ({results['files']} files, {state_bytes / 1e6:.1f} MB, batch {batch}), "
          f"median of {args.repeat}, every call a new snapshot:\n")
    print("| store | task (TI start-end) s | dag.test wall s | CLI process s | engine in-process s "
          "| task / CLI | task / engine | dag.test / CLI | CLI / engine | goal task <= 1.2x CLI |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for store, r in results["stores"].items():
        print(f"| {store} | {r['task_s']:.3f} | {r['dag_test_s']:.2f} | {r['cli_s']:.3f} | {r['engine_s']:.3f} "
              f"| {r['task_vs_cli']:.2f} | {r['task_vs_engine']:.2f} | {r['dag_test_vs_cli']:.2f} "
              f"| {r['cli_vs_engine']:.2f} | {'met' if r['meets_goal'] else 'MISSED'} |")
    print("\nengine time inside each (the snapshot's own `seconds`): "
          + "; ".join(f"{s}: task {r['engine_in_task_s']:.3f}s, CLI {r['engine_in_cli_s']:.3f}s"
                      for s, r in results["stores"].items()))
    print(f"raw figures in {(WORK / 'operator_overhead.json').relative_to(REPO)}")
    return 0  # measured, not asserted: the table says whether the goal is met


if __name__ == "__main__":
    sys.exit(main())
