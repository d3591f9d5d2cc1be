"""DR benchmark: the warm-up penalty a failover from a snapshot avoids, and what translation costs.

    .venv/bin/python benchmarks/dr_bench.py [--events 10000000] [--after 100000] [--accounts 100000]
                                            [--max-offsets 1000000] [--policy default]

On a private region pair (primary broker, DR broker, a real MirrorMaker 2 between them) in
`.bench/dr`: a history of `--events` events is produced straight into the primary topic
(fast: no rate limit, in Kafka transactions of 1,000 so the clusters' offsets differ);
the example stream reads it all on the primary (available-now, RocksDB state with changelog
checkpointing) and two snapshots with Kafka anchors are taken of its last batch: one at
once, holding changelogs only (Spark's maintenance uploads its RocksDB snapshots in the
background, seconds later), and one once those are uploaded (what a snapshot of a
long-running stream finds). `--after` more events arrive after the snapshots; once the
mirror holds everything, the ways to get the stream going in DR are timed in the same
Spark session, on the same machine, one after the other:

* **failover**: `engine.dr.failover` (choose the snapshot, translate its offsets, restore,
  rewrite) into a new checkpoint, then the stream on it until it has read everything the
  mirror holds; from the newest snapshot, and again from the changelog-only one;
* **replay**: what a team has without snapshots: the stream on an empty checkpoint from
  the mirror's earliest offsets, rebuilding its state from the whole history;
* **cold restart** (for reference, no DR): a copy of the primary's own checkpoint restarted
  on the primary cluster, reading the same events after the snapshot: what any restart of
  the stream costs, i.e. the floor a failover from a snapshot can reach.

All of them end in the same state (checked, account by account). Prints a Markdown table (the
ratio replay / failover, translation time per partition) and writes .bench/dr_results.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from typing import Any

from bench_common import WORK  # this folder is on sys.path; it puts the repo there too

from dev import stack as stack_mod

STATE_DIR = WORK / "dr"


STEP_MS = 10  # event time per transaction: the 10-minute watermark spans 60,000 events


def fast_produce(bootstrap: str, topic: str, events: int, accounts: int, first: int, per_txn: int = 1000) -> int:
    """Generator transactions `first`..`first+events-1` as fast as one producer goes, in
    event-time order (several producers would interleave event times, and the stream's
    watermark would then drop records differently in differently sized batches)."""
    from airflow_provider_streamstate.jobs.generator import GeneratorSpec, produce

    spec = GeneratorSpec(seed=11, accounts=accounts, events=events, first=first, step_ms=STEP_MS)
    return produce(bootstrap, topic, spec, per_transaction=per_txn)


def records(bootstrap: str, topic: str) -> int:
    """Records the topic holds (3 partitions; 0 while the mirror has not created it)."""
    from airflow_provider_streamstate.engine.core.errors import NotFoundError
    from airflow_provider_streamstate.engine.kafka.offsets import broker_offsets

    try:
        return sum(p.latest - p.earliest for p in broker_offsets(bootstrap, {topic: {"0": 0, "1": 0, "2": 0}}))
    except NotFoundError:
        return 0


BATCH_LOG: dict[str, list[dict[str, Any]]] = {}  # checkpoint -> each batch's progress, trimmed


def _batch(progress: dict[str, Any]) -> dict[str, Any]:
    """What a batch's progress says about where its time went."""
    ops = []
    for op in progress.get("stateOperators") or []:
        metrics = {k: v for k, v in (op.get("customMetrics") or {}).items()
                   if not k.startswith("SnapshotLastUploaded") and v}
        ops.append({k: op.get(k) for k in ("operatorName", "numRowsTotal", "numRowsUpdated", "numRowsRemoved",
                                           "allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")} | metrics)
    return {"batchId": progress.get("batchId"), "numInputRows": progress.get("numInputRows"),
            "durationMs": progress.get("durationMs"), "stateOperators": ops}


def drain(spark: Any, bootstrap: str, topic: str, checkpoint: str, max_offsets: int) -> tuple[float, int, dict[str, int]]:
    """Run the example stream (available-now) on `checkpoint` until it has read `topic` to
    its end; seconds, the last batch id, and Spark's own time split (durationMs summed)."""
    from airflow_provider_streamstate.jobs.example_stream import StreamArgs, start_query

    args = StreamArgs(bootstrap, checkpoint, source_topic=topic, alerts_topic=f"{topic}-alerts",
                      trigger="available-now", max_offsets_per_trigger=max_offsets, query_name="bench-dr")
    t0 = time.monotonic()
    query = start_query(spark, args)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    split: dict[str, int] = {}
    BATCH_LOG[checkpoint] = [_batch(p) for p in query.recentProgress]
    for progress in query.recentProgress:
        for key, ms in (progress.get("durationMs") or {}).items():
            split[key] = split.get(key, 0) + int(ms)
    return time.monotonic() - t0, int(query.lastProgress["batchId"]) if query.lastProgress else -1, split


