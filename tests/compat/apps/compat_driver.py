"""The compatibility suite's driver: everything one Spark line runs, in one spark-submit.

    spark-submit [options] jobs/supervised.py compat_driver.py --bootstrap B --topic T --ctl DIR \
        --checkpoint hdfs=PATH --checkpoint rocksdb-changelog=PATH

Run by tests/compat/test_spark_versions.py with that line's own spark-submit and Python
(dev/spark_versions.py), under the package's supervised wrapper (heartbeat, driver record,
graceful stop), so one JVM start per line serves every check:

1. `info.json`: which Python, pyspark and JVM Spark this driver runs.
2. The example stream's `accounts` query (deduplication within a watermark, then per-account
   count/sum/max; alerts with threshold 0, so every batch writes each updated account's
   whole state) runs once per state store (on 4.3+ once more with offset log format 2), on
   the same topic, until the test writes
   `stop-live` (it snapshots the checkpoints meanwhile, from the main venv); then each query
   is stopped after its batch in flight (`live.json`).
3. The test restores and fails over the snapshots with the engine and writes `tasks.json`;
   each task runs here, with this Spark, and its outcome (or its error's first line) goes
   to `results.json`:
   - `state`: Spark's state data source on a checkpoint at a batch (operator 0: account ->
     count/sum/max; operator 1: the deduplicated transaction ids);
   - `reader`: the engine's StateReader on a snapshot in a store (operator 0, flattened);
   - `gx` (given at start with --gx, run beside the live queries): the engine's Great
     Expectations run (a state job's validation) on a DataFrame of the given rows, with Data Docs;
   - `resume`: the query restarted on a restored or failed-over copy, available-now, over
     `topic`, writing to `alerts_topic`: the batches it ran (consecutive ones of a group side by side).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

TASK_WAIT_S = 300.0
OFFSET_LOG_FORMAT = "spark.sql.streaming.offsetLog.formatVersion"  # Spark 4.3+; 1 by default
RESUME_WAIT_S = 240.0


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def first_line(exc: BaseException) -> str:
    """The error's first line; for a Py4J error, the JVM exception's (Py4J's own first line
    only says which call failed)."""
    java = getattr(exc, "java_exception", None)
    text = [ln for ln in (str(java.toString()) if java is not None else str(exc)).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:2000]


def use_store(spark: Any, kind: str) -> None:
    from airflow_provider_streamstate.engine.state.spark import state_store_confs

    for key, value in state_store_confs(kind).items():
        spark.conf.set(key, value)


def run_state(spark: Any, task: dict[str, Any]) -> Any:
    from airflow_provider_streamstate.engine.state.spark import read_state

    use_store(spark, task["store"])
    rows = read_state(spark, task["checkpoint"], operatorId=task["operator"], batchId=task.get("batch_id")).collect()
    if task["operator"] == 0:
        return {r.key.account: r.value.asDict() for r in rows}
    return sorted(r.key.txn_id for r in rows)


def run_reader(spark: Any, task: dict[str, Any]) -> Any:
    from airflow_provider_streamstate.engine.state.reader import StateReader, StateSelector
    from airflow_provider_streamstate.engine.stores import open_store

    with StateReader(open_store(task["store_url"]), spark=spark) as reader:
        meta = reader.metadata(task["stream"], task["snapshot_id"])
        rows = reader.state(task["stream"], task["snapshot_id"], StateSelector(operator=0)).collect()
        return {
            "stores": [s.to_json() for s in meta.stores],
            "state": {r.key_account: {"count": r.value_count, "sum": r.value_sum, "max": r.value_max} for r in rows},
        }


def run_gx(spark: Any, task: dict[str, Any]) -> Any:
    """The engine's GX run (engine/state/validation.py, what a state job's validation runs) on
    a Spark DataFrame of `rows`, through a GX checkpoint that writes Data Docs."""
    from airflow_provider_streamstate.engine.state.validation import load_suite, run_suite

    df = spark.createDataFrame([tuple(r) for r in task["rows"]], task["schema"])
    run = run_suite(df, load_suite(task["suite"]), data_docs=task["data_docs"])
    return {
        "gx_version": run.gx_version, "seconds": round(run.seconds, 2), "success": run.success,
        "results": [o.to_json() for o in run.results], "data_docs": run.data_docs,
        "data_docs_written": Path(run.data_docs or "/nonexistent").is_file(),
    }


def start_resume(spark: Any, task: dict[str, Any], bootstrap: str) -> Any:
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query

    use_store(spark, task["store"])  # a query takes the session's confs when it starts
    args = StreamArgs(bootstrap, task["checkpoint"], source_topic=task["topic"], alerts_topic=task["alerts_topic"],
                      trigger="available-now", max_offsets_per_trigger=task.get("max_offsets", 400), threshold_cents=0,
                      query_name=task["name"])
    return start_query(spark, args)


def finish_resume(query: Any, deadline: float) -> Any:
    if not query.awaitTermination(max(1.0, deadline - time.monotonic())):
        query.stop()
        raise TimeoutError(f"{query.name} did not drain its input in time")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return {"batches": [p["batchId"] for p in query.recentProgress]}


RUNNERS = {"state": run_state, "reader": run_reader, "gx": run_gx}


def run_tasks(spark: Any, tasks: list[dict[str, Any]], bootstrap: str, ctl: Path) -> dict[str, Any]:
    """Each task in order, except that consecutive `resume` tasks of one `group` run side by
    side: their outcome, or the first line of their error. Two copies of one stream (a
    restored and a failed-over one keep its query id) must not be in one group: Spark stops
    the run of a query id that is already active when another starts
    (spark.sql.streaming.stopActiveRunOnRestart)."""
    results: dict[str, Any] = {}

    def record(task: dict[str, Any], started: float, fn: Any) -> None:
        try:
            out = {"value": fn()}
        except Exception as exc:  # noqa: BLE001 - recorded for the test, which decides
            out = {"error": first_line(exc), "trace": traceback.format_exc()[-4000:]}
        out["seconds"] = round(time.monotonic() - started, 2)
        results[task["name"]] = out
        write_json(ctl / "results.partial.json", results)

    def run_side_by_side(group: list[dict[str, Any]]) -> None:
        started = time.monotonic()
        queries: dict[str, Any] = {}
        for t in group:  # an error starting one is its result; the others still run
            record(t, started, lambda t=t: queries.__setitem__(t["name"], start_resume(spark, t, bootstrap)))
        deadline = time.monotonic() + RESUME_WAIT_S
        for t in group:
            if t["name"] in queries:
                record(t, started, lambda t=t: finish_resume(queries[t["name"]], deadline))

    i = 0
    while i < len(tasks):
        task = tasks[i]
        if task["kind"] != "resume":
            record(task, time.monotonic(), lambda t=task: RUNNERS[t["kind"]](spark, t))
            i += 1
            continue
        group = []
        while i < len(tasks) and tasks[i]["kind"] == "resume" and tasks[i].get("group") == task.get("group"):
            group.append(tasks[i])
            i += 1
        run_side_by_side(group)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--ctl", required=True, type=Path)
    p.add_argument("--checkpoint", action="append", default=[], help="STATE_STORE=PATH, one live query each")
    p.add_argument("--offsets-v2", help="one more live query (HDFS-backed) there, with offset log format 2 (4.3+)")
    p.add_argument("--gx", type=Path, help="a `gx` task, run beside the live queries (its outcome joins the results)")
    a = p.parse_args(argv)

    import pyspark

    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query
    from airflow_provider_streamstate.jobs.runtime import stop_query

    # Fast maintenance and snapshots every 3 versions: the snapshots under load see the state
    # store's maintenance write .snapshot/.zip files and delete old ones.
    spark = spark_session("streamstate-compat", master=None, shuffle_partitions=2, conf={
        "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "3",
    })
    write_json(a.ctl / "info.json", {
        "python": sys.executable, "pyspark": pyspark.__version__, "spark": spark.version,
        "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.version"),  # noqa: SLF001
        "spark_home": os.environ.get("SPARK_HOME"), "pid": os.getpid(),
        # The executors' Python (PYSPARK_PYTHON): what runs pandas UDFs and Python stateful operators.
        "worker_python": spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()[0],
    })

    live: dict[str, Any] = {}
    for item in a.checkpoint:
        kind, _, checkpoint = item.partition("=")
        use_store(spark, kind)  # pinned into the checkpoint at batch 0
        live[kind] = start_query(spark, StreamArgs(
            a.bootstrap, checkpoint, source_topic=a.topic, alerts_topic=f"{a.topic}-live-{kind}",
            trigger="processing:300 milliseconds", max_offsets_per_trigger=100, threshold_cents=0,
            query_name=f"compat-{kind}"))
    if a.offsets_v2:
        use_store(spark, "hdfs")
        spark.conf.set(OFFSET_LOG_FORMAT, "2")
        live["offsets-v2"] = start_query(spark, StreamArgs(
            a.bootstrap, a.offsets_v2, source_topic=a.topic, alerts_topic=f"{a.topic}-live-offsets-v2",
            trigger="processing:300 milliseconds", max_offsets_per_trigger=100, threshold_cents=0,
            query_name="compat-offsets-v2"))
        spark.conf.unset(OFFSET_LOG_FORMAT)
    gx: dict[str, Any] = {}
    gx_thread = None
    if a.gx:
        gx_task = json.loads(a.gx.read_text())

        def validate() -> None:
            task = gx_task
            started = time.monotonic()
            try:
                gx["value"] = run_gx(spark, task)
            except Exception as exc:  # noqa: BLE001 - recorded for the test, which decides
                gx.update(error=first_line(exc), trace=traceback.format_exc()[-4000:])
            gx["seconds"] = round(time.monotonic() - started, 2)

        gx_thread = threading.Thread(target=validate, name="compat-gx", daemon=True)
        gx_thread.start()
    while not (a.ctl / "stop-live").exists() and all(q.isActive for q in live.values()):
        time.sleep(0.2)
    for query in live.values():
        stop_query(query, batch_wait_s=30)
    errors = {k: str(q.exception()) for k, q in live.items() if q.exception() is not None}
    write_json(a.ctl / "live.json", {
        "last_batch": {k: (q.lastProgress or {}).get("batchId") for k, q in live.items()}, "errors": errors})
    if errors:
        return 1

    deadline = time.monotonic() + TASK_WAIT_S
    while not (a.ctl / "tasks.json").exists():
        if time.monotonic() > deadline or (a.ctl / "abort").exists():
            return 2
        time.sleep(0.2)
    results = run_tasks(spark, json.loads((a.ctl / "tasks.json").read_text()), a.bootstrap, a.ctl)
    if gx_thread is not None:
        gx_thread.join(TASK_WAIT_S)
        results["gx"] = gx or {"error": "TimeoutError: the GX run did not end"}
    write_json(a.ctl / "results.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
