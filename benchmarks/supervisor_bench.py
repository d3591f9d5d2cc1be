"""How long a stream is down when its driver dies and `streamstate_supervisor` brings it
back: from SIGKILL of the driver to the first batch committed after the restart, in parts.

Each cycle: the example stream runs under spark-submit (local[1], HDFS state store) and
has read its input; new records arrive; the driver's process group gets SIGKILL (t0); the
supervisor DAG runs at once with Airflow's own runner (`dag.test()`, in this process).
Parts, all from t0 or from the DAG run's start:

* detection: t0 until `launcher.status` says `dead` (on the driver's host: at once; on
  another host: the heartbeat's staleness, 3 beats);
* Airflow: DAG run start until the supervise task has decided (DAG parse, task start);
* launch: decision until the driver process exists;
* query running: decision until the heartbeat says `running` (JVM, session, checkpoint
  loaded; the runtime says `running` at the query's first progress event, which on a
  restart with waiting input comes after the first batch, so this includes it);
* first batch: decision until the first new batch's commit file is written;
* total: t0 until that commit.

In production add the wait for the next scheduled run (the schedule is every 5 minutes).

    .venv/bin/python benchmarks/supervisor_bench.py [--cycles 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import WORK

from dev import airflow_home
from dev import stack as stack_mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=3)
    args = p.parse_args(argv)

    WORK.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="supervisor-airflow-", dir=WORK))
    airflow_home.configure_env(home)
    airflow_home.prepare(home)
    stack = stack_mod.up()
    try:
        return _run(args, stack, home)
    finally:
        stack_mod.down()


def _run(args: argparse.Namespace, stack: stack_mod.Stack, home: Path) -> int:
    from datetime import datetime

    import airflow_provider_streamstate.jobs.example_stream as job
    from airflow_provider_streamstate.engine.streams import launcher, records
    from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets
    from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
    from airflow_provider_streamstate.spec import StreamSpec
    from airflow_provider_streamstate.streams.start import start_stream

    os.environ["AIRFLOW_CONN_SPARK_BENCH"] = json.dumps({"conn_type": "spark", "host": "local[1]"})
    topic = f"bench-supervisor-{int(time.time())}"
    ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
    spec = StreamSpec(
        name="bench", application=job.__file__,
        application_args=["--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", "{checkpoint}",
                          "--source-topic", topic, "--alerts-topic", "{sinks[alerts]}", "--trigger",
                          "processing:1 second", "--state-store", "hdfs", "--shuffle-partitions", "2"],
        checkpoint=str(home / "bench-checkpoint"), store=f"file://{home / 'store'}", spark_conn_id="spark_bench",
        jars=list(stack.spark_jars), sinks={"alerts": f"{topic}-alerts"}, heartbeat_interval_s=1.0,
        conf={"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"},
    )

    def consumed() -> int:
        found = committed_kafka_offsets(spec.checkpoint)
        return sum(sum(v.values()) for v in found[1].values()) if found else 0

    def wait(predicate, what: str, timeout: float = 300) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.1)

    class _Log:
        def info(self, *a: object) -> None: ...

    gen = GeneratorSpec(seed=7, accounts=50, events=500)
    total = produce(stack.kafka_bootstrap, topic, gen)
    start_stream(spec, startup_timeout_s=300, log=_Log())
    wait(lambda: consumed() == total, "the first records")
    rows = []
    for cycle in range(args.cycles):
        gen = gen.next_round(300)
        total += produce(stack.kafka_bootstrap, topic, gen)
        before = max(int(f.name) for f in Path(spec.checkpoint, "commits").iterdir() if f.name.isdigit())
        handle = records.read_launch(spec.checkpoint).handle
        t0 = time.time()
        os.killpg(handle.pid, signal.SIGKILL)
        wait(lambda: launcher.status(spec.checkpoint).state == "dead", "the stream to be dead", 60)
        detected = time.time()
        run_start = time.time()
        result = airflow_home.run_dag("streamstate_supervisor", {"streams": [spec.to_dict()], "settle_seconds": 300})
        report = result.tasks["supervise[0]"].xcom
        if result.state != "success" or report["action"] != "restarted":
            print(result.log[-3000:])
            return 1
        decided = datetime.fromisoformat(report["decided_at"].replace("Z", "+00:00")).timestamp()
        first = min(int(f.name) for f in Path(spec.checkpoint, "commits").iterdir() if f.name.isdigit()
                    and int(f.name) > before)
        committed_at = Path(spec.checkpoint, "commits", str(first)).stat().st_mtime
        timing = report["timings"][0]
        row = {
            "detection_s": detected - t0, "airflow_s": decided - run_start, "launch_s": timing["launch_s"],
            "query_running_s": timing["spark_start_s"], "first_batch_s": committed_at - decided,
            "total_s": committed_at - t0,
        }
        rows.append(row)
        print(f"cycle {cycle + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
        wait(lambda n=total: consumed() == n, "the restarted stream to catch up")
    launcher.stop(spec.checkpoint, timeout_s=60)

    print(f"\nsupervisor recovery, median of {len(rows)} cycles (driver SIGKILLed, DAG run at once):")
    for key in rows[0]:
        print(f"  {key:14} {statistics.median(r[key] for r in rows):6.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