def state_of(spark: Any, checkpoint: str) -> dict[str, dict[str, int]]:
    from airflow_provider_streamstate.engine.state.spark import read_state

    return {r.key.account: r.value.asDict() for r in read_state(spark, checkpoint, operatorId=0).collect()}


def rocksdb_snapshots_uploaded(checkpoint: str, timeout_s: float = 300.0) -> float:
    """Wait until every RocksDB state store of the checkpoint has a snapshot (`<version>.zip`)
    beside its changelogs: Spark's maintenance uploads them in the background, after the
    batch. Returns the seconds waited."""
    from pathlib import Path

    t0 = time.monotonic()
    stores = [d for d in Path(checkpoint, "state").glob("*/*") if d.is_dir() and d.name.isdigit()]
    while not all(any(d.glob("*.zip")) for d in stores):
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"Spark uploaded no RocksDB snapshot for some state stores within {timeout_s:.0f} s")
        time.sleep(2)
    return time.monotonic() - t0


def _failover_run(spark: Any, store: Any, dr: Any, dr_topic: str, target: str, max_offsets: int, policy: str,
                  snapshot: str | None = None) -> tuple[Any, float, float, int, dict[str, int]]:
    """Fail over into `target` and drain: (result, prepare s, total s, batches, Spark's split)."""
    from airflow_provider_streamstate.engine.dr.failover import TopicMap, failover

    t0 = time.monotonic()
    result = failover(store, "bench", target, dr.bootstrap, snapshot=snapshot,
                      topic_map=TopicMap.parse([], policy, dr.source_alias))
    prepared = time.monotonic() - t0
    _, last, split = drain(spark, dr.bootstrap, dr_topic, target, max_offsets)
    return result, prepared, time.monotonic() - t0, last - result.batch_id, split


