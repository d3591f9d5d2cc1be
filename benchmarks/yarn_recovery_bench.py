"""How long a stream in YARN cluster mode is down when its application dies, and a
supervision round brings it back through YARN, against the same stream in local mode
(driver on this host, SIGKILLed) as the baseline of the same run.

Each cycle: the example stream (checkpoint in S3 on the stack's moto endpoint, HDFS state
store) has read its input; new records arrive; the driver dies (t0): on YARN its
application is killed through the ResourceManager's REST API, locally its process group
gets SIGKILL; a supervision round (`engine.streams.supervisor.supervise`, the start the
operators use) runs at once. Parts:

* detection: t0 until `launcher.status` says `dead` (YARN: the ResourceManager says KILLED);
* restart: the round's decision until its new driver's query runs (submission, the
  application master's container and JVM, the Spark session, executors, the checkpoint);
* total: t0 until the restarted query has committed a batch past the one before t0.

    .venv/bin/python benchmarks/yarn_recovery_bench.py [--cycles 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import stack_with_yarn

from dev import stack as stack_mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=2)
    args = p.parse_args(argv)
    with stack_with_yarn("yarn-recovery-") as (stack, yarn, work):
        return _run(args, stack, yarn, work)


def _spec(stack: stack_mod.Stack, yarn: stack_mod.YarnCluster, work: Path, topic: str, *, on_yarn: bool) -> Any:

    import airflow_provider_streamstate.jobs.example_stream as job
    from airflow_provider_streamstate.spec import StreamSpec

    name = "bench-yarn" if on_yarn else "bench-local"
    conf = {"spark.ui.enabled": "false", **stack.s3a_conf("primary")}
    if on_yarn:
        conf |= yarn.pyspark_conf(work / "staging")
    else:
        conf |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    return StreamSpec(
        name=name, application=job.__file__,
        application_args=["--bootstrap-servers", stack.kafka_bootstrap, "--checkpoint", "{checkpoint}",
                          "--source-topic", topic, "--alerts-topic", "{sinks[alerts]}", "--trigger",
                          "processing:1 second", "--state-store", "hdfs", "--shuffle-partitions", "2"],
        checkpoint=f"s3a://{stack.s3['primary']['bucket']}/bench/{int(time.time())}/{name}",
        store=f"file://{work / 'store'}", spark_conn_id="spark_yarn" if on_yarn else "spark_bench",
        jars=list(stack.spark_jars), sinks={"alerts": f"{topic}-alerts"}, heartbeat_interval_s=1.0,
        env={**(yarn.env() if on_yarn else {"PYSPARK_PYTHON": sys.executable}), **stack.s3_env("primary")},
        conf=conf,
    )


def _run(args: argparse.Namespace, stack: stack_mod.Stack, yarn: stack_mod.YarnCluster, work: Path) -> int:
    from airflow_provider_streamstate.engine.streams import launcher, records
    from airflow_provider_streamstate.engine.streams.health import committed_kafka_offsets, newest_commit
    from airflow_provider_streamstate.engine.streams.managers.yarn import ResourceManager
    from airflow_provider_streamstate.engine.streams.supervisor import SupervisionPolicy, supervise
    from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce
    from airflow_provider_streamstate.streams.start import start_stream

    os.environ.update(stack.s3_env("primary"))
    os.environ.update(yarn.env())
    os.environ["AIRFLOW_CONN_SPARK_YARN"] = json.dumps({"conn_type": "spark", "host": "yarn",
                                                        "extra": {"deploy-mode": "cluster"}})
    os.environ["AIRFLOW_CONN_SPARK_BENCH"] = json.dumps({"conn_type": "spark", "host": "local[1]"})

    class _Log:
        def info(self, *a: object) -> None: ...

        def warning(self, *a: object) -> None: ...

    def wait(predicate: Any, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.2)

    rows: dict[str, list[dict[str, float]]] = {"local": [], "yarn": []}
    for kind in ("local", "yarn"):
        topic = f"bench-recovery-{kind}-{int(time.time())}"
        ensure_topic(stack.kafka_bootstrap, topic, partitions=3)
        spec = _spec(stack, yarn, work, topic, on_yarn=kind == "yarn")

        def consumed(spec: Any = spec) -> int:
            found = committed_kafka_offsets(spec.checkpoint)
            return sum(sum(v.values()) for v in found[1].values()) if found else 0

        gen = GeneratorSpec(seed=7, accounts=50, events=500)
        total = produce(stack.kafka_bootstrap, topic, gen)
        start_stream(spec, startup_timeout_s=600, log=_Log())
        wait(lambda n=total, c=consumed: c() == n, "the first records")
        for cycle in range(args.cycles):
            gen = gen.next_round(300)
            total += produce(stack.kafka_bootstrap, topic, gen)
            wait(lambda n=total, c=consumed: c() > 0, "input")
            before = newest_commit(spec.checkpoint)[0] or 0
            record = records.read_launch(spec.checkpoint)
            t0 = time.time()
            if record.cluster is not None and record.cluster.app_id:
                ResourceManager(record.cluster.rm_urls).kill(record.cluster.app_id)
            else:
                os.killpg(record.handle.pid, signal.SIGKILL)
            wait(lambda s=spec: launcher.status(s.checkpoint).state == "dead", "the stream to be dead", 120)
            detected = time.time()
            report = supervise(spec.name, spec.checkpoint,
                               start=lambda s=spec: start_stream(s, startup_timeout_s=600, log=_Log())[0],
                               policy=SupervisionPolicy(settle_s=600), store=None)
            if report.action != "restarted":
                print(json.dumps(report.to_json()))
                return 1
            wait(lambda s=spec, b=before: (newest_commit(s.checkpoint)[0] or 0) > b, "a new batch")
            done = time.time()
            row = {"detection_s": detected - t0, "restart_s": report.timings[0].spark_start_s or 0.0,
                   "total_s": done - t0}
            rows[kind].append(row)
            print(f"{kind} cycle {cycle + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
            wait(lambda n=total, c=consumed: c() == n, "the restarted stream to catch up")
        launcher.stop(spec.checkpoint, timeout_s=120)

    print(f"\nrecovery from a dead driver, median of {args.cycles} cycles (supervision round at once):")
    print(f"  {'':14} {'local':>8} {'yarn':>8} {'yarn/local':>10}")
    for key in rows["local"][0]:
        local = statistics.median(r[key] for r in rows["local"])
        on_yarn = statistics.median(r[key] for r in rows["yarn"])
        print(f"  {key:14} {local:7.1f}s {on_yarn:7.1f}s {on_yarn / local if local else float('nan'):9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
