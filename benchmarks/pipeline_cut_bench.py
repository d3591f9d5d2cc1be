"""What a consistent cut of a pipeline costs against snapshotting its two streams on their own.

The example pipeline (jobs/example_pipeline.py: `enrich` deduplicates transactions into a
link topic, `totals` aggregates it per account; RocksDB state, processing-time trigger) runs
in this process on local Spark against the stack's Kafka broker while a producer writes.
Alternately, `--rounds` times each: a pipeline snapshot (`create_pipeline_snapshot`: wait
for `enrich` to be between two batches, read the link's end offsets, snapshot both members,
read and store the channel records, write the record), and the baseline: two independent
snapshots (`create_snapshot` of each stream, newest batch), into the same local store, without
and with Kafka anchors (which the pipeline's members record, for DR failover).
Medians, their ratio, and the parts of the cut (the wait for the moment between batches,
the channel's records) go to .bench/pipeline_cut_results.json.

    .venv/bin/python benchmarks/pipeline_cut_bench.py [--rounds 7] [--trigger-ms 1000] [--rate 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import WORK, write_results  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--trigger-ms", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=400.0, help="transactions per second while it runs")
    ap.add_argument("--accounts", type=int, default=5000)
    a = ap.parse_args()

    from dev import stack as stack_mod

    stack = stack_mod.up()
    try:
        return _run(a, stack)
    finally:
        stack_mod.down()


def _run(a: argparse.Namespace, stack: object) -> int:
    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.pipeline.snapshots import create_pipeline_snapshot
    from airflow_provider_streamstate.engine.pipeline.spec import Link, PipelineSpec
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs.example_pipeline import PipelineArgs, start_member
    from airflow_provider_streamstate.jobs.generator import GeneratorSpec, ensure_topic, produce

    bootstrap = stack.kafka_bootstrap  # type: ignore[attr-defined]
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pipeline-cut-", dir=WORK))
    src, link = f"bench-src-{uuid.uuid4().hex[:6]}", f"bench-link-{uuid.uuid4().hex[:6]}"
    for t in (src, link, f"{link}-totals"):
        ensure_topic(bootstrap, t, partitions=3)
    spark = spark_session("pipeline-cut-bench", stack.spark_jars, shuffle_partitions=4,  # type: ignore[attr-defined]
                          conf={"spark.sql.streaming.stateStore.maintenanceInterval": "5s"})
    ck = {"enrich": str(work / "enrich"), "totals": str(work / "totals")}
    spec = PipelineSpec("bench", ck, (Link("enrich", link, "totals"),))
    store = LocalStore(work / "store")
    first = GeneratorSpec(seed=5, accounts=a.accounts, events=20_000)
    produce(bootstrap, src, first)
    stop = threading.Event()

    def producer() -> None:
        spec_ = first.next_round(int(a.rate))
        while not stop.is_set():
            produce(bootstrap, src, spec_, rate=a.rate)
            spec_ = spec_.next_round()

    queries = [start_member(spark, PipelineArgs(bootstrap, ck[m], m, source_topic=src, link_topic=link,
                                                totals_topic=f"{link}-totals",
                                                trigger=f"processing:{a.trigger_ms} milliseconds",
                                                max_offsets_per_trigger=5000)) for m in ck]
    feeder = threading.Thread(target=producer, daemon=True)
    feeder.start()
    try:
        while not all(q.lastProgress and q.lastProgress["batchId"] >= 3 for q in queries):
            time.sleep(0.5)
        cut_s, pair_s, anchored_s, waits, channel, batch_ms = [], [], [], [], [], []
        phases: dict[str, list[float]] = {}
        for _ in range(a.rounds):
            t0 = time.monotonic()
            r = create_pipeline_snapshot(spec, store, bootstrap, wait_s=120, parallelism=8)
            cut_s.append(time.monotonic() - t0)
            waits.append(r.snapshot.cut_seconds)
            channel.append(r.snapshot.channels[0].records)
            for phase, v in r.phases.items():
                phases.setdefault(phase, []).append(v)
            t0 = time.monotonic()
            for m in ck:
                create_snapshot(ck[m], store, m, always=True, parallelism=8)
            pair_s.append(time.monotonic() - t0)
            t0 = time.monotonic()
            for m in ck:  # as the pipeline's members are taken: with Kafka anchors (DR failover needs them)
                create_snapshot(ck[m], store, m, always=True, parallelism=8, kafka_bootstrap=bootstrap)
            anchored_s.append(time.monotonic() - t0)
            batch_ms.append(queries[0].lastProgress["durationMs"].get("triggerExecution", 0))
            time.sleep(0.3)
    finally:
        stop.set()
        for q in queries:
            q.stop()
        spark.stop()
    results = {
        "rounds": a.rounds, "trigger_ms": a.trigger_ms, "rate_per_s": a.rate,
        "pipeline_snapshot_s_median": round(statistics.median(cut_s), 3),
        "two_independent_snapshots_s_median": round(statistics.median(pair_s), 3),
        "ratio_cut_over_independent": round(statistics.median(cut_s) / statistics.median(pair_s), 2),
        "two_independent_snapshots_with_anchors_s_median": round(statistics.median(anchored_s), 3),
        "ratio_cut_over_independent_with_anchors": round(statistics.median(cut_s) / statistics.median(anchored_s), 2),
        **{f"phase_{k}_s_median": round(statistics.median(v), 3) for k, v in phases.items()},
        "cut_seconds_median (finding the cut, incl. the wait between batches)": round(statistics.median(waits), 3),
        "channel_records_median": statistics.median(channel),
        "enrich_batch_ms_median": statistics.median(batch_ms),
        "pipeline_snapshot_s": [round(x, 3) for x in cut_s], "two_independent_snapshots_s": [round(x, 3) for x in pair_s],
    }
    write_results("pipeline_cut", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