def _both_ways(spark: Any, store: Any, dr: Any, dr_topic: str, work: Any, max_offsets: int,
               policy: str, primary: tuple[str, str, str], early: str) -> dict[str, Any]:
    """Failover from the snapshot, then replay from the earliest mirrored offset, both with
    `max_offsets` per trigger; both end in the same state or the run says so."""
    # Failover from the newest snapshot: translate, restore, rewrite; then read what came after it.
    target = str(work / f"dr-failover-{max_offsets}")
    result, prepared, failover_s, failover_batches, failover_split = _failover_run(
        spark, store, dr, dr_topic, target, max_offsets, policy)
    parts = len(result.translated)
    print(f"maxOffsetsPerTrigger {max_offsets}: failover ready in {prepared:.1f} s, caught up after "
          f"{failover_s:.1f} s", flush=True)
    # The same batch, snapshotted before Spark's maintenance uploaded its RocksDB snapshots.
    early_target = str(work / f"dr-failover-early-{max_offsets}")
    _, _, early_s, _, _ = _failover_run(spark, store, dr, dr_topic, early_target, max_offsets, policy, early)
    print(f"maxOffsetsPerTrigger {max_offsets}: failover from the changelog-only snapshot caught up after "
          f"{early_s:.1f} s", flush=True)

    # Cold restart, for reference: the primary's checkpoint, copied, restarted at home.
    bootstrap, topic, primary_ckpt = primary
    restart_ckpt = work / f"restart-{max_offsets}"
    shutil.rmtree(restart_ckpt, ignore_errors=True)
    shutil.copytree(primary_ckpt, restart_ckpt)
    restart_s, _, restart_split = drain(spark, bootstrap, topic, str(restart_ckpt), max_offsets)
    print(f"maxOffsetsPerTrigger {max_offsets}: cold restart at home caught up after {restart_s:.1f} s", flush=True)

    # Replay: the same stream from the mirror's earliest offsets, state rebuilt from scratch.
    replay_ckpt = str(work / f"dr-replay-{max_offsets}")
    replay_s, batch, replay_split = drain(spark, dr.bootstrap, dr_topic, replay_ckpt, max_offsets)
    print(f"maxOffsetsPerTrigger {max_offsets}: replay caught up after {replay_s:.1f} s ({batch + 1} batches)",
          flush=True)
    return {
        "max_offsets_per_trigger": max_offsets,
        "failover_choose_s": round(result.seconds_choose, 3),
        "failover_restore_s": round(result.seconds_restore, 3),
        "failover_rewrite_s": round(result.seconds_rewrite, 3),
        "failover_prepare_s": round(prepared, 3),
        "failover_catch_up_s": round(failover_s - prepared, 1),
        "failover_changelog_only_total_s": round(early_s, 1),
        "failover_changelog_only_batch_log": BATCH_LOG.get(early_target),
        "failover_total_s": round(failover_s, 1),
        "translated_partitions": parts,
        "failover_translate_s": round(result.seconds_translate, 3),
        "translate_per_partition_s": round(result.seconds_translate / max(parts, 1), 4),
        "events_behind": result.events_behind,
        "failover_spark_ms": failover_split,
        "failover_batches": failover_batches,
        "failover_batch_log": BATCH_LOG.get(target),
        "restart_batch_log": BATCH_LOG.get(str(restart_ckpt)),
        "restart_total_s": round(restart_s, 1),
        "restart_spark_ms": restart_split,
        "replay_total_s": round(replay_s, 1),
        "replay_batches": batch + 1,
        "replay_spark_ms": replay_split,
        "ratio_replay_over_failover": round(replay_s / failover_s, 1),
        "same_state": all(state_of(spark, c) == state_of(spark, replay_ckpt)
                          for c in (target, early_target, str(restart_ckpt))),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=10_000_000, help="the history before the snapshot")
    p.add_argument("--after", type=int, default=100_000, help="events after the snapshot")
    p.add_argument("--accounts", type=int, default=100_000)
    p.add_argument("--max-offsets", type=int, nargs="+", default=[1_000_000, 200_000],
                   help="maxOffsetsPerTrigger of the DR stream; both ways are timed for each value")
    p.add_argument("--policy", choices=sorted(stack_mod.MM2_POLICIES), default="default")
    args = p.parse_args(argv)

    from airflow_provider_streamstate.backends.local.store import LocalStore
    from airflow_provider_streamstate.engine.lifecycle.snapshot import create_snapshot
    from airflow_provider_streamstate.engine.state.spark import spark_session
    from airflow_provider_streamstate.jobs.generator import ensure_topic

    stack_mod.down(STATE_DIR)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    primary = stack_mod.up(STATE_DIR)
    dr = stack_mod.start_dr_kafka(STATE_DIR, primary.kafka_bootstrap, policy=args.policy)
    work = STATE_DIR / "work"
    work.mkdir(parents=True, exist_ok=True)
    topic = "bench-transactions"
    dr_topic = dr.dr_topic(topic)
    results: dict[str, Any] = {"events": args.events, "after": args.after, "accounts": args.accounts,
                               "max_offsets_per_trigger": args.max_offsets, "policy": args.policy}
    spark = spark_session("streamstate-dr-bench", primary.spark_jars)
    try:
        ensure_topic(primary.kafka_bootstrap, topic, partitions=3)
        t0 = time.monotonic()
        fast_produce(primary.kafka_bootstrap, topic, args.events, args.accounts, 0)
        results["produce_history_s"] = round(time.monotonic() - t0, 1)
        print(f"history: {args.events} events produced in {results['produce_history_s']} s", flush=True)

        primary_ckpt = str(work / "primary")
        seconds, batch, _ = drain(spark, primary.kafka_bootstrap, topic, primary_ckpt, max(args.max_offsets))
        results["primary_build_s"] = round(seconds, 1)
        print(f"primary stream read the history in {seconds:.0f} s ({batch + 1} batches)", flush=True)
        store = LocalStore(work / "dr-store", fsync=False)
        # Right after the last batch: Spark's maintenance has not uploaded its RocksDB snapshots
        # yet, so this one holds changelogs only and a restore replays every one of them.
        early = create_snapshot(primary_ckpt, store, "bench", kafka_bootstrap=primary.kafka_bootstrap)
        results["waited_for_rocksdb_snapshots_s"] = round(rocksdb_snapshots_uploaded(primary_ckpt), 1)
        # The same batch once they are there: what a snapshot of a long-running stream finds.
        snap = create_snapshot(primary_ckpt, store, "bench", kafka_bootstrap=primary.kafka_bootstrap, always=True)
        results["snapshot_bytes"] = snap.manifest.bytes_total
        results["changelog_only_snapshot_bytes"] = early.manifest.bytes_total
        fast_produce(primary.kafka_bootstrap, topic, args.after, args.accounts, args.events)
        total = args.events + args.after
        t_mirror = time.monotonic()
        while records(dr.bootstrap, dr_topic) < total:
            if time.monotonic() - t_mirror > 3600:
                raise TimeoutError("the mirror did not catch up within an hour")
            time.sleep(2)
        print(f"mirror holds all {total} events", flush=True)

        runs = []
        for max_offsets in args.max_offsets:
            runs.append(_both_ways(spark, store, dr, dr_topic, work, max_offsets, args.policy,
                                   (primary.kafka_bootstrap, topic, primary_ckpt), early.manifest.snapshot_id))
        results["runs"] = runs
    finally:
        spark.stop()
        stack_mod.down(STATE_DIR)

    print()
    print("| maxOffsetsPerTrigger | failover: prepare (s) | failover: caught up (s) | "
          "failover, changelog-only snapshot (s) | cold restart at home (s) | replay: caught up (s) | "
          "replay / failover | same state |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results["runs"]:
        print(f"| {r['max_offsets_per_trigger']:,} | {r['failover_prepare_s']} | {r['failover_total_s']} | "
              f"{r['failover_changelog_only_total_s']} | {r['restart_total_s']} | {r['replay_total_s']} | "
              f"{r['ratio_replay_over_failover']}x | {r['same_state']} |")
    print(f"\ntranslation per partition: {results['runs'][0]['translate_per_partition_s']} s")
    (WORK / "dr_results.json").write_text(json.dumps(results, indent=1))
    return 0 if all(r["same_state"] for r in results["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
